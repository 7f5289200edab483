//! The text form of rules: tokenizer, recursive-descent parser and canonical printer.
//!
//! ```text
//! rule    := then END
//! then    := bounded [ THEN then ]                  right-associative
//! bounded := or { (WITHIN | AFTER) duration }       postfix, applied left to right
//! or      := and { OR and }                         left-associative
//! and     := unary { AND unary }                    left-associative
//! unary   := NOT unary | primary
//! primary := name | "(" then ")"
//! ```
//!
//! Tokens: names (`"double quoted"` with the escapes `\"` and `\\`, or bare
//! `[A-Za-z_][A-Za-z0-9_.:-]*` that are not keywords), the keywords `AND OR NOT THEN WITHIN
//! AFTER` (any case), parentheses, and durations (read only right after `WITHIN`/`AFTER`, by
//! [`super::duration`]). Whitespace may separate any two tokens.
//!
//! Every error is a [`ParseError`] with the byte offset where the problem starts, what would
//! have been valid there and what was found. The limits ([`MAX_NODES`], [`MAX_DEPTH`],
//! [`MAX_EVENT_NAME_BYTES`]) are checked while parsing, so a huge or deeply nested input is
//! refused as soon as it crosses one, and the parser's recursion stays bounded: every level of
//! recursion either consumes a node (`NOT`, `THEN`) or a parenthesis, and both are limited.
//!
//! `Display for Rule` writes the canonical text: names always quoted, keywords in capitals,
//! canonical durations, and only the parentheses this grammar needs. For every rule within the
//! limits, `parse(&rule.to_string()) == Ok(rule)`.

use std::fmt;

use super::duration::{self, Span};
use super::{MAX_DEPTH, MAX_EVENT_NAME_BYTES, MAX_NODES, Rule, describe, lexeme_at};

/// How errors describe the end of the text.
const END_OF_RULE: &str = "the end of the rule";

/// What may start a `unary`.
const EXPECTED_OPERAND: &str = "an event name, NOT or \"(\"";

/// Where and why a rule's text does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at byte {position}: expected {expected}, found {found}")]
pub struct ParseError {
    /// Byte offset in the rule's text where the problem starts (the text's length for its end).
    pub position: usize,
    /// What would have been valid there, e.g. `")"` or `a duration like 7d or 30m`.
    pub expected: String,
    /// What was there, quoted as written (e.g. `"AND"`), or `the end of the rule`.
    pub found: String,
}

impl ParseError {
    /// The error for people: the message, then the line of `text` the error is on, then a caret
    /// under the position. `text` should be the text that was parsed; any other text is
    /// rendered without panicking, the caret placed as well as it can be.
    ///
    /// ```text
    /// error at byte 11: expected THEN, AND, OR, WITHIN, AFTER or ")", found the end of the rule
    ///   ("a" OR "b"
    ///              ^
    /// ```
    pub fn render(&self, text: &str) -> String {
        let mut position = self.position.min(text.len());
        while !text.is_char_boundary(position) {
            position -= 1;
        }
        let line_start = text[..position].rfind('\n').map_or(0, |i| i + 1);
        let line_end = text[position..]
            .find('\n')
            .map_or(text.len(), |i| position + i);
        // Control characters (tabs, carriage returns) would move the caret: show them as spaces.
        let line: String = text[line_start..line_end]
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let column = text[line_start..position].chars().count();
        let place = if text.contains('\n') {
            let line_number = text[..line_start].matches('\n').count() + 1;
            format!("line {line_number}, byte {}", self.position)
        } else {
            format!("byte {}", self.position)
        };
        format!(
            "error at {place}: expected {}, found {}\n  {line}\n  {}^",
            self.expected,
            self.found,
            " ".repeat(column)
        )
    }
}

