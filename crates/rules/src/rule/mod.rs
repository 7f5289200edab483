//! The rule language: the syntax tree every other part works on.
//!
//! A rule is a tree of event names combined with `AND`, `OR`, `NOT`, `THEN`, and the two time
//! bounds `WITHIN d` and `AFTER d`. The text form is parsed by [`parse`]; the JSON form (the
//! same tree, for APIs) by [`Rule::from_json`]; [`Rule`]'s `Display` writes the canonical text
//! form back. What a rule means is written down in `docs/triggers.md` and implemented by
//! [`crate::eval`].
//!
//! Where this sits: a trigger definition arrives (CLI or HTTP) as text or JSON, is parsed here
//! into a [`Rule`] (refusing anything over the limits below, with a positioned error), checked by
//! [`crate::check`], and then evaluated per entity by [`crate::eval`].
//!
//! - [`Rule`]: the syntax tree; [`MAX_NODES`], [`MAX_DEPTH`], [`MAX_EVENT_NAME_BYTES`]: its
//!   limits, the same for both forms;
//! - [`parse`] and [`ParseError`] (module `parse`): the text form, and `Display for Rule`, its
//!   canonical printer;
//! - [`Rule::to_json`], [`Rule::from_json`] and [`JsonError`] (module `json`): the JSON form;
//! - [`Span`] and [`SpanError`] (module `duration`): durations such as `7d` or `1h30m`.

mod duration;
mod json;
mod parse;

pub use duration::{Span, SpanError};
pub use json::{JsonError, JsonProblem};
pub use parse::{ParseError, parse};

/// A rule's syntax tree.
///
/// Children are boxed; a rule is at most [`MAX_NODES`] nodes, so recursion over it is bounded.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Rule {
    /// An event with this name (the leaf): true once such an event has happened.
    Event(String),
    /// True while the inner rule is false.
    Not(Box<Rule>),
    /// True while both are true.
    And(Box<Rule>, Box<Rule>),
    /// True while either is true.
    Or(Box<Rule>, Box<Rule>),
    /// `A THEN B`: B, evaluated only over what happens after A became true.
    Then(Box<Rule>, Box<Rule>),
    /// `B WITHIN d`: B's verdict over the window of `d` from the start THEN gives it.
    Within(Box<Rule>, Span),
    /// `B AFTER d`: B evaluated only over what happens from `d` after the start on.
    After(Box<Rule>, Span),
}

/// Most nodes a rule may have; a larger rule is refused when parsed.
pub const MAX_NODES: usize = 64;

/// Longest event name, in bytes.
pub const MAX_EVENT_NAME_BYTES: usize = 256;

/// Deepest a rule may be: nodes on the longest path from the root to a leaf (an event alone is
/// depth 1). Also the most parentheses the text form may nest. Together with [`MAX_NODES`] it
/// bounds the recursion of the parsers, the printer and the evaluator; no useful rule comes
/// close.
pub const MAX_DEPTH: usize = 32;

impl Rule {
    /// Number of nodes in the tree.
    pub fn nodes(&self) -> usize {
        match self {
            Rule::Event(_) => 1,
            Rule::Not(a) | Rule::Within(a, _) | Rule::After(a, _) => 1 + a.nodes(),
            Rule::And(a, b) | Rule::Or(a, b) | Rule::Then(a, b) => 1 + a.nodes() + b.nodes(),
        }
    }

    /// Nodes on the longest path from the root to a leaf (an event alone is depth 1).
    pub fn depth(&self) -> usize {
        match self {
            Rule::Event(_) => 1,
            Rule::Not(a) | Rule::Within(a, _) | Rule::After(a, _) => 1 + a.depth(),
            Rule::And(a, b) | Rule::Or(a, b) | Rule::Then(a, b) => 1 + a.depth().max(b.depth()),
        }
    }

    /// The event names the rule mentions, sorted, without repeats.
    pub fn event_names(&self) -> Vec<&str> {
        let mut names = Vec::new();
        self.collect_names(&mut names);
        names.sort_unstable();
        names.dedup();
        names
    }

    fn collect_names<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Rule::Event(name) => out.push(name),
            Rule::Not(a) | Rule::Within(a, _) | Rule::After(a, _) => a.collect_names(out),
            Rule::And(a, b) | Rule::Or(a, b) | Rule::Then(a, b) => {
                a.collect_names(out);
                b.collect_names(out);
            }
        }
    }
}

impl std::str::FromStr for Rule {
    type Err = ParseError;

    /// Same as [`parse`].
    fn from_str(text: &str) -> Result<Rule, ParseError> {
        parse(text)
    }
}

/// Longest excerpt of the input an error quotes, in characters.
const FOUND_CHARS_MAX: usize = 32;

/// The lexeme starting at byte `position` of `text`, for saying what was found there: a quoted
/// name up to its closing quote, a parenthesis, one whitespace character, or a run of anything
/// else up to whitespace, a parenthesis or a quote. Empty at the end (or off a char boundary).
fn lexeme_at(text: &str, position: usize) -> &str {
    let rest = text.get(position..).unwrap_or("");
    let mut chars = rest.char_indices();
    let Some((_, first)) = chars.next() else {
        return "";
    };
    let end = match first {
        '(' | ')' => 1,
        '"' => {
            let mut escaped = false;
            let mut end = rest.len();
            for (i, c) in chars {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == '"' {
                    end = i + 1;
                    break;
                }
            }
            end
        }
        c if c.is_whitespace() => c.len_utf8(),
        _ => rest
            .find(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | '"'))
            .unwrap_or(rest.len()),
    };
    &rest[..end]
}

/// How an error says what it found: `end` for nothing, a word for whitespace, else the lexeme in
/// double quotes (a quoted name is shown as written), cut to [`FOUND_CHARS_MAX`] characters.
fn describe(lexeme: &str, end: &str) -> String {
    let Some(first) = lexeme.chars().next() else {
        return end.to_owned();
    };
    match first {
        ' ' => return "a space".to_owned(),
        '\n' | '\r' => return "a line break".to_owned(),
        c if c.is_whitespace() => return "whitespace".to_owned(),
        _ => {}
    }
    let cut = lexeme
        .char_indices()
        .nth(FOUND_CHARS_MAX)
        .map(|(i, _)| &lexeme[..i]);
    match (first == '"', cut) {
        (true, None) => lexeme.to_owned(),
        (true, Some(cut)) => format!("{cut}\u{2026}\""),
        (false, None) => format!("\"{lexeme}\""),
        (false, Some(cut)) => format!("\"{cut}\u{2026}\""),
    }
}
