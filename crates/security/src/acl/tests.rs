//! Table-driven tests of Kafka's ACL semantics: wire codes, validation, authorization,
//! filters, and the durable store.

use proptest::prelude::*;

use super::*;
use crate::error::{AclValidationKind, SecurityError};

use AclOperation as Op;
use AclPermissionType as Perm;
use PatternType as Pat;
use ResourceType as Res;

fn binding(
    rt: Res,
    name: &str,
    pt: Pat,
    principal: &str,
    host: &str,
    op: Op,
    perm: Perm,
) -> AclBinding {
    AclBinding::new(
        ResourcePattern::new(rt, name, pt),
        AccessControlEntry::new(principal, host, op, perm),
    )
}

fn allow(rt: Res, name: &str, pt: Pat, principal: &str, op: Op) -> AclBinding {
    binding(rt, name, pt, principal, "*", op, Perm::Allow)
}

fn deny(rt: Res, name: &str, pt: Pat, principal: &str, op: Op) -> AclBinding {
    binding(rt, name, pt, principal, "*", op, Perm::Deny)
}

#[test]
fn wire_codes_match_kafka() {
    let resource = [
        (Res::Unknown, 0),
        (Res::Any, 1),
        (Res::Topic, 2),
        (Res::Group, 3),
        (Res::Cluster, 4),
        (Res::TransactionalId, 5),
        (Res::DelegationToken, 6),
        (Res::User, 7),
    ];
    for (v, code) in resource {
        assert_eq!((v.code(), Res::from_code(code)), (code, v));
    }
    let pattern = [
        (Pat::Unknown, 0),
        (Pat::Any, 1),
        (Pat::Match, 2),
        (Pat::Literal, 3),
        (Pat::Prefixed, 4),
    ];
    for (v, code) in pattern {
        assert_eq!((v.code(), Pat::from_code(code)), (code, v));
    }
    let ops = [
        (Op::Unknown, 0),
        (Op::Any, 1),
        (Op::All, 2),
        (Op::Read, 3),
        (Op::Write, 4),
        (Op::Create, 5),
        (Op::Delete, 6),
        (Op::Alter, 7),
        (Op::Describe, 8),
        (Op::ClusterAction, 9),
        (Op::DescribeConfigs, 10),
        (Op::AlterConfigs, 11),
        (Op::IdempotentWrite, 12),
        (Op::CreateTokens, 13),
        (Op::DescribeTokens, 14),
        (Op::TwoPhaseCommit, 15),
    ];
    for (v, code) in ops {
        assert_eq!((v.code(), Op::from_code(code)), (code, v));
    }
    let perms = [
        (Perm::Unknown, 0),
        (Perm::Any, 1),
        (Perm::Deny, 2),
        (Perm::Allow, 3),
    ];
    for (v, code) in perms {
        assert_eq!((v.code(), Perm::from_code(code)), (code, v));
    }
    assert_eq!(Res::from_code(8), Res::Unknown);
    assert_eq!(Op::from_code(-1), Op::Unknown);
    assert_eq!(Res::from_name("transactional_id"), Res::TransactionalId);
    assert_eq!(Op::from_name("nope"), Op::Unknown);
    assert_eq!(Op::DescribeConfigs.to_string(), "DESCRIBE_CONFIGS");
}

#[test]
fn principal_parse_and_display() {
    let p: Principal = "User:alice".parse().unwrap();
    assert_eq!(p, Principal::user("alice"));
    assert_eq!(p.to_string(), "User:alice");
    let odd: Principal = "Group:a:b".parse().unwrap();
    assert_eq!(
        (odd.principal_type.as_str(), odd.name.as_str()),
        ("Group", "a:b")
    );
    assert!("User:*".parse::<Principal>().unwrap().is_wildcard());
    assert!(!"Group:*".parse::<Principal>().unwrap().is_wildcard());
    for bad in ["alice", "", ":alice", "User:"] {
        let err = bad.parse::<Principal>().unwrap_err();
        assert_eq!(err.kind, AclValidationKind::InvalidPrincipal, "{bad}");
    }
}

