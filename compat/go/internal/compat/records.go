// Package compat holds what every Go client program of the compatibility suite shares: the
// records it produces (the same set as compat/python/compat_util.py makes), the read-back
// check they must pass, the timestamps offsets are looked up by, and the step runner that
// reports each step as one JSON line for compat/python/test_go_clients.py.
package compat

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

const (
	NRecords       = 10_000 // records each client produces and reads back
	Partitions     = 3      // partitions of each client's topic
	NKeys          = 50     // enough keys that every partition gets some
	TombstoneEvery = 1000   // every 1000th record has a null value
)

// Header is one record header; a nil Value is a null header value.
type Header struct {
	Key   string
	Value []byte
}

// Rec is a record as produced.
type Rec struct {
	Seq         int
	Key         []byte
	Value       []byte // nil: a tombstone
	Headers     []Header
	TimestampMs int64
}

// Got is a record as read back by a client.
type Got struct {
	Partition   int32
	Offset      int64
	Key         []byte
	Value       []byte
	Headers     []Header
	TimestampMs int64
	// CreateTime is false when the client saw LogAppendTime.
	CreateTime bool
}

// Where is the partition and offset a producer was told for a record.
type Where struct {
	Partition int32
	Offset    int64
}

// TopicName is a topic name no other test or run uses.
func TopicName(client string) string {
	return fmt.Sprintf("compat-%s-%s", client, RandomHex(4))
}

// RandomHex is n random bytes as 2n hex characters.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NowMs is the wall clock in milliseconds since the epoch.
func NowMs() int64 { return time.Now().UnixMilli() }

// MakeRecords is n keyed records with headers (a repeated name and an empty value among them):
// record seq has timestamp baseTs+seq and a value `client-seq-` followed by 0-96 bytes of every
// byte value, a tombstone every TombstoneEvery-th record (compat_util.make_records).
func MakeRecords(client string, baseTs int64, n int) []Rec {
	recs := make([]Rec, 0, n)
	for seq := 0; seq < n; seq++ {
		value := []byte(fmt.Sprintf("%s-%05d-", client, seq))
		for j := 0; j < seq%97; j++ {
			value = append(value, byte((seq*31+j)%256))
		}
		if seq%TombstoneEvery == TombstoneEvery-1 {
			value = nil
		}
		recs = append(recs, Rec{
			Seq:   seq,
			Key:   []byte(fmt.Sprintf("key-%02d", seq%NKeys)),
			Value: value,
			Headers: []Header{
				{"seq", []byte(strconv.Itoa(seq))},
				{"client", []byte(client)},
				{"dup", []byte("first")},
				{"dup", []byte("second")},
				{"empty", []byte{}},
			},
			TimestampMs: baseTs + int64(seq),
		})
	}
	return recs
}

// SeqOf is the seq a read record was produced with, from its `seq` header (-1: none).
func SeqOf(g Got) int {
	for _, h := range g.Headers {
		if h.Key == "seq" && h.Value != nil {
			if n, err := strconv.Atoi(string(h.Value)); err == nil {
				return n
			}
		}
	}
	return -1
}

// problems collects mismatches by kind and renders the first few of each.
type problems struct {
	order []string
	items map[string][]string
}

func (p *problems) add(kind, format string, args ...any) {
	if p.items == nil {
		p.items = map[string][]string{}
	}
	if _, ok := p.items[kind]; !ok {
		p.order = append(p.order, kind)
	}
	p.items[kind] = append(p.items[kind], fmt.Sprintf(format, args...))
}

func (p *problems) err(what string) error {
	if len(p.items) == 0 {
		return nil
	}
	total := 0
	for _, v := range p.items {
		total += len(v)
	}
	lines := []string{fmt.Sprintf("%s: %d problem(s)", what, total)}
	for _, kind := range p.order {
		d := p.items[kind]
		lines = append(lines, fmt.Sprintf("- %s: %d, e.g. %s", kind, len(d), strings.Join(d[:min(3, len(d))], "; ")))
	}
	return fmt.Errorf("%s", strings.Join(lines, "\n"))
}

// ByPartition groups records by partition, each sorted by offset.
func ByPartition(got []Got) map[int32][]Got {
	parts := map[int32][]Got{}
	for _, g := range got {
		parts[g.Partition] = append(parts[g.Partition], g)
	}
	for _, rs := range parts {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Offset < rs[j].Offset })
	}
	return parts
}

func headersEqual(a, b []Header) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || string(a[i].Value) != string(b[i].Value) || (a[i].Value == nil) != (b[i].Value == nil) {
			return false
		}
	}
	return true
}

func bytesEqual(a, b []byte) bool {
	return (a == nil) == (b == nil) && string(a) == string(b)
}