/// Parses a rule's text form, e.g. `"signed_up" THEN (NOT "paid" WITHIN 7d)`.
///
/// Refuses rules over [`MAX_NODES`] nodes or [`MAX_DEPTH`] levels, and names that are empty or
/// over [`MAX_EVENT_NAME_BYTES`]. Never panics, whatever the input.
pub fn parse(text: &str) -> Result<Rule, ParseError> {
    Parser {
        text,
        position: 0,
        peeked: None,
        nodes: 0,
        parens: 0,
        after_bound: false,
    }
    .rule()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keyword {
    And,
    Or,
    Not,
    Then,
    Within,
    After,
}

impl Keyword {
    fn from_word(word: &str) -> Option<Keyword> {
        [
            ("AND", Keyword::And),
            ("OR", Keyword::Or),
            ("NOT", Keyword::Not),
            ("THEN", Keyword::Then),
            ("WITHIN", Keyword::Within),
            ("AFTER", Keyword::After),
        ]
        .into_iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(word))
        .map(|(_, keyword)| keyword)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// An event name, unescaped.
    Name(String),
    Keyword(Keyword),
    Open,
    Close,
    End,
    /// Anything else (a digit, a stray `@`): only ever reported as found.
    Other,
}

#[derive(Debug, Clone)]
struct Token {
    kind: Kind,
    /// Byte offsets of the token in the text.
    start: usize,
    end: usize,
}

/// Reads the token at or after byte `from` (skipping whitespace). `from` is a char boundary.
fn lex(text: &str, from: usize) -> Result<Token, ParseError> {
    let start = skip_whitespace(text, from);
    let rest = text.get(start..).unwrap_or("");
    let token = |kind: Kind, len: usize| {
        Ok(Token {
            kind,
            start,
            end: start + len,
        })
    };
    let Some(first) = rest.chars().next() else {
        return token(Kind::End, 0);
    };
    match first {
        '(' => token(Kind::Open, 1),
        ')' => token(Kind::Close, 1),
        '"' => lex_quoted(text, start),
        c if c.is_ascii_alphabetic() || c == '_' => {
            let len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')))
                .unwrap_or(rest.len());
            let word = &rest[..len];
            match Keyword::from_word(word) {
                Some(keyword) => token(Kind::Keyword(keyword), len),
                None => {
                    check_name_length(word, start)?;
                    token(Kind::Name(word.to_owned()), len)
                }
            }
        }
        _ => token(Kind::Other, lexeme_at(text, start).len()),
    }
}

/// Reads a double-quoted name starting at byte `start` (the opening quote).
fn lex_quoted(text: &str, start: usize) -> Result<Token, ParseError> {
    let body_start = start + 1;
    let mut name = String::new();
    let mut chars = text.get(body_start..).unwrap_or("").char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => {
                if name.is_empty() {
                    return Err(ParseError {
                        position: start,
                        expected: "a name that is not empty".to_owned(),
                        found: "\"\"".to_owned(),
                    });
                }
                check_name_length(&name, start)?;
                return Ok(Token {
                    kind: Kind::Name(name),
                    start,
                    end: body_start + i + 1,
                });
            }
            '\\' => match chars.next() {
                Some((_, escaped @ ('"' | '\\'))) => name.push(escaped),
                Some((j, escaped)) => {
                    let at = body_start + i;
                    let escape_end = body_start + j + escaped.len_utf8();
                    return Err(ParseError {
                        position: at,
                        expected: r#"\" or \\ (the only escapes in a quoted name)"#.to_owned(),
                        found: describe(&text[at..escape_end], END_OF_RULE),
                    });
                }
                None => break,
            },
            c => name.push(c),
        }
    }
    Err(ParseError {
        position: start,
        expected: "a closing \" for the name that starts here".to_owned(),
        found: END_OF_RULE.to_owned(),
    })
}

fn check_name_length(name: &str, start: usize) -> Result<(), ParseError> {
    if name.len() > MAX_EVENT_NAME_BYTES {
        return Err(ParseError {
            position: start,
            expected: format!("an event name of at most {MAX_EVENT_NAME_BYTES} bytes"),
            found: format!("a name of {} bytes", name.len()),
        });
    }
    Ok(())
}

fn skip_whitespace(text: &str, from: usize) -> usize {
    let rest = text.get(from..).unwrap_or("");
    rest.find(|c: char| !c.is_whitespace())
        .map_or(text.len(), |i| from + i)
}

