//! Durations in rules: `30s`, `15m`, `7d`, `1h30m`.

/// A time span in milliseconds (at least 1 ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Span(u64);

impl Span {
    pub fn from_ms(ms: u64) -> Span {
        Span(ms)
    }

    pub fn as_ms(self) -> u64 {
        self.0
    }
}

/// A duration that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpanError(pub String);
