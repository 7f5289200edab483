//! Property tests for the rule language's codecs: the text form and the JSON form round-trip
//! every tree within the limits, and the parser returns (never panics) on any input.

use proptest::prelude::*;
use sluice_rules::rule::{MAX_DEPTH, MAX_NODES, ParseError, Rule, Span, parse};

/// Names, including ones that need quotes (keywords, spaces, non-ASCII) or escapes.
const NAMES: &[&str] = &[
    "a",
    "paid",
    "signed_up",
    "order.created:v2-eu",
    "_x",
    "AND",
    "within",
    "7d",
    "two words",
    "say \"hi\"",
    "back\\slash",
    "\\\"",
    "line\nbreak",
    "üñí 名前",
    "(",
];

fn name() -> impl Strategy<Value = String> {
    prop::sample::select(NAMES).prop_map(str::to_owned)
}

fn span() -> impl Strategy<Value = Span> {
    prop_oneof![
        // Whole units, which print as one or two groups.
        (
            1u64..=100,
            prop::sample::select(&[1u64, 1_000, 60_000, 3_600_000, 86_400_000][..])
        )
            .prop_map(|(count, unit)| Span::from_ms(count * unit)),
        (Span::MIN.as_ms()..=Span::MAX.as_ms()).prop_map(Span::from_ms),
        Just(Span::MIN),
        Just(Span::MAX),
    ]
}

/// Trees at most 5 levels of operators deep (so at most 63 nodes, within the limits).
fn rule() -> impl Strategy<Value = Rule> {
    let leaf = name().prop_map(Rule::Event);
    leaf.prop_recursive(5, 64, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|a| Rule::Not(Box::new(a))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Rule::And(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Rule::Or(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Rule::Then(Box::new(a), Box::new(b))),
            (inner.clone(), span()).prop_map(|(a, d)| Rule::Within(Box::new(a), d)),
            (inner, span()).prop_map(|(a, d)| Rule::After(Box::new(a), d)),
        ]
    })
}

/// Pieces of rules (valid tokens, near misses and junk), to build token soups from.
const PIECES: &[&str] = &[
    "AND",
    "and",
    "OR",
    "Or",
    "NOT",
    "not",
    "THEN",
    "WITHIN",
    "within",
    "AFTER",
    "(",
    ")",
    "a",
    "paid",
    "\"x\"",
    "\"a b\"",
    "\"q\\\"\"",
    "\"\\\\\"",
    "\"",
    "\"\\",
    "\"\\n\"",
    "\"\"",
    "7d",
    "1h30m",
    "30m1h",
    "0s",
    "3651d",
    "500ms",
    "1",
    "d",
    "ms",
    "7 d",
    "@",
    "é",
    "名",
    "\t",
    "\n",
];

/// Asserts what holds for any input: an error points at a char boundary within the text and
/// renders; a parsed rule is within the limits and its canonical text parses back to it.
fn check_any(text: &str) -> Result<(), TestCaseError> {
    match parse(text) {
        Err(error) => {
            prop_assert!(error.position <= text.len(), "{error:?}");
            prop_assert!(text.is_char_boundary(error.position), "{error:?}");
            prop_assert!(!error.expected.is_empty() && !error.found.is_empty());
            let rendered = error.render(text);
            prop_assert!(rendered.contains(&error.expected));
        }
        Ok(rule) => {
            prop_assert!(rule.nodes() <= MAX_NODES);
            prop_assert!(rule.depth() <= MAX_DEPTH);
            prop_assert_eq!(parse(&rule.to_string()), Ok(rule.clone()));
            prop_assert_eq!(Rule::from_json(&rule.to_json()), Ok(rule));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn text_round_trips(rule in rule()) {
        let text = rule.to_string();
        let parsed = parse(&text).map_err(|e: ParseError| TestCaseError::fail(e.render(&text)))?;
        prop_assert_eq!(parsed, rule);
    }

    #[test]
    fn json_round_trips(rule in rule()) {
        let value = rule.to_json();
        prop_assert_eq!(Rule::from_json(&value), Ok(rule.clone()));
        // Through serialized JSON too, as an API would see it.
        let reread: serde_json::Value = serde_json::from_str(&value.to_string())
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(Rule::from_json(&reread), Ok(rule));
    }

    #[test]
    fn spans_round_trip(span in span()) {
        prop_assert_eq!(Span::parse(&span.to_string()), Ok(span));
    }

    #[test]
    fn any_string(text in any::<String>()) {
        check_any(&text)?;
    }

    #[test]
    fn any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        check_any(&String::from_utf8_lossy(&bytes))?;
    }

    #[test]
    fn token_soup(
        pieces in prop::collection::vec(
            (prop::sample::select(PIECES), prop::sample::select(&["", " ", "  "][..])),
            0..40,
        )
    ) {
        let text: String = pieces.iter().flat_map(|(piece, space)| [*piece, *space]).collect();
        check_any(&text)?;
    }

    #[test]
    fn rule_text_with_a_mutation(rule in rule(), at in any::<prop::sample::Index>(), piece in prop::sample::select(PIECES)) {
        // Valid text with a piece inserted somewhere: mostly errors close to valid input.
        let mut text = rule.to_string();
        let mut position = at.index(text.len() + 1);
        while !text.is_char_boundary(position) {
            position -= 1;
        }
        text.insert_str(position, piece);
        check_any(&text)?;
    }

    #[test]
    fn any_json_never_panics(text in "[\\[\\]{}\",:a-z0-9 ]{0,80}") {
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(&text)
            && let Ok(rule) = Rule::from_json(&value)
        {
            prop_assert_eq!(Rule::from_json(&rule.to_json()), Ok(rule));
        }
    }
}

#[test]
fn deep_and_long_inputs_are_refused_quickly() {
    for text in [
        "(".repeat(1_000_000),
        "NOT ".repeat(100_000),
        "a AND ".repeat(100_000),
        format!("\"{}", "x".repeat(1_000_000)),
        "a THEN ".repeat(100_000),
    ] {
        assert!(parse(&text).is_err());
    }
}
