//! Durations in rules: `500ms`, `30s`, `15m`, `7d`, `1h30m`, `2w`.
//!
//! A duration follows `WITHIN` and `AFTER` in a rule's text (and is the `"d"` field of the JSON
//! form). It is one or more `<integer><unit>` groups, units from largest to smallest, each unit
//! at most once: `w` (7 days), `d`, `h`, `m`, `s`, `ms`. The whole value is between
//! [`Span::MIN`] (1 ms) and [`Span::MAX`] (3650 days).
//!
//! [`Span`]'s `Display` writes the canonical form (largest units first, zero groups left out,
//! weeks only from two on: 90 minutes is `1h30m`, 7 days `7d`, 14 days `2w`), which parses back
//! to the same value.
//!
//! The scanner here works on a prefix of its input ([`scan`]) so that the rule parser can read a
//! duration in the middle of a rule and report errors at their byte offset in the rule.

use std::fmt;
use std::str::FromStr;

use super::{describe, lexeme_at};

const SECOND_MS: u64 = 1_000;
const MINUTE_MS: u64 = 60 * SECOND_MS;
const HOUR_MS: u64 = 60 * MINUTE_MS;
const DAY_MS: u64 = 24 * HOUR_MS;
const WEEK_MS: u64 = 7 * DAY_MS;

/// The units, largest first: how they are written and their length in milliseconds. The order
/// is the order groups must come in, and the order `Display` writes them.
const UNITS: [(&str, u64); 6] = [
    ("w", WEEK_MS),
    ("d", DAY_MS),
    ("h", HOUR_MS),
    ("m", MINUTE_MS),
    ("s", SECOND_MS),
    ("ms", 1),
];

/// What a duration looks like, for errors where one was expected and something else is there.
pub(super) const EXPECTED_DURATION: &str = "a duration like 7d or 30m";
const EXPECTED_UNIT: &str = "a unit: ms, s, m, h, d or w";
const EXPECTED_ORDER: &str = "units from largest to smallest, each at most once, like 1h30m";

/// A time span in milliseconds.
///
/// Spans in parsed rules are between [`Span::MIN`] and [`Span::MAX`]; [`Span::from_ms`] does not
/// check that (for tests and internal arithmetic), [`Span::try_from_ms`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Span(u64);

impl Span {
    /// The shortest span a rule may have: 1 ms.
    pub const MIN: Span = Span(1);

    /// The longest span a rule may have: 3650 days (about ten years). Longer bounds are almost
    /// certainly mistakes, and the bound keeps deadlines (`now + span`) far from overflow.
    pub const MAX: Span = Span(3650 * DAY_MS);

    /// A span of `ms` milliseconds, unchecked.
    pub fn from_ms(ms: u64) -> Span {
        Span(ms)
    }

    /// A span of `ms` milliseconds, if it is between [`Span::MIN`] and [`Span::MAX`].
    pub fn try_from_ms(ms: u64) -> Result<Span, SpanError> {
        check_range(ms)
            .map(|()| Span(ms))
            .map_err(|expected| SpanError {
                position: 0,
                expected: expected.to_owned(),
                found: format!("{ms} ms"),
            })
    }

    /// The span in milliseconds.
    pub fn as_ms(self) -> u64 {
        self.0
    }

    /// Parses a whole string as a duration (no surrounding whitespace): `7d`, `1h30m`, `500ms`.
    pub fn parse(text: &str) -> Result<Span, SpanError> {
        const END: &str = "the end";
        let (span, len) = scan(text, END)?;
        if len < text.len() {
            return Err(SpanError {
                position: len,
                expected: "a number and a unit (like 30m), or the end".to_owned(),
                found: describe(lexeme_at(text, len), END),
            });
        }
        Ok(span)
    }
}

impl FromStr for Span {
    type Err = SpanError;

    fn from_str(text: &str) -> Result<Span, SpanError> {
        Span::parse(text)
    }
}

/// The canonical form: largest units first, zero groups left out (`1h30m`, `2w`, `1s500ms`).
/// Weeks are written only from two weeks on: a week is almost always meant as `7d` (and reads
/// so), while `2w` reads better than `14d`. So `7d` and `13d` stay in days, `15d` is `2w1d`.
/// A zero span (never produced by parsing) is written `0ms`.
impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("0ms");
        }
        let mut rest = self.0;
        for (name, unit_ms) in UNITS {
            if unit_ms == WEEK_MS && rest < 2 * WEEK_MS {
                continue;
            }
            let count = rest / unit_ms;
            if count > 0 {
                write!(f, "{count}{name}")?;
                rest %= unit_ms;
            }
        }
        Ok(())
    }
}