#[test]
fn create_validation_matches_kafka() {
    use AclValidationKind::*;
    let ok = allow(Res::Topic, "t", Pat::Literal, "User:a", Op::Read);
    let with = |f: &dyn Fn(&mut AclBinding)| {
        let mut b = ok.clone();
        f(&mut b);
        b
    };
    let cases: Vec<(AclBinding, Option<AclValidationKind>)> = vec![
        (ok.clone(), None),
        (with(&|b| b.pattern.pattern_type = Pat::Prefixed), None),
        (
            with(&|b| b.pattern.resource_type = Res::Unknown),
            Some(UnknownElement),
        ),
        (
            with(&|b| b.pattern.pattern_type = Pat::Unknown),
            Some(UnknownElement),
        ),
        (
            with(&|b| b.entry.operation = Op::Unknown),
            Some(UnknownElement),
        ),
        (
            with(&|b| b.entry.permission = Perm::Unknown),
            Some(UnknownElement),
        ),
        (
            with(&|b| b.pattern.resource_type = Res::Any),
            Some(NotConcrete),
        ),
        (
            with(&|b| b.pattern.pattern_type = Pat::Any),
            Some(NotConcrete),
        ),
        (
            with(&|b| b.pattern.pattern_type = Pat::Match),
            Some(NotConcrete),
        ),
        (with(&|b| b.entry.operation = Op::Any), Some(NotConcrete)),
        (with(&|b| b.entry.permission = Perm::Any), Some(NotConcrete)),
        (with(&|b| b.pattern.name.clear()), Some(EmptyResourceName)),
        (
            with(&|b| b.entry.principal = "alice".into()),
            Some(InvalidPrincipal),
        ),
        (
            with(&|b| {
                b.pattern.resource_type = Res::Cluster;
                b.pattern.name = "other".into();
            }),
            Some(InvalidClusterName),
        ),
        (
            with(&|b| {
                b.pattern.resource_type = Res::Cluster;
                b.pattern.name = CLUSTER_NAME.into();
            }),
            None,
        ),
    ];
    for (b, expected) in cases {
        let got = b.validate();
        assert_eq!(got.as_ref().err().map(|e| e.kind), expected, "{b:?}");
        if let Err(e) = got {
            assert_eq!(e.kafka_error_code(), 42);
        }
    }
}

fn sample_index() -> AclIndex {
    AclIndex::from_bindings([
        allow(Res::Topic, "orders", Pat::Literal, "User:alice", Op::Read),
        allow(Res::Topic, "orders", Pat::Literal, "User:bob", Op::All),
        deny(Res::Topic, "orders", Pat::Literal, "User:bob", Op::Delete),
        allow(Res::Topic, "pay-", Pat::Prefixed, "User:carol", Op::Write),
        deny(
            Res::Topic,
            "pay-secret",
            Pat::Prefixed,
            "User:carol",
            Op::Write,
        ),
        allow(Res::Topic, "*", Pat::Literal, "User:dave", Op::Describe),
        allow(Res::Topic, "public", Pat::Literal, "User:*", Op::Read),
        binding(
            Res::Topic,
            "local",
            Pat::Literal,
            "User:erin",
            "10.0.0.1",
            Op::Read,
            Perm::Allow,
        ),
        allow(Res::Group, "g1", Pat::Literal, "User:alice", Op::Read),
        allow(
            Res::Cluster,
            CLUSTER_NAME,
            Pat::Literal,
            "User:ops",
            Op::AlterConfigs,
        ),
        deny(Res::Topic, "public", Pat::Literal, "User:mallory", Op::Read),
        allow(Res::Topic, "ünï", Pat::Prefixed, "User:frank", Op::Read),
        allow(
            Res::TransactionalId,
            "tx",
            Pat::Literal,
            "Group:team",
            Op::Write,
        ),
        allow(
            Res::TransactionalId,
            "tx",
            Pat::Literal,
            "Group:*",
            Op::Read,
        ),
        deny(Res::Topic, "audit", Pat::Literal, "User:gina", Op::Read),
        allow(Res::Topic, "audit", Pat::Literal, "User:gina", Op::Describe),
    ])
    .unwrap()
}

