//! The reference evaluator: the semantics of `docs/triggers.md`, written as directly as
//! possible, for tests and for [`crate::check`].
//!
//! It shares nothing with the incremental evaluator. It takes a whole trace with integer
//! times, lays out every moment up front (for each integer tick `t` from the first event's
//! time to the horizon: the deadline moment at `t`, then the events at `t`), and computes each
//! node's value and settledness at every moment from scratch, by recursion over the rule and
//! the moment list: [`trace`](Reference::trace) returns a node's `(value, settled)` at each
//! moment from its start on. `THEN` replays its waiting/attempt history from its start.
//!
//! Ticks where no deadline falls change nothing (values only change at events and deadlines),
//! which is what lets [`firings_at`] use a sparse set of ticks that contains every deadline.
//! It is slow (quadratic and worse), and allocates freely: that is the point.

use crate::rule::Rule;

/// A moment of a trace: `event` is the index of the event in the trace given, `None` for a
/// deadline moment (a tick).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Moment {
    pub time: i64,
    pub event: Option<usize>,
}

/// The moments the rule fires at over `events` (names and times; times are clamped to be
/// non-decreasing, events whose name the rule does not mention are ignored), with a deadline
/// moment at every integer tick from the first event's time to `horizon` inclusive.
pub fn firings(rule: &Rule, events: &[(&str, i64)], horizon: i64) -> Vec<Moment> {
    let first = clamped(rule, events)
        .first()
        .map_or(horizon, |&(_, time)| time);
    let ticks: Vec<i64> = (first..=horizon).collect();
    firings_at(rule, events, &ticks)
}

/// The horizon the tests use: the last event's time plus the sum of the rule's durations,
/// plus 2.
pub fn horizon(rule: &Rule, events: &[(&str, i64)]) -> i64 {
    let last = events.iter().map(|&(_, time)| time).max().unwrap_or(0);
    last.saturating_add(durations(rule).iter().sum::<i64>())
        .saturating_add(2)
}

