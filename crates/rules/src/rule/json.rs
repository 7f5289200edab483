//! The JSON form of rules, for APIs: the same tree as the text form, one JSON value per node.
//!
//! - an event is a JSON string, its name: `"paid"`;
//! - `{"operator": "not", "a": <rule>}`;
//! - `{"operator": "and" | "or" | "then", "a": <rule>, "b": <rule>}`;
//! - `{"operator": "within" | "after", "a": <rule>, "d": "7d"}`, `d` a duration string (see
//!   [`Span::parse`]) or an integer of milliseconds.
//!
//! [`Rule::to_json`] writes operators in lowercase and `d` as its canonical string;
//! [`Rule::from_json`] takes operators in any case, refuses unknown and missing fields, and
//! applies the limits of the text form ([`MAX_NODES`], [`MAX_DEPTH`], [`MAX_EVENT_NAME_BYTES`],
//! the span range). Its errors name the path of the bad node from the top, e.g. `b.a` for the
//! `a` of the top node's `b`. The depth is checked before descending, so a deeply nested value
//! cannot exhaust the stack.

use serde_json::{Map, Value};

use super::{MAX_DEPTH, MAX_EVENT_NAME_BYTES, MAX_NODES, Rule, Span, SpanError};

/// A JSON value that is not a valid rule: where (the path of the bad node) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at {}: {problem}", if .path.is_empty() { "the top" } else { .path.as_str() })]
pub struct JsonError {
    /// The bad node's path from the top, its keys joined with dots (`b.a`); empty for the top.
    pub path: String,
    /// What is wrong with it.
    #[source]
    pub problem: JsonProblem,
}

/// What is wrong with a node of a rule's JSON form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonProblem {
    #[error("expected an event name (a string) or an operator (an object), found {0}")]
    NotARule(&'static str),
    #[error("an event name must not be empty")]
    EmptyName,
    #[error("an event name is at most {MAX_EVENT_NAME_BYTES} bytes, this one is {0}")]
    NameTooLong(usize),
    #[error("\"operator\" must be one of and, or, not, then, within, after (found {0})")]
    UnknownOperator(String),
    #[error("\"{field}\" is missing: {operator} takes {fields}")]
    MissingField {
        field: &'static str,
        operator: &'static str,
        fields: &'static str,
    },
    #[error("unknown field \"{field}\": {operator} takes {fields}")]
    UnknownField {
        field: String,
        operator: &'static str,
        fields: &'static str,
    },
    #[error("\"d\" must be a duration like \"7d\" or an integer of milliseconds, found {0}")]
    DurationType(String),
    #[error("\"d\" is not a valid duration: {0}")]
    Duration(#[source] SpanError),
    #[error("the rule has more than {MAX_NODES} nodes")]
    TooManyNodes,
    #[error("the rule is nested more than {MAX_DEPTH} levels deep")]
    TooDeep,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    And,
    Or,
    Not,
    Then,
    Within,
    After,
}

impl Operator {
    const ALL: [Operator; 6] = [
        Operator::And,
        Operator::Or,
        Operator::Not,
        Operator::Then,
        Operator::Within,
        Operator::After,
    ];

    fn name(self) -> &'static str {
        match self {
            Operator::And => "and",
            Operator::Or => "or",
            Operator::Not => "not",
            Operator::Then => "then",
            Operator::Within => "within",
            Operator::After => "after",
        }
    }

    /// The fields an object with this operator has, and how errors list them.
    fn fields(self) -> (&'static [&'static str], &'static str) {
        match self {
            Operator::Not => (&["operator", "a"], "\"operator\" and \"a\""),
            Operator::And | Operator::Or | Operator::Then => {
                (&["operator", "a", "b"], "\"operator\", \"a\" and \"b\"")
            }
            Operator::Within | Operator::After => {
                (&["operator", "a", "d"], "\"operator\", \"a\" and \"d\"")
            }
        }
    }
}