#[test]
fn authorize_table() {
    let index = sample_index();
    let authorizer_dir = tempfile::tempdir().unwrap();
    let authorizer = Authorizer::open(authorizer_dir.path(), [Principal::user("root")]).unwrap();
    authorizer
        .create(&index.bindings().cloned().collect::<Vec<_>>())
        .unwrap()
        .into_iter()
        .for_each(|r| r.unwrap());
    // (principal, host, operation, resource type, name, allowed, why)
    let cases: &[(&str, &str, Op, Res, &str, bool, &str)] = &[
        (
            "User:alice",
            "h",
            Op::Read,
            Res::Topic,
            "orders",
            true,
            "literal allow",
        ),
        (
            "User:alice",
            "h",
            Op::Write,
            Res::Topic,
            "orders",
            false,
            "no allow for WRITE",
        ),
        (
            "User:alice",
            "h",
            Op::Read,
            Res::Topic,
            "orders2",
            false,
            "literal is not a prefix",
        ),
        (
            "User:alice",
            "h",
            Op::Read,
            Res::Group,
            "orders",
            false,
            "other resource type",
        ),
        (
            "User:alice",
            "h",
            Op::Describe,
            Res::Topic,
            "orders",
            true,
            "READ implies DESCRIBE",
        ),
        (
            "User:alice",
            "h",
            Op::DescribeConfigs,
            Res::Topic,
            "orders",
            false,
            "READ does not imply DESCRIBE_CONFIGS",
        ),
        (
            "User:bob",
            "h",
            Op::Write,
            Res::Topic,
            "orders",
            true,
            "ALL covers WRITE",
        ),
        (
            "User:bob",
            "h",
            Op::Delete,
            Res::Topic,
            "orders",
            false,
            "deny beats allow ALL",
        ),
        (
            "User:bob",
            "h",
            Op::Describe,
            Res::Topic,
            "orders",
            true,
            "DENY DELETE does not deny DESCRIBE",
        ),
        (
            "User:carol",
            "h",
            Op::Write,
            Res::Topic,
            "pay-eu",
            true,
            "prefixed allow",
        ),
        (
            "User:carol",
            "h",
            Op::Write,
            Res::Topic,
            "pay-",
            true,
            "prefix equal to the name",
        ),
        (
            "User:carol",
            "h",
            Op::Write,
            Res::Topic,
            "pay",
            false,
            "shorter than the prefix",
        ),
        (
            "User:carol",
            "h",
            Op::Write,
            Res::Topic,
            "pay-secret-1",
            false,
            "longer prefixed deny wins",
        ),
        (
            "User:carol",
            "h",
            Op::Describe,
            Res::Topic,
            "pay-eu",
            true,
            "WRITE implies DESCRIBE",
        ),
        (
            "User:dave",
            "h",
            Op::Describe,
            Res::Topic,
            "anything",
            true,
            "literal * wildcard",
        ),
        (
            "User:dave",
            "h",
            Op::Describe,
            Res::Topic,
            "*",
            true,
            "a topic named *",
        ),
        (
            "User:dave",
            "h",
            Op::Read,
            Res::Topic,
            "anything",
            false,
            "DESCRIBE does not imply READ",
        ),
        (
            "User:dave",
            "h",
            Op::Describe,
            Res::Group,
            "anything",
            false,
            "wildcard is per type",
        ),
        (
            "User:zed",
            "h",
            Op::Read,
            Res::Topic,
            "public",
            true,
            "wildcard principal",
        ),
        (
            "Group:zed",
            "h",
            Op::Read,
            Res::Topic,
            "public",
            true,
            "User:* matches every principal type, as in Kafka",
        ),
        (
            "User:mallory",
            "h",
            Op::Read,
            Res::Topic,
            "public",
            false,
            "deny beats wildcard allow",
        ),
        (
            "User:erin",
            "10.0.0.1",
            Op::Read,
            Res::Topic,
            "local",
            true,
            "host match",
        ),
        (
            "User:erin",
            "10.0.0.2",
            Op::Read,
            Res::Topic,
            "local",
            false,
            "host mismatch",
        ),
        (
            "User:ops",
            "h",
            Op::DescribeConfigs,
            Res::Cluster,
            CLUSTER_NAME,
            true,
            "ALTER_CONFIGS implies DESCRIBE_CONFIGS",
        ),
        (
            "User:ops",
            "h",
            Op::Describe,
            Res::Cluster,
            CLUSTER_NAME,
            false,
            "ALTER_CONFIGS does not imply DESCRIBE",
        ),
        (
            "User:frank",
            "h",
            Op::Read,
            Res::Topic,
            "ünïcode",
            true,
            "multi-byte prefix",
        ),
        (
            "User:frank",
            "h",
            Op::Read,
            Res::Topic,
            "ün",
            false,
            "multi-byte, shorter",
        ),
        (
            "Group:team",
            "h",
            Op::Write,
            Res::TransactionalId,
            "tx",
            true,
            "non-User principal type",
        ),
        (
            "User:team",
            "h",
            Op::Write,
            Res::TransactionalId,
            "tx",
            false,
            "principal type must match",
        ),
        (
            "Group:team",
            "h",
            Op::Read,
            Res::TransactionalId,
            "tx",
            false,
            "only User:* is a wildcard",
        ),
        (
            "User:gina",
            "h",
            Op::Read,
            Res::Topic,
            "audit",
            false,
            "explicit deny",
        ),
        (
            "User:gina",
            "h",
            Op::Describe,
            Res::Topic,
            "audit",
            true,
            "deny READ leaves DESCRIBE",
        ),
        (
            "User:nobody",
            "h",
            Op::Read,
            Res::Topic,
            "orders",
            false,
            "no ACL at all",
        ),
        (
            "User:alice",
            "h",
            Op::Any,
            Res::Topic,
            "orders",
            false,
            "ANY is not an action",
        ),
        (
            "User:bob",
            "h",
            Op::Read,
            Res::Any,
            "orders",
            false,
            "ANY is not a resource type",
        ),
        (
            "User:root",
            "h",
            Op::Delete,
            Res::Topic,
            "orders",
            true,
            "super user",
        ),
        (
            "User:root",
            "h",
            Op::ClusterAction,
            Res::Cluster,
            CLUSTER_NAME,
            true,
            "super user, no ACL",
        ),
    ];
    for &(principal, host, op, rt, name, expected, why) in cases {
        let p: Principal = principal.parse().unwrap();
        assert_eq!(
            authorizer.authorize(&p, host, op, rt, name),
            expected,
            "{why}: {principal} {host} {op} {rt} {name}"
        );
        if principal != "User:root" {
            assert_eq!(
                index.authorize(&p, host, op, rt, name),
                expected,
                "{why} (index)"
            );
        }
    }
    assert!(!index.authorize(&Principal::user("root"), "h", Op::Read, Res::Topic, "x"));
}

