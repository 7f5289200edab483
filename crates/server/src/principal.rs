//! Who a TLS client is: the subject of its certificate as a distinguished name in RFC 2253
//! form (as Java's `X500Principal.getName()` writes it, so Kafka's mapping rules read the same
//! text here), and Kafka's `ssl.principal.mapping.rules` that turn it into a user name.
//!
//! Rules (`--ssl-principal-mapping-rules`), tried in order, the first that applies wins:
//! - `DEFAULT`: the whole distinguished name;
//! - `RULE:pattern/replacement/` with an optional `L` or `U` after the last slash (lower or
//!   upper case the result): when `pattern` (a regular expression) matches the whole name, the
//!   name becomes `replacement`, where `$1`... are the pattern's groups. A `/` or `,` inside a
//!   pattern or a replacement is written `\/`; rules are separated by commas.
//!
//! No rule applying refuses the connection, as Kafka does. Patterns use Rust's `regex` syntax,
//! which is Java's for everything such rules use in practice (groups, classes, `.*?`); it has no
//! look-around.

use regex::Regex;

/// The user name of a connection with no client certificate (PLAINTEXT, or TLS without
/// `--tls-client-ca`), as Kafka names it.
pub const ANONYMOUS: &str = "ANONYMOUS";

/// One parsed mapping rule.
#[derive(Debug, Clone)]
enum Rule {
    Default,
    Replace {
        /// The pattern anchored at both ends (Kafka's rules apply only on a whole match).
        pattern: Regex,
        replacement: String,
        case: Case,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

/// Kafka's `ssl.principal.mapping.rules`: distinguished name to user name.
#[derive(Debug, Clone)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
}

/// Why mapping rules were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid ssl_principal_mapping_rules: {0}")]
pub struct RuleError(pub String);

impl Default for PrincipalMapper {
    fn default() -> Self {
        PrincipalMapper {
            rules: vec![Rule::Default],
        }
    }
}

impl PrincipalMapper {
    /// Parses a rule list (`DEFAULT` when empty).
    pub fn parse(text: &str) -> Result<PrincipalMapper, RuleError> {
        let mut rules = Vec::new();
        let mut rest = text.trim();
        while !rest.is_empty() {
            let (rule, after) = if let Some(body) = rest.strip_prefix("RULE:") {
                let (pattern, after_pattern) = until_slash(body).ok_or_else(|| {
                    RuleError(format!(
                        "'{rest}': a RULE is RULE:pattern/replacement/ with an optional L or U"
                    ))
                })?;
                let (replacement, after_replacement) =
                    until_slash(after_pattern).ok_or_else(|| {
                        RuleError(format!(
                            "'{rest}': a RULE is RULE:pattern/replacement/ with an optional L or U"
                        ))
                    })?;
                let (flags, after) = after_replacement
                    .split_once(',')
                    .unwrap_or((after_replacement, ""));
                let case = match flags.trim() {
                    "" => Case::Keep,
                    "L" => Case::Lower,
                    "U" => Case::Upper,
                    other => {
                        return Err(RuleError(format!(
                            "'{other}' after the replacement of RULE:{pattern}/{replacement}/: only L (lower case) or U (upper case) may follow"
                        )));
                    }
                };
                let anchored = Regex::new(&format!("^(?:{pattern})$"))
                    .map_err(|e| RuleError(format!("pattern '{pattern}': {e}")))?;
                let rule = Rule::Replace {
                    pattern: anchored,
                    replacement: replacement.to_owned(),
                    case,
                };
                (rule, after)
            } else {
                let (word, after) = rest.split_once(',').unwrap_or((rest, ""));
                if word.trim() != "DEFAULT" {
                    return Err(RuleError(format!(
                        "'{}' is neither DEFAULT nor RULE:pattern/replacement/[LU]",
                        word.trim()
                    )));
                }
                (Rule::Default, after)
            };
            rules.push(rule);
            rest = after.trim_start();
        }
        if rules.is_empty() {
            rules.push(Rule::Default);
        }
        Ok(PrincipalMapper { rules })
    }

    /// The user name for distinguished name `dn`; `None` when no rule applies.
    pub fn map(&self, dn: &str) -> Option<String> {
        self.rules.iter().find_map(|rule| match rule {
            Rule::Default => Some(dn.to_owned()),
            Rule::Replace {
                pattern,
                replacement,
                case,
            } => {
                let captures = pattern.captures(dn)?;
                let name = expand(replacement, &captures);
                Some(match case {
                    Case::Keep => name,
                    Case::Lower => name.to_lowercase(),
                    Case::Upper => name.to_uppercase(),
                })
            }
        })
    }
}

/// Splits `text` at its first `/` not escaped by a backslash; the part before keeps its escapes
/// (the regex reads `\/` as `/`, and [`expand`] reads `\x` as `x`).
fn until_slash(text: &str) -> Option<(&str, &str)> {
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '/' => return Some((&text[..i], &text[i + 1..])),
            _ => {}
        }
    }
    None
}

