//! Refuses rules that cannot mean what their author wants: before a trigger is created, its
//! rule goes through [`check`], and a refusal says why and how to fix it.
//!
//! Three checks, in this order:
//!
//! 1. **A time bound needs a start.** `WITHIN` and `AFTER` count from the moment the left side
//!    of a `THEN` became true, so each must be inside the right operand of some `THEN`.
//! 2. **A `THEN` must wait for an event.** If a `THEN`'s left side can be true without any
//!    event and its right side has a time bound, then every time the right side fails at a
//!    deadline a new attempt starts at once, by itself, without end (a timer per entity that
//!    never stops). Such a rule is refused.
//! 3. **The rule must be able to fire.** A bounded search runs the reference evaluator
//!    ([`crate::eval::reference`]) over every trace of up to [`SEARCH_EVENTS_MAX`] events over
//!    the rule's names, with gaps between events drawn from 0, 1, each span, and each span
//!    ± 1 (in units of the greatest common divisor of the spans, see [`search`]). If none
//!    fires, the rule is refused. The search is bounded: a rule that only fires on longer or
//!    differently spaced sequences is refused too, and a rule whose search would exceed
//!    [`SEARCH_WORK_MAX`] searches fewer events (down to none: then it is accepted).

use crate::eval::reference;
use crate::rule::{Rule, Span};

/// Most events in a searched trace.
pub const SEARCH_EVENTS_MAX: usize = 4;

/// Most work for the never-fires search, in (trace × moment × node) units: about 50 ms for a
/// 10-node rule in a release build. The trace length is lowered until the search fits.
pub const SEARCH_WORK_MAX: u64 = 20_000_000;

/// Why a rule is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// A `WITHIN` or `AFTER` outside the right operand of every `THEN`.
    #[error(
        "{bound} has no start: a time bound counts from when the left side of THEN became true, \
         so it must be on the right of a THEN; write \"<first event>\" THEN {bound}"
    )]
    NoStart { bound: String },
    /// A `THEN` whose left side can be true without an event, with a time bound on its right.
    #[error(
        "{then} would start over by itself: its left side {left} can be true without any event, \
         so each time the right side fails at a deadline a new attempt begins at once, forever; \
         make the left side wait for an event, e.g. \"<event>\" AND ({left})"
    )]
    StartsOverByItself { then: String, left: String },
    /// The bounded search found no sequence of events that makes the rule fire.
    #[error("this rule can never fire: no sequence of up to {events} events makes it true{hint}")]
    NeverFires { events: usize, hint: String },
}

/// Checks a rule before a trigger is made from it; see the module docs.
pub fn check(rule: &Rule) -> Result<(), CheckError> {
    bounds_have_starts(rule, false)?;
    thens_wait_for_events(rule)?;
    match search(rule) {
        Search::Fired | Search::Skipped => Ok(()),
        Search::Never { events } => Err(CheckError::NeverFires {
            events,
            hint: hint(rule),
        }),
    }
}

fn bounds_have_starts(rule: &Rule, in_then_right: bool) -> Result<(), CheckError> {
    match rule {
        Rule::Event(_) => Ok(()),
        Rule::Within(a, _) | Rule::After(a, _) => {
            if !in_then_right {
                return Err(CheckError::NoStart {
                    bound: rule.to_string(),
                });
            }
            bounds_have_starts(a, in_then_right)
        }
        Rule::Not(a) => bounds_have_starts(a, in_then_right),
        Rule::And(a, b) | Rule::Or(a, b) => {
            bounds_have_starts(a, in_then_right)?;
            bounds_have_starts(b, in_then_right)
        }
        Rule::Then(a, b) => {
            bounds_have_starts(a, in_then_right)?;
            bounds_have_starts(b, true)
        }
    }
}

