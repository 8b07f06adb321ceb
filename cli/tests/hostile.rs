//! Hostile clients against a real `agentaddress serve`, over real sockets:
//! - each stalled shape is closed by its own timeout: a request head that stops half-way, an
//!   idle connection, an idle keep-alive connection, a body that stops (408), a body that
//!   drips, an answer the client never reads; a long poll in flight is not timed out;
//! - hundreds of slowloris connections while a normal client's requests keep succeeding;
//! - at its connection cap (global, or per client IP) the server refuses with a 503 JSON
//!   answer and `Retry-After`, and serves again once connections close;
//! - with a descriptor limit far below what clients open (a child under `prlimit`), no request
//!   ever gets a 500 or hangs, and nothing acknowledged is lost;
//! - a hundred slow readers of 4 MB pages stay within a memory bound (the page budget cuts
//!   pages; every page is still whole and in order).

mod common;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use agentaddress_blackbox::{Address, Client};
use common::net::{connect_from, rss_kib, socket_addr};
use common::raw::{parse_answer, path_of, read_answer, Answer};
use common::{server, ServeCommand};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

async fn connect(to: SocketAddr) -> TcpStream {
    connect_from(to, [127, 0, 0, 1], None).await
}

/// Reads until the server closes the connection (end of stream or reset), within `limit`;
/// returns what was read and when the connection ended, or `None` if it was still open.
async fn read_until_closed(sock: &mut TcpStream, limit: Duration) -> (Vec<u8>, Option<Duration>) {
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let left = limit.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, sock.read(&mut buf)).await {
            Err(_) => return (got, None),
            Ok(Ok(0)) | Ok(Err(_)) => return (got, Some(started.elapsed())),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

fn get_request(path: &str, token: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {token}\r\n\r\n")
}

async fn feed(client: &Client, a: &Address) -> Vec<Value> {
    client.read_all(a).await
}

#[tokio::test]
async fn each_stalled_shape_is_closed_by_its_timeout() {
    let (_server, base, _dir) = server(&[
        "--header-timeout-seconds",
        "1",
        "--idle-timeout-seconds",
        "2",
        "--body-timeout-seconds",
        "1",
    ])
    .await;
    let to = socket_addr(&base);
    let client = Client::new(&base);
    let a = client.new_address().await;
    let limit = Duration::from_secs(8);

    // A request head that stops half-way: closed by the header timeout (1 s), not the idle one.
    let mut half_head = connect(to).await;
    half_head
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("write");
    // A connection that sends nothing: closed by the idle timeout (2 s).
    let mut silent = connect(to).await;
    // A keep-alive connection after one answer: idle again, closed by the idle timeout.
    let mut kept = connect(to).await;
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let first = read_answer(&mut kept, limit).await;
    assert_eq!(first.status, 200);
    // A long poll in flight is never timed out by the connection's idle timeout.
    let mut polling = connect(to).await;
    let events_path = path_of(&a.events_url);
    polling
        .write_all(get_request(&format!("{events_path}?after=0&wait=4"), &a.token).as_bytes())
        .await
        .expect("write");

    let (head_closed, silent_closed, kept_closed, poll_answer) = tokio::join!(
        read_until_closed(&mut half_head, limit),
        read_until_closed(&mut silent, limit),
        read_until_closed(&mut kept, limit),
        async {
            let started = Instant::now();
            let answer = read_answer(&mut polling, limit).await;
            (answer, started.elapsed())
        },
    );
    let head_after = head_closed
        .1
        .unwrap_or_else(|| panic!("a half-sent request head was still open after {limit:?}"));
    assert!(
        head_after >= Duration::from_millis(800) && head_after < Duration::from_millis(1900),
        "a half-sent head is closed by the 1 s header timeout, before the 2 s idle one: {head_after:?}"
    );
    let silent_after = silent_closed
        .1
        .unwrap_or_else(|| panic!("a silent connection was still open after {limit:?}"));
    assert!(
        silent_after >= Duration::from_millis(1800),
        "closed by the 2 s idle timeout: {silent_after:?}"
    );
    assert!(silent_closed.0.is_empty(), "nothing is written to it");
    assert!(
        kept_closed.1.is_some(),
        "an idle keep-alive connection was still open after {limit:?}"
    );
    let (answer, took) = poll_answer;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(
        took >= Duration::from_millis(3800),
        "the long poll waited its 4 s although the idle timeout is 2 s: {took:?}"
    );

    // A body that stops: 408 `request_timeout` once no byte came for 1 s; nothing is stored.
    let inbox = path_of(&a.inbox_url);
    let mut stalled = connect(to).await;
    stalled
        .write_all(
            format!(
                "POST {inbox} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                 Content-Length: 900000\r\n\r\n{{\"a"
            )
            .as_bytes(),
        )
        .await
        .expect("write");
    let started = Instant::now();
    let answer = read_answer(&mut stalled, limit).await;
    assert_eq!(answer.status, 408, "{answer:?}");
    assert_eq!(answer.json()["error"]["code"], "request_timeout");
    assert_eq!(answer.header("connection"), Some("close"));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert!(
        read_until_closed(&mut stalled, limit).await.1.is_some(),
        "closed after the 408"
    );

    // A body that drips a byte every 300 ms never stalls for 1 s, but is far below the
    // minimum rate (4096 bytes/s) once the 1 s grace has passed: 408 too.
    let mut drip = connect(to).await;
    drip.write_all(
        format!(
            "POST {inbox} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: 1000\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .expect("write");
    let started = Instant::now();
    let dripping = async {
        for _ in 0..30 {
            if drip.write_all(b" ").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            if started.elapsed() > Duration::from_secs(3) {
                break;
            }
        }
        read_answer(&mut drip, limit).await
    };
    let answer = dripping.await;
    assert_eq!(answer.status, 408, "{answer:?}");
    assert_eq!(answer.json()["error"]["code"], "request_timeout");

    assert!(
        feed(&client, &a).await.is_empty(),
        "no timed-out body became an event"
    );
}

#[tokio::test]
async fn an_answer_the_client_does_not_read_is_dropped_after_the_write_timeout() {
    let (_server, base, _dir) = server(&["--write-timeout-seconds", "2"]).await;
    let to = socket_addr(&base);
    let client = Client::new(&base);
    let a = client.new_address().await;
    let big = "x".repeat(900_000);
    for i in 0..4 {
        client
            .deliver(&a, &json!({"i": i, "pad": big}), None)
            .await
            .expect_status(202, "deliver");
    }
    let mut reader = connect_from(to, [127, 0, 0, 1], Some(4096)).await;
    reader
        .write_all(get_request(&format!("{}?after=0", path_of(&a.events_url)), &a.token).as_bytes())
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (got, closed) = read_until_closed(&mut reader, Duration::from_secs(10)).await;
    assert!(closed.is_some(), "the connection ends");
    let answer = parse_answer(&got).unwrap_or_else(|| panic!("no answer head"));
    let declared: usize = answer
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no content-length: {:?}", answer.headers));
    assert!(declared > 3_600_000, "a page of about 3.6 MB: {declared}");
    assert!(
        answer.body.len() < declared,
        "the server gave up writing: {} of {declared} bytes arrived",
        answer.body.len()
    );
    // A reader that reads gets it all.
    let r = client.events(&a, "after=0").await;
    r.expect_status(200, "read");
    assert_eq!(r.json["events"].as_array().map(Vec::len), Some(4));
}

#[tokio::test]
async fn slowloris_does_not_starve_a_normal_client() {
    let (_server, base, _dir) = server(&["--header-timeout-seconds", "3"]).await;
    let to = socket_addr(&base);
    let client = Client::new(&base);
    let a = client.new_address().await;

    // 400 connections from 4 other client IPs, each sending a header line every 500 ms.
    let mut loris = Vec::new();
    for i in 0..400u32 {
        let from = [127, 0, 1, 1 + (i % 4) as u8];
        loris.push(connect_from(to, from, None).await);
    }
    let dripping = tokio::spawn(async move {
        let mut closed = 0usize;
        let started = Instant::now();
        for round in 0.. {
            let mut open = 0;
            for sock in loris.iter_mut() {
                let line = if round == 0 {
                    "GET /healthz HTTP/1.1\r\n".to_owned()
                } else {
                    format!("X-Drip-{round}: 1\r\n")
                };
                if sock.write_all(line.as_bytes()).await.is_ok() {
                    open += 1;
                }
            }
            closed = loris.len() - open;
            if closed == loris.len() || started.elapsed() > Duration::from_secs(12) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        (closed, started.elapsed())
    });

    // Meanwhile a normal client delivers and reads, and every request succeeds.
    for i in 0..40 {
        client
            .deliver(
                &a,
                &json!({"type": "normal", "data": {"i": i}}),
                Some(&format!("k{i}")),
            )
            .await
            .expect_status(202, "a delivery during slowloris");
        client
            .get(&client.url("/healthz"), None)
            .await
            .expect_status(200, "healthz during slowloris");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let events = feed(&client, &a).await;
    assert_eq!(events.len(), 40);
    let (closed, after) = dripping.await.expect("the slowloris task");
    assert_eq!(
        closed, 400,
        "every slowloris connection is closed by the 3 s header timeout (after {after:?})"
    );
}

#[tokio::test]
async fn at_its_connection_caps_the_server_refuses_cleanly_and_recovers() {
    let (_server, base, _dir) =
        server(&["--max-connections", "30", "--max-connections-per-ip", "10"]).await;
    let to = socket_addr(&base);

    async fn healthz(sock: &mut TcpStream) -> Answer {
        sock.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        read_answer(sock, Duration::from_secs(5)).await
    }

    // Per client IP: 10 held from 127.0.2.1, the 11th from there is refused...
    let mut held = Vec::new();
    for _ in 0..10 {
        let mut s = connect_from(to, [127, 0, 2, 1], None).await;
        assert_eq!(healthz(&mut s).await.status, 200);
        held.push(s);
    }
    let mut eleventh = connect_from(to, [127, 0, 2, 1], None).await;
    let refused = healthz(&mut eleventh).await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(refused.json()["error"]["code"], "unavailable");
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(refused.header("connection"), Some("close"));
    // ... while another client is served.
    let mut other = connect_from(to, [127, 0, 2, 2], None).await;
    assert_eq!(healthz(&mut other).await.status, 200);
    held.push(other);

    // Globally: fill up to 30 from more IPs; the next one, from a fresh IP, is refused.
    for i in 0..19u8 {
        let mut s = connect_from(to, [127, 0, 3, 1 + i / 9], None).await;
        assert_eq!(healthz(&mut s).await.status, 200);
        held.push(s);
    }
    let mut over = connect_from(to, [127, 0, 4, 1], None).await;
    let refused = healthz(&mut over).await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(refused.json()["error"]["code"], "unavailable");
    assert!(
        read_until_closed(&mut over, Duration::from_secs(5))
            .await
            .1
            .is_some(),
        "a refused connection is closed"
    );

    // Connections close: the server serves again.
    drop(held);
    let client = Client::new(&base);
    let mut ok = false;
    for _ in 0..50 {
        if client.get(&client.url("/healthz"), None).await.status == 200 {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ok, "healthz answers again once connections closed");
}

/// One request on a fresh connection from 127.0.0.1; the answer's status, or 0 when the
/// connection was refused or closed without an answer. Panics on a hang.
async fn one_request(to: SocketAddr, request: &[u8]) -> (u16, Option<Answer>) {
    let attempt = async {
        let Ok(mut sock) = TcpStream::connect(to).await else {
            return (0, None);
        };
        if sock.write_all(request).await.is_err() {
            return (0, None);
        }
        let (got, _) = read_until_closed_or_answer(&mut sock).await;
        match parse_answer(&got) {
            Some(a) => (a.status, Some(a)),
            None => (0, None),
        }
    };
    tokio::time::timeout(Duration::from_secs(10), attempt)
        .await
        .unwrap_or_else(|_| panic!("a request hung for 10 s under descriptor pressure"))
}

async fn read_until_closed_or_answer(sock: &mut TcpStream) -> (Vec<u8>, bool) {
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        if let Some(a) = parse_answer(&got) {
            let len: usize = a
                .header("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if a.body.len() >= len {
                return (got, true);
            }
        }
        match sock.read(&mut buf).await {
            Ok(0) | Err(_) => return (got, false),
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test]
async fn descriptor_exhaustion_never_gives_a_500_or_a_hang() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("agentaddress.db");
    // `prlimit` (util-linux) runs the server with 100 descriptors, soft and hard.
    let (_child, base, _stdout) = ServeCommand::under("prlimit", &["--nofile=100:100"])
        .listen("127.0.0.1:0")
        .db(&db)
        .rust_log("warn")
        .stderr(Stdio::inherit())
        .listening()
        .await;
    let to = socket_addr(&base);
    let client = Client::new(&base);
    let a = client.new_address().await;
    drop(client);

    // 150 idle connections: more than the process could ever hold.
    let mut idle = Vec::new();
    for _ in 0..150 {
        if let Ok(s) = TcpStream::connect(to).await {
            idle.push(s);
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let inbox = path_of(&a.inbox_url);
    let events = path_of(&a.events_url);
    let state = path_of(&a.state_url);
    let mut accepted = Vec::new();
    let mut refused = 0;
    for i in 0..30 {
        let body = format!("{{\"i\":{i}}}");
        let requests = [
            format!(
                "POST {inbox} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                 Idempotency-Key: k{i}\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            ),
            format!(
                "PUT {state}/counter HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{{\"value\":{i}}}",
                a.token,
                format!("{{\"value\":{i}}}").len()
            ),
            get_request(&format!("{events}?after=0&limit=5"), &a.token),
        ];
        for (n, request) in requests.iter().enumerate() {
            let (status, answer) = one_request(to, request.as_bytes()).await;
            assert_ne!(status, 500, "a 500 under descriptor pressure: {answer:?}");
            match status {
                0 => refused += 1,
                503 => {
                    let answer = answer.unwrap_or_else(|| panic!("503 without an answer"));
                    assert_eq!(answer.json()["error"]["code"], "unavailable");
                    assert!(answer.header("retry-after").is_some(), "{answer:?}");
                    refused += 1;
                }
                200 | 202 => {
                    if n == 0 {
                        accepted.push(i);
                    }
                }
                other => panic!("unexpected {other}: {answer:?}"),
            }
        }
    }

    // The idle connections that were admitted still serve requests, without a 500 or a hang.
    let mut served_on_idle = 0;
    for sock in idle.iter_mut().take(20) {
        let request = get_request(&format!("{events}?after=0&limit=1"), &a.token);
        if sock.write_all(request.as_bytes()).await.is_err() {
            continue;
        }
        let read = tokio::time::timeout(Duration::from_secs(10), read_until_closed_or_answer(sock))
            .await
            .unwrap_or_else(|_| panic!("a request on an admitted connection hung"));
        if let Some(answer) = parse_answer(&read.0) {
            assert_ne!(answer.status, 500, "{answer:?}");
            if answer.status == 200 {
                served_on_idle += 1;
            }
        }
    }
    assert!(
        served_on_idle > 0,
        "some of the idle connections were admitted and serve requests"
    );

    // Once the crowd leaves, everything works, and every accepted delivery is in the feed.
    drop(idle);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let client = Client::new(&base);
    client
        .deliver(&a, &json!({"after": "crowd"}), Some("after"))
        .await
        .expect_status(202, "a delivery after the crowd left");
    let all = client.read_all(&a).await;
    for i in &accepted {
        assert!(
            all.iter().any(|e| e["data"] == json!({"i": i})),
            "accepted delivery {i} is in the feed"
        );
    }
    eprintln!(
        "descriptor pressure: {} deliveries accepted, {refused} requests refused, {served_on_idle} served on held connections",
        accepted.len()
    );
}

#[tokio::test]
async fn a_hundred_slow_readers_of_4_mb_pages_stay_within_a_memory_bound() {
    let (server, base, _dir) =
        server(&["--page-memory-mib", "32", "--polls-per-minute", "1000"]).await;
    let pid = server.id().unwrap_or_else(|| panic!("no server pid"));
    let to = socket_addr(&base);
    let client = Client::new(&base);
    let a = client.new_address().await;
    let pad = "y".repeat(250_000);
    for i in 0..16 {
        client
            .deliver(&a, &json!({"i": i, "pad": pad}), None)
            .await
            .expect_status(202, "deliver");
    }
    let before = rss_kib(pid);
    let request = get_request(&format!("{}?after=0", path_of(&a.events_url)), &a.token);
    let mut readers = Vec::new();
    for _ in 0..100 {
        let mut s = connect_from(to, [127, 0, 0, 1], Some(4096)).await;
        s.write_all(request.as_bytes()).await.expect("write");
        readers.push(s);
    }
    // Every request is answered (the server is only waiting on the readers) within a few
    // seconds; sample the server's memory meanwhile.
    let mut peak = before;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        peak = peak.max(rss_kib(pid));
    }
    let grown_mib = (peak.saturating_sub(before)) / 1024;
    eprintln!(
        "100 slow readers of 4 MB pages: RSS {} MiB before, peak {} MiB (+{grown_mib} MiB)",
        before / 1024,
        peak / 1024
    );
    // Without the budget this is about 100 × 4 MB = 400 MB; with it, 32 MiB of full pages plus
    // one 250 KB event for each other reader, and the allocator's slack.
    assert!(
        grown_mib <= 110,
        "100 slow readers grew the server by {grown_mib} MiB"
    );

    // Every reader gets a whole page, in order from the first event; cut pages say has_more.
    // They read at once, as a hundred clients would: drained one after another from this one
    // task, the last would outwait the server's 10 s memory wait (a 503) on a busy machine.
    let answers = futures::future::join_all(
        readers
            .into_iter()
            .map(|mut s| async move { read_answer(&mut s, Duration::from_secs(20)).await }),
    )
    .await;
    let mut cut = 0;
    for (i, answer) in answers.into_iter().enumerate() {
        assert_eq!(answer.status, 200, "reader {i}");
        let page = answer.json();
        let events = page["events"]
            .as_array()
            .unwrap_or_else(|| panic!("reader {i}: no events"));
        assert!(
            !events.is_empty(),
            "reader {i}: a page holds at least one event"
        );
        for (k, e) in events.iter().enumerate() {
            assert_eq!(e["sequence"], json!(k + 1), "reader {i}: in order from 1");
        }
        assert_eq!(page["next_cursor"], json!(events.len()));
        assert_eq!(page["has_more"], json!(events.len() < 16), "reader {i}");
        if events.len() < 16 {
            cut += 1;
        }
    }
    assert!(cut > 0, "the budget cut some pages");
}
