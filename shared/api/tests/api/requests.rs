//! Requests for a person (docs/API.md §12): creation and its checks, the person's page and its
//! form, the first answer winning, expiry without a timer (the manual clock), and what the page
//! must never do with untrusted text.

use agentaddress_core::store::prelude::*;
use http::StatusCode;
use serde_json::{json, Value};

use crate::common::*;

fn requests(a: &Addr) -> String {
    format!("{}/requests", a.root)
}

/// The path of a request's page URL (`http://host/r/…` → `/r/…`).
fn page_path(url: &str) -> String {
    let at = url.find("/r/").expect("a page URL holds /r/");
    url[at..].to_owned()
}

async fn ask(app: &TestApp, a: &Addr, body: &Value) -> Value {
    let r = app
        .send(post(requests(a)).bearer(&a.token).json(body))
        .await;
    r.ok(StatusCode::CREATED)["request"].clone()
}

fn form(path: &str, fields: &str) -> Req {
    post(path)
        .content_type("application/x-www-form-urlencoded")
        .raw(fields.as_bytes().to_vec())
}

#[tokio::test]
async fn a_request_is_created_answered_once_and_read_back() {
    let app = TestApp::new();
    let a = app.create().await;
    let r = ask(
        &app,
        &a,
        &json!({"title": "Ship it?", "body": "The *build* passed.", "options": ["Yes", "No"]}),
    )
    .await;
    let id = r["id"].as_str().expect("id").to_owned();
    assert!(id.starts_with("req_"), "{r}");
    assert_eq!(r["status"], "open");
    assert_eq!(r["options"], json!(["Yes", "No"]));
    assert_eq!(r["comment"], "optional");
    assert_eq!(r["answer"], Value::Null);
    let url = r["url"].as_str().expect("url");
    assert!(url.contains(&format!("/r/{id}/ars_")), "{url}");
    let page = page_path(url);

    // The page: the question and one button per option.
    let p = app.send(get(&page)).await;
    assert_eq!(p.status, StatusCode::OK);
    assert_eq!(p.header("content-type"), Some("text/html; charset=utf-8"));
    assert!(p.text.contains("Ship it?"), "{}", p.text);
    assert!(
        p.text.contains("<em>build</em>"),
        "Markdown rendered: {}",
        p.text
    );
    assert!(
        p.text.contains(r#"name="choice" value="Yes""#),
        "{}",
        p.text
    );

    // The answer: 303 to the page, one event in the feed.
    let answered = app
        .send(form(&page, "choice=No&comment=Not+on+a+Friday"))
        .await;
    assert_eq!(answered.status, StatusCode::SEE_OTHER, "{}", answered.text);
    assert_eq!(answered.header("location"), Some(page.as_str()));
    let feed = app.events(&a, "after=0").await;
    let events = feed["events"].as_array().expect("events");
    assert_eq!(events.len(), 1, "{feed}");
    let e = &events[0];
    assert_eq!(e["type"], "request.answered");
    assert_eq!(e["ingress_surface"], "request");
    assert_eq!(e["source"], id.as_str());
    assert_eq!(e["data"]["request_id"], id.as_str());
    assert_eq!(e["data"]["choice"], "No");
    assert_eq!(e["data"]["comment"], "Not on a Friday");

    // A second answer changes nothing; the page shows the decision and no form.
    let again = app.send(form(&page, "choice=Yes")).await;
    assert_eq!(again.status, StatusCode::SEE_OTHER);
    let json_again = app.send(post(&page).json(&json!({"choice": "Yes"}))).await;
    json_again.err(StatusCode::CONFLICT, "request_closed");
    assert_eq!(
        app.events(&a, "after=0").await["events"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    let p = app.send(get(&page)).await;
    assert!(
        p.text.contains("Answered: <strong>No</strong>"),
        "{}",
        p.text
    );
    assert!(!p.text.contains("<form"), "{}", p.text);

    // The API shows the answer, and never the URL again.
    let got = app
        .send(get(format!("{}/{id}", requests(&a))).bearer(&a.token))
        .await;
    let got = &got.ok(StatusCode::OK)["request"];
    assert_eq!(got["status"], "answered");
    assert_eq!(got["answer"]["choice"], "No");
    assert_eq!(got["answer"]["comment"], "Not on a Friday");
    assert!(got.get("url").is_none(), "{got}");
}

#[tokio::test]
async fn the_page_carries_its_headers_and_escapes_everything() {
    let app = TestApp::new();
    let a = app.create().await;
    let hostile = "<script>window.__pwned=1</script>\n\n<img src=x onerror=alert(1)>\n\n\
                   [click](javascript:alert(1)) and ![x](https://tracker.example/p.png)";
    let r = ask(
        &app,
        &a,
        &json!({"title": "<b>bold</b> \"title\"", "body": hostile,
                "options": ["<i>yes</i>", "no\"><script>"]}),
    )
    .await;
    let page = page_path(r["url"].as_str().expect("url"));
    let p = app.send(get(&page)).await;
    assert_eq!(
        p.header("content-security-policy"),
        Some("default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
    );
    assert_eq!(p.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(p.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(p.header("cache-control"), Some("no-store"));
    // One script, the page's own (docs/API.md §12): none from the request.
    assert_eq!(p.text.matches("<script").count(), 1, "{}", p.text);
    assert!(
        p.text
            .contains(r#"<script src="/r/page.js" defer></script></head>"#),
        "{}",
        p.text
    );
    for bad in [
        "<script>",
        "<img",
        "<b>",
        "<i>",
        "href=\"javascript",
        "tracker.example",
        "<img src=x onerror",
    ] {
        assert!(
            !p.text.contains(bad),
            "{bad} reached the page unescaped: {}",
            p.text
        );
    }
    assert!(p.text.contains("&lt;script&gt;"), "{}", p.text);
    assert!(
        p.text.contains("<p>click and x</p>"),
        "links and images as text: {}",
        p.text
    );
    assert!(p.text.contains("&lt;b&gt;bold&lt;/b&gt;"), "{}", p.text);
    // An option is an attribute value and a text, escaped in both.
    assert!(
        p.text.contains(r#"value="no&quot;&gt;&lt;script&gt;""#),
        "{}",
        p.text
    );
    // The stylesheet and the script are ours, under the pages' headers.
    let css = app.send(get("/r/page.css")).await;
    assert_eq!(css.status, StatusCode::OK);
    assert_eq!(css.header("content-type"), Some("text/css; charset=utf-8"));
    assert!(css.text.contains(".options"), "{}", css.text);
    assert!(
        css.text.contains("--accent"),
        "the viewer's rules: {}",
        css.text
    );
    let js = app.send(get("/r/page.js")).await;
    assert_eq!(js.status, StatusCode::OK);
    assert_eq!(
        js.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    assert_eq!(js.header("x-content-type-options"), Some("nosniff"));
    assert!(js.text.contains("time[datetime]"), "{}", js.text);
}

/// The page names who asks, the address's name, escaped; an address without a name, nobody.
#[tokio::test]
async fn the_page_names_the_asker() {
    let app = TestApp::new();
    for (name, shown) in [
        (
            json!("deploy <b>watcher</b>"),
            Some("<p class=\"asker\">deploy &lt;b&gt;watcher&lt;/b&gt; asks:</p>"),
        ),
        (Value::Null, None),
    ] {
        let (_, a) = app.create_with(&json!({"name": name})).await;
        let r = ask(&app, &a, &json!({"title": "Q"})).await;
        let p = app
            .send(get(page_path(r["url"].as_str().expect("url"))))
            .await;
        assert_eq!(p.status, StatusCode::OK);
        match shown {
            Some(html) => assert!(p.text.contains(html), "{}", p.text),
            None => assert!(!p.text.contains("asks:"), "{}", p.text),
        }
    }
}

#[tokio::test]
async fn a_wrong_secret_or_unknown_request_is_the_same_plain_404() {
    let app = TestApp::new();
    let a = app.create().await;
    let r = ask(&app, &a, &json!({"title": "Q"})).await;
    let id = r["id"].as_str().expect("id");
    let page = page_path(r["url"].as_str().expect("url"));
    let wrong = format!("/r/{id}/ars_{}", "A".repeat(43));
    let unknown = format!("/r/req_unknown/{}", page.rsplit('/').next().unwrap_or(""));
    let mut bodies = Vec::new();
    for path in [wrong.as_str(), unknown.as_str(), "/r/req_x/not..valid"] {
        let p = app.send(get(path)).await;
        assert_eq!(p.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(p.header("referrer-policy"), Some("no-referrer"));
        bodies.push(p.text);
        let answered = app.send(form(path, "choice=Approve")).await;
        assert_eq!(answered.status, StatusCode::NOT_FOUND, "{path}");
    }
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "the 404s differ");
    assert!(!bodies[0].contains(id), "the 404 names nothing");
    assert!(
        app.events(&a, "after=0").await["events"]
            .as_array()
            .is_some_and(Vec::is_empty),
        "nothing was answered"
    );
    // Another address's token cannot read it.
    let b = app.create().await;
    app.send(get(format!("{}/{id}", requests(&b))).bearer(&b.token))
        .await
        .err(StatusCode::NOT_FOUND, "not_found");
    app.send(get(format!("{}/{id}", requests(&a))).bearer(&b.token))
        .await
        .err(StatusCode::UNAUTHORIZED, "unauthorized");
}

#[tokio::test]
async fn bad_requests_are_refused_with_the_field_named() {
    let app = TestApp::with_limits(|l| l.max_open_requests = 2);
    let a = app.create().await;
    for (body, field) in [
        (json!({}), "title"),
        (json!({"title": ""}), "title"),
        (json!({"title": "x".repeat(201)}), "title"),
        (json!({"title": "a\u{202e}b"}), "title"),
        (json!({"title": "ok", "body": "x".repeat(20_001)}), "body"),
        (json!({"title": "ok", "body": "a\u{0007}"}), "body"),
        (json!({"title": "ok", "options": []}), "options"),
        (
            json!({"title": "ok", "options": ["a", "b", "c", "d", "e", "f"]}),
            "options",
        ),
        (json!({"title": "ok", "options": ["a", "a"]}), "options"),
        (
            json!({"title": "ok", "options": ["x".repeat(41)]}),
            "options",
        ),
        (json!({"title": "ok", "options": [1]}), "options"),
        (json!({"title": "ok", "comment": "maybe"}), "comment"),
        (
            json!({"title": "ok", "expires_in_seconds": 59}),
            "expires_in_seconds",
        ),
        (
            json!({"title": "ok", "expires_in_seconds": 2_592_001}),
            "expires_in_seconds",
        ),
    ] {
        let r = app
            .send(post(requests(&a)).bearer(&a.token).json(&body))
            .await;
        let e = r.err(StatusCode::BAD_REQUEST, "invalid_request");
        let message = e["message"].as_str().unwrap_or("");
        assert!(message.contains(field), "{body} → {message}");
    }
    // Not JSON.
    app.send(
        post(requests(&a))
            .bearer(&a.token)
            .content_type("text/plain")
            .raw(b"title=x".to_vec()),
    )
    .await
    .err(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type");
    // The open-request limit.
    ask(&app, &a, &json!({"title": "one"})).await;
    ask(&app, &a, &json!({"title": "two"})).await;
    app.send(
        post(requests(&a))
            .bearer(&a.token)
            .json(&json!({"title": "three"})),
    )
    .await
    .err(StatusCode::CONFLICT, "quota_exceeded");
}

#[tokio::test]
async fn a_retried_creation_gets_the_same_request_and_url() {
    let app = TestApp::new();
    let a = app.create().await;
    let body = json!({"title": "Same?"});
    let send = |key: &'static str, body: Value| {
        let (app, a) = (&app, &a);
        async move {
            app.send(
                post(requests(a))
                    .bearer(&a.token)
                    .header("idempotency-key", key)
                    .json(&body),
            )
            .await
        }
    };
    let first = send("k-1", body.clone()).await;
    let first = first.ok(StatusCode::CREATED).clone();
    let again = send("k-1", body.clone()).await;
    let again = again.ok(StatusCode::OK);
    assert_eq!(again["request"]["id"], first["request"]["id"]);
    assert_eq!(again["request"]["url"], first["request"]["url"]);
    send("k-1", json!({"title": "Other?"}))
        .await
        .err(StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused");
    let other = send("k-2", body).await;
    assert_ne!(
        other.ok(StatusCode::CREATED)["request"]["url"],
        first["request"]["url"]
    );
}

#[tokio::test]
async fn a_wrong_answer_shows_the_form_again_and_records_nothing() {
    let app = TestApp::new();
    let a = app.create().await;
    let r = ask(&app, &a, &json!({"title": "Why?", "comment": "required"})).await;
    let page = page_path(r["url"].as_str().expect("url"));
    for (fields, reason) in [
        ("choice=Approve", "A comment is required."),
        (
            "choice=Maybe&comment=x",
            "Choose one of the request's options.",
        ),
        ("comment=x", "choice"),
    ] {
        let p = app.send(form(&page, fields)).await;
        assert_eq!(p.status, StatusCode::OK, "{fields}");
        assert!(p.text.contains(reason), "{fields}: {}", p.text);
        assert!(p.text.contains("<form"), "the form again: {}", p.text);
    }
    app.send(post(&page).json(&json!({"choice": "Approve"})))
        .await
        .err(StatusCode::BAD_REQUEST, "invalid_request");
    let none = ask(&app, &a, &json!({"title": "No comment", "comment": "none"})).await;
    let none_page = page_path(none["url"].as_str().expect("url"));
    let p = app.send(get(&none_page)).await;
    assert!(!p.text.contains("<textarea"), "{}", p.text);
    let p = app
        .send(form(&none_page, "choice=Approve&comment=sneaky"))
        .await;
    assert!(
        p.text.contains("This request takes no comment."),
        "{}",
        p.text
    );
    assert!(
        app.events(&a, "after=0").await["events"]
            .as_array()
            .is_some_and(Vec::is_empty),
        "nothing was recorded"
    );
}

#[tokio::test]
async fn an_expired_request_gets_its_event_before_the_feed_is_read() {
    let app = TestApp::new();
    let a = app.create().await;
    let r = ask(
        &app,
        &a,
        &json!({"title": "Soon?", "expires_in_seconds": 60}),
    )
    .await;
    let id = r["id"].as_str().expect("id");
    let page = page_path(r["url"].as_str().expect("url"));
    app.advance(59);
    assert!(
        app.events(&a, "after=0").await["events"]
            .as_array()
            .is_some_and(Vec::is_empty),
        "not yet"
    );
    app.advance(1);
    let feed = app.events(&a, "after=0").await;
    let events = feed["events"].as_array().expect("events");
    assert_eq!(events.len(), 1, "{feed}");
    assert_eq!(events[0]["type"], "request.expired");
    assert_eq!(events[0]["data"], json!({"request_id": id}));
    // Read again: still one.
    assert_eq!(
        app.events(&a, "after=0").await["events"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    let got = app
        .send(get(format!("{}/{id}", requests(&a))).bearer(&a.token))
        .await;
    assert_eq!(got.ok(StatusCode::OK)["request"]["status"], "expired");
    let p = app.send(get(&page)).await;
    assert!(p.text.contains("expired"), "{}", p.text);
    app.send(post(&page).json(&json!({"choice": "Approve"})))
        .await
        .err(StatusCode::CONFLICT, "request_closed");
}

#[tokio::test]
async fn reading_a_request_appends_its_due_expiry_too() {
    let app = TestApp::new();
    let a = app.create().await;
    let r = ask(
        &app,
        &a,
        &json!({"title": "Soon?", "expires_in_seconds": 60}),
    )
    .await;
    let id = r["id"].as_str().expect("id");
    app.advance(61);
    let got = app
        .send(get(format!("{}/{id}", requests(&a))).bearer(&a.token))
        .await;
    assert_eq!(got.ok(StatusCode::OK)["request"]["status"], "expired");
    // The event is there without a feed read having appended it.
    let page = app
        .store
        .read_events(&a.id, 0, 10, u64::MAX, app.now())
        .await
        .expect("read");
    assert_eq!(page.events.len(), 1);
    assert_eq!(page.events[0].event_type, "request.expired");
}

/// Appends after an expiry come after its `request.expired`, whoever touches the address first
/// (a sender, a state write or delete): the feed is in the order things happened.
#[tokio::test]
async fn an_expiry_comes_before_what_is_appended_after_it() {
    let app = TestApp::new();
    let a = app.create().await;
    let touch: [&str; 3] = ["deliver", "put", "delete"];
    let mut expected = Vec::new();
    app.put_state(&a, "k", &json!({"value": 1}))
        .await
        .ok(StatusCode::OK);
    expected.push("state.updated".to_owned());
    for how in touch {
        let r = ask(&app, &a, &json!({"title": how, "expires_in_seconds": 60})).await;
        let id = r["id"].as_str().expect("id").to_owned();
        app.advance(61);
        match how {
            "deliver" => {
                app.deliver_ok(&a, &json!({"type": "after.expiry"})).await;
                expected.push(format!("request.expired {id}"));
                expected.push("after.expiry".to_owned());
            }
            "put" => {
                app.put_state(&a, "k", &json!({"value": 2}))
                    .await
                    .ok(StatusCode::OK);
                expected.push(format!("request.expired {id}"));
                expected.push("state.updated".to_owned());
            }
            _ => {
                app.send(delete(a.key("k")).bearer(&a.token))
                    .await
                    .ok(StatusCode::OK);
                expected.push(format!("request.expired {id}"));
                expected.push("state.deleted".to_owned());
            }
        }
    }
    let feed = app.events(&a, "after=0").await;
    let got: Vec<String> = feed["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| match e["type"].as_str() {
            Some("request.expired") => format!(
                "request.expired {}",
                e["data"]["request_id"].as_str().unwrap_or_default()
            ),
            other => other.unwrap_or_default().to_owned(),
        })
        .collect();
    assert_eq!(got, expected, "{feed}");
}

#[tokio::test]
async fn the_sweeper_expires_requests_of_idle_addresses() {
    let app = TestApp::new();
    let a = app.create().await;
    let r = ask(
        &app,
        &a,
        &json!({"title": "Idle?", "expires_in_seconds": 60}),
    )
    .await;
    app.advance(61);
    // Nobody reads the feed; the embedded store's sweeper appends the event.
    app.store
        .sweep(&app.limits, app.now())
        .await
        .expect("sweep");
    let page = app
        .store
        .read_events(&a.id, 0, 10, u64::MAX, app.now())
        .await
        .expect("read");
    assert_eq!(page.events.len(), 1);
    assert_eq!(page.events[0].event_type, "request.expired");
    assert!(page.events[0].data.contains(r["id"].as_str().expect("id")));
    // And it does not append it again.
    app.store
        .sweep(&app.limits, app.now())
        .await
        .expect("sweep");
    assert_eq!(
        app.events(&a, "after=0").await["events"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

#[tokio::test]
async fn a_long_poll_wakes_when_a_request_expires() {
    // The poll waits on the store's signal; the request expires 1 s into it (real time: the
    // wait is real, the request's expiry is set from the manual clock's start).
    let app = TestApp::new();
    let a = app.create().await;
    let r = ask(
        &app,
        &a,
        &json!({"title": "Wake?", "expires_in_seconds": 60}),
    )
    .await;
    // 59 s of the request's minute pass on the manual clock; the last one passes in real time
    // while the poll waits (the poll computes its wake-up from the expiry and the clock).
    app.advance(59);
    let started = std::time::Instant::now();
    let advance = {
        let clock = app.clock.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(1_000)).await;
            clock.advance_secs(1);
        })
    };
    let feed = app.events(&a, "after=0&wait=5").await;
    advance.await.expect("advance task");
    let events = feed["events"].as_array().expect("events");
    assert_eq!(events.len(), 1, "{feed}");
    assert_eq!(events[0]["type"], "request.expired");
    assert_eq!(events[0]["data"]["request_id"], r["id"]);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(4),
        "woken at the expiry, not at the end of the wait: {:?}",
        started.elapsed()
    );
}