/// The rule's spans in ms (each at least 1, as the evaluator takes them), in rule order.
pub fn durations(rule: &Rule) -> Vec<i64> {
    fn walk(rule: &Rule, out: &mut Vec<i64>) {
        match rule {
            Rule::Event(_) => {}
            Rule::Not(a) => walk(a, out),
            Rule::Within(a, span) | Rule::After(a, span) => {
                out.push(span_ms(span.as_ms()));
                walk(a, out);
            }
            Rule::And(a, b) | Rule::Or(a, b) | Rule::Then(a, b) => {
                walk(a, out);
                walk(b, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(rule, &mut out);
    out
}

/// Like [`firings`], with deadline moments only at the given tick times (in any order; ticks
/// before the first event are dropped). Exact when the ticks contain every time a deadline
/// falls on.
pub fn firings_at(rule: &Rule, events: &[(&str, i64)], ticks: &[i64]) -> Vec<Moment> {
    let kept = clamped(rule, events);
    let Some(&(_, first)) = kept.first() else {
        return Vec::new();
    };
    let mut moments: Vec<Moment> = ticks
        .iter()
        .filter(|&&time| time >= first)
        .map(|&time| Moment { time, event: None })
        .chain(kept.iter().map(|&(index, time)| Moment {
            time,
            event: Some(index),
        }))
        .collect();
    // Ticks (None) sort before the events at the same time; events keep their trace order.
    moments.sort();
    moments.dedup();
    let names = moments
        .iter()
        .map(|m| m.event.map(|index| events[index].0))
        .collect();
    Reference { moments, names }.root_firings(rule)
}

/// Whether the rule, started fresh at time 0 and left without events, is true at some moment
/// (its start or one of its deadlines), when every `THEN` inside it needs an event to leave
/// waiting. `None` if it has too many time bounds to tell (more than
/// [`WITHOUT_EVENTS_TICKS_MAX`] distinct deadline times).
///
/// Without events, a fresh node's deadlines are its base plus the sum of a set of its spans
/// (each bound opens or closes once, and no `THEN` inside starts an attempt), so those sums
/// are the only ticks needed.
pub fn true_without_events(rule: &Rule) -> Option<bool> {
    let mut ticks = vec![0i64];
    for span in durations(rule) {
        let more: Vec<i64> = ticks
            .iter()
            .map(|&tick| tick.saturating_add(span))
            .collect();
        ticks.extend(more);
        ticks.sort_unstable();
        ticks.dedup();
        if ticks.len() > WITHOUT_EVENTS_TICKS_MAX {
            return None;
        }
    }
    let moments = ticks
        .iter()
        .map(|&time| Moment { time, event: None })
        .collect::<Vec<_>>();
    let names = vec![None; moments.len()];
    let reference = Reference { moments, names };
    let start = Start {
        eval_from: 0,
        sees_from: 0,
        base: 0,
    };
    Some(reference.trace(rule, start).iter().any(|v| v.value))
}

/// Most deadline times [`true_without_events`] looks at.
pub const WITHOUT_EVENTS_TICKS_MAX: usize = 4096;

/// The trace's events the rule mentions, as (index in the trace, clamped time).
fn clamped(rule: &Rule, events: &[(&str, i64)]) -> Vec<(usize, i64)> {
    let names = rule.event_names();
    let mut last = i64::MIN;
    let mut out = Vec::new();
    for (index, &(name, time)) in events.iter().enumerate() {
        if names.contains(&name) {
            last = last.max(time);
            out.push((index, last));
        }
    }
    out
}

fn span_ms(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX).max(1)
}

/// A node's value and settledness at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Val {
    value: bool,
    settled: bool,
}

const UNSETTLED_FALSE: Val = Val {
    value: false,
    settled: false,
};

/// Where a node's evaluation starts: the first moment it is evaluated at, the first moment
/// whose event it sees (the same moment, or the next one), and its base time.
#[derive(Debug, Clone, Copy)]
struct Start {
    eval_from: usize,
    sees_from: usize,
    base: i64,
}

struct Reference<'a> {
    moments: Vec<Moment>,
    /// The event name of each moment (`None` for ticks).
    names: Vec<Option<&'a str>>,
}

impl Reference<'_> {
    /// Root evaluations: each starts at an event (and sees it), and ends when it fires; the
    /// next one starts at the next event.
    fn root_firings(&self, rule: &Rule) -> Vec<Moment> {
        let mut firings = Vec::new();
        let mut from = 0;
        while let Some(first) =
            (from..self.moments.len()).find(|&k| self.moments[k].event.is_some())
        {
            let start = Start {
                eval_from: first,
                sees_from: first,
                base: self.moments[first].time,
            };
            let values = self.trace(rule, start);
            let Some(offset) = values.iter().position(|v| v.value) else {
                break;
            };
            let fired = first + offset;
            firings.push(self.moments[fired]);
            from = fired + 1;
        }
        firings
    }

    /// The index of the deadline moment at `time`, if it is in the trace.
    fn tick(&self, time: i64) -> Option<usize> {
        self.moments
            .iter()
            .position(|m| m.time == time && m.event.is_none())
    }

    /// The node's value and settledness at every moment from `start.eval_from` to the end.
    fn trace(&self, rule: &Rule, start: Start) -> Vec<Val> {
        let moments = start.eval_from..self.moments.len();
        match rule {
            Rule::Event(name) => {
                let mut seen = false;
                moments
                    .map(|k| {
                        seen |= k >= start.sees_from && self.names[k] == Some(name.as_str());
                        Val {
                            value: seen,
                            settled: seen,
                        }
                    })
                    .collect()
            }
            Rule::Not(a) => self
                .trace(a, start)
                .into_iter()
                .map(|v| Val {
                    value: !v.value,
                    settled: v.settled,
                })
                .collect(),
            Rule::And(a, b) | Rule::Or(a, b) => {
                let and = matches!(rule, Rule::And(..));
                let (a, b) = (self.trace(a, start), self.trace(b, start));
                a.into_iter()
                    .zip(b)
                    .map(|(a, b)| {
                        // AND is decided by a settled false side, OR by a settled true one.
                        let decides = |v: Val| v.settled && v.value != and;
                        let value = if and {
                            a.value && b.value
                        } else {
                            a.value || b.value
                        };
                        Val {
                            value,
                            settled: (a.settled && b.settled) || decides(a) || decides(b),
                        }
                    })
                    .collect()
            }
            Rule::Within(inner, span) => {
                let close = self.tick(start.base.saturating_add(span_ms(span.as_ms())));
                let inner = self.trace(inner, start);
                moments
                    .map(|k| match close {
                        Some(close) if k >= close => {
                            // B's value after the last moment before the close.
                            Val {
                                value: inner[close - 1 - start.eval_from].value,
                                settled: true,
                            }
                        }
                        _ => {
                            let v = inner[k - start.eval_from];
                            if v.settled { v } else { UNSETTLED_FALSE }
                        }
                    })
                    .collect()
            }
            Rule::After(inner, span) => {
                let open_time = start.base.saturating_add(span_ms(span.as_ms()));
                let Some(open) = self.tick(open_time) else {
                    return moments.map(|_| UNSETTLED_FALSE).collect();
                };
                // B starts at the deadline moment; it sees the events from that time on.
                let inner = self.trace(
                    inner,
                    Start {
                        eval_from: open,
                        sees_from: open + 1,
                        base: open_time,
                    },
                );
                moments
                    .map(|k| {
                        if k < open {
                            UNSETTLED_FALSE
                        } else {
                            inner[k - open]
                        }
                    })
                    .collect()
            }
            Rule::Then(a, b) => self.trace_then(a, b, start),
        }
    }

    /// `A THEN B`, replaying its history moment by moment.
    fn trace_then(&self, a: &Rule, b: &Rule, start: Start) -> Vec<Val> {
        enum Phase {
            Waiting(Start, Vec<Val>),
            Attempt(Start, Vec<Val>),
        }
        let mut phase = Phase::Waiting(start, self.trace(a, start));
        let mut out = Vec::new();
        for k in start.eval_from..self.moments.len() {
            let time = self.moments[k].time;
            let mut restarts = 0;
            let now = loop {
                match &phase {
                    Phase::Waiting(a_start, a_values) => {
                        if k < a_start.eval_from {
                            break UNSETTLED_FALSE;
                        }
                        let v = a_values[k - a_start.eval_from];
                        if !v.value {
                            // Waiting: false, settled once A is settled false.
                            break Val {
                                value: false,
                                settled: v.settled,
                            };
                        }
                        // A is true: an attempt, B sees what comes after this moment and is
                        // evaluated at it.
                        let b_start = Start {
                            eval_from: k,
                            sees_from: k + 1,
                            base: time,
                        };
                        phase = Phase::Attempt(b_start, self.trace(b, b_start));
                    }
                    Phase::Attempt(b_start, b_values) => {
                        let v = b_values[k - b_start.eval_from];
                        if v.value || !v.settled {
                            break v;
                        }
                        // B settled false: restart. A sees this moment's event, unless this is
                        // the second failure at this moment: then it starts after it.
                        restarts += 1;
                        let from = if restarts == 1 { k } else { k + 1 };
                        let a_start = Start {
                            eval_from: from,
                            sees_from: from,
                            base: time,
                        };
                        phase = Phase::Waiting(a_start, self.trace(a, a_start));
                        if restarts == 2 {
                            break UNSETTLED_FALSE;
                        }
                    }
                }
            };
            out.push(now);
        }
        out
    }
}