#[test]
fn ipv6_hosts_match_in_either_form() {
    let index = AclIndex::from_bindings([binding(
        Res::Topic,
        "t",
        Pat::Literal,
        "User:alice",
        "0:0:0:0:0:0:0:1",
        Op::Read,
        Perm::Allow,
    )])
    .unwrap();
    let alice = Principal::user("alice");
    assert!(index.authorize(&alice, "::1", Op::Read, Res::Topic, "t"));
    assert!(index.authorize(&alice, "0:0:0:0:0:0:0:1", Op::Read, Res::Topic, "t"));
    assert!(!index.authorize(&alice, "::2", Op::Read, Res::Topic, "t"));
    assert!(!index.authorize(&alice, "127.0.0.1", Op::Read, Res::Topic, "t"));
}

#[test]
fn allows_any_finds_one_resource_of_the_type() {
    let alice = Principal::user("alice");
    let bob = Principal::user("bob");
    let index = AclIndex::from_bindings([
        allow(Res::Topic, "logs-", Pat::Prefixed, "User:alice", Op::Write),
        allow(Res::Topic, "orders", Pat::Literal, "User:bob", Op::Read),
        allow(Res::Topic, "orders", Pat::Literal, "User:carol", Op::All),
        allow(Res::Topic, "orders", Pat::Literal, "User:dave", Op::Write),
        deny(Res::Topic, "*", Pat::Literal, "User:dave", Op::Write),
    ])
    .unwrap();
    assert!(index.allows_any(&alice, "h", Op::Write, Res::Topic));
    // READ does not grant WRITE, and WRITE is not asked for on groups.
    assert!(!index.allows_any(&bob, "h", Op::Write, Res::Topic));
    assert!(!index.allows_any(&alice, "h", Op::Write, Res::Group));
    assert!(index.allows_any(&Principal::user("carol"), "h", Op::Write, Res::Topic));
    // A deny on every topic outweighs an allow on one.
    assert!(!index.allows_any(&Principal::user("dave"), "h", Op::Write, Res::Topic));
}