/// Innermost `THEN`s first, which is what [`reference::true_without_events`] needs.
fn thens_wait_for_events(rule: &Rule) -> Result<(), CheckError> {
    match rule {
        Rule::Event(_) => Ok(()),
        Rule::Not(a) | Rule::Within(a, _) | Rule::After(a, _) => thens_wait_for_events(a),
        Rule::And(a, b) | Rule::Or(a, b) => {
            thens_wait_for_events(a)?;
            thens_wait_for_events(b)
        }
        Rule::Then(a, b) => {
            thens_wait_for_events(a)?;
            thens_wait_for_events(b)?;
            // Unknown (too many bounds to tell) passes: the evaluator caps the work anyway.
            if !reference::durations(b).is_empty()
                && reference::true_without_events(a) == Some(true)
            {
                return Err(CheckError::StartsOverByItself {
                    then: rule.to_string(),
                    left: a.to_string(),
                });
            }
            Ok(())
        }
    }
}

/// The outcome of the never-fires search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Search {
    /// Some trace makes the rule fire.
    Fired,
    /// No trace of up to `events` events does.
    Never { events: usize },
    /// The rule is too big (or its spans too far apart) to search even one event.
    Skipped,
}

/// The never-fires search.
///
/// The rule's spans and the event times are divided by the greatest common divisor `g` of the
/// spans. That changes nothing: when every span and every event time is a multiple of `g`,
/// every deadline is too, and the rule behaves the same on the scaled trace. The gaps between
/// events are then 0, 1, each scaled span and each scaled span ± 1 (so "just before" and "just
/// after" a bound, in units of `g`), the first event is at 0, and the reference runs with a
/// deadline moment at every tick up to its horizon (last event + sum of the spans + 2).
/// Shorter traces are tried first, and the search stops at the first firing.
pub fn search(rule: &Rule) -> Search {
    let spans = reference::durations(rule);
    let unit = spans.iter().copied().fold(0, gcd).max(1);
    let scaled = scale(rule, unit);
    let spans: Vec<i64> = spans.iter().map(|span| span / unit).collect();
    let mut gaps = vec![0, 1];
    for &span in &spans {
        gaps.extend([span - 1, span, span.saturating_add(1)]);
    }
    gaps.sort_unstable();
    gaps.dedup();
    let names = rule.event_names();
    let max_gap = *gaps.last().unwrap_or(&0);
    let spans_sum: i64 = spans.iter().fold(0, |sum, &span| sum.saturating_add(span));

    // The longest traces that fit the work budget.
    let nodes = rule.nodes() as u64;
    let mut work: u64 = 0;
    let mut max_events = 0;
    for events in 1..=SEARCH_EVENTS_MAX {
        let traces = (names.len() as u64)
            .saturating_pow(events as u32)
            .saturating_mul((gaps.len() as u64).saturating_pow(events as u32 - 1));
        let ticks = u64::try_from(
            max_gap
                .saturating_mul(events as i64 - 1)
                .saturating_add(spans_sum)
                .saturating_add(3),
        )
        .unwrap_or(u64::MAX);
        work = work.saturating_add(
            traces
                .saturating_mul(ticks.saturating_add(events as u64))
                .saturating_mul(nodes),
        );
        if work > SEARCH_WORK_MAX {
            break;
        }
        max_events = events;
    }
    if max_events == 0 {
        return Search::Skipped;
    }

    let mut trace: Vec<(&str, i64)> = Vec::with_capacity(max_events);
    for events in 1..=max_events {
        // Odometer over (name of each event, gap before each event but the first).
        let mut name_at = vec![0usize; events];
        let mut gap_at = vec![0usize; events - 1];
        loop {
            trace.clear();
            let mut time = 0i64;
            for i in 0..events {
                if i > 0 {
                    time += gaps[gap_at[i - 1]];
                }
                trace.push((names[name_at[i]], time));
            }
            let horizon = reference::horizon(&scaled, &trace);
            if !reference::firings(&scaled, &trace, horizon).is_empty() {
                return Search::Fired;
            }
            if !advance(&mut name_at, names.len()) && !advance(&mut gap_at, gaps.len()) {
                break;
            }
        }
    }
    Search::Never { events: max_events }
}

