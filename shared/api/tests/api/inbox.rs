//! §3 of docs/API.md, delivering to the inbox: acceptance, idempotency keys, the envelope rule,
//! recorded headers, wrong secrets, body size and the full feed (`quota_exceeded`).

use agentaddress_core::domain::time::format_rfc3339;
use http::StatusCode;
use serde_json::{json, Value};

use crate::common::{assert_time, delete, get, is_id, post, seqs, TestApp};

#[tokio::test]
async fn inbox_accepts_202_and_records_the_event() {
    let t = TestApp::new();
    let a = t.create().await;
    let r = t
        .deliver(
            &a,
            &json!({"type": "demo.callback", "source": "ci", "data": {"ok": true}}),
        )
        .await;
    let b = r.ok(StatusCode::ACCEPTED);
    assert_eq!(b["duplicate"], false);
    assert_eq!(b["event"]["sequence"], 1);
    let id = b["event"]["id"].as_str().expect("id").to_owned();
    assert!(id.starts_with("evt_") && is_id(&id), "{id}");

    let page = t.events(&a, "").await;
    assert_eq!(page["events"].as_array().map(Vec::len), Some(1));
    let e = &page["events"][0];
    assert_eq!(e["id"], id.as_str());
    assert_eq!(e["sequence"], 1);
    assert_eq!(e["type"], "demo.callback");
    assert_eq!(e["source"], "ci");
    assert_eq!(e["ingress_surface"], "http");
    assert_eq!(e["received_at"], format_rfc3339(t.now()));
    assert_time(&e["received_at"]);
    assert_eq!(e["acknowledged_at"], Value::Null);
    assert_eq!(e["data"], json!({"ok": true}));
    assert_eq!(e["http"]["content_type"], "application/json");
    assert!(e["http"]["headers"].is_object());
    assert_eq!(page["next_cursor"], 1);
    assert_eq!(page["has_more"], false);

    // The single-event route shows the same object.
    let r = t.send(get(a.event(&id)).bearer(&a.token)).await;
    assert_eq!(r.ok(StatusCode::OK)["event"], *e);
}

#[tokio::test]
async fn inbox_idempotency_key_dedupes_and_detects_reuse() {
    let t = TestApp::new();
    let a = t.create().await;
    let body = json!({"type": "job.done", "data": {"id": 7}});
    let send = |b: &Value, key: &str| post(&a.inbox).json(b).header("idempotency-key", key);
    let first = t.send(send(&body, "delivery-1")).await;
    let first = first.ok(StatusCode::ACCEPTED).clone();
    assert_eq!(first["duplicate"], false);

    let again = t.send(send(&body, "delivery-1")).await;
    let again = again.ok(StatusCode::OK);
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["event"], first["event"]);

    let reused = t
        .send(send(
            &json!({"type": "job.done", "data": {"id": 8}}),
            "delivery-1",
        ))
        .await;
    reused.err(StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused");

    // No new event for the duplicate or the refused reuse.
    let page = t.events(&a, "").await;
    assert_eq!(seqs(&page), vec![1]);

    // Another key is another event.
    let other = t.send(send(&body, "delivery-2")).await;
    assert_eq!(other.ok(StatusCode::ACCEPTED)["event"]["sequence"], 2);

    // Bad keys: empty, too long, not printable ASCII.
    for bad in [
        b"".to_vec(),
        "k".repeat(256).into_bytes(),
        b"tab\there".to_vec(),
        "caf\u{e9}".as_bytes().to_vec(),
    ] {
        let r = t
            .send(post(&a.inbox).json(&body).header("idempotency-key", bad))
            .await;
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
    }
    // 255 printable characters are fine.
    let r = t.send(send(&body, &"k".repeat(255))).await;
    r.ok(StatusCode::ACCEPTED);
}

