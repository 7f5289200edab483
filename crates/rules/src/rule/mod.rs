//! The rule language: the syntax tree every other part works on.
//!
//! A rule is a tree of event names combined with `AND`, `OR`, `NOT`, `THEN`, and the two time
//! bounds `WITHIN d` and `AFTER d`. The text form is parsed by [`parse`]; the JSON form (the
//! same tree, for APIs) by [`Rule::from_json`]; [`Rule`]'s `Display` writes the canonical text
//! form back. What a rule means is written down in `docs/triggers.md` and implemented by
//! [`crate::eval`].

mod duration;
mod json;
mod parse;

pub use duration::{Span, SpanError};
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

impl Rule {
    /// Number of nodes in the tree.
    pub fn nodes(&self) -> usize {
        match self {
            Rule::Event(_) => 1,
            Rule::Not(a) | Rule::Within(a, _) | Rule::After(a, _) => 1 + a.nodes(),
            Rule::And(a, b) | Rule::Or(a, b) | Rule::Then(a, b) => 1 + a.nodes() + b.nodes(),
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