/// Next combination of `digits` in base `base`; false (and back to all zeros) after the last.
fn advance(digits: &mut [usize], base: usize) -> bool {
    for digit in digits.iter_mut() {
        *digit += 1;
        if *digit < base {
            return true;
        }
        *digit = 0;
    }
    false
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The rule with every span divided by `unit` (a divisor of each).
fn scale(rule: &Rule, unit: i64) -> Rule {
    // As the evaluator takes spans: at least 1 ms, at most i64::MAX.
    let scale_span = |span: &Span| {
        let ms = i64::try_from(span.as_ms()).unwrap_or(i64::MAX).max(1);
        Span::from_ms((ms / unit) as u64)
    };
    match rule {
        Rule::Event(name) => Rule::Event(name.clone()),
        Rule::Not(a) => Rule::Not(Box::new(scale(a, unit))),
        Rule::And(a, b) => Rule::And(Box::new(scale(a, unit)), Box::new(scale(b, unit))),
        Rule::Or(a, b) => Rule::Or(Box::new(scale(a, unit)), Box::new(scale(b, unit))),
        Rule::Then(a, b) => Rule::Then(Box::new(scale(a, unit)), Box::new(scale(b, unit))),
        Rule::Within(a, span) => Rule::Within(Box::new(scale(a, unit)), scale_span(span)),
        Rule::After(a, span) => Rule::After(Box::new(scale(a, unit)), scale_span(span)),
    }
}

/// A specific hint for the common ways a rule cannot fire, after a colon; or a general one.
fn hint(rule: &Rule) -> String {
    if let Rule::Not(_) = rule {
        return format!(
            "; a rule with NOT at the top is only evaluated at the events it names, and here \
             each of them makes it false; put the NOT on the right of a THEN, as in \
             \"<event>\" THEN {rule} WITHIN 1h"
        );
    }
    if let Some((a, b)) = contradiction(rule) {
        return format!("; {a} and {b} can never be true at once");
    }
    if let Some((after, within)) = after_outside_window(rule) {
        return format!("; {after} only starts after its window {within} has closed");
    }
    "; try each side of its THEN, AND and OR on its own to find the part that cannot be true"
        .to_owned()
}

/// An `A AND NOT A` (either order) somewhere in the rule.
fn contradiction(rule: &Rule) -> Option<(String, String)> {
    match rule {
        Rule::Event(_) => None,
        Rule::And(a, b) => {
            let negates = |x: &Rule, y: &Rule| matches!(y, Rule::Not(inner) if **inner == *x);
            if negates(a, b) || negates(b, a) {
                return Some((a.to_string(), b.to_string()));
            }
            contradiction(a).or_else(|| contradiction(b))
        }
        Rule::Or(a, b) | Rule::Then(a, b) => contradiction(a).or_else(|| contradiction(b)),
        Rule::Not(a) | Rule::Within(a, _) | Rule::After(a, _) => contradiction(a),
    }
}

/// An `X AFTER d` directly inside a `... WITHIN w` with `d >= w`.
fn after_outside_window(rule: &Rule) -> Option<(String, String)> {
    match rule {
        Rule::Event(_) => None,
        Rule::Within(a, window) => {
            if let Rule::After(_, after) = &**a
                && after >= window
            {
                return Some((a.to_string(), format!("WITHIN {window}")));
            }
            after_outside_window(a)
        }
        Rule::Not(a) | Rule::After(a, _) => after_outside_window(a),
        Rule::And(a, b) | Rule::Or(a, b) | Rule::Then(a, b) => {
            after_outside_window(a).or_else(|| after_outside_window(b))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::parse;

    fn checked(text: &str) -> Result<(), CheckError> {
        check(&parse(text).expect("the rule parses"))
    }

    #[test]
    fn accepts_rules_that_can_fire() {
        for text in [
            r#""signed_up" THEN NOT "paid" WITHIN 7d"#,
            r#""reading" THEN NOT "reading" WITHIN 5m"#,
            r#""shipped" AND NOT "paid""#,
            r#""a" OR "b""#,
            r#""a" THEN "b" AFTER 1h"#,
            r#""a" THEN ("b" THEN "c" WITHIN 1h) WITHIN 1d"#,
            r#""a" THEN ("b" WITHIN 7d) AND ("c" WITHIN 1h)"#,
            r#""a" THEN NOT ("b" OR "c") WITHIN 30s AFTER 10s"#,
        ] {
            assert_eq!(checked(text), Ok(()), "{text}");
        }
    }

    #[test]
    fn refuses_bare_time_bounds() {
        let error = checked(r#""paid" WITHIN 7d"#).expect_err("a bare bound");
        assert_eq!(
            error.to_string(),
            "\"paid\" WITHIN 7d has no start: a time bound counts from when the left side of THEN \
             became true, so it must be on the right of a THEN; write \"<first event>\" THEN \"paid\" \
             WITHIN 7d"
        );
        for text in [
            r#"("a" AFTER 1s) THEN "b""#,
            r#""a" OR "b" AFTER 1s"#,
            r#"("a" WITHIN 1s) AND "b""#,
        ] {
            assert!(
                matches!(checked(text), Err(CheckError::NoStart { .. })),
                "{text}"
            );
        }
    }

    #[test]
    fn refuses_thens_that_start_over_by_themselves() {
        for text in [
            r#"NOT "a" THEN "b" WITHIN 1s"#,
            r#""s" THEN (NOT "q" WITHIN 2s) THEN "y" WITHIN 3s"#,
        ] {
            assert!(
                matches!(checked(text), Err(CheckError::StartsOverByItself { .. })),
                "{text}: {:?}",
                checked(text)
            );
        }
        // Without a time bound on the right, failures only come with events: accepted.
        assert_eq!(checked(r#"NOT "a" THEN NOT "b""#), Ok(()));
    }

    #[test]
    fn refuses_rules_that_never_fire_with_a_hint() {
        let error = checked(r#"NOT "paid""#).expect_err("never fires");
        let message = error.to_string();
        assert!(message.starts_with("this rule can never fire: no sequence of up to 4 events makes it true; a rule with NOT at the top"), "{message}");
        let error = checked(r#""a" THEN ("b" AND NOT "b")"#).expect_err("never fires");
        assert!(
            error
                .to_string()
                .contains("\"b\" and NOT \"b\" can never be true at once"),
            "{error}"
        );
        let error = checked(r#""a" THEN ("b" AFTER 2h) WITHIN 1h"#).expect_err("never fires");
        assert!(
            error
                .to_string()
                .contains("only starts after its window WITHIN 1h has closed"),
            "{error}"
        );
        assert!(matches!(
            checked(r#""a" THEN ("b" WITHIN 1h) AND (NOT "b" WITHIN 1h)"#),
            Err(CheckError::NeverFires { .. })
        ));
    }

    #[test]
    fn spans_far_apart_search_fewer_events() {
        // 3650 days and 1 ms: one event already needs 3.15e11 ticks; the search is skipped.
        let rule = parse(r#""a" THEN ("b" WITHIN 3650d) OR ("c" WITHIN 1ms)"#).expect("parses");
        assert_eq!(search(&rule), Search::Skipped);
        assert_eq!(check(&rule), Ok(()));
        // Spans with a large common divisor search the whole space.
        let rule = parse(r#""a" THEN ("b" WITHIN 7d) AND (NOT "c" WITHIN 1d)"#).expect("parses");
        assert_eq!(search(&rule), Search::Fired);
    }
}