fn operator_node(operator: Operator, fields: Vec<(&'static str, Value)>) -> Value {
    let mut object = Map::new();
    object.insert("operator".to_owned(), Value::from(operator.name()));
    for (key, value) in fields {
        object.insert(key.to_owned(), value);
    }
    Value::Object(object)
}

impl Rule {
    /// The rule's JSON form (see the module docs): operators lowercase, durations canonical.
    pub fn to_json(&self) -> Value {
        let binary = |operator, a: &Rule, b: &Rule| {
            operator_node(operator, vec![("a", a.to_json()), ("b", b.to_json())])
        };
        let bounded = |operator, a: &Rule, span: &Span| {
            operator_node(
                operator,
                vec![("a", a.to_json()), ("d", Value::from(span.to_string()))],
            )
        };
        match self {
            Rule::Event(name) => Value::from(name.as_str()),
            Rule::Not(a) => operator_node(Operator::Not, vec![("a", a.to_json())]),
            Rule::And(a, b) => binary(Operator::And, a, b),
            Rule::Or(a, b) => binary(Operator::Or, a, b),
            Rule::Then(a, b) => binary(Operator::Then, a, b),
            Rule::Within(a, span) => bounded(Operator::Within, a, span),
            Rule::After(a, span) => bounded(Operator::After, a, span),
        }
    }

    /// Reads a rule from its JSON form (see the module docs), with the text form's limits.
    pub fn from_json(value: &Value) -> Result<Rule, JsonError> {
        Reader {
            nodes: 0,
            path: Vec::new(),
        }
        .rule(value)
    }
}

struct Reader {
    /// Nodes read so far.
    nodes: usize,
    /// Keys from the top to the node being read; its length is the node's depth minus one.
    path: Vec<&'static str>,
}

impl Reader {
    fn error(&self, problem: JsonProblem) -> JsonError {
        JsonError {
            path: self.path.join("."),
            problem,
        }
    }

    fn rule(&mut self, value: &Value) -> Result<Rule, JsonError> {
        if self.path.len() >= MAX_DEPTH {
            return Err(self.error(JsonProblem::TooDeep));
        }
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(self.error(JsonProblem::TooManyNodes));
        }
        match value {
            Value::String(name) if name.is_empty() => Err(self.error(JsonProblem::EmptyName)),
            Value::String(name) if name.len() > MAX_EVENT_NAME_BYTES => {
                Err(self.error(JsonProblem::NameTooLong(name.len())))
            }
            Value::String(name) => Ok(Rule::Event(name.clone())),
            Value::Object(object) => self.operator(object),
            other => Err(self.error(JsonProblem::NotARule(kind(other)))),
        }
    }

    fn operator(&mut self, object: &Map<String, Value>) -> Result<Rule, JsonError> {
        let operator = match object.get("operator") {
            Some(Value::String(name)) => Operator::ALL
                .into_iter()
                .find(|operator| operator.name().eq_ignore_ascii_case(name))
                .ok_or_else(|| self.error(JsonProblem::UnknownOperator(excerpt(name))))?,
            Some(other) => {
                return Err(self.error(JsonProblem::UnknownOperator(kind(other).to_owned())));
            }
            None => {
                return Err(self.error(JsonProblem::UnknownOperator(
                    "no \"operator\" field".to_owned(),
                )));
            }
        };
        let (fields, listed) = operator.fields();
        if let Some(unknown) = object.keys().find(|key| !fields.contains(&key.as_str())) {
            return Err(self.error(JsonProblem::UnknownField {
                field: excerpt_raw(unknown),
                operator: operator.name(),
                fields: listed,
            }));
        }
        let field = |name: &'static str| {
            object.get(name).ok_or_else(|| {
                self.error(JsonProblem::MissingField {
                    field: name,
                    operator: operator.name(),
                    fields: listed,
                })
            })
        };
        let a = field("a")?;
        let second = match operator {
            Operator::Not => None,
            Operator::And | Operator::Or | Operator::Then => Some(field("b")?),
            Operator::Within | Operator::After => Some(field("d")?),
        };
        let a = Box::new(self.child("a", a)?);
        match (operator, second) {
            (Operator::Not, _) => Ok(Rule::Not(a)),
            (Operator::Within, Some(d)) => Ok(Rule::Within(a, self.span(d)?)),
            (Operator::After, Some(d)) => Ok(Rule::After(a, self.span(d)?)),
            (Operator::And, Some(b)) => Ok(Rule::And(a, Box::new(self.child("b", b)?))),
            (Operator::Or, Some(b)) => Ok(Rule::Or(a, Box::new(self.child("b", b)?))),
            (Operator::Then, Some(b)) => Ok(Rule::Then(a, Box::new(self.child("b", b)?))),
            // Every operator but NOT has its second field, read above.
            (_, None) => Err(self.error(JsonProblem::MissingField {
                field: "b",
                operator: operator.name(),
                fields: listed,
            })),
        }
    }

    fn child(&mut self, key: &'static str, value: &Value) -> Result<Rule, JsonError> {
        self.path.push(key);
        let rule = self.rule(value)?;
        self.path.pop();
        Ok(rule)
    }

    fn span(&self, value: &Value) -> Result<Span, JsonError> {
        let parsed = match value {
            Value::String(text) => Span::parse(text),
            Value::Number(number) => match number.as_u64() {
                Some(ms) => Span::try_from_ms(ms),
                None => {
                    return Err(
                        self.error(JsonProblem::DurationType(format!("the number {number}")))
                    );
                }
            },
            other => return Err(self.error(JsonProblem::DurationType(kind(other).to_owned()))),
        };
        parsed.map_err(|error| self.error(JsonProblem::Duration(error)))
    }
}

