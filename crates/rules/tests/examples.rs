//! Every row of the examples table in `docs/triggers.md` ("What a rule means"), checked
//! against both evaluators.
//!
//! The incremental evaluator runs on the times in ms. The reference has a moment for every
//! integer tick, so it runs on a scaled copy: every span and every event time divided by their
//! greatest common divisor, which changes nothing (every deadline is then a multiple of it),
//! and its firing times multiplied back.

use sluice_rules::eval::Program;
use sluice_rules::eval::reference;
use sluice_rules::rule::{Rule, Span, parse};

const DOC: &str = include_str!("../../../docs/triggers.md");

/// A firing as the table writes it: the time, and the event's name for an event moment.
type Fire = (i64, Option<String>);

#[derive(Debug)]
struct Row {
    line: usize,
    rule_text: String,
    rule: Rule,
    events: Vec<(String, i64)>,
    fires: Vec<Fire>,
}

/// `2d`, `1h30m`, `9s999ms`, `0s`: like a rule's duration, but 0 is allowed.
fn time_ms(text: &str) -> i64 {
    if text
        .trim_end_matches(|c: char| c.is_ascii_alphabetic())
        .chars()
        .all(|c| c == '0')
    {
        return 0;
    }
    Span::parse(text)
        .unwrap_or_else(|e| panic!("time {text:?}: {e}"))
        .as_ms() as i64
}

/// `name@time`.
fn event(text: &str) -> (String, i64) {
    let (name, time) = text
        .trim()
        .split_once('@')
        .unwrap_or_else(|| panic!("event {text:?}: expected name@time"));
    (name.to_owned(), time_ms(time))
}

fn cell(text: &str) -> &str {
    text.trim().trim_start_matches('`').trim_end_matches('`')
}

fn rows() -> Vec<Row> {
    let start = DOC
        .find("<!-- examples:start -->")
        .expect("the examples start marker");
    let end = DOC
        .find("<!-- examples:end -->")
        .expect("the examples end marker");
    let first_line = DOC[..start].lines().count() + 1;
    let mut rows = Vec::new();
    for (offset, line) in DOC[start..end].lines().enumerate() {
        let line_no = first_line + offset;
        let cells: Vec<&str> = line.split('|').collect();
        if cells.len() != 5 || line.starts_with("| Rule") || line.starts_with("|---") {
            continue;
        }
        let rule_text = cell(cells[1]).to_owned();
        let rule = parse(&rule_text).unwrap_or_else(|e| panic!("line {line_no}: {rule_text}: {e}"));
        let events = cell(cells[2]).split(',').map(event).collect();
        let fires_text = cell(cells[3]);
        let fires = if fires_text == "never" {
            Vec::new()
        } else {
            fires_text
                .split(',')
                .map(|fire| {
                    let fire = fire
                        .trim()
                        .strip_prefix("at ")
                        .unwrap_or_else(|| panic!("line {line_no}: {fire:?}"));
                    if fire.contains('@') {
                        let (name, time) = event(fire);
                        (time, Some(name))
                    } else {
                        (time_ms(fire), None)
                    }
                })
                .collect()
        };
        rows.push(Row {
            line: line_no,
            rule_text,
            rule,
            events,
            fires,
        });
    }
    rows
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn scale(rule: &Rule, unit: i64) -> Rule {
    let span = |span: &Span| Span::from_ms(span.as_ms() / unit as u64);
    let boxed = |rule: &Rule| Box::new(scale(rule, unit));
    match rule {
        Rule::Event(name) => Rule::Event(name.clone()),
        Rule::Not(a) => Rule::Not(boxed(a)),
        Rule::And(a, b) => Rule::And(boxed(a), boxed(b)),
        Rule::Or(a, b) => Rule::Or(boxed(a), boxed(b)),
        Rule::Then(a, b) => Rule::Then(boxed(a), boxed(b)),
        Rule::Within(a, d) => Rule::Within(boxed(a), span(d)),
        Rule::After(a, d) => Rule::After(boxed(a), span(d)),
    }
}

fn by_reference(row: &Row) -> Vec<Fire> {
    let spans = reference::durations(&row.rule);
    let unit = spans
        .iter()
        .chain(row.events.iter().map(|(_, time)| time))
        .fold(0, |g, &x| gcd(g, x))
        .max(1);
    let rule = scale(&row.rule, unit);
    let events: Vec<(&str, i64)> = row
        .events
        .iter()
        .map(|(name, time)| (name.as_str(), time / unit))
        .collect();
    let horizon = reference::horizon(&rule, &events);
    reference::firings(&rule, &events, horizon)
        .into_iter()
        .map(|m| (m.time * unit, m.event.map(|i| row.events[i].0.clone())))
        .collect()
}

fn incremental(row: &Row) -> Vec<Fire> {
    let program = Program::compile(&row.rule);
    let events: Vec<(&str, i64)> = row
        .events
        .iter()
        .map(|(name, time)| (name.as_str(), *time))
        .collect();
    let horizon = reference::horizon(&row.rule, &events);
    let mut state = program.new_state();
    let mut fires = Vec::new();
    let mut next_deadline = None;
    for (name, time) in events
        .iter()
        .map(|&(n, t)| (Some(n), t))
        .chain([(None, horizon)])
    {
        while let Some(deadline) = next_deadline.filter(|&d| d <= time) {
            let step = program.on_time(&mut state, deadline);
            if let Some(fired) = step.fired {
                fires.push((fired.time_ms, None));
            }
            next_deadline = step.next_deadline;
        }
        let Some(id) = name.and_then(|name| program.event_id(name)) else {
            continue;
        };
        let step = program.on_event(&mut state, id, time);
        assert!(
            step.fired_before.is_none(),
            "deadlines were run up to the event"
        );
        if let Some(fired) = step.fired {
            fires.push((fired.time_ms, name.map(str::to_owned)));
        }
        next_deadline = step.next_deadline;
    }
    fires
}

#[test]
fn examples_table() {
    let rows = rows();
    assert!(rows.len() >= 25, "the table has {} rows", rows.len());
    let mut failures = Vec::new();
    for row in &rows {
        for (evaluator, got) in [
            ("reference", by_reference(row)),
            ("incremental", incremental(row)),
        ] {
            if got != row.fires {
                failures.push(format!(
                    "line {}: {} over {:?}: {evaluator} gives {got:?}, the table says {:?}",
                    row.line, row.rule_text, row.events, row.fires
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every operator appears in the table.
#[test]
fn examples_cover_every_operator() {
    let rows = rows();
    for operator in ["NOT", "AND", "OR", "THEN", "WITHIN", "AFTER"] {
        assert!(
            rows.iter().any(|row| row.rule_text.contains(operator)),
            "no example with {operator}"
        );
    }
}