// CheckReadBack: everything produced came back exactly once, unchanged and in order: the count;
// offsets firstOffset.. in every partition with seq increasing (produce order); each record's
// key, value (null stays null), headers in order, CreateTime timestamp; each key in one
// partition; each record where its producer was told (delivered, if not nil).
func CheckReadBack(expected []Rec, got []Got, delivered map[int]Where, partitions int) error {
	var p problems
	if len(got) != len(expected) {
		p.add("count", "read %d records, produced %d", len(got), len(expected))
	}
	parts := ByPartition(got)
	for part, rs := range parts {
		if part < 0 || int(part) >= partitions {
			p.add("partition", "records in partition %d", part)
		}
		for i, g := range rs {
			if g.Offset != int64(i) {
				p.add("offsets", "partition %d: offsets not 0..%d, at index %d: offset %d", part, len(rs)-1, i, g.Offset)
				break
			}
		}
		for i := 1; i < len(rs); i++ {
			a, b := SeqOf(rs[i-1]), SeqOf(rs[i])
			if a >= 0 && b >= 0 && b <= a {
				p.add("order", "partition %d offset %d: seq %d after seq %d", part, rs[i].Offset, b, a)
			}
		}
	}
	if len(expected) >= 100*partitions && len(parts) != partitions {
		p.add("partition", "only %d of %d partitions got records", len(parts), partitions)
	}
	seen := map[int]Got{}
	keyParts := map[string]map[int32]bool{}
	for _, g := range got {
		seq := SeqOf(g)
		if seq < 0 || seq >= len(expected) {
			p.add("seq header", "p%d@%d: headers %v", g.Partition, g.Offset, g.Headers)
			continue
		}
		if first, dup := seen[seq]; dup {
			p.add("duplicate", "seq %d at p%d@%d and p%d@%d", seq, first.Partition, first.Offset, g.Partition, g.Offset)
			continue
		}
		seen[seq] = g
		want := expected[seq]
		where := fmt.Sprintf("seq %d (p%d@%d)", seq, g.Partition, g.Offset)
		if keyParts[string(want.Key)] == nil {
			keyParts[string(want.Key)] = map[int32]bool{}
		}
		keyParts[string(want.Key)][g.Partition] = true
		if !bytesEqual(g.Key, want.Key) {
			p.add("key", "%s: %q != %q", where, g.Key, want.Key)
		}
		if !bytesEqual(g.Value, want.Value) {
			p.add("value", "%s: %q != %q", where, trunc(g.Value), trunc(want.Value))
		}
		if !headersEqual(g.Headers, want.Headers) {
			p.add("headers", "%s: %v != %v", where, g.Headers, want.Headers)
		}
		if g.TimestampMs != want.TimestampMs {
			p.add("timestamp", "%s: %d != %d", where, g.TimestampMs, want.TimestampMs)
		}
		if !g.CreateTime {
			p.add("timestamp type", "%s: LogAppendTime", where)
		}
		if delivered != nil {
			if d, ok := delivered[seq]; !ok || d != (Where{g.Partition, g.Offset}) {
				p.add("delivery report", "%s: producer was told %v (known: %v)", where, d, ok)
			}
		}
	}
	missing := []int{}
	for _, r := range expected {
		if _, ok := seen[r.Seq]; !ok {
			missing = append(missing, r.Seq)
		}
	}
	if len(missing) > 0 {
		p.add("missing", "%d records never read back, first seqs %v", len(missing), missing[:min(5, len(missing))])
	}
	for key, ps := range keyParts {
		if len(ps) > 1 {
			p.add("key partitioning", "key %q in %d partitions", key, len(ps))
		}
	}
	if delivered != nil && len(delivered) != len(expected) {
		p.add("delivery report", "%d delivery reports for %d records", len(delivered), len(expected))
	}
	return p.err("read-back check")
}

func trunc(b []byte) string {
	if b == nil {
		return "<null>"
	}
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

// Lookup is a timestamp to look offsets up by, with what it stands for.
type Lookup struct {
	Label string
	Ts    int64
}

// OffsetLookups: before all records, the first, at 25%, 50%, 90%, the last, after all
// (compat_util.offset_lookups).
func OffsetLookups(got []Got) []Lookup {
	set := map[int64]bool{}
	for _, g := range got {
		set[g.TimestampMs] = true
	}
	stamps := make([]int64, 0, len(set))
	for t := range set {
		stamps = append(stamps, t)
	}
	sort.Slice(stamps, func(i, j int) bool { return stamps[i] < stamps[j] })
	out := []Lookup{{"before every record", stamps[0] - 1000}, {"first record", stamps[0]}}
	for _, pct := range []int{25, 50, 90} {
		out = append(out, Lookup{fmt.Sprintf("timestamp at %d%%", pct), stamps[len(stamps)*pct/100]})
	}
	return append(out, Lookup{"last record", stamps[len(stamps)-1]}, Lookup{"after every record", stamps[len(stamps)-1] + 1000})
}

// ExpectedOffsetForTime is the earliest offset in partition whose timestamp is >= ts, or -1.
func ExpectedOffsetForTime(got []Got, partition int32, ts int64) int64 {
	best := int64(-1)
	for _, g := range got {
		if g.Partition == partition && g.TimestampMs >= ts && (best < 0 || g.Offset < best) {
			best = g.Offset
		}
	}
	return best
}

// WaitUntil polls f until it returns true (or an error that is final); it fails with what
// and f's last error after timeout.
func WaitUntil(timeout time.Duration, what string, f func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := f()
		if ok {
			return nil
		}
		last = err
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("timed out after %s waiting for %s: %w", timeout, what, last)
			}
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
