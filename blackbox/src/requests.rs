//! Requests for a person over HTTP (docs/API.md §12), for any deployment: an agent waits on its
//! feed while a person answers on the page; the page shows the decision afterwards; of many
//! concurrent answers exactly one is recorded.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::{Address, Client, Resp};

/// `POST {root}/requests` with `body`, expecting 201; the request.
pub async fn ask(c: &Client, a: &Address, body: &Value) -> Value {
    let r = c
        .json(
            "POST",
            &format!("{}/requests", a.root),
            Some(&a.token),
            body,
        )
        .await;
    r.expect_status(201, "create a request");
    r.json["request"].clone()
}

/// A client that shows redirects instead of following them (the form's 303).
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(40))
        .build()
        .expect("cannot build an HTTP client")
}

/// Sends the page's form to `url` as a browser would.
pub async fn answer_form(url: &str, fields: &[(&str, &str)]) -> reqwest::Response {
    let body: String = fields
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    no_redirects()
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST the form to {url}: {e}"))
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            b' ' => "+".to_owned(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The agent waits on its feed; the person opens the page and answers with a comment; the
/// waiting poll returns `request.answered` with that choice; the page then shows the decision
/// and no form; the API shows the answer.
pub async fn a_person_answers_while_the_agent_waits(c: &Client) {
    let a = c.new_address().await;
    let r = ask(
        c,
        &a,
        &json!({"title": "Deploy v2?", "body": "Release notes: **all green**.",
                "options": ["Ship it", "Hold"]}),
    )
    .await;
    let url = r["url"].as_str().unwrap_or_default().to_owned();
    let id = r["id"].as_str().unwrap_or_default().to_owned();
    assert!(
        url.starts_with(&c.base),
        "the page is on this deployment: {url}"
    );

    let poll = {
        let (c, a) = (c.clone(), a.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let r = c.events(&a, "after=0&wait=20").await;
            (r, started.elapsed())
        })
    };
    // ... and on the request itself (docs/API.md §21).
    let wait = {
        let (c, path) = (c.clone(), format!("{}/requests/{id}?wait=20", a.root));
        let token = a.token.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let r = c.get(&path, Some(&token)).await;
            (r, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    let page = c.get(&url, None).await;
    page.expect_status(200, "the page");
    assert!(page.text.contains("Deploy v2?"), "{}", page.text);
    assert!(
        page.text.contains("<strong>all green</strong>"),
        "{}",
        page.text
    );
    assert_eq!(
        page.headers
            .get("referrer-policy")
            .and_then(|v| v.to_str().ok()),
        Some("no-referrer")
    );
    let answered = answer_form(
        &url,
        &[("choice", "Hold"), ("comment", "wait for QA & docs")],
    )
    .await;
    assert_eq!(answered.status(), 303, "the form answers See Other");

    let (feed, waited) = poll.await.expect("poll task");
    let feed: &Resp = &feed;
    feed.expect_status(200, "the waiting poll");
    assert!(
        waited < Duration::from_secs(10),
        "woken by the answer after {waited:?}"
    );
    let e = &feed.json["events"][0];
    assert_eq!(e["type"], "request.answered", "{}", feed.text);
    assert_eq!(e["data"]["request_id"], id.as_str());
    assert_eq!(e["data"]["choice"], "Hold");
    assert_eq!(e["data"]["comment"], "wait for QA & docs");

    let (r, waited) = wait.await.expect("wait task");
    r.expect_status(200, "the request's wait");
    assert!(
        waited < Duration::from_secs(10),
        "the wait answered after {waited:?}"
    );
    assert_eq!(r.json["request"]["status"], "answered", "{}", r.text);
    assert_eq!(r.json["request"]["answer"]["choice"], "Hold");

    let page = c.get(&url, None).await;
    page.expect_status(200, "the page after the answer");
    assert!(page.text.contains("Hold"), "{}", page.text);
    assert!(
        !page.text.contains("<form"),
        "no form once answered: {}",
        page.text
    );
    let got = c
        .get(&format!("{}/requests/{id}", a.root), Some(&a.token))
        .await;
    got.expect_status(200, "read the request");
    assert_eq!(got.json["request"]["status"], "answered");
    assert_eq!(got.json["request"]["answer"]["choice"], "Hold");
}

/// Many people answer at once: one answer is recorded, the others are told it is closed, and
/// the feed holds one `request.answered`.
pub async fn concurrent_answers_record_one(c: &Client, answers: usize) {
    let a = c.new_address().await;
    let r = ask(c, &a, &json!({"title": "Who is first?"})).await;
    let url = r["url"].as_str().unwrap_or_default().to_owned();
    let tasks: Vec<_> = (0..answers)
        .map(|n| {
            let (c, url) = (c.clone(), url.clone());
            let choice = if n % 2 == 0 { "Approve" } else { "Reject" };
            tokio::spawn(async move {
                c.json(
                    "POST",
                    &url,
                    None,
                    &json!({"choice": choice, "comment": format!("#{n}")}),
                )
                .await
            })
        })
        .collect();
    let mut won = Vec::new();
    for t in tasks {
        let r = t.await.expect("answer task");
        match r.status {
            200 => won.push(r.json["request"]["answer"].clone()),
            409 => assert_eq!(r.code(), "request_closed", "{}", r.text),
            other => panic!("an answer got {other}: {}", r.text),
        }
    }
    assert_eq!(won.len(), 1, "exactly one answer wins: {won:?}");
    let feed = c.read_all(&a).await;
    let answered: Vec<&Value> = feed
        .iter()
        .filter(|e| e["type"] == "request.answered")
        .collect();
    assert_eq!(answered.len(), 1, "one answer in the feed: {feed:?}");
    assert_eq!(answered[0]["data"]["choice"], won[0]["choice"]);
    assert_eq!(answered[0]["data"]["comment"], won[0]["comment"]);
}
