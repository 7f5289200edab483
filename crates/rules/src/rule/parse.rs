//! The text form of rules.

use super::Rule;

/// Where and why a rule's text does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at byte {position}: expected {expected}, found {found}")]
pub struct ParseError {
    pub position: usize,
    pub expected: String,
    pub found: String,
}

/// Parses a rule's text form.
pub fn parse(text: &str) -> Result<Rule, ParseError> {
    Err(ParseError {
        position: 0,
        expected: "a rule".to_owned(),
        found: format!("{text:?}"),
    })
}