#[test]
fn filter_table() {
    let lit = ResourcePattern::new(Res::Topic, "foo", Pat::Literal);
    let star = ResourcePattern::new(Res::Topic, "*", Pat::Literal);
    let pre = ResourcePattern::new(Res::Topic, "fo", Pat::Prefixed);
    let group = ResourcePattern::new(Res::Group, "foo", Pat::Literal);
    let f = |rt, name: Option<&str>, pt| ResourcePatternFilter::new(rt, name, pt);
    // (filter, [matches lit, star, pre, group])
    let cases = [
        (ResourcePatternFilter::any(), [true, true, true, true]),
        (f(Res::Topic, None, Pat::Any), [true, true, true, false]),
        (
            f(Res::Any, Some("foo"), Pat::Any),
            [true, false, false, true],
        ),
        (
            f(Res::Topic, Some("foo"), Pat::Literal),
            [true, false, false, false],
        ),
        (
            f(Res::Topic, Some("fo"), Pat::Prefixed),
            [false, false, true, false],
        ),
        (
            f(Res::Topic, Some("foo"), Pat::Prefixed),
            [false, false, false, false],
        ),
        (
            f(Res::Topic, Some("*"), Pat::Literal),
            [false, true, false, false],
        ),
        (
            f(Res::Topic, Some("foo"), Pat::Match),
            [true, true, true, false],
        ),
        (
            f(Res::Topic, Some("fob"), Pat::Match),
            [false, true, true, false],
        ),
        (
            f(Res::Topic, Some("f"), Pat::Match),
            [false, true, false, false],
        ),
        (f(Res::Topic, None, Pat::Match), [true, true, true, false]),
        (
            f(Res::Any, Some("foo"), Pat::Match),
            [true, true, true, true],
        ),
        (
            f(Res::Topic, None, Pat::Prefixed),
            [false, false, true, false],
        ),
    ];
    for (filter, expected) in cases {
        let got = [&lit, &star, &pre, &group].map(|p| filter.matches(p));
        assert_eq!(got, expected, "{filter:?}");
    }

    let entry = AccessControlEntry::new("User:alice", "1.2.3.4", Op::Read, Perm::Allow);
    let e =
        |p: Option<&str>, h: Option<&str>, op, perm| AccessControlEntryFilter::new(p, h, op, perm);
    let entry_cases = [
        (AccessControlEntryFilter::any(), true),
        (e(Some("User:alice"), None, Op::Any, Perm::Any), true),
        (e(Some("User:*"), None, Op::Any, Perm::Any), false),
        (e(None, Some("1.2.3.4"), Op::Read, Perm::Allow), true),
        (e(None, Some("*"), Op::Any, Perm::Any), false),
        (e(None, None, Op::Describe, Perm::Any), false),
        (e(None, None, Op::Any, Perm::Deny), false),
    ];
    for (filter, expected) in entry_cases {
        assert_eq!(filter.matches(&entry), expected, "{filter:?}");
    }
    let unknown = AclBindingFilter::new(
        f(Res::Unknown, None, Pat::Any),
        AccessControlEntryFilter::any(),
    );
    assert!(unknown.validate().is_err());
    let unknown = AclBindingFilter::new(
        ResourcePatternFilter::any(),
        e(None, None, Op::Unknown, Perm::Any),
    );
    assert!(unknown.validate().is_err());
    assert!(AclBindingFilter::any().validate().is_ok());
}

