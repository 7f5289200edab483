//! The HTTP API under the broker's ACLs (`--authorizer acl`): each API key is a principal
//! (`User:` + its name, or its `principal`), the same ACLs that Kafka clients meet decide,
//! and the key's own read/write/admin lists no longer apply.

mod common;

use std::sync::Arc;

use common::{Api, key};
use serde_json::{Value, json};
use sluice_http::HttpConfig;
use sluice_http::auth::ApiKeyConfig;
use sluice_security::{
    AccessControlEntry, AclBinding, AclOperation, AclPermissionType, Authorizer, PatternType,
    Principal, ResourcePattern, ResourceType,
};

const ALICE: &str = "sk_alice";
const OPS: &str = "sk_ops";
const ADMIN: &str = "sk_admin";

fn acl(
    rt: ResourceType,
    name: &str,
    pattern: PatternType,
    who: &str,
    op: AclOperation,
    permission: AclPermissionType,
) -> AclBinding {
    AclBinding::new(
        ResourcePattern::new(rt, name, pattern),
        AccessControlEntry::new(who, "*", op, permission),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_acls_decide_for_each_key_principal() {
    // alice's key would allow everything by its lists: with ACLs on, the lists do not count.
    let keys = vec![
        key("alice", ALICE, &["*"], &["*"], &["*"]),
        ApiKeyConfig {
            principal: Some("User:operations".to_owned()),
            ..key("ops", OPS, &[], &[], &[])
        },
        key("admin", ADMIN, &[], &[], &[]),
    ];
    let api = Api::start_with(HttpConfig::default(), keys, |_| {}).await;
    api.create_topic("orders", 1);
    api.create_topic("payments", 1);
    let acl_dir = tempfile::tempdir().unwrap();
    let authorizer =
        Arc::new(Authorizer::open(acl_dir.path(), [Principal::user("admin")]).unwrap());
    use AclOperation::*;
    use AclPermissionType::*;
    use PatternType::*;
    use ResourceType::*;
    let created = authorizer
        .create(&[
            acl(Topic, "orders", Literal, "User:alice", Write, Allow),
            acl(Topic, "orders", Literal, "User:alice", Read, Allow),
            acl(Group, "billing", Prefixed, "User:alice", Read, Allow),
            acl(Topic, "pay", Prefixed, "User:operations", Create, Allow),
            acl(Topic, "payments", Literal, "User:operations", Read, Allow),
            acl(Topic, "payments", Literal, "User:operations", Read, Deny),
        ])
        .unwrap();
    assert!(created.iter().all(Result::is_ok));
    assert!(api.broker.set_authorizer(authorizer));

    let c = &api.client;
    let produce = |secret: &'static str, topic: &str| {
        c.post(api.at(&format!("/topics/{topic}/records")))
            .bearer_auth(secret)
            .json(&json!([{"key": "k", "value": "v"}]))
            .send()
    };
    let read = |secret: &'static str, topic: &str| {
        c.get(api.at(&format!("/topics/{topic}/partitions/0/records?offset=0")))
            .bearer_auth(secret)
            .send()
    };
    let r = produce(ALICE, "orders").await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(read(ALICE, "orders").await.unwrap().status(), 200);
    let r = produce(ALICE, "payments").await.unwrap();
    assert_eq!(r.status(), 403);
    let body: Value = r.json().await.unwrap();
    let message = body["error"].as_str().unwrap();
    assert!(
        message.contains("User:alice")
            && message.contains("\"alice\"")
            && message.contains("WRITE")
            && message.contains("payments"),
        "{message}"
    );
    // The list shows what she may describe (WRITE and READ imply DESCRIBE).
    let topics: Value = c
        .get(api.at("/topics"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(topics["topics"].as_array().unwrap().len(), 1, "{topics}");
    assert_eq!(topics["topics"][0]["name"], "orders");

    // Group offsets: READ on the group.
    let commit = |secret: &'static str, group: &str| {
        c.post(api.at(&format!("/groups/{group}/offsets")))
            .bearer_auth(secret)
            .json(&json!({"offsets": [{"topic": "orders", "partition": 0, "offset": 1}]}))
            .send()
    };
    let r = commit(ALICE, "billing-eu").await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let r = commit(ALICE, "shipping").await.unwrap();
    assert_eq!(r.status(), 403);

    // The ops key is User:operations: CREATE by prefix, and a DENY that beats its ALLOW.
    let create = |secret: &'static str, topic: &str| {
        c.post(api.at("/topics"))
            .bearer_auth(secret)
            .json(&json!({"name": topic, "partitions": 1}))
            .send()
    };
    assert_eq!(create(OPS, "payouts").await.unwrap().status(), 201);
    assert_eq!(create(OPS, "orders-2").await.unwrap().status(), 403);
    assert_eq!(read(OPS, "payments").await.unwrap().status(), 403);
    assert_eq!(create(ALICE, "anything").await.unwrap().status(), 403);

    // The super user may do anything, with no ACL naming it.
    assert_eq!(produce(ADMIN, "payments").await.unwrap().status(), 200);
    let r = c
        .delete(api.at("/topics/payouts"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_keys_the_http_caller_is_anonymous() {
    let api = Api::start_with(HttpConfig::default(), Vec::new(), |_| {}).await;
    api.create_topic("public", 1);
    api.create_topic("private", 1);
    let acl_dir = tempfile::tempdir().unwrap();
    let authorizer = Arc::new(Authorizer::open(acl_dir.path(), []).unwrap());
    authorizer
        .create(&[acl(
            ResourceType::Topic,
            "public",
            PatternType::Literal,
            "User:ANONYMOUS",
            AclOperation::Read,
            AclPermissionType::Allow,
        )])
        .unwrap();
    assert!(api.broker.set_authorizer(authorizer));
    let get = |path: &str| api.client.get(api.at(path)).send();
    let r = get("/topics/public/partitions/0/records?offset=0")
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = get("/topics/private/partitions/0/records?offset=0")
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("User:ANONYMOUS"),
        "{body}"
    );
    // Health and metrics stay open: they name no topic.
    assert_eq!(get("/healthz").await.unwrap().status(), 200);
    api.stop().await;
}
