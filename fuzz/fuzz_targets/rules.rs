//! The trigger rule language's decoders, on arbitrary input: the text parser (and, for what it
//! accepts, that the canonical text parses back to the same rule), the JSON form, and the
//! per-entity state decoder followed by evaluation steps on whatever it accepts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_rules::eval::Program;
use sluice_rules::rule::{Rule, parse};

const STATE_RULE: &str = r#""a" THEN (NOT "b" WITHIN 7d) OR ("c" THEN "a" AFTER 1h)"#;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    match selector % 3 {
        0 => {
            if let Ok(text) = std::str::from_utf8(rest)
                && let Ok(rule) = parse(text)
            {
                let printed = rule.to_string();
                assert_eq!(parse(&printed).as_ref(), Ok(&rule), "{printed}");
                assert_eq!(Rule::from_json(&rule.to_json()).as_ref(), Ok(&rule));
            }
        }
        1 => {
            if let Ok(value) = serde_json::from_slice::<serde_json::Value>(rest)
                && let Ok(rule) = Rule::from_json(&value)
            {
                assert_eq!(parse(&rule.to_string()).as_ref(), Ok(&rule));
            }
        }
        _ => {
            let program = Program::compile(&parse(STATE_RULE).expect("a valid rule"));
            if let Ok(mut state) = program.decode_state(rest) {
                let mut time = 0i64;
                for (i, name) in ["a", "b", "c", "a"].iter().enumerate() {
                    let event = program.event_id(name).expect("named in the rule");
                    time = time.saturating_add(i as i64 * 3_600_000);
                    let _ = program.on_event(&mut state, event, time);
                }
                let _ = program.on_time(&mut state, i64::MAX);
            }
        }
    }
});