/// A duration that does not parse, or is out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at byte {position}: expected {expected}, found {found}")]
pub struct SpanError {
    /// Byte offset in the duration's text where the problem starts.
    pub position: usize,
    /// What would have been valid there.
    pub expected: String,
    /// What was there, quoted, or "the end".
    pub found: String,
}

/// Reads the duration at the start of `text` and returns it with the number of bytes it takes.
///
/// Reading stops after the last `<integer><unit>` group; whatever follows is the caller's (the
/// rule parser's next token). `end` is how errors describe the end of `text` ("the end of the
/// rule" when `text` is the rest of a rule). Positions in errors are offsets into `text`.
pub(super) fn scan(text: &str, end: &str) -> Result<(Span, usize), SpanError> {
    let bytes = text.as_bytes();
    let error = |position: usize, expected: &str, found: String| SpanError {
        position,
        expected: expected.to_owned(),
        found,
    };
    if !bytes.first().is_some_and(u8::is_ascii_digit) {
        return Err(error(
            0,
            EXPECTED_DURATION,
            describe(lexeme_at(text, 0), end),
        ));
    }

    // Arithmetic saturates: a saturated value is far above Span::MAX, so the range check below
    // reports it, after any syntax error later in the text.
    let mut total_ms: u64 = 0;
    let mut pos = 0;
    let mut previous_unit: Option<usize> = None;
    while bytes.get(pos).is_some_and(u8::is_ascii_digit) {
        let group_start = pos;
        let mut count: u64 = 0;
        while let Some(digit) = bytes.get(pos).filter(|b| b.is_ascii_digit()) {
            count = count
                .saturating_mul(10)
                .saturating_add(u64::from(digit - b'0'));
            pos += 1;
        }
        let unit_start = pos;
        while bytes.get(pos).is_some_and(u8::is_ascii_alphabetic) {
            pos += 1;
        }
        // Digits and ASCII letters are one byte each, so these offsets are char boundaries.
        let unit = &text[unit_start..pos];
        if unit.is_empty() {
            return Err(error(
                unit_start,
                EXPECTED_UNIT,
                describe(lexeme_at(text, unit_start), end),
            ));
        }
        let Some(index) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(error(unit_start, EXPECTED_UNIT, describe(unit, end)));
        };
        if previous_unit.is_some_and(|previous| index <= previous) {
            return Err(error(
                group_start,
                EXPECTED_ORDER,
                describe(&text[group_start..pos], end),
            ));
        }
        previous_unit = Some(index);
        total_ms = total_ms.saturating_add(count.saturating_mul(UNITS[index].1));
    }
    if let Err(expected) = check_range(total_ms) {
        return Err(error(0, expected, describe(&text[..pos], end)));
    }
    Ok((Span(total_ms), pos))
}