/// The kind of a JSON value, for errors.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Longest excerpt of a field name or operator an error quotes, in characters.
const EXCERPT_CHARS_MAX: usize = 32;

/// `text` quoted as a JSON string, cut to [`EXCERPT_CHARS_MAX`] characters.
fn excerpt(text: &str) -> String {
    Value::from(excerpt_raw(text)).to_string()
}

fn excerpt_raw(text: &str) -> String {
    match text.char_indices().nth(EXCERPT_CHARS_MAX) {
        Some((cut, _)) => format!("{}\u{2026}", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::rule::parse;

    fn rule(text: &str) -> Rule {
        match parse(text) {
            Ok(rule) => rule,
            Err(e) => panic!("{}", e.render(text)),
        }
    }

    fn error(value: Value) -> String {
        match Rule::from_json(&value) {
            Ok(rule) => panic!("{value} reads as {rule}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn worked_example() {
        let text = r#""signed_up" THEN (NOT "paid" WITHIN 7d)"#;
        let value = json!({
            "operator": "then",
            "a": "signed_up",
            "b": {"operator": "within", "a": {"operator": "not", "a": "paid"}, "d": "7d"}
        });
        assert_eq!(rule(text).to_json(), value);
        assert_eq!(Rule::from_json(&value), Ok(rule(text)));
        // Key order is operator, a, then b or d.
        assert_eq!(
            rule(text).to_json().to_string(),
            r#"{"operator":"then","a":"signed_up","b":{"operator":"within","a":{"operator":"not","a":"paid"},"d":"7d"}}"#
        );
    }

    #[test]
    fn accepts_any_case_and_integer_durations() {
        let value = json!({"operator": "AfTeR", "a": {"operator": "OR", "a": "x", "b": "y"}, "d": 5_400_000});
        assert_eq!(
            Rule::from_json(&value),
            Ok(rule(r#"("x" OR "y") AFTER 1h30m"#))
        );
        assert_eq!(rule("x AFTER 5400s").to_json()["d"], json!("1h30m"));
    }

    #[test]
    fn errors_name_the_path() {
        assert_eq!(
            error(
                json!({"operator": "then", "a": "x", "b": {"operator": "not", "a": {"operator": "xor"}}})
            ),
            r#"at b.a: "operator" must be one of and, or, not, then, within, after (found "xor")"#
        );
        assert_eq!(
            error(json!({"a": "x"})),
            r#"at the top: "operator" must be one of and, or, not, then, within, after (found no "operator" field)"#
        );
        assert_eq!(
            error(json!({"operator": 3, "a": "x"})),
            r#"at the top: "operator" must be one of and, or, not, then, within, after (found a number)"#
        );
        assert_eq!(
            error(json!({"operator": "and", "a": "x"})),
            r#"at the top: "b" is missing: and takes "operator", "a" and "b""#
        );
        assert_eq!(
            error(json!({"operator": "not", "a": "x", "b": "y"})),
            r#"at the top: unknown field "b": not takes "operator" and "a""#
        );
        assert_eq!(
            error(json!({"operator": "within", "a": "x"})),
            r#"at the top: "d" is missing: within takes "operator", "a" and "d""#
        );
        assert_eq!(
            error(json!({"operator": "or", "a": "x", "b": ["y"]})),
            "at b: expected an event name (a string) or an operator (an object), found an array"
        );
        assert_eq!(
            error(json!({"operator": "or", "a": "", "b": "y"})),
            "at a: an event name must not be empty"
        );
        assert_eq!(
            error(json!("x".repeat(MAX_EVENT_NAME_BYTES + 1))),
            "at the top: an event name is at most 256 bytes, this one is 257"
        );
    }

    #[test]
    fn duration_errors() {
        let with_d = |d: Value| error(json!({"operator": "within", "a": "x", "d": d}));
        assert_eq!(
            with_d(json!("7x")),
            r#"at the top: "d" is not a valid duration: at byte 1: expected a unit: ms, s, m, h, d or w, found "x""#
        );
        assert_eq!(
            with_d(json!(0)),
            r#"at the top: "d" is not a valid duration: at byte 0: expected a duration of at least 1ms, found 0 ms"#
        );
        assert_eq!(
            with_d(json!("3651d")),
            r#"at the top: "d" is not a valid duration: at byte 0: expected a duration of at most 3650d, found "3651d""#
        );
        assert_eq!(
            with_d(json!(-5)),
            r#"at the top: "d" must be a duration like "7d" or an integer of milliseconds, found the number -5"#
        );
        assert_eq!(
            with_d(json!(1.5)),
            r#"at the top: "d" must be a duration like "7d" or an integer of milliseconds, found the number 1.5"#
        );
        assert_eq!(
            with_d(json!(null)),
            r#"at the top: "d" must be a duration like "7d" or an integer of milliseconds, found null"#
        );
    }

    #[test]
    fn limits() {
        // 32 levels of NOT over a name is 33 deep: refused at the node that is level 33.
        let mut value = json!("x");
        for _ in 0..32 {
            value = json!({"operator": "not", "a": value});
        }
        let path = vec!["a"; 32].join(".");
        assert_eq!(
            error(value.clone()),
            format!("at {path}: the rule is nested more than 32 levels deep")
        );
        assert_eq!(
            Rule::from_json(&value["a"]).map(|r| r.depth()),
            Ok(MAX_DEPTH)
        );

        // Deeper values are refused at level 33, without descending further.
        let mut deep = json!("x");
        for _ in 0..1_000 {
            deep = json!({"operator": "not", "a": deep});
        }
        assert_eq!(
            error(deep),
            format!("at {path}: the rule is nested more than 32 levels deep")
        );

        // 33 names under 32 ORs are 65 nodes.
        let mut wide = json!("x");
        for _ in 0..16 {
            wide = json!({"operator": "or", "a": wide, "b": "y"});
        }
        assert_eq!(Rule::from_json(&wide).map(|r| r.nodes()), Ok(33));
        let too_many = json!({"operator": "or", "a": wide.clone(), "b": wide});
        assert_eq!(
            error(too_many),
            "at b.a.a.b: the rule has more than 64 nodes"
        );
    }
}
