package compat

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"
)

// StepTimeout bounds each step; the pytest side bounds the whole program as well.
const StepTimeout = 90 * time.Second

// Step is one check a client program makes. Needs names earlier steps whose outcome it builds
// on: if one of them did not pass, this one is skipped with that reason, so the report shows
// the first real failure instead of a cascade.
type Step struct {
	Name  string
	Needs []string
	Run   func(ctx context.Context) error
}

// SkipError marks a step as not run, with the reason (a feature the broker does not offer).
type SkipError struct{ Reason string }

func (e *SkipError) Error() string { return "skipped: " + e.Reason }

// Skip returns an error that reports the step as skipped with reason.
func Skip(format string, args ...any) error {
	return &SkipError{Reason: fmt.Sprintf(format, args...)}
}

// Result is one line of a program's report (stdout, JSON): one per step, in order.
type Result struct {
	Client  string  `json:"client"`
	Step    string  `json:"step"`
	Outcome string  `json:"outcome"` // "passed", "failed" or "skipped"
	Reason  string  `json:"reason,omitempty"`
	Seconds float64 `json:"seconds"`
}

// Options are the command line every client program takes.
type Options struct {
	Bootstrap []string          // -bootstrap HOST:PORT[,HOST:PORT...]
	Skip      map[string]string // -skip STEP=REASON (repeatable): report STEP skipped
	Only      map[string]bool   // -only STEP,STEP: run only these (and report the others skipped)
	List      bool              // -list: print the step names, one a line, and exit
}

type skipFlag map[string]string

func (s skipFlag) String() string { return fmt.Sprint(map[string]string(s)) }
func (s skipFlag) Set(v string) error {
	name, reason, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("want STEP=REASON, got %q", v)
	}
	s[name] = reason
	return nil
}

// ParseOptions reads the command line.
func ParseOptions() Options {
	bootstrap := flag.String("bootstrap", os.Getenv("SLUICE_BOOTSTRAP"), "broker addresses, comma-separated")
	skip := skipFlag{}
	flag.Var(skip, "skip", "STEP=REASON: report STEP as skipped with REASON (repeatable)")
	only := flag.String("only", "", "comma-separated steps to run (the others are reported skipped)")
	list := flag.Bool("list", false, "print the step names and exit")
	flag.Parse()
	o := Options{Skip: skip, List: *list}
	if *bootstrap != "" {
		o.Bootstrap = strings.Split(*bootstrap, ",")
	}
	if *only != "" {
		o.Only = map[string]bool{}
		for _, s := range strings.Split(*only, ",") {
			o.Only[s] = true
		}
	}
	if len(o.Bootstrap) == 0 && !o.List {
		fmt.Fprintln(os.Stderr, "-bootstrap (or SLUICE_BOOTSTRAP) is required")
		os.Exit(2)
	}
	return o
}

// Run runs steps in order and prints one Result per step as a JSON line on stdout (progress
// and client logs go to stderr). The exit status is 1 if any step failed.
func Run(client string, o Options, steps []Step) {
	if o.List {
		for _, s := range steps {
			fmt.Println(s.Name)
		}
		return
	}
	passed := map[string]bool{}
	failed := false
	enc := json.NewEncoder(os.Stdout)
	for _, s := range steps {
		start := time.Now()
		r := Result{Client: client, Step: s.Name}
		var missing []string
		for _, n := range s.Needs {
			if !passed[n] {
				missing = append(missing, n)
			}
		}
		switch {
		case o.Skip[s.Name] != "":
			r.Outcome, r.Reason = "skipped", o.Skip[s.Name]
		case o.Only != nil && !o.Only[s.Name]:
			r.Outcome, r.Reason = "skipped", "not selected (-only)"
		case len(missing) > 0:
			r.Outcome, r.Reason = "skipped", "needs earlier step(s) that did not pass: "+strings.Join(missing, ", ")
		default:
			fmt.Fprintf(os.Stderr, "[%s] step %s\n", client, s.Name)
			err := runOne(s)
			var skip *SkipError
			switch {
			case err == nil:
				r.Outcome = "passed"
				passed[s.Name] = true
			case errors.As(err, &skip):
				r.Outcome, r.Reason = "skipped", skip.Reason
			default:
				r.Outcome, r.Reason = "failed", err.Error()
				failed = true
			}
		}
		r.Seconds = float64(time.Since(start).Milliseconds()) / 1000
		fmt.Fprintf(os.Stderr, "[%s] %s: %s %s\n", client, s.Name, r.Outcome, r.Reason)
		_ = enc.Encode(r)
	}
	if failed {
		os.Exit(1)
	}
}

func runOne(s Step) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), StepTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return s.Run(ctx)
}