/// Java's `Matcher.replaceAll` replacement syntax, as Kafka uses it: `$N` is group N (a
/// reference past the last group keeps its longest valid prefix, or stays literal when even
/// its first digit is past it), `\x` is `x`.
fn expand(replacement: &str, captures: &regex::Captures<'_>) -> String {
    let groups = captures.len() - 1;
    let mut out = String::new();
    let mut chars = replacement.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    out.push(next);
                }
            }
            '$' if chars.peek().is_some_and(|d| d.is_ascii_digit()) => {
                let first = chars.peek().and_then(|d| d.to_digit(10)).unwrap_or(0) as usize;
                if first > groups {
                    out.push('$');
                    continue;
                }
                chars.next();
                let mut group = first;
                while let Some(d) = chars.peek().and_then(|d| d.to_digit(10)) {
                    let longer = group * 10 + d as usize;
                    if longer > groups {
                        break;
                    }
                    group = longer;
                    chars.next();
                }
                out.push_str(captures.get(group).map_or("", |m| m.as_str()));
            }
            c => out.push(c),
        }
    }
    out
}

/// The subject of a DER certificate as an RFC 2253 distinguished name (`CN=alice,O=Acme`:
/// the last RDN of the certificate first, as Java writes it). `None` when the certificate
/// cannot be read (it has passed verification, so this does not happen in practice).
pub fn subject_dn(cert_der: &[u8]) -> Option<String> {
    let (certificate, _) = der::read(cert_der, der::SEQUENCE)?;
    let (tbs, _) = der::read(certificate, der::SEQUENCE)?;
    let mut rest = tbs;
    // [0] EXPLICIT version, optional.
    if rest.first() == Some(&0xA0) {
        rest = der::read(rest, 0xA0)?.1;
    }
    // serialNumber, signature, issuer, validity, then subject.
    rest = der::read(rest, der::INTEGER)?.1;
    rest = der::read(rest, der::SEQUENCE)?.1;
    rest = der::read(rest, der::SEQUENCE)?.1;
    rest = der::read(rest, der::SEQUENCE)?.1;
    let (subject, _) = der::read(rest, der::SEQUENCE)?;
    let mut rdns = Vec::new();
    let mut sets = subject;
    while !sets.is_empty() {
        let (set, after) = der::read(sets, der::SET)?;
        sets = after;
        let mut attributes = Vec::new();
        let mut items = set;
        while !items.is_empty() {
            let (pair, after) = der::read(items, der::SEQUENCE)?;
            items = after;
            let (oid, value) = der::read(pair, der::OID)?;
            let (tag, content, _) = der::read_any(value)?;
            attributes.push(attribute(oid, tag, content, value));
        }
        rdns.push(attributes.join("+"));
    }
    rdns.reverse();
    Some(rdns.join(","))
}