/// A parsed subtree and its depth, so depth is checked as the tree is built.
struct Built {
    rule: Rule,
    depth: usize,
}

struct Parser<'t> {
    text: &'t str,
    /// Byte offset of the first character not yet consumed (the peeked token is not consumed).
    position: usize,
    peeked: Option<Token>,
    /// Nodes so far: one per name and per operator keyword consumed.
    nodes: usize,
    /// Parentheses open at this point.
    parens: usize,
    /// Whether the last thing parsed was a duration (then AND and OR cannot follow).
    after_bound: bool,
}

impl Parser<'_> {
    fn rule(mut self) -> Result<Rule, ParseError> {
        let built = self.then()?;
        if self.peek()?.kind == Kind::End {
            Ok(built.rule)
        } else {
            Err(self.unexpected_continuation())
        }
    }

    fn then(&mut self) -> Result<Built, ParseError> {
        let first = self.bounded()?;
        if self.peek()?.kind != Kind::Keyword(Keyword::Then) {
            return Ok(first);
        }
        let op = self.operator()?;
        let rest = self.then()?;
        let depth = first.depth.max(rest.depth);
        self.node(
            &op,
            Rule::Then(Box::new(first.rule), Box::new(rest.rule)),
            depth,
        )
    }

    fn bounded(&mut self) -> Result<Built, ParseError> {
        let mut built = self.or()?;
        loop {
            let keyword = match self.peek()?.kind {
                Kind::Keyword(keyword @ (Keyword::Within | Keyword::After)) => keyword,
                _ => return Ok(built),
            };
            let op = self.operator()?;
            let span = self.span()?;
            let inner = Box::new(built.rule);
            let rule = match keyword {
                Keyword::Within => Rule::Within(inner, span),
                _ => Rule::After(inner, span),
            };
            built = self.node(&op, rule, built.depth)?;
            self.after_bound = true;
        }
    }

    fn or(&mut self) -> Result<Built, ParseError> {
        let mut built = self.and()?;
        while self.peek()?.kind == Kind::Keyword(Keyword::Or) {
            let op = self.operator()?;
            let right = self.and()?;
            let depth = built.depth.max(right.depth);
            built = self.node(
                &op,
                Rule::Or(Box::new(built.rule), Box::new(right.rule)),
                depth,
            )?;
        }
        Ok(built)
    }

    fn and(&mut self) -> Result<Built, ParseError> {
        let mut built = self.unary()?;
        while self.peek()?.kind == Kind::Keyword(Keyword::And) {
            let op = self.operator()?;
            let right = self.unary()?;
            let depth = built.depth.max(right.depth);
            built = self.node(
                &op,
                Rule::And(Box::new(built.rule), Box::new(right.rule)),
                depth,
            )?;
        }
        Ok(built)
    }

    fn unary(&mut self) -> Result<Built, ParseError> {
        if self.peek()?.kind != Kind::Keyword(Keyword::Not) {
            return self.primary();
        }
        let op = self.operator()?;
        let inner = self.unary()?;
        self.node(&op, Rule::Not(Box::new(inner.rule)), inner.depth)
    }

    fn primary(&mut self) -> Result<Built, ParseError> {
        let token = self.next()?;
        match token.kind {
            Kind::Name(name) => {
                self.count_node(token.start, token.end)?;
                self.after_bound = false;
                Ok(Built {
                    rule: Rule::Event(name),
                    depth: 1,
                })
            }
            Kind::Open => {
                self.parens += 1;
                if self.parens > MAX_DEPTH {
                    return Err(self.too_deep(token.start, token.end, self.parens));
                }
                let inner = self.then()?;
                if self.peek()?.kind != Kind::Close {
                    return Err(self.unexpected_continuation());
                }
                self.next()?;
                self.parens -= 1;
                self.after_bound = false;
                Ok(inner)
            }
            _ => Err(self.error_at(token.start, token.end, EXPECTED_OPERAND)),
        }
    }

    /// Reads the duration after `WITHIN`/`AFTER` (just consumed, so nothing is peeked).
    fn span(&mut self) -> Result<Span, ParseError> {
        let start = skip_whitespace(self.text, self.position);
        let rest = self.text.get(start..).unwrap_or("");
        match duration::scan(rest, END_OF_RULE) {
            Ok((span, len)) => {
                self.position = start + len;
                Ok(span)
            }
            Err(error) => Err(ParseError {
                position: start + error.position,
                expected: error.expected,
                found: error.found,
            }),
        }
    }

    fn peek(&mut self) -> Result<&Token, ParseError> {
        let token = match self.peeked.take() {
            Some(token) => token,
            None => lex(self.text, self.position)?,
        };
        Ok(self.peeked.insert(token))
    }

    fn next(&mut self) -> Result<Token, ParseError> {
        let token = match self.peeked.take() {
            Some(token) => token,
            None => lex(self.text, self.position)?,
        };
        self.position = token.end;
        Ok(token)
    }

    /// Consumes an operator keyword (already peeked) and counts it as a node.
    fn operator(&mut self) -> Result<Token, ParseError> {
        let op = self.next()?;
        self.count_node(op.start, op.end)?;
        Ok(op)
    }

    fn count_node(&mut self, start: usize, end: usize) -> Result<(), ParseError> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(ParseError {
                position: start,
                expected: format!("at most {MAX_NODES} event names and operators in a rule"),
                found: format!("{} (number {})", self.found(start, end), self.nodes),
            });
        }
        Ok(())
    }

    /// A node built at operator `op`, if it is not too deep.
    fn node(&self, op: &Token, rule: Rule, children_depth: usize) -> Result<Built, ParseError> {
        let depth = children_depth + 1;
        if depth > MAX_DEPTH {
            return Err(self.too_deep(op.start, op.end, depth));
        }
        Ok(Built { rule, depth })
    }

    fn too_deep(&self, start: usize, end: usize, depth: usize) -> ParseError {
        ParseError {
            position: start,
            expected: format!("at most {MAX_DEPTH} levels of nesting"),
            found: format!("{} at level {depth}", self.found(start, end)),
        }
    }

    /// The error when the peeked token cannot continue what was parsed.
    fn unexpected_continuation(&self) -> ParseError {
        let closer = if self.parens > 0 { "\")\"" } else { "the end" };
        let expected = if self.after_bound {
            format!("THEN, WITHIN, AFTER or {closer}")
        } else {
            format!("THEN, AND, OR, WITHIN, AFTER or {closer}")
        };
        match &self.peeked {
            Some(token) => self.error_at(token.start, token.end, &expected),
            None => self.error_at(self.position, self.position, &expected),
        }
    }

    fn error_at(&self, start: usize, end: usize, expected: &str) -> ParseError {
        ParseError {
            position: start,
            expected: expected.to_owned(),
            found: self.found(start, end),
        }
    }

    fn found(&self, start: usize, end: usize) -> String {
        describe(self.text.get(start..end).unwrap_or(""), END_OF_RULE)
    }
}