#[tokio::test]
async fn inbox_envelope_rule() {
    let t = TestApp::new();
    let a = t.create().await;

    // Only type/source/data: data is unwrapped.
    t.deliver_ok(
        &a,
        &json!({"type": "demo.callback", "source": "ci", "data": {"ok": true}}),
    )
    .await;
    // Extra keys: the whole body is the data.
    let push = json!({"type": "push", "source": "gh", "data": 1, "ref": "main"});
    t.deliver_ok(&a, &push).await;
    // Type only: data is null, source null.
    t.deliver_ok(&a, &json!({"type": "ping"})).await;
    // No type: http.request with the whole object.
    t.deliver_ok(&a, &json!({"source": "x", "data": 1})).await;
    // Non-string type: http.request.
    t.deliver_ok(&a, &json!({"type": 5, "data": 1})).await;
    // Non-object JSON.
    t.deliver_ok(&a, &json!([1, 2])).await;
    // text/plain, even when it parses as JSON.
    t.send(post(&a.inbox).content_type("text/plain").raw("hello"))
        .await
        .ok(StatusCode::ACCEPTED);
    t.send(
        post(&a.inbox)
            .content_type("text/plain")
            .raw(r#"{"type":"x"}"#),
    )
    .await
    .ok(StatusCode::ACCEPTED);
    // Binary.
    t.send(
        post(&a.inbox)
            .content_type("application/octet-stream")
            .raw(vec![0xff, 0x00, 0x01]),
    )
    .await
    .ok(StatusCode::ACCEPTED);
    // Empty body without a content type.
    t.send(post(&a.inbox)).await.ok(StatusCode::ACCEPTED);
    // Declared JSON that does not parse: kept as text.
    t.send(
        post(&a.inbox)
            .content_type("application/json")
            .raw("{broken"),
    )
    .await
    .ok(StatusCode::ACCEPTED);
    // JSON without a content type is still JSON.
    t.send(post(&a.inbox).raw(r#"{"type":"bare","data":[1]}"#))
        .await
        .ok(StatusCode::ACCEPTED);

    let page = t.events(&a, "").await;
    let e = page["events"].as_array().expect("events");
    assert_eq!(e.len(), 12);
    let view = |i: usize| {
        (
            e[i]["type"].clone(),
            e[i]["source"].clone(),
            e[i]["data"].clone(),
        )
    };
    assert_eq!(
        view(0),
        (json!("demo.callback"), json!("ci"), json!({"ok": true}))
    );
    assert_eq!(view(1), (json!("push"), json!("gh"), push));
    assert_eq!(view(2), (json!("ping"), Value::Null, Value::Null));
    assert_eq!(
        view(3),
        (
            json!("http.request"),
            Value::Null,
            json!({"source": "x", "data": 1})
        )
    );
    assert_eq!(
        view(4),
        (
            json!("http.request"),
            Value::Null,
            json!({"type": 5, "data": 1})
        )
    );
    assert_eq!(view(5), (json!("http.request"), Value::Null, json!([1, 2])));
    assert_eq!(
        view(6),
        (
            json!("http.request"),
            Value::Null,
            json!({"content_type": "text/plain", "text": "hello"})
        )
    );
    assert_eq!(
        view(7).2,
        json!({"content_type": "text/plain", "text": "{\"type\":\"x\"}"})
    );
    assert_eq!(view(7).0, "http.request");
    assert_eq!(
        view(8).2,
        json!({"content_type": "application/octet-stream", "base64": "/wAB"})
    );
    assert_eq!(e[8]["http"]["content_type"], "application/octet-stream");
    assert_eq!(view(9).2, json!({"content_type": null, "text": ""}));
    assert_eq!(e[9]["http"]["content_type"], Value::Null);
    assert_eq!(
        view(10).2,
        json!({"content_type": "application/json", "text": "{broken"})
    );
    assert_eq!(view(11), (json!("bare"), Value::Null, json!([1])));
}

#[tokio::test]
async fn inbox_records_only_allowlisted_headers() {
    let t = TestApp::new();
    let a = t.create().await;
    let r = t
        .send(
            post(&a.inbox)
                .json(&json!({"zen": "hi"}))
                .header("user-agent", "GitHub-Hookshot/abc")
                .header("x-github-event", "push")
                .header("x-github-delivery", "d-1")
                .header("x-hub-signature-256", "sha256=00ff")
                .header("stripe-signature", "t=1,v1=aa")
                .header("webhook-id", "msg_1")
                .header("webhook-timestamp", "1700000000")
                .header("webhook-signature", "v1,abc")
                .header("authorization", "Bearer very-secret-value")
                .header("cookie", "session=cookie-secret")
                .header("x-api-key", "key-secret"),
        )
        .await;
    r.ok(StatusCode::ACCEPTED);
    let page = t.events(&a, "").await;
    let http = &page["events"][0]["http"];
    assert_eq!(
        http["headers"],
        json!({
            "user-agent": "GitHub-Hookshot/abc",
            "x-github-event": "push",
            "x-github-delivery": "d-1",
            "x-hub-signature-256": "sha256=00ff",
            "stripe-signature": "t=1,v1=aa",
            "webhook-id": "msg_1",
            "webhook-timestamp": "1700000000",
            "webhook-signature": "v1,abc"
        })
    );
    let text = page.to_string();
    for secret in ["very-secret-value", "cookie-secret", "key-secret"] {
        assert!(!text.contains(secret), "{secret} was recorded: {text}");
    }
}

#[tokio::test]
async fn inbox_unknown_address_or_wrong_secret_is_404() {
    let t = TestApp::new();
    let a = t.create().await;
    let b = t.create().await;
    let paths = [
        format!("/api/v1/inbox/{}/ais_{}", a.id, "w".repeat(43)),
        format!("/api/v1/inbox/{}/{}", a.id, b.inbox_secret),
        format!("/api/v1/inbox/{}/{}", b.id, a.inbox_secret),
        format!("/api/v1/inbox/addr_unknownunknown/{}", a.inbox_secret),
        format!("/api/v1/inbox/{}/{}%21", a.id, a.inbox_secret),
        format!("/api/v1/inbox/{}/{}", a.id, "s".repeat(65)),
        format!("/api/v1/inbox/addr%21/{}", a.inbox_secret),
        format!("/api/v1/inbox/{}/{}", a.id, a.token),
    ];
    let mut bodies = Vec::new();
    for p in &paths {
        let r = t.send(post(p).json(&json!({"x": 1}))).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{p}: {}", r.text);
        r.err(StatusCode::NOT_FOUND, "not_found");
        bodies.push(r.text);
    }
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "{bodies:?}");
    // Missing secret segment: no such route.
    let r = t
        .send(post(format!("/api/v1/inbox/{}", a.id)).json(&json!({})))
        .await;
    r.err(StatusCode::NOT_FOUND, "not_found");
    // Nothing was delivered to either address.
    assert_eq!(t.inspect(&a).await["usage"]["last_sequence"], 0);
    assert_eq!(t.inspect(&b).await["usage"]["last_sequence"], 0);
}

#[tokio::test]
async fn inbox_body_over_the_limit_is_413() {
    let t = TestApp::with_limits(|l| l.max_inbox_bytes = 100);
    let a = t.create().await;
    // Exactly the limit is fine.
    t.send(
        post(&a.inbox)
            .content_type("text/plain")
            .raw("a".repeat(100)),
    )
    .await
    .ok(StatusCode::ACCEPTED);
    // One byte more is not, with or without a Content-Length.
    t.send(
        post(&a.inbox)
            .content_type("text/plain")
            .raw("a".repeat(101)),
    )
    .await
    .err(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    t.send(
        post(&a.inbox)
            .content_type("text/plain")
            .header("content-length", "101")
            .raw("a".repeat(101)),
    )
    .await
    .err(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    // A declared length over the limit is refused before the body is read.
    t.send(
        post(&a.inbox)
            .content_type("text/plain")
            .header("content-length", "1000000")
            .raw("tiny"),
    )
    .await
    .err(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    let page = t.events(&a, "").await;
    assert_eq!(seqs(&page), vec![1]);
}

#[tokio::test]
async fn full_feed_is_quota_exceeded_until_retention_frees_it() {
    let t = TestApp::with_limits(|l| {
        l.max_retained_events = 3;
        l.event_retention_seconds = 3600;
    });
    let a = t.create().await;
    let (first_id, _) = t.deliver_ok(&a, &json!({"n": 1})).await;
    t.send(
        post(&a.inbox)
            .json(&json!({"n": 2}))
            .header("idempotency-key", "k-2"),
    )
    .await
    .ok(StatusCode::ACCEPTED);
    t.put_state(&a, "k", &json!({"value": 1}))
        .await
        .ok(StatusCode::OK);

    // Full: deliveries and state writes are refused.
    t.deliver(&a, &json!({"n": 4}))
        .await
        .err(StatusCode::CONFLICT, "quota_exceeded");
    t.put_state(&a, "k", &json!({"value": 2}))
        .await
        .err(StatusCode::CONFLICT, "quota_exceeded");
    t.put_state(&a, "new", &json!({"value": 2}))
        .await
        .err(StatusCode::CONFLICT, "quota_exceeded");
    t.send(delete(a.key("k")).bearer(&a.token))
        .await
        .err(StatusCode::CONFLICT, "quota_exceeded");
    // A duplicate delivery still answers with its original event.
    let dup = t
        .send(
            post(&a.inbox)
                .json(&json!({"n": 2}))
                .header("idempotency-key", "k-2"),
        )
        .await;
    assert_eq!(dup.ok(StatusCode::OK)["event"]["sequence"], 2);

    // Acknowledging frees nothing.
    let page = t.events(&a, "").await;
    for e in page["events"].as_array().expect("events") {
        let id = e["id"].as_str().expect("id");
        t.send(post(a.ack(id)).bearer(&a.token))
            .await
            .ok(StatusCode::OK);
    }
    t.deliver(&a, &json!({"n": 4}))
        .await
        .err(StatusCode::CONFLICT, "quota_exceeded");
    let d = t.inspect(&a).await;
    assert_eq!(d["usage"]["retained_events"], 3);
    assert_eq!(d["usage"]["last_sequence"], 3);
    // The state value is unchanged.
    let r = t.send(get(a.key("k")).bearer(&a.token)).await;
    assert_eq!(r.ok(StatusCode::OK)["value"], 1);

    // Retention frees the quota; expired events are never returned.
    t.advance(3600);
    let page = t.events(&a, "").await;
    assert_eq!(seqs(&page), Vec::<u64>::new());
    assert_eq!(page["next_cursor"], 0);
    t.send(get(a.event(&first_id)).bearer(&a.token))
        .await
        .err(StatusCode::NOT_FOUND, "not_found");
    t.send(post(a.ack(&first_id)).bearer(&a.token))
        .await
        .err(StatusCode::NOT_FOUND, "not_found");
    let (_, seq) = t.deliver_ok(&a, &json!({"n": 4})).await;
    assert_eq!(seq, 4, "sequences continue, gapless");
    // The Idempotency-Key is forgotten with its event.
    let again = t
        .send(
            post(&a.inbox)
                .json(&json!({"n": 2}))
                .header("idempotency-key", "k-2"),
        )
        .await;
    let again = again.ok(StatusCode::ACCEPTED);
    assert_eq!(again["duplicate"], false);
    assert_eq!(again["event"]["sequence"], 5);
    let d = t.inspect(&a).await;
    assert_eq!(d["usage"]["retained_events"], 2);
    assert_eq!(d["usage"]["last_sequence"], 5);
    // The state itself does not expire with its event.
    let r = t.send(get(a.key("k")).bearer(&a.token)).await;
    assert_eq!(r.ok(StatusCode::OK)["value"], 1);
}