/// One `TYPE=value` of a distinguished name.
fn attribute(oid: &[u8], tag: u8, content: &[u8], whole_value: &[u8]) -> String {
    // The RFC 2253 names Java uses (2.5.4.x, DC and UID); others are written as dotted OIDs.
    let name = match oid {
        [0x55, 0x04, 0x03] => Some("CN"),
        [0x55, 0x04, 0x06] => Some("C"),
        [0x55, 0x04, 0x07] => Some("L"),
        [0x55, 0x04, 0x08] => Some("ST"),
        [0x55, 0x04, 0x09] => Some("STREET"),
        [0x55, 0x04, 0x0A] => Some("O"),
        [0x55, 0x04, 0x0B] => Some("OU"),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xF2, 0x2C, 0x64, 0x01, 0x19] => Some("DC"),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xF2, 0x2C, 0x64, 0x01, 0x01] => Some("UID"),
        _ => None,
    };
    let text = match tag {
        // UTF8String, PrintableString, IA5String, NumericString, VisibleString.
        0x0C | 0x13 | 0x16 | 0x12 | 0x1A => std::str::from_utf8(content).ok().map(str::to_owned),
        // TeletexString: read as Latin-1.
        0x14 => Some(content.iter().map(|&b| char::from(b)).collect()),
        // BMPString: UTF-16BE.
        0x1E => {
            let units: Vec<u16> = content
                .chunks_exact(2)
                .map(|p| u16::from_be_bytes([p[0], p[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    };
    match (name, text) {
        (Some(name), Some(text)) => format!("{name}={}", escape(&text)),
        // RFC 2253: an unknown type, or a value that is not a string, as its BER in hex.
        (_, text) => {
            let oid = der::oid_string(oid);
            match text {
                Some(text) if name.is_none() => format!("{oid}={}", escape(&text)),
                _ => {
                    let hex: String = whole_value.iter().map(|b| format!("{b:02x}")).collect();
                    format!("{}=#{hex}", name.map_or(oid, str::to_owned))
                }
            }
        }
    }
}

/// RFC 2253 escaping of an attribute value.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == ' ' || c == '#'))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Just enough DER to walk a certificate to its subject.
mod der {
    pub const INTEGER: u8 = 0x02;
    pub const OID: u8 = 0x06;
    pub const SEQUENCE: u8 = 0x30;
    pub const SET: u8 = 0x31;

    /// One element of any tag: (tag, content, what follows it).
    pub fn read_any(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (&tag, rest) = input.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = if first < 0x80 {
            (first as usize, rest)
        } else {
            let count = (first & 0x7F) as usize;
            if count == 0 || count > 4 || rest.len() < count {
                return None;
            }
            let len = rest[..count]
                .iter()
                .fold(0usize, |acc, &b| (acc << 8) | b as usize);
            (len, &rest[count..])
        };
        if rest.len() < len {
            return None;
        }
        Some((tag, &rest[..len], &rest[len..]))
    }

    /// One element that must have tag `tag`: (content, what follows it).
    pub fn read(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
        let (found, content, rest) = read_any(input)?;
        (found == tag).then_some((content, rest))
    }

    /// An OID's content bytes in dotted form.
    pub fn oid_string(content: &[u8]) -> String {
        let mut parts: Vec<u64> = Vec::new();
        let mut value = 0u64;
        for &b in content {
            value = (value << 7) | u64::from(b & 0x7F);
            if b & 0x80 == 0 {
                if parts.is_empty() {
                    let first = (value / 40).min(2);
                    parts.push(first);
                    parts.push(value - first * 40);
                } else {
                    parts.push(value);
                }
                value = 0;
            }
        }
        parts
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(".")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_the_whole_name() {
        let m = PrincipalMapper::parse("").unwrap();
        assert_eq!(m.map("CN=alice,O=Acme").as_deref(), Some("CN=alice,O=Acme"));
        let m = PrincipalMapper::parse("DEFAULT").unwrap();
        assert_eq!(m.map("CN=bob").as_deref(), Some("CN=bob"));
    }

    #[test]
    fn rules_as_kafka_documents_them() {
        let m = PrincipalMapper::parse(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,DEFAULT",
        )
        .unwrap();
        assert_eq!(
            m.map("CN=kafka-broker,OU=ServiceUsers,O=Acme").as_deref(),
            Some("kafka-broker")
        );
        assert_eq!(
            m.map("CN=Alice,OU=Eng,O=Acme,L=Paris,ST=IDF,C=FR")
                .as_deref(),
            Some("alice@eng")
        );
        assert_eq!(m.map("O=Acme,cN=Duke.Smith").as_deref(), Some("duke.smith"));
        assert_eq!(m.map("O=Acme").as_deref(), Some("O=Acme"));
    }

    #[test]
    fn upper_case_escapes_and_no_match() {
        let m = PrincipalMapper::parse("RULE:^CN=([^,]*),O=Acme$/$1/U").unwrap();
        assert_eq!(m.map("CN=alice,O=Acme").as_deref(), Some("ALICE"));
        // No rule applies (and no DEFAULT): no principal, the connection is refused.
        assert_eq!(m.map("CN=alice,O=Other"), None);
        // The pattern must match the whole name.
        assert_eq!(m.map("CN=alice,O=Acme,C=FR"), None);
        // An escaped slash in a pattern and in a replacement; literal text and a missing
        // group reference stay as written.
        let m = PrincipalMapper::parse(r"RULE:^CN=(.*)\/x$/user\/$1-$2/").unwrap();
        assert_eq!(m.map("CN=a/x").as_deref(), Some("user/a-$2"));
        // $12 with one group is $1 then "2".
        let m = PrincipalMapper::parse("RULE:^CN=(.*)$/$12/").unwrap();
        assert_eq!(m.map("CN=a").as_deref(), Some("a2"));
    }

    #[test]
    fn bad_rules_are_refused_with_the_reason() {
        let e = PrincipalMapper::parse("RULE:^CN=(.*)$/$1").unwrap_err();
        assert!(e.0.contains("RULE:pattern/replacement/"), "{e}");
        let e = PrincipalMapper::parse("RULE:^CN=(.*$/$1/").unwrap_err();
        assert!(e.0.contains("pattern '^CN=(.*$'"), "{e}");
        let e = PrincipalMapper::parse("RULE:^CN=(.*)$/$1/X").unwrap_err();
        assert!(e.0.contains("only L (lower case) or U"), "{e}");
        let e = PrincipalMapper::parse("DEFAULT,SOMETHING").unwrap_err();
        assert!(e.0.contains("'SOMETHING' is neither DEFAULT"), "{e}");
    }

    #[test]
    fn subject_in_rfc2253_order_with_escapes() {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CountryName, "FR");
        dn.push(rcgen::DnType::OrganizationName, "Acme, Inc.");
        dn.push(rcgen::DnType::OrganizationalUnitName, "Eng");
        dn.push(rcgen::DnType::CommonName, "alice");
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let dn = subject_dn(cert.der()).unwrap();
        // rcgen writes the attributes in the order pushed; Java lists the last one first.
        assert_eq!(dn, r"CN=alice,OU=Eng,O=Acme\, Inc.,C=FR");
        assert_eq!(escape(" a+b "), r"\ a\+b\ ");
        assert_eq!(
            der::oid_string(&[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D]),
            "1.2.840.113549"
        );
    }
}
