//! The HTTP API answers its operational routes and unknown paths with JSON.

mod common;

use common::Api;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_unknown_route() {
    let api = Api::start().await;
    let r = api.client.get(api.at("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = api.client.get(api.at("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = api.client.get(api.at("/nope")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("/nope"), "{body}");
    let r = api.client.put(api.at("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    api.stop().await;
}
