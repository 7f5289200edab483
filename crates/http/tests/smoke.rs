//! The HTTP API answers its operational routes and unknown paths with JSON.

mod common;

use std::sync::Arc;

use common::Api;
use sluice_http::StorageHooks;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_hooks_add_series_and_turn_readyz_to_503() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let lapsed = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&lapsed);
    let hooks = StorageHooks {
        series: Arc::new(|| "# TYPE sluice_object_test gauge\nsluice_object_test 7\n".to_owned()),
        not_ready: Arc::new(move || {
            flag.load(Ordering::Relaxed)
                .then(|| ("writer_lease_lapsed", "the writer lease lapsed".to_owned()))
        }),
    };
    let api = Api::start_with_storage(hooks).await;
    let client = &api.client;
    let url = &api.url;

    let r = client.get(format!("{url}/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let text = client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("\nsluice_object_test 7\n"), "{text}");

    lapsed.store(true, Ordering::Relaxed);
    let r = client.get(format!("{url}/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["status"], "writer_lease_lapsed");
    assert_eq!(body["error"], "the writer lease lapsed");

    lapsed.store(false, Ordering::Relaxed);
    let r = client.get(format!("{url}/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    api.stop().await;
}
