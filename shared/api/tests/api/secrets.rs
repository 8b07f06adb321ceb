//! Secrets (the read token and the inbox secret) appear only in the create response.

use http::StatusCode;
use serde_json::json;

use crate::common::{addr_of, delete, fresh_ip, get, post, put, Resp, TestApp, CREATE};

#[tokio::test]
async fn secrets_appear_only_in_the_create_response() {
    let t = TestApp::new();
    let r = t
        .send(post(CREATE).ip(&fresh_ip()).json(&json!({"name": "n"})))
        .await;
    let created = r.ok(StatusCode::CREATED).clone();
    let a = addr_of(&created);
    assert!(r.text.contains(&a.token) && r.text.contains(&a.inbox_secret));

    let mut seen: Vec<(String, Resp)> = Vec::new();
    let mut record = |what: &str, r: Resp| seen.push((what.to_owned(), r));
    let (event_id, _) = t.deliver_ok(&a, &json!({"type": "t", "data": 1})).await;
    record(
        "deliver",
        t.send(
            post(&a.inbox)
                .json(&json!({"x": 1}))
                .header("idempotency-key", "same"),
        )
        .await,
    );
    record(
        "duplicate",
        t.send(
            post(&a.inbox)
                .json(&json!({"x": 1}))
                .header("idempotency-key", "same"),
        )
        .await,
    );
    record(
        "reused key",
        t.send(
            post(&a.inbox)
                .json(&json!({"x": 2}))
                .header("idempotency-key", "same"),
        )
        .await,
    );
    record("inspect", t.send(get(&a.root).bearer(&a.token)).await);
    record("events", t.send(get(a.events()).bearer(&a.token)).await);
    record(
        "event",
        t.send(get(a.event(&event_id)).bearer(&a.token)).await,
    );
    record("ack", t.send(post(a.ack(&event_id)).bearer(&a.token)).await);
    record(
        "put",
        t.send(put(a.key("k")).bearer(&a.token).json(&json!({"value": 1})))
            .await,
    );
    record(
        "conflict",
        t.send(
            put(a.key("k"))
                .bearer(&a.token)
                .json(&json!({"value": 1, "if_revision": 0})),
        )
        .await,
    );
    record("get state", t.send(get(a.key("k")).bearer(&a.token)).await);
    record("list state", t.send(get(a.state()).bearer(&a.token)).await);
    record(
        "delete state",
        t.send(delete(a.key("k")).bearer(&a.token)).await,
    );
    record(
        "bad key",
        t.send(get(a.key("a%20b")).bearer(&a.token)).await,
    );
    record(
        "bad query",
        t.send(get(format!("{}?after=x", a.events())).bearer(&a.token))
            .await,
    );
    record(
        "wrong token on another id",
        t.send(get("/api/v1/addresses/addr_x").bearer(&a.token))
            .await,
    );
    record(
        "basic",
        t.send(get(&a.root).header("authorization", format!("Basic {}", a.token)))
            .await,
    );
    record(
        "inbox secret as token",
        t.send(get(&a.root).bearer(&a.inbox_secret)).await,
    );
    record(
        "secret on another id",
        t.send(post(format!("/api/v1/inbox/addr_other/{}", a.inbox_secret)).json(&json!({})))
            .await,
    );
    record(
        "inbox with token",
        t.send(post(format!("/api/v1/inbox/{}/{}", a.id, a.token)).json(&json!({})))
            .await,
    );
    record("405 on inbox", t.send(get(&a.inbox)).await);
    record(
        "404 below inbox",
        t.send(post(format!("{}/x", a.inbox))).await,
    );
    record("openapi", t.send(get("/openapi.json")).await);
    record("skill", t.send(get("/skill.md")).await);
    record("delete", t.send(delete(&a.root).bearer(&a.token)).await);
    record("gone", t.send(get(&a.root).bearer(&a.token)).await);
    record("gone inbox", t.send(post(&a.inbox).json(&json!({}))).await);

    for (what, r) in &seen {
        for (name, secret) in [("read token", &a.token), ("inbox secret", &a.inbox_secret)] {
            assert!(
                !r.text.contains(secret.as_str()),
                "{what} echoed the {name}: {}",
                r.text
            );
            for (h, v) in &r.headers {
                let v = String::from_utf8_lossy(v.as_bytes());
                assert!(
                    !v.contains(secret.as_str()),
                    "{what} header {h} echoed the {name}"
                );
            }
        }
    }
    assert!(seen.len() > 20);
}
