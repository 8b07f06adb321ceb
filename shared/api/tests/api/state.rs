//! §7 of docs/API.md, durable state: put/get/list/delete and their feed events, compare-and-set,
//! bad requests and keys, the key-count and byte limits.

use agentaddress_core::domain::time::format_rfc3339;
use http::StatusCode;
use serde_json::{json, Value};

use crate::common::{delete, get, put, TestApp};

#[tokio::test]
async fn state_put_get_list_delete_and_their_feed_events() {
    let t = TestApp::new();
    let a = t.create().await;
    // An inbox event first, so revisions visibly follow the feed's sequence.
    t.deliver_ok(&a, &json!({"n": 1})).await;

    let empty = t.send(get(a.state()).bearer(&a.token)).await;
    assert_eq!(
        *empty.ok(StatusCode::OK),
        json!({"keys": [], "state_bytes": 0, "state_keys": 0,
               "limits": {"max_keys": 32, "max_bytes": 65536}})
    );
    t.send(get(a.key("k1")).bearer(&a.token))
        .await
        .err(StatusCode::NOT_FOUND, "not_found");

    let updated_at = format_rfc3339(t.now());
    // Compact JSON is what is stored and counted, whatever the spacing of the request.
    let r = t
        .send(
            put(a.key("k1"))
                .bearer(&a.token)
                .content_type("application/json")
                .raw(r#"{ "value" : { "a" : 1 } }"#),
        )
        .await;
    let w = r.ok(StatusCode::OK).clone();
    assert_eq!(w["key"], "k1");
    assert_eq!(w["value"], json!({"a": 1}));
    assert_eq!(w["revision"], 2);
    assert_eq!(w["updated_at"], updated_at.as_str());
    assert_eq!(w["event"]["sequence"], 2);
    let put_event_id = w["event"]["id"].as_str().expect("event id").to_owned();

    let r = t.send(get(a.key("k1")).bearer(&a.token)).await;
    assert_eq!(
        *r.ok(StatusCode::OK),
        json!({"key": "k1", "value": {"a": 1}, "revision": 2, "updated_at": updated_at})
    );

    // Any JSON value, null included; no Content-Type is accepted too.
    let r = t
        .send(
            put(a.key("task:1.step-2_x"))
                .bearer(&a.token)
                .raw(r#"{"value": null}"#),
        )
        .await;
    assert_eq!(r.ok(StatusCode::OK)["revision"], 3);
    let r = t.send(get(a.key("task:1.step-2_x")).bearer(&a.token)).await;
    let v = r.ok(StatusCode::OK);
    assert!(v.get("value").is_some_and(Value::is_null), "{v}");

    let r = t.send(get(a.state()).bearer(&a.token)).await;
    let l = r.ok(StatusCode::OK);
    assert_eq!(
        l["keys"],
        json!([
            {"key": "k1", "revision": 2, "size": 2 + 7 + 64, "updated_at": updated_at},
            {"key": "task:1.step-2_x", "revision": 3, "size": 15 + 4 + 64, "updated_at": updated_at},
        ])
    );
    assert_eq!(l["state_bytes"], 73 + 83);
    assert_eq!(l["state_keys"], 2);

    t.advance(2);
    let r = t.send(delete(a.key("k1")).bearer(&a.token)).await;
    let d = r.ok(StatusCode::OK).clone();
    assert_eq!(d["key"], "k1");
    assert_eq!(d["deleted"], true);
    assert_eq!(d["revision"], 4);
    assert_eq!(d["event"]["sequence"], 4);
    t.send(get(a.key("k1")).bearer(&a.token))
        .await
        .err(StatusCode::NOT_FOUND, "not_found");
    t.send(delete(a.key("k1")).bearer(&a.token))
        .await
        .err(StatusCode::NOT_FOUND, "not_found");

    // The feed tells the same story.
    let p = t.events(&a, "after=1").await;
    let e = p["events"].as_array().expect("events");
    assert_eq!(e.len(), 3);
    assert_eq!(e[0]["id"], put_event_id.as_str());
    assert_eq!(e[0]["sequence"], 2);
    assert_eq!(e[0]["type"], "state.updated");
    assert_eq!(e[0]["source"], "state");
    assert_eq!(e[0]["ingress_surface"], "state");
    assert_eq!(
        e[0]["data"],
        json!({"key": "k1", "revision": 2, "value": {"a": 1}})
    );
    assert!(e[0].get("http").is_none(), "{}", e[0]);
    assert_eq!(
        e[1]["data"],
        json!({"key": "task:1.step-2_x", "revision": 3, "value": null})
    );
    assert_eq!(e[2]["type"], "state.deleted");
    assert_eq!(e[2]["source"], "state");
    assert_eq!(e[2]["ingress_surface"], "state");
    assert_eq!(e[2]["data"], json!({"key": "k1", "revision": 4}));
    assert_eq!(e[2]["id"], d["event"]["id"]);
    assert!(e[2].get("http").is_none());
}

#[tokio::test]
async fn state_compare_and_set_with_if_revision_and_if_match() {
    let t = TestApp::new();
    let a = t.create().await;

    // if_revision 0: create only.
    let r = t
        .put_state(&a, "k", &json!({"value": 1, "if_revision": 0}))
        .await;
    assert_eq!(r.ok(StatusCode::OK)["revision"], 1);
    let e = t
        .put_state(&a, "k", &json!({"value": 2, "if_revision": 0}))
        .await;
    let e = e.err(StatusCode::CONFLICT, "revision_conflict");
    assert_eq!(e["current_revision"], 1);

    // if_revision N on a missing key: conflict with current_revision null.
    let e = t
        .put_state(&a, "missing", &json!({"value": 1, "if_revision": 7}))
        .await;
    let e = e.err(StatusCode::CONFLICT, "revision_conflict");
    assert_eq!(e.get("current_revision"), Some(&Value::Null), "{e}");

    // Wrong revision in the body.
    let e = t
        .put_state(&a, "k", &json!({"value": 2, "if_revision": 5}))
        .await;
    assert_eq!(
        e.err(StatusCode::CONFLICT, "revision_conflict")["current_revision"],
        1
    );
    // Right revision in the body.
    let r = t
        .put_state(&a, "k", &json!({"value": 2, "if_revision": 1}))
        .await;
    assert_eq!(r.ok(StatusCode::OK)["revision"], 2);

    // If-Match header: wrong, then right; agreeing header and body is fine.
    let r = t
        .send(
            put(a.key("k"))
                .bearer(&a.token)
                .header("if-match", "1")
                .json(&json!({"value": 3})),
        )
        .await;
    assert_eq!(
        r.err(StatusCode::CONFLICT, "revision_conflict")["current_revision"],
        2
    );
    let r = t
        .send(
            put(a.key("k"))
                .bearer(&a.token)
                .header("if-match", "2")
                .json(&json!({"value": 3})),
        )
        .await;
    assert_eq!(r.ok(StatusCode::OK)["revision"], 3);
    let r = t
        .send(
            put(a.key("k"))
                .bearer(&a.token)
                .header("if-match", "3")
                .json(&json!({"value": 4, "if_revision": 3})),
        )
        .await;
    assert_eq!(r.ok(StatusCode::OK)["revision"], 4);
    // If-Match: 0 means create only.
    let r = t
        .send(
            put(a.key("k"))
                .bearer(&a.token)
                .header("if-match", "0")
                .json(&json!({"value": 5})),
        )
        .await;
    assert_eq!(
        r.err(StatusCode::CONFLICT, "revision_conflict")["current_revision"],
        4
    );
    // Unconditional.
    let r = t.put_state(&a, "k", &json!({"value": 5})).await;
    assert_eq!(r.ok(StatusCode::OK)["revision"], 5);

    // DELETE with ?if_revision= and If-Match.
    let r = t
        .send(delete(format!("{}?if_revision=4", a.key("k"))).bearer(&a.token))
        .await;
    assert_eq!(
        r.err(StatusCode::CONFLICT, "revision_conflict")["current_revision"],
        5
    );
    let r = t
        .send(delete(a.key("k")).bearer(&a.token).header("if-match", "4"))
        .await;
    assert_eq!(
        r.err(StatusCode::CONFLICT, "revision_conflict")["current_revision"],
        5
    );
    let r = t
        .send(delete(format!("{}?if_revision=5", a.key("k"))).bearer(&a.token))
        .await;
    assert_eq!(r.ok(StatusCode::OK)["revision"], 6);

    t.put_state(&a, "j", &json!({"value": 1}))
        .await
        .ok(StatusCode::OK);
    let r = t
        .send(delete(a.key("j")).bearer(&a.token).header("if-match", "7"))
        .await;
    let d = r.ok(StatusCode::OK);
    assert_eq!(d["revision"], 8);
    assert_eq!(d["deleted"], true);

    // Conflicts appended nothing: 8 events for 8 successful writes.
    assert_eq!(t.inspect(&a).await["usage"]["last_sequence"], 8);
}

#[tokio::test]
async fn state_rejects_bad_requests_with_400() {
    let t = TestApp::new();
    let a = t.create().await;
    t.put_state(&a, "k", &json!({"value": 1}))
        .await
        .ok(StatusCode::OK);

    let bad_bodies = [
        "",
        "{",
        "[]",
        "5",
        "null",
        r#"{"value": 1"#,
        r#"{"if_revision": 1}"#,
        r#"{"Value": 1}"#,
        r#"{"value": 1, "if_revision": "1"}"#,
        r#"{"value": 1, "if_revision": -1}"#,
        r#"{"value": 1, "if_revision": 1.5}"#,
        r#"{"value": 1, "if_revision": true}"#,
        r#"{"value": 1, "if_revision": 99999999999999999999999}"#,
        r#"{"value": 1, "if_revision": 1e400}"#,
        r#"{"value": 1}{"value": 2}"#,
    ];
    for body in bad_bodies {
        let r = t
            .send(
                put(a.key("k"))
                    .bearer(&a.token)
                    .content_type("application/json")
                    .raw(body),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body:?}: {}", r.text);
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
    }

    // If-Match that is not a revision number, and If-Match disagreeing with if_revision.
    for bad in [
        "abc",
        "-1",
        "1.5",
        "*",
        "W/\"1\"",
        "99999999999999999999999",
    ] {
        let r = t
            .send(
                put(a.key("k"))
                    .bearer(&a.token)
                    .header("if-match", bad)
                    .json(&json!({"value": 2})),
            )
            .await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "If-Match {bad}: {}",
            r.text
        );
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
        let r = t
            .send(delete(a.key("k")).bearer(&a.token).header("if-match", bad))
            .await;
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
    }
    let r = t
        .send(
            put(a.key("k"))
                .bearer(&a.token)
                .header("if-match", "1")
                .json(&json!({"value": 2, "if_revision": 2})),
        )
        .await;
    r.err(StatusCode::BAD_REQUEST, "invalid_request");
    let r = t
        .send(
            delete(format!("{}?if_revision=2", a.key("k")))
                .bearer(&a.token)
                .header("if-match", "1"),
        )
        .await;
    r.err(StatusCode::BAD_REQUEST, "invalid_request");
    for q in [
        "if_revision=abc",
        "if_revision=-1",
        "if_revision=1.5",
        "if_revision=",
        "if_revision=1&if_revision=1",
    ] {
        let r = t
            .send(delete(format!("{}?{q}", a.key("k"))).bearer(&a.token))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "?{q}: {}", r.text);
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
    }

    // Nothing changed.
    let r = t.send(get(a.key("k")).bearer(&a.token)).await;
    let v = r.ok(StatusCode::OK);
    assert_eq!(
        (v["value"].clone(), v["revision"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(t.inspect(&a).await["usage"]["last_sequence"], 1);
}

#[tokio::test]
async fn state_put_with_a_non_json_content_type_is_415() {
    let t = TestApp::new();
    let a = t.create().await;
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/octet-stream",
    ] {
        let r = t
            .send(
                put(a.key("k"))
                    .bearer(&a.token)
                    .content_type(ct)
                    .raw(r#"{"value": 1}"#),
            )
            .await;
        r.err(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type");
    }
    // JSON content types with parameters or a +json suffix are fine.
    for ct in [
        "application/json; charset=utf-8",
        "application/merge-patch+json",
    ] {
        let r = t
            .send(
                put(a.key("k"))
                    .bearer(&a.token)
                    .content_type(ct)
                    .raw(r#"{"value": 1}"#),
            )
            .await;
        r.ok(StatusCode::OK);
    }
}

#[tokio::test]
async fn state_rejects_bad_keys_with_400() {
    let t = TestApp::new();
    let a = t.create().await;
    let bad_keys = [
        "k".repeat(129),
        "a%20b".into(),
        "a%2Fb".into(),
        "a+b".into(),
        "a%40b".into(),
        "a%2Ab".into(),
        "%C3%A9".into(),
        "a%00b".into(),
        "a%22b".into(),
        "~tilde".into(),
    ];
    for key in &bad_keys {
        let r = t.put_state(&a, key, &json!({"value": 1})).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "PUT {key}: {}", r.text);
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
        let r = t.send(get(a.key(key)).bearer(&a.token)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "GET {key}: {}", r.text);
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
        let r = t.send(delete(a.key(key)).bearer(&a.token)).await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "DELETE {key}: {}",
            r.text
        );
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
    }
    // 128 characters and every allowed character are fine.
    let long = "k".repeat(128);
    t.put_state(&a, &long, &json!({"value": 1}))
        .await
        .ok(StatusCode::OK);
    t.put_state(&a, "AZaz09._:-", &json!({"value": 1}))
        .await
        .ok(StatusCode::OK);
    let r = t.send(get(a.key("AZaz09._:-")).bearer(&a.token)).await;
    assert_eq!(r.ok(StatusCode::OK)["key"], "AZaz09._:-");
    assert_eq!(t.inspect(&a).await["usage"]["state_keys"], 2);
}

#[tokio::test]
async fn state_key_count_limit() {
    let t = TestApp::with_limits(|l| l.max_state_keys = 2);
    let a = t.create().await;
    t.put_state(&a, "k1", &json!({"value": 1}))
        .await
        .ok(StatusCode::OK);
    t.put_state(&a, "k2", &json!({"value": 2}))
        .await
        .ok(StatusCode::OK);
    t.put_state(&a, "k3", &json!({"value": 3}))
        .await
        .err(StatusCode::CONFLICT, "state_limit_exceeded");
    // Overwriting an existing key is fine at the limit.
    t.put_state(&a, "k2", &json!({"value": 22}))
        .await
        .ok(StatusCode::OK);
    // Freeing a key makes room.
    t.send(delete(a.key("k1")).bearer(&a.token))
        .await
        .ok(StatusCode::OK);
    t.put_state(&a, "k3", &json!({"value": 3}))
        .await
        .ok(StatusCode::OK);
    let r = t.send(get(a.state()).bearer(&a.token)).await;
    let l = r.ok(StatusCode::OK);
    assert_eq!(l["state_keys"], 2);
    assert_eq!(l["limits"], json!({"max_keys": 2, "max_bytes": 65536}));
    // 5 successful writes, no event for the refused one.
    assert_eq!(t.inspect(&a).await["usage"]["last_sequence"], 5);
}

#[tokio::test]
async fn state_byte_limit_and_values_that_can_never_fit() {
    let t = TestApp::with_limits(|l| l.max_state_bytes = 200);
    let a = t.create().await;
    let s = |n: usize| json!({"value": "x".repeat(n)});

    // "a" + a 133-character string (135 bytes of JSON) + 64 = 200: exactly fits.
    t.put_state(&a, "a", &s(133)).await.ok(StatusCode::OK);
    // Any other key now breaks the byte limit.
    t.put_state(&a, "b", &json!({"value": 1}))
        .await
        .err(StatusCode::CONFLICT, "state_limit_exceeded");
    // 201 bytes alone can never fit.
    t.put_state(&a, "a", &s(134))
        .await
        .err(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    t.put_state(&a, "c", &s(1000))
        .await
        .err(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    // Replacing counts the new size, not both.
    t.put_state(&a, "a", &s(53)).await.ok(StatusCode::OK); // 120 bytes
    t.put_state(&a, "b", &s(13)).await.ok(StatusCode::OK); // 80 bytes: 200 in all
    t.put_state(&a, "b", &s(14))
        .await
        .err(StatusCode::CONFLICT, "state_limit_exceeded");
    let r = t.send(get(a.state()).bearer(&a.token)).await;
    let l = r.ok(StatusCode::OK);
    assert_eq!(l["state_bytes"], 200);
    assert_eq!(l["state_keys"], 2);
    assert_eq!(l["keys"][0]["size"], 120);
    assert_eq!(l["keys"][1]["size"], 80);
    assert_eq!(l["limits"]["max_bytes"], 200);
    // The refused writes changed nothing.
    let r = t.send(get(a.key("b")).bearer(&a.token)).await;
    assert_eq!(r.ok(StatusCode::OK)["value"], "x".repeat(13));
    assert_eq!(t.inspect(&a).await["usage"]["last_sequence"], 3);

    // A declared Content-Length far over anything acceptable is 413 before reading.
    let r = t
        .send(
            put(a.key("a"))
                .bearer(&a.token)
                .content_type("application/json")
                .header("content-length", "1000000000")
                .raw(r#"{"value": 1}"#),
        )
        .await;
    r.err(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
}
