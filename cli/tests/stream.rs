//! The event stream (`GET {root}/events/stream`, docs/API.md §14) of a real `agentaddress
//! serve`, over real sockets:
//! - a client that drops its connection and resumes with `Last-Event-ID`, while several
//!   senders deliver, sees every event exactly once, in order;
//! - the wire format (`id:`, `event:`, `data:` with the feed's event JSON), `after` and the
//!   `Last-Event-ID` header that overrides it, live events and heartbeat comments;
//! - the stream ends at its longest duration, at graceful shutdown (and the server exits),
//!   and when its address is deleted;
//! - 400 for a bad `after` or `Last-Event-ID`, 401, 410, 429 (one stream is one poll), and the
//!   connection caps count streams as the connections they are.
//!
//! The heartbeat interval and the longest duration are lowered through `serve`'s hidden
//! testing flags. No test asserts how fast anything happens: waits are generous bounds.

mod common;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;

use agentaddress_blackbox::sse::{http_client, Item, Stream};
use agentaddress_blackbox::{Address, Client};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;

/// A generous bound on anything that should come promptly.
const SOON: Duration = Duration::from_secs(20);

async fn server(extra: &[&str]) -> (Child, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut args = vec!["--creations-per-minute", "1000"];
    args.extend_from_slice(extra);
    let (child, base) =
        common::spawn_serve(&dir.path().join("agentaddress.db"), "127.0.0.1:0", &args).await;
    (child, base, dir)
}