/// How tightly a node binds, loosest first; a child looser than its place allows is printed in
/// parentheses. Mirrors the grammar: e.g. `and := unary { AND unary }` makes an AND's left
/// child at least `And` and its right child at least `Unary`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Then,
    Bounded,
    Or,
    And,
    Unary,
}

fn level(rule: &Rule) -> Level {
    match rule {
        Rule::Then(..) => Level::Then,
        Rule::Within(..) | Rule::After(..) => Level::Bounded,
        Rule::Or(..) => Level::Or,
        Rule::And(..) => Level::And,
        Rule::Not(_) | Rule::Event(_) => Level::Unary,
    }
}

/// The canonical text form; see the module docs.
impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_bare(f, self)
    }
}

fn write_at(f: &mut fmt::Formatter<'_>, rule: &Rule, at_least: Level) -> fmt::Result {
    if level(rule) < at_least {
        f.write_str("(")?;
        write_bare(f, rule)?;
        f.write_str(")")
    } else {
        write_bare(f, rule)
    }
}

fn write_bare(f: &mut fmt::Formatter<'_>, rule: &Rule) -> fmt::Result {
    match rule {
        Rule::Event(name) => write_name(f, name),
        Rule::Not(a) => {
            f.write_str("NOT ")?;
            write_at(f, a, Level::Unary)
        }
        Rule::And(a, b) => {
            write_at(f, a, Level::And)?;
            f.write_str(" AND ")?;
            write_at(f, b, Level::Unary)
        }
        Rule::Or(a, b) => {
            write_at(f, a, Level::Or)?;
            f.write_str(" OR ")?;
            write_at(f, b, Level::And)
        }
        Rule::Within(a, span) => {
            write_at(f, a, Level::Bounded)?;
            write!(f, " WITHIN {span}")
        }
        Rule::After(a, span) => {
            write_at(f, a, Level::Bounded)?;
            write!(f, " AFTER {span}")
        }
        Rule::Then(a, b) => {
            write_at(f, a, Level::Bounded)?;
            f.write_str(" THEN ")?;
            write_at(f, b, Level::Then)
        }
    }
}