/// `Ok` if `ms` is a valid span, else what a valid one would be.
fn check_range(ms: u64) -> Result<(), &'static str> {
    if ms < Span::MIN.0 {
        Err("a duration of at least 1ms")
    } else if ms > Span::MAX.0 {
        Err("a duration of at most 3650d")
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> u64 {
        match Span::parse(text) {
            Ok(span) => span.as_ms(),
            Err(e) => panic!("{text:?} does not parse: {e}"),
        }
    }

    fn err(text: &str) -> (usize, String, String) {
        match Span::parse(text) {
            Ok(span) => panic!("{text:?} parses as {span}"),
            Err(e) => (e.position, e.expected, e.found),
        }
    }

    #[test]
    fn parses_every_unit_and_combinations() {
        assert_eq!(ms("500ms"), 500);
        assert_eq!(ms("30s"), 30 * SECOND_MS);
        assert_eq!(ms("15m"), 15 * MINUTE_MS);
        assert_eq!(ms("2h"), 2 * HOUR_MS);
        assert_eq!(ms("7d"), 7 * DAY_MS);
        assert_eq!(ms("2w"), 14 * DAY_MS);
        assert_eq!(ms("1h30m"), 90 * MINUTE_MS);
        assert_eq!(
            ms("1w2d3h4m5s6ms"),
            WEEK_MS + 2 * DAY_MS + 3 * HOUR_MS + 4 * MINUTE_MS + 5 * SECOND_MS + 6
        );
        assert_eq!(ms("90m"), 90 * MINUTE_MS);
        assert_eq!(ms("007s"), 7 * SECOND_MS);
    }

    #[test]
    fn range_is_1ms_to_3650d_inclusive() {
        assert_eq!(ms("1ms"), 1);
        assert_eq!(ms("3650d"), Span::MAX.as_ms());
        assert_eq!(ms("521w3d"), Span::MAX.as_ms());
        assert_eq!(
            err("0s"),
            (0, "a duration of at least 1ms".into(), "\"0s\"".into())
        );
        assert_eq!(
            err("0d0ms"),
            (0, "a duration of at least 1ms".into(), "\"0d0ms\"".into())
        );
        assert_eq!(
            err("3650d1ms"),
            (
                0,
                "a duration of at most 3650d".into(),
                "\"3650d1ms\"".into()
            )
        );
        // Overflowing u64 saturates, then is out of range.
        assert_eq!(
            err("99999999999999999999999w").1,
            "a duration of at most 3650d"
        );
        assert_eq!(
            err("18446744073709551615d").1,
            "a duration of at most 3650d"
        );
        assert!(Span::try_from_ms(0).is_err());
        assert!(Span::try_from_ms(Span::MAX.as_ms() + 1).is_err());
        assert_eq!(Span::try_from_ms(1), Ok(Span::MIN));
    }

    #[test]
    fn errors_say_what_is_expected_and_where() {
        assert_eq!(err(""), (0, EXPECTED_DURATION.into(), "the end".into()));
        assert_eq!(err("d"), (0, EXPECTED_DURATION.into(), "\"d\"".into()));
        assert_eq!(err("7"), (1, EXPECTED_UNIT.into(), "the end".into()));
        assert_eq!(err("7 d"), (1, EXPECTED_UNIT.into(), "a space".into()));
        assert_eq!(err("7days"), (1, EXPECTED_UNIT.into(), "\"days\"".into()));
        assert_eq!(err("7D"), (1, EXPECTED_UNIT.into(), "\"D\"".into()));
        assert_eq!(err("1h7x"), (3, EXPECTED_UNIT.into(), "\"x\"".into()));
        assert_eq!(err("30m1h"), (3, EXPECTED_ORDER.into(), "\"1h\"".into()));
        assert_eq!(err("1h1h"), (2, EXPECTED_ORDER.into(), "\"1h\"".into()));
        assert_eq!(
            err("7d "),
            (
                2,
                "a number and a unit (like 30m), or the end".into(),
                "a space".into()
            )
        );
        assert_eq!(err("1.5h"), (1, EXPECTED_UNIT.into(), "\".5h\"".into()));
        assert_eq!(
            Span::parse("7x").map_err(|e| e.to_string()),
            Err("at byte 1: expected a unit: ms, s, m, h, d or w, found \"x\"".to_owned())
        );
    }

    #[test]
    fn display_is_canonical() {
        let canonical = |text: &str| Span::parse(text).map(|s| s.to_string());
        assert_eq!(canonical("90m"), Ok("1h30m".into()));
        assert_eq!(canonical("7d"), Ok("7d".into()));
        assert_eq!(canonical("14d"), Ok("2w".into()));
        assert_eq!(canonical("1w"), Ok("7d".into()));
        assert_eq!(canonical("13d23h"), Ok("13d23h".into()));
        assert_eq!(canonical("15d"), Ok("2w1d".into()));
        assert_eq!(canonical("1500ms"), Ok("1s500ms".into()));
        assert_eq!(canonical("3600s"), Ok("1h".into()));
        assert_eq!(canonical("3650d"), Ok("521w3d".into()));
        assert_eq!(Span::from_ms(0).to_string(), "0ms");
    }

    #[test]
    fn display_parses_back() {
        let samples = [
            1,
            999,
            1000,
            1001,
            59_999,
            60_000,
            3_599_999,
            DAY_MS - 1,
            WEEK_MS + 1,
        ];
        for ms in samples
            .into_iter()
            .chain([Span::MAX.as_ms(), Span::MAX.as_ms() - 1])
        {
            let span = Span::from_ms(ms);
            assert_eq!(Span::parse(&span.to_string()), Ok(span), "{ms} ms");
        }
    }

    #[test]
    fn scan_stops_after_the_last_group() {
        assert_eq!(scan("7d)", "the end"), Ok((Span::from_ms(7 * DAY_MS), 2)));
        assert_eq!(
            scan("1h30m THEN", "the end"),
            Ok((Span::from_ms(90 * MINUTE_MS), 5))
        );
    }
}