async fn deliver(c: &Client, a: &Address, n: u64) -> u64 {
    let r = c
        .deliver(a, &json!({"type": "test.delivery", "data": {"n": n}}), None)
        .await;
    r.expect_status(202, "deliver");
    r.json["event"]["sequence"]
        .as_u64()
        .unwrap_or_else(|| panic!("a sequence: {}", r.text))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resuming_client_sees_every_event_once_in_order_under_concurrent_deliveries() {
    let (_server, base, _dir) = server(&["--polls-per-minute", "10000"]).await;
    let c = Client::new(&base);
    let a = c.new_address().await;
    const SENDERS: u64 = 4;
    const EACH: u64 = 60;
    const TOTAL: u64 = SENDERS * EACH;
    let senders: Vec<_> = (0..SENDERS)
        .map(|s| {
            let c = c.clone();
            let a = a.clone();
            tokio::spawn(async move {
                for n in 0..EACH {
                    deliver(&c, &a, s * 1000 + n).await;
                    if n % 7 == 0 {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            })
        })
        .collect();

    let http = http_client();
    let mut seen: Vec<Value> = Vec::new();
    let mut last: Option<u64> = None;
    let mut connections = 0;
    // Each connection reads a few events, then drops (mid-stream: more are on their way).
    let per_connection = [7usize, 1, 23, 40, 3, 60, 11];
    while (seen.len() as u64) < TOTAL {
        connections += 1;
        assert!(
            connections < 200,
            "{} of {TOTAL} events after {connections} connections",
            seen.len()
        );
        let id = last.map(|l| l.to_string());
        let headers: Vec<(&str, &str)> = id.iter().map(|v| ("last-event-id", v.as_str())).collect();
        // `after=0` is overridden by Last-Event-ID on every reconnection.
        let mut s = Stream::open(&http, &a, "?after=0", &headers).await;
        assert_eq!(s.status, 200);
        let quota = per_connection[connections % per_connection.len()];
        for _ in 0..quota {
            let Some(e) = s.next_event_within(SOON, "the next event").await else {
                panic!("the stream ended early");
            };
            let seq = e.id();
            let data = e.data();
            assert_eq!(
                data["sequence"].as_u64(),
                Some(seq),
                "id is the event's sequence"
            );
            assert_eq!(
                seq,
                last.unwrap_or(0) + 1,
                "exactly once, in order (connection {connections})"
            );
            last = Some(seq);
            seen.push(data);
            if seen.len() as u64 == TOTAL {
                break;
            }
        }
        drop(s);
    }
    for s in senders {
        s.await.expect("sender");
    }
    assert!(connections > 5, "the client reconnected several times");
    // What the stream sent is the feed, event for event.
    let feed = c.read_all(&a).await;
    assert_eq!(feed.len() as u64, TOTAL);
    assert_eq!(seen, feed, "the stream's events are the feed's events");
    let distinct: BTreeSet<u64> = feed
        .iter()
        .filter_map(|e| e["data"]["n"].as_u64())
        .collect();
    assert_eq!(distinct.len() as u64, TOTAL, "every delivery once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_wire_format_the_cursor_and_heartbeats() {
    let (_server, base, _dir) = server(&["--stream-heartbeat-ms", "200"]).await;
    let c = Client::new(&base);
    let a = c.new_address().await;
    for n in 1..=3 {
        deliver(&c, &a, n).await;
    }
    let feed = c.read_all(&a).await;
    let http = http_client();

    // `after` starts the stream after that sequence.
    let mut s = Stream::open(&http, &a, "?after=1", &[]).await;
    assert_eq!(s.status, 200);
    assert_eq!(
        s.headers.get("content-type").and_then(|v| v.to_str().ok()),
        Some("text/event-stream")
    );
    let e = s
        .next_event_within(SOON, "event 2")
        .await
        .unwrap_or_else(|| panic!("event 2"));
    let names: Vec<&str> = e.fields.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["id", "event", "data"], "{e:?}");
    assert_eq!(e.field("id"), Some("2"));
    assert_eq!(e.field("event"), Some("test.delivery"));
    assert_eq!(e.data(), feed[1], "data is the feed's event JSON");
    let raw = String::from_utf8_lossy(&s.raw).into_owned();
    assert!(
        raw.starts_with(&format!(
            "id: 2\nevent: test.delivery\ndata: {}\n\n",
            serde_json::to_string(&feed[1]).unwrap_or_default()
        )),
        "{raw}"
    );
    assert_eq!(
        s.next_event_within(SOON, "event 3").await.map(|e| e.id()),
        Some(3)
    );
    // Nothing more yet: heartbeat comments come.
    match s.next_within(SOON, "a heartbeat").await {
        Some(Item::Comment(text)) => assert_eq!(text, " keep-alive", "the line is `: keep-alive`"),
        other => panic!("a heartbeat comment, not {other:?}"),
    }
    // A delivery now reaches the open stream.
    deliver(&c, &a, 4).await;
    let e = s
        .next_event_within(SOON, "a live event")
        .await
        .unwrap_or_else(|| panic!("a live event"));
    assert_eq!(e.id(), 4);
    assert_eq!(e.data()["data"], json!({"n": 4}));
    drop(s);

    // Last-Event-ID overrides after, both ways.
    let mut s = Stream::open(&http, &a, "?after=0", &[("last-event-id", "3")]).await;
    assert_eq!(
        s.next_event_within(SOON, "after 3").await.map(|e| e.id()),
        Some(4)
    );
    drop(s);
    let mut s = Stream::open(&http, &a, "?after=3", &[("last-event-id", "1")]).await;
    assert_eq!(
        s.next_event_within(SOON, "after 1").await.map(|e| e.id()),
        Some(2)
    );
    drop(s);
    // Without either: from the start.
    let mut s = Stream::open(&http, &a, "", &[]).await;
    assert_eq!(
        s.next_event_within(SOON, "from 0").await.map(|e| e.id()),
        Some(1)
    );
    drop(s);

    // A type with a line break cannot break the framing; data keeps the exact type.
    let r = c
        .deliver(&a, &json!({"type": "two\nlines\r", "data": 5}), None)
        .await;
    r.expect_status(202, "deliver a hostile type");
    let mut s = Stream::open(&http, &a, "", &[("last-event-id", "4")]).await;
    let e = s
        .next_event_within(SOON, "the hostile type")
        .await
        .unwrap_or_else(|| panic!("event 5"));
    assert_eq!(e.field("event"), Some("two\u{FFFD}lines\u{FFFD}"));
    assert_eq!(e.data()["type"], "two\nlines\r");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_longest_duration_ends_a_stream_and_the_client_resumes() {
    let (_server, base, _dir) = server(&["--stream-max-ms", "1000"]).await;
    let c = Client::new(&base);
    let a = c.new_address().await;
    deliver(&c, &a, 1).await;
    let http = http_client();
    let mut s = Stream::open(&http, &a, "", &[]).await;
    assert_eq!(
        s.next_event_within(SOON, "event 1").await.map(|e| e.id()),
        Some(1)
    );
    assert_eq!(
        s.next_event_within(SOON, "the end").await,
        None,
        "the server closes the stream at its longest duration"
    );
    deliver(&c, &a, 2).await;
    let mut s = Stream::open(&http, &a, "", &[("last-event-id", "1")]).await;
    assert_eq!(
        s.next_event_within(SOON, "event 2").await.map(|e| e.id()),
        Some(2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn graceful_shutdown_ends_open_streams_and_the_server_exits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut child, base, _) = common::spawn_serve_with(
        &dir.path().join("agentaddress.db"),
        "127.0.0.1:0",
        &[],
        "warn",
        Stdio::inherit(),
    )
    .await;
    let c = Client::new(&base);
    let a = c.new_address().await;
    deliver(&c, &a, 1).await;
    let http = http_client();
    let mut streams = Vec::new();
    for _ in 0..3 {
        let mut s = Stream::open(&http, &a, "", &[]).await;
        assert_eq!(
            s.next_event_within(SOON, "event 1").await.map(|e| e.id()),
            Some(1)
        );
        streams.push(s);
    }
    let pid = child.id().unwrap_or_else(|| panic!("server pid"));
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    for s in &mut streams {
        assert_eq!(
            s.next_event_within(SOON, "the end at shutdown").await,
            None,
            "shutdown ends the stream"
        );
    }
    let status = tokio::time::timeout(SOON, child.wait())
        .await
        .unwrap_or_else(|_| panic!("the server exits after SIGTERM with streams open"))
        .expect("wait");
    assert!(status.success(), "clean exit: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_the_address_ends_its_stream() {
    let (_server, base, _dir) = server(&[]).await;
    let c = Client::new(&base);
    let a = c.new_address().await;
    let http = http_client();
    let mut s = Stream::open(&http, &a, "", &[]).await;
    assert_eq!(s.status, 200);
    c.send("DELETE", &a.root, Some(&a.token), &[], None)
        .await
        .expect_status(204, "delete");
    assert_eq!(s.next_event_within(SOON, "the end").await, None);
    let s = Stream::open(&http, &a, "", &[]).await;
    assert_eq!(s.status, 410);
    assert_eq!(s.error_json().await["error"]["code"], "address_gone");
}

async fn expect_error(s: Stream, status: u16, code: &str, what: &str) {
    assert_eq!(s.status, status, "{what}");
    assert_eq!(
        s.headers.get("content-type").and_then(|v| v.to_str().ok()),
        Some("application/json; charset=utf-8"),
        "{what}: a JSON error"
    );
    if status == 429 {
        assert!(
            s.headers.get("retry-after").is_some(),
            "{what}: Retry-After"
        );
    }
    let body = s.error_json().await;
    assert_eq!(body["error"]["code"], code, "{what}: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refusals_are_the_feeds() {
    let (_server, base, _dir) = server(&["--polls-per-minute", "3"]).await;
    let c = Client::new(&base);
    let a = c.new_address().await;
    let http = http_client();
    // Authentication first: none of these is charged as a poll.
    let s = Stream::open_with_token(&http, &a, "", None, &[]).await;
    expect_error(s, 401, "unauthorized", "no token").await;
    let s = Stream::open_with_token(&http, &a, "?after=x", Some("aat_wrong"), &[]).await;
    expect_error(s, 401, "unauthorized", "a wrong token").await;
    let mut unknown = a.clone();
    unknown.events_url = unknown.events_url.replace(&a.id, "addr_unknown");
    let s = Stream::open(&http, &unknown, "", &[]).await;
    expect_error(s, 401, "unauthorized", "an unknown address").await;
    // Bad cursors, as the feed's bad `after` (each one poll: 1 and 2 of 3).
    let s = Stream::open(&http, &a, "?after=-1", &[]).await;
    expect_error(s, 400, "invalid_request", "after=-1").await;
    let s = Stream::open(&http, &a, "", &[("last-event-id", "evt_1")]).await;
    expect_error(s, 400, "invalid_request", "Last-Event-ID: evt_1").await;
    // Poll 3 is a stream; a fourth is over the limit.
    let open = Stream::open(&http, &a, "", &[]).await;
    assert_eq!(open.status, 200);
    let s = Stream::open(&http, &a, "", &[]).await;
    expect_error(s, 429, "rate_limited", "a fourth poll in a minute").await;
    let r = c.events(&a, "after=0").await;
    r.expect_error(429, "rate_limited", "GET events counts with streams");
    drop(open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn streams_count_against_the_connection_caps() {
    // Heartbeats often, so that the server soon writes to (and finds closed) a dropped stream.
    let (_server, base, _dir) = server(&[
        "--max-connections-per-ip",
        "2",
        "--stream-heartbeat-ms",
        "100",
    ])
    .await;
    let c = Client::new(&base);
    let a = c.new_address().await;
    // The creation's keep-alive connection counts until the server sees it closed: the two
    // streams may have to wait for that (retried for a while).
    drop(c);
    let http = http_client();
    let mut open = Vec::new();
    // (A connection over the cap is answered 503 and closed as it connects: the client may see
    // either that answer or, if the close beats it, a failure to send. Both mean "not yet".)
    for _ in 0..100 {
        match Stream::try_open(&http, &a).await {
            Ok(s) if s.status == 200 => {
                open.push(s);
                if open.len() == 2 {
                    break;
                }
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    assert_eq!(open.len(), 2, "two streams open within the cap of two");
    let (second, first) = (open.pop(), open.pop());
    // The third is refused as it connects (answered before it is read: a raw socket reads it).
    let authority = base.trim_start_matches("http://");
    let mut third = tokio::net::TcpStream::connect(authority)
        .await
        .expect("connect");
    let request = format!(
        "GET {}/stream HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {}\r\n\r\n",
        a.events_url.trim_start_matches(&base),
        a.token
    );
    let _ = third.write_all(request.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(SOON, third.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("\"unavailable\""), "{answer}");
    drop(first);
    // A closed stream frees its connection (the server notices the close at its next write;
    // retried for a while).
    let mut opened = false;
    for _ in 0..100 {
        if matches!(Stream::try_open(&http, &a).await, Ok(s) if s.status == 200) {
            opened = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(opened, "a closed stream's connection is freed");
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_wake_up_signal_the_stream_is_not_served() {
    // `--sqlite-wakeups false` (a benchmarking knob) leaves long polls re-reading with
    // backoff; a stream would have to poll, so it is refused as on Lambda.
    let (_server, base, _dir) = server(&["--sqlite-wakeups", "false"]).await;
    let c = Client::new(&base);
    let a = c.new_address().await;
    let s = Stream::open(&http_client(), &a, "", &[]).await;
    expect_error(s, 501, "not_supported", "no wake-up signal").await;
    c.events(&a, "after=0")
        .await
        .expect_status(200, "the feed is served");
}