#[test]
fn create_describe_delete_persist_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let auth = Authorizer::open(dir.path(), []).unwrap();
    let a = allow(Res::Topic, "orders", Pat::Literal, "User:alice", Op::Read);
    let b = allow(Res::Topic, "ord", Pat::Prefixed, "User:bob", Op::Write);
    let c = deny(Res::Group, "g", Pat::Literal, "User:alice", Op::Read);
    let bad = allow(Res::Cluster, "nope", Pat::Literal, "User:x", Op::Alter);
    let results = auth
        .create(&[a.clone(), b.clone(), c.clone(), bad, a.clone()])
        .unwrap();
    let kinds: Vec<_> = results
        .iter()
        .map(|r| r.as_ref().err().map(|e| e.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            None,
            None,
            None,
            Some(AclValidationKind::InvalidClusterName),
            None
        ]
    );
    assert_eq!(auth.snapshot().len(), 3, "duplicate collapsed");

    let reopened = Authorizer::open(dir.path(), []).unwrap();
    assert_eq!(
        reopened.describe(&AclBindingFilter::any()).unwrap().len(),
        3
    );
    assert!(reopened.authorize(
        &Principal::user("bob"),
        "h",
        Op::Write,
        Res::Topic,
        "orders"
    ));

    let match_orders = AclBindingFilter::new(
        ResourcePatternFilter::new(Res::Topic, Some("orders"), Pat::Match),
        AccessControlEntryFilter::any(),
    );
    let mut described = reopened.describe(&match_orders).unwrap();
    described.sort();
    let mut expected = vec![a.clone(), b.clone()];
    expected.sort();
    assert_eq!(described, expected);

    let alice_any = AclBindingFilter::new(
        ResourcePatternFilter::any(),
        AccessControlEntryFilter::new(Some("User:alice"), None, Op::Any, Perm::Any),
    );
    let unknown = AclBindingFilter::new(
        ResourcePatternFilter::new(Res::Unknown, None, Pat::Any),
        AccessControlEntryFilter::any(),
    );
    let deleted = reopened
        .delete(&[match_orders.clone(), alice_any, unknown.clone()])
        .unwrap();
    assert_eq!(deleted[0].as_ref().unwrap().len(), 2);
    let mut alice_deleted = deleted[1].clone().unwrap();
    alice_deleted.sort();
    let mut expected = vec![a.clone(), c.clone()];
    expected.sort();
    assert_eq!(alice_deleted, expected, "a is reported by both filters");
    assert!(deleted[2].is_err());
    assert!(reopened.describe(&unknown).is_err());

    let after = Authorizer::open(dir.path(), []).unwrap();
    assert!(after.describe(&AclBindingFilter::any()).unwrap().is_empty());
    assert!(!after.authorize(
        &Principal::user("alice"),
        "h",
        Op::Read,
        Res::Topic,
        "orders"
    ));
    // Deleting nothing writes nothing and reports empty.
    assert_eq!(after.delete(&[match_orders]).unwrap()[0], Ok(vec![]));
}