/// Writes `name` double-quoted, escaping `"` and `\`.
fn write_name(f: &mut fmt::Formatter<'_>, name: &str) -> fmt::Result {
    f.write_str("\"")?;
    let mut written = 0;
    for (at, special) in name.match_indices(['"', '\\']) {
        f.write_str(&name[written..at])?;
        f.write_str("\\")?;
        f.write_str(special)?;
        written = at + special.len();
    }
    f.write_str(&name[written..])?;
    f.write_str("\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(name: &str) -> Box<Rule> {
        Box::new(Rule::Event(name.to_owned()))
    }

    fn ok(text: &str) -> Rule {
        match parse(text) {
            Ok(rule) => rule,
            Err(e) => panic!("{text:?} does not parse:\n{}", e.render(text)),
        }
    }

    fn err(text: &str) -> ParseError {
        match parse(text) {
            Ok(rule) => panic!("{text:?} parses as {rule}"),
            Err(e) => e,
        }
    }

    /// Asserts the error's position, expected and found.
    #[track_caller]
    fn assert_err(text: &str, position: usize, expected: &str, found: &str) {
        let e = err(text);
        assert_eq!(
            (e.position, e.expected.as_str(), e.found.as_str()),
            (position, expected, found),
            "{text:?}"
        );
    }

    fn span(text: &str) -> Span {
        match Span::parse(text) {
            Ok(span) => span,
            Err(e) => panic!("{text}: {e}"),
        }
    }

    #[test]
    fn precedence_examples() {
        assert_eq!(
            ok(r#"NOT "paid" WITHIN 7d"#),
            Rule::Within(Box::new(Rule::Not(ev("paid"))), span("7d"))
        );
        assert_eq!(
            ok(r#""a" THEN "b" OR "c" WITHIN 1h"#),
            Rule::Then(
                ev("a"),
                Box::new(Rule::Within(
                    Box::new(Rule::Or(ev("b"), ev("c"))),
                    span("1h")
                ))
            )
        );
        assert_eq!(
            ok(r#""a" THEN "b" THEN "c""#),
            Rule::Then(ev("a"), Box::new(Rule::Then(ev("b"), ev("c"))))
        );
        assert_eq!(
            ok(r#""a" OR "b" AND "c""#),
            Rule::Or(ev("a"), Box::new(Rule::And(ev("b"), ev("c"))))
        );
        assert_eq!(
            ok(r#""a" AND "b" AND "c""#),
            Rule::And(Box::new(Rule::And(ev("a"), ev("b"))), ev("c"))
        );
        assert_eq!(
            ok(r#""a" OR "b" OR "c""#),
            Rule::Or(Box::new(Rule::Or(ev("a"), ev("b"))), ev("c"))
        );
        assert_eq!(
            ok(r#"NOT "a" AND "b""#),
            Rule::And(Box::new(Rule::Not(ev("a"))), ev("b"))
        );
        assert_eq!(ok("NOT NOT a"), Rule::Not(Box::new(Rule::Not(ev("a")))));
        // Bounds apply left to right.
        assert_eq!(
            ok(r#""a" WITHIN 1h AFTER 5m"#),
            Rule::After(Box::new(Rule::Within(ev("a"), span("1h"))), span("5m"))
        );
        assert_eq!(
            ok(r#""signed_up" THEN (NOT "paid" WITHIN 7d)"#),
            Rule::Then(
                ev("signed_up"),
                Box::new(Rule::Within(Box::new(Rule::Not(ev("paid"))), span("7d")))
            )
        );
        assert_eq!(
            ok(r#"("a" THEN "b") THEN "c""#),
            Rule::Then(Box::new(Rule::Then(ev("a"), ev("b"))), ev("c"))
        );
    }

    #[test]
    fn tokens() {
        // Bare names, keywords in any case, whitespace anywhere or nowhere.
        assert_eq!(
            ok("signed_up then not Paid"),
            ok(r#""signed_up" THEN NOT "Paid""#)
        );
        assert_eq!(
            ok("order.created:v2-eu"),
            Rule::Event("order.created:v2-eu".into())
        );
        assert_eq!(ok("_x"), Rule::Event("_x".into()));
        assert_eq!(ok("(a)and(b)"), Rule::And(ev("a"), ev("b")));
        assert_eq!(
            ok(" \t\n a\nWiThIn\t30s \n"),
            Rule::Within(ev("a"), span("30s"))
        );
        assert_eq!(ok(r#""a"WITHIN 1h"#), Rule::Within(ev("a"), span("1h")));
        assert_eq!(ok("(a WITHIN 1h)"), Rule::Within(ev("a"), span("1h")));
        // Keywords are names when quoted, or when part of a longer word.
        assert_eq!(ok(r#""AND" OR ANDY"#), Rule::Or(ev("AND"), ev("ANDY")));
        // Escapes, and anything else inside quotes.
        assert_eq!(
            ok(r#""say \"hi\" \\o/""#),
            Rule::Event(r#"say "hi" \o/"#.into())
        );
        assert_eq!(
            ok("\"two words\nüñí\""),
            Rule::Event("two words\nüñí".into())
        );
    }

    #[test]
    fn unexpected_tokens() {
        let after_operand = "THEN, AND, OR, WITHIN, AFTER or the end";
        assert_err("", 0, EXPECTED_OPERAND, "the end of the rule");
        assert_err("   ", 3, EXPECTED_OPERAND, "the end of the rule");
        assert_err(r#""a" AND"#, 7, EXPECTED_OPERAND, "the end of the rule");
        assert_err(r#""a" AND OR "b""#, 8, EXPECTED_OPERAND, "\"OR\"");
        assert_err(r#"AND "a""#, 0, EXPECTED_OPERAND, "\"AND\"");
        assert_err(r#""a" "b""#, 4, after_operand, r#""b""#);
        assert_err(r#""a" )"#, 4, after_operand, r#"")""#);
        assert_err("a @b", 2, after_operand, "\"@b\"");
        assert_err("7d", 0, EXPECTED_OPERAND, "\"7d\"");
        assert_err("()", 1, EXPECTED_OPERAND, "\")\"");
        assert_err(
            r#"("a" OR "b""#,
            11,
            r#"THEN, AND, OR, WITHIN, AFTER or ")""#,
            "the end of the rule",
        );
        assert_err(
            r#"("a" "b")"#,
            5,
            r#"THEN, AND, OR, WITHIN, AFTER or ")""#,
            r#""b""#,
        );
        // After a bound only THEN, another bound or the end may follow: AND and OR bind tighter.
        assert_err(
            r#""a" WITHIN 1h AND "b""#,
            14,
            "THEN, WITHIN, AFTER or the end",
            "\"AND\"",
        );
        assert_err(
            r#"("a" WITHIN 1h OR "b")"#,
            15,
            r#"THEN, WITHIN, AFTER or ")""#,
            "\"OR\"",
        );
        assert_err(
            r#""a" WITHIN 7d_x"#,
            13,
            "THEN, WITHIN, AFTER or the end",
            "\"_x\"",
        );
    }

    #[test]
    fn duration_errors_point_into_the_rule() {
        assert_err(
            r#""a" WITHIN"#,
            10,
            "a duration like 7d or 30m",
            "the end of the rule",
        );
        assert_err(
            r#""a" WITHIN "b""#,
            11,
            "a duration like 7d or 30m",
            r#""b""#,
        );
        assert_err(r#""a" AFTER x"#, 10, "a duration like 7d or 30m", "\"x\"");
        assert_err(
            r#""a" WITHIN 7"#,
            12,
            "a unit: ms, s, m, h, d or w",
            "the end of the rule",
        );
        assert_err(
            r#""a" WITHIN 7 d"#,
            12,
            "a unit: ms, s, m, h, d or w",
            "a space",
        );
        assert_err(
            r#""a" WITHIN 7days"#,
            12,
            "a unit: ms, s, m, h, d or w",
            "\"days\"",
        );
        assert_err(
            r#""a" WITHIN 7dAND "b""#,
            12,
            "a unit: ms, s, m, h, d or w",
            "\"dAND\"",
        );
        assert_err(
            r#""a" WITHIN 0s"#,
            11,
            "a duration of at least 1ms",
            "\"0s\"",
        );
        assert_err(
            r#""a" WITHIN 3651d)"#,
            11,
            "a duration of at most 3650d",
            "\"3651d\"",
        );
        assert_err(
            r#""a" WITHIN 99999999999999999999999d"#,
            11,
            "a duration of at most 3650d",
            "\"99999999999999999999999d\"",
        );
        assert_err(
            r#""a" WITHIN 30m1h"#,
            14,
            "units from largest to smallest, each at most once, like 1h30m",
            "\"1h\"",
        );
    }

    #[test]
    fn name_errors() {
        assert_err(r#""a" OR """#, 7, "a name that is not empty", "\"\"");
        assert_err(
            r#""a" OR "b"#,
            7,
            "a closing \" for the name that starts here",
            "the end of the rule",
        );
        assert_err(
            r#""a" OR "b\""#,
            7,
            "a closing \" for the name that starts here",
            "the end of the rule",
        );
        assert_err(
            r#""a\"#,
            0,
            "a closing \" for the name that starts here",
            "the end of the rule",
        );
        assert_err(
            r#""a\nb""#,
            2,
            r#"\" or \\ (the only escapes in a quoted name)"#,
            r#""\n""#,
        );
        assert_err(
            "\"a\\é\"",
            2,
            r#"\" or \\ (the only escapes in a quoted name)"#,
            "\"\\é\"",
        );
        let long = "x".repeat(MAX_EVENT_NAME_BYTES + 1);
        assert_err(
            &format!("a OR \"{long}\""),
            5,
            "an event name of at most 256 bytes",
            "a name of 257 bytes",
        );
        assert_err(
            &format!("a OR {long}"),
            5,
            "an event name of at most 256 bytes",
            "a name of 257 bytes",
        );
        // Bytes, not characters: 129 two-byte characters are 258 bytes.
        assert_err(
            &format!("\"{}\"", "é".repeat(129)),
            0,
            "an event name of at most 256 bytes",
            "a name of 258 bytes",
        );
        assert_eq!(
            ok(&format!("\"{}\"", "x".repeat(MAX_EVENT_NAME_BYTES))).nodes(),
            1
        );
    }

    #[test]
    fn limits() {
        // Nodes: 16 groups of 3 nodes joined by 15 ORs are 63 nodes (depth 17).
        let groups = vec!["(a AND a)"; 16].join(" OR ");
        assert_eq!(ok(&groups).nodes(), 63);
        assert_eq!(ok(&format!("NOT ({groups})")).nodes(), MAX_NODES);
        // One more OR and name: the name is node 65, refused where it starts.
        let text = format!("{groups} OR b");
        let at = text.len() - 1;
        assert_err(
            &text,
            at,
            "at most 64 event names and operators in a rule",
            "\"b\" (number 65)",
        );
        // A long chain of ANDs reaches the node limit before the depth limit.
        let text = vec!["a"; 33].join(" AND ");
        assert_err(
            &text,
            192,
            "at most 64 event names and operators in a rule",
            "\"a\" (number 65)",
        );

        // Depth: 31 NOTs over a name are 32 deep; a 32nd NOT is refused at the outermost NOT,
        // the node that would be at level 33.
        assert_eq!(ok(&format!("{}a", "NOT ".repeat(31))).depth(), MAX_DEPTH);
        let text = format!("{}a", "NOT ".repeat(32));
        assert_err(
            &text,
            0,
            "at most 32 levels of nesting",
            "\"NOT\" at level 33",
        );
        let text = format!("{}a AND b", "NOT ".repeat(31));
        assert_err(
            &text,
            126,
            "at most 32 levels of nesting",
            "\"AND\" at level 33",
        );
        let chain = vec!["a"; 32].join(" OR ");
        assert_eq!(ok(&chain).depth(), MAX_DEPTH);
        let text = format!("NOT ({chain})");
        assert_err(
            &text,
            0,
            "at most 32 levels of nesting",
            "\"NOT\" at level 33",
        );

        // Parentheses: 32 levels are fine, the 33rd "(" is refused (so recursion stays bounded).
        let text = format!("{}a{}", "(".repeat(32), ")".repeat(32));
        assert_eq!(ok(&text), Rule::Event("a".into()));
        let text = format!("{}a{}", "(".repeat(33), ")".repeat(33));
        assert_err(
            &text,
            32,
            "at most 32 levels of nesting",
            "\"(\" at level 33",
        );
        assert_eq!(err(&"(".repeat(100_000)).position, 32);
    }

    #[test]
    fn display_is_canonical_with_minimal_parentheses() {
        let and = |a, b| Rule::And(a, b);
        assert_eq!(
            and(Box::new(and(ev("a"), ev("b"))), ev("c")).to_string(),
            r#""a" AND "b" AND "c""#
        );
        assert_eq!(
            and(ev("a"), Box::new(and(ev("b"), ev("c")))).to_string(),
            r#""a" AND ("b" AND "c")"#
        );
        assert_eq!(
            Rule::Then(Box::new(Rule::Then(ev("a"), ev("b"))), ev("c")).to_string(),
            r#"("a" THEN "b") THEN "c""#
        );
        assert_eq!(
            Rule::Then(ev("a"), Box::new(Rule::Then(ev("b"), ev("c")))).to_string(),
            r#""a" THEN "b" THEN "c""#
        );
        assert_eq!(
            Rule::Not(Box::new(Rule::Within(ev("a"), span("1h")))).to_string(),
            r#"NOT ("a" WITHIN 1h)"#
        );
        assert_eq!(
            Rule::Or(Box::new(Rule::Within(ev("a"), span("90m"))), ev("b")).to_string(),
            r#"("a" WITHIN 1h30m) OR "b""#
        );
        assert_eq!(Rule::Event(r#"q"\"#.into()).to_string(), r#""q\"\\""#);
        let text = "signed_up then (not paid within 168h)";
        assert_eq!(
            ok(text).to_string(),
            r#""signed_up" THEN NOT "paid" WITHIN 7d"#
        );
        assert_eq!(ok(&ok(text).to_string()), ok(text));
    }

    #[test]
    fn render_points_at_the_position() {
        let text = r#"("a" OR "b""#;
        assert_eq!(
            err(text).render(text),
            "error at byte 11: expected THEN, AND, OR, WITHIN, AFTER or \")\", found the end of the rule\n  (\"a\" OR \"b\"\n             ^"
        );
        let text = "\"a\"\n  WITHIN 7x";
        assert_eq!(
            err(text).render(text),
            "error at line 2, byte 14: expected a unit: ms, s, m, h, d or w, found \"x\"\n    WITHIN 7x\n            ^"
        );
        // Characters, not bytes, set the caret's column.
        let text = r#""ü" "b""#;
        assert!(err(text).render(text).ends_with("\n  \"ü\" \"b\"\n      ^"));
        // Any position, even one that is not in the text, renders.
        let odd = ParseError {
            position: 1,
            expected: "x".into(),
            found: "y".into(),
        };
        assert!(odd.render("é").ends_with("\n  é\n  ^"));
        assert!(odd.render("").ends_with("\n  \n  ^"));
    }
}