#[test]
fn corrupt_acl_file_gives_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = Authorizer::open(dir.path(), [])
        .unwrap()
        .path()
        .to_path_buf();
    let valid = r#"{"resource_type":"TOPIC","resource_name":"t","pattern_type":"LITERAL","principal":"User:a","host":"*","operation":"READ","permission":"ALLOW"}"#;
    let cases = [
        ("[".to_string(), "not valid JSON"),
        (
            r#"{"version":1,"acls":[{"resource_type":"TOPIC"}]}"#.to_string(),
            "not valid JSON",
        ),
        (
            format!(
                r#"{{"version":1,"acls":[{}]}}"#,
                valid.replace("TOPIC", "PLANET")
            ),
            "not valid JSON",
        ),
        (
            format!(r#"{{"version":9,"acls":[{valid}]}}"#),
            "format version 9",
        ),
        (
            format!(
                r#"{{"version":1,"acls":[{}]}}"#,
                valid.replace("User:a", "alice")
            ),
            "invalid ACL",
        ),
    ];
    for (contents, expected) in cases {
        std::fs::write(&path, &contents).unwrap();
        let err = Authorizer::open(dir.path(), []).unwrap_err();
        assert!(
            matches!(
                err,
                SecurityError::Corrupt { .. } | SecurityError::InvalidStore { .. }
            ),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains(expected) && text.contains("acls.json"),
            "{contents}: {text}"
        );
    }
    std::fs::write(&path, format!(r#"{{"version":1,"acls":[{valid}]}}"#)).unwrap();
    assert_eq!(
        Authorizer::open(dir.path(), []).unwrap().snapshot().len(),
        1
    );
}

#[test]
fn authorizer_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Authorizer>();
    assert_send_sync::<AclIndex>();
}

/// A reference model: scan every binding, no index.
fn model_authorize(
    bindings: &[AclBinding],
    p: &Principal,
    host: &str,
    op: Op,
    rt: Res,
    name: &str,
) -> bool {
    let mut allowed = false;
    for b in bindings {
        let resource_ok = b.pattern.resource_type == rt
            && match b.pattern.pattern_type {
                Pat::Literal => b.pattern.name == name || b.pattern.name == "*",
                Pat::Prefixed => name.starts_with(&b.pattern.name),
                _ => false,
            };
        let ace: Principal = b.entry.principal.parse().unwrap();
        let principal_ok = ace == *p || ace.to_string() == WILDCARD_PRINCIPAL;
        let host_ok = b.entry.host == "*" || b.entry.host == host;
        let implied = match op {
            Op::Describe => [Op::Describe, Op::Read, Op::Write, Op::Delete, Op::Alter]
                .contains(&b.entry.operation),
            Op::DescribeConfigs => {
                [Op::DescribeConfigs, Op::AlterConfigs].contains(&b.entry.operation)
            }
            _ => false,
        };
        let op_ok = b.entry.operation == Op::All
            || b.entry.operation == op
            || (b.entry.permission == Perm::Allow && implied);
        if resource_ok && principal_ok && host_ok && op_ok {
            if b.entry.permission == Perm::Deny {
                return false;
            }
            allowed = true;
        }
    }
    allowed
}

fn arb_binding() -> impl Strategy<Value = AclBinding> {
    (
        prop::sample::select(vec![Res::Topic, Res::Group]),
        "[ab*]{1,3}",
        prop::sample::select(vec![Pat::Literal, Pat::Prefixed]),
        prop::sample::select(vec!["User:x", "User:y", "User:*", "Group:x"]),
        prop::sample::select(vec!["*", "h1"]),
        prop::sample::select(vec![
            Op::All,
            Op::Read,
            Op::Write,
            Op::Describe,
            Op::AlterConfigs,
        ]),
        prop::sample::select(vec![Perm::Allow, Perm::Deny]),
    )
        .prop_map(|(rt, name, pt, principal, host, op, perm)| {
            binding(rt, &name, pt, principal, host, op, perm)
        })
}

proptest! {
    #[test]
    fn index_agrees_with_linear_scan(
        bindings in prop::collection::vec(arb_binding(), 0..20),
        principal in prop::sample::select(vec!["User:x", "User:y", "Group:x"]),
        host in prop::sample::select(vec!["h1", "h2"]),
        op in prop::sample::select(vec![Op::Read, Op::Write, Op::Describe, Op::DescribeConfigs, Op::AlterConfigs]),
        rt in prop::sample::select(vec![Res::Topic, Res::Group]),
        name in "[ab*]{1,4}",
    ) {
        let index = AclIndex::from_bindings(bindings.clone()).unwrap();
        let p: Principal = principal.parse().unwrap();
        prop_assert_eq!(
            index.authorize(&p, host, op, rt, &name),
            model_authorize(&bindings, &p, host, op, rt, &name)
        );
    }
}
