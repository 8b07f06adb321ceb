//! Hostile clients, second round (docs/PERFORMANCE.md, "Hostile clients"), against a real
//! `agentaddress serve` over real sockets:
//! - HTTP/2 streams whose flow-control window stays closed hold no more than the page budget
//!   (and one client no more than its share), are cut after the write timeout, and starve no
//!   other client;
//! - slow readers of event streams over ~1 MB events hold no more than the page budget, and
//!   still read every event once, in order;
//! - an HTTP/2 connection that sent only its preface is idle, not a slow request head: it is
//!   closed after the idle timeout (docs/API.md, "Connections");
//! - a WebSocket frame or message over 16 KiB is answered with close code 1009;
//! - a WebSocket that answers nothing is pinged, then closed; one that answers stays open.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use agentaddress_blackbox::{Address, Client};
use bytes::Bytes;
use common::net::{connect_from, rss_kib, socket_addr};
use common::raw::path_of;
use common::server;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

const MIB: u64 = 1024;

/// The server's peak RSS (KiB) sampled every 100 ms for `span`.
async fn peak_rss(pid: u32, span: Duration) -> u64 {
    let until = Instant::now() + span;
    let mut peak = rss_kib(pid);
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
        peak = peak.max(rss_kib(pid));
    }
    peak
}

/// An address whose feed holds `n` events of about 950 KB each.
async fn big_feed(client: &Client, n: usize) -> Address {
    let a = client.new_address().await;
    let pad = "z".repeat(950_000);
    for i in 0..n {
        client
            .deliver(&a, &json!({"i": i, "pad": pad}), None)
            .await
            .expect_status(202, "deliver a large event");
    }
    a
}

/// Reads the whole feed from a client at `from`,
/// checking that the sequences run 1..=n without a gap; returns how long it took.
async fn read_whole_feed(a: &Address, from: [u8; 4], n: u64) -> Duration {
    let http = reqwest::Client::builder()
        .local_address(IpAddr::V4(Ipv4Addr::from(from)))
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    let started = Instant::now();
    let mut after = 0u64;
    while after < n {
        let url = format!("{}?after={after}", a.events_url);
        let answer = http
            .get(&url)
            .bearer_auth(&a.token)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let status = answer.status().as_u16();
        let page: Value = answer
            .json()
            .await
            .unwrap_or_else(|e| panic!("page after {after}: {e}"));
        assert_eq!(status, 200, "a page after {after} from {from:?}: {page}");
        let events = page["events"]
            .as_array()
            .unwrap_or_else(|| panic!("no events: {page}"));
        assert!(!events.is_empty(), "a page of a non-empty feed: {page}");
        for e in events {
            after += 1;
            assert_eq!(e["sequence"], json!(after), "in order, no gap");
        }
        assert_eq!(page["next_cursor"], json!(after));
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn http2_streams_with_a_closed_window_are_bounded_and_cut() {
    // A 16 MiB budget of which one client may hold 8; an answer that makes no progress for 3 s
    // ends its connection.
    let (server, base, _dir) = server(&[
        "--page-memory-mib",
        "16",
        "--page-memory-per-client-mib",
        "8",
        "--write-timeout-seconds",
        "3",
        "--polls-per-minute",
        "1000000",
    ])
    .await;
    let pid = server.id().unwrap_or_else(|| panic!("no server pid"));
    let to = socket_addr(&base);
    let client = Client::new(&base);
    const EVENTS: u64 = 24;
    let a = big_feed(&client, EVENTS as usize).await;
    let before = rss_kib(pid);

    // Two connections from 127.0.0.1, each with 100 streams asking for the whole feed and a
    // window of 0: the server may send headers, never a byte of a body.
    let uri = format!("http://{to}{}?after=0", path_of(&a.events_url));
    let mut connections = Vec::new();
    let mut streams = Vec::new();
    let mut senders = Vec::new();
    for _ in 0..2 {
        let tcp = connect_from(to, [127, 0, 0, 1], None).await;
        let (mut h2, connection) = h2::client::Builder::new()
            .initial_window_size(0)
            .handshake::<_, Bytes>(tcp)
            .await
            .expect("h2 handshake");
        let opened = Instant::now();
        connections.push(tokio::spawn(async move {
            let _ = connection.await;
            opened.elapsed()
        }));
        for _ in 0..100 {
            h2 = h2.ready().await.expect("h2 ready");
            let request = http::Request::get(&uri)
                .header("authorization", format!("Bearer {}", a.token))
                .body(())
                .expect("request");
            let (answer, _) = h2.send_request(request, true).expect("send_request");
            streams.push(answer);
        }
        senders.push(h2);
    }

    // Meanwhile another client (127.0.0.2) reads the whole feed: the stalled streams hold at
    // most their client's share, so it is not starved.
    let other = {
        let a = a.clone();
        tokio::spawn(async move { read_whole_feed(&a, [127, 0, 0, 2], EVENTS).await })
    };
    let peak = peak_rss(pid, Duration::from_secs(3)).await;
    let grown_mib = peak.saturating_sub(before) / MIB;
    eprintln!(
        "200 zero-window HTTP/2 streams over {EVENTS} events of 950 KB: RSS {} MiB before, \
         peak {} MiB (+{grown_mib} MiB)",
        before / MIB,
        peak / MIB
    );
    // Without a bound every stream holds at least one event (~1 MB): 200 MB and more. With it:
    // the budget (16 MiB) and what encoding a page and the allocator add.
    assert!(
        grown_mib <= 16 + 64,
        "200 stalled HTTP/2 streams grew the server by {grown_mib} MiB"
    );

    // The stalled connections are ended once an answer has waited for the write timeout.
    for connection in connections {
        let lived = tokio::time::timeout(Duration::from_secs(20), connection)
            .await
            .unwrap_or_else(|_| panic!("a connection of stalled streams is still open after 20 s"))
            .expect("connection task");
        eprintln!("a stalled HTTP/2 connection was closed after {lived:?}");
        assert!(
            lived >= Duration::from_secs(3),
            "not before the write timeout: {lived:?}"
        );
    }
    let took = tokio::time::timeout(Duration::from_secs(60), other)
        .await
        .unwrap_or_else(|_| panic!("the other client was starved"))
        .expect("other client");
    eprintln!("the other client read the whole feed in {took:?} during the attack");
    drop((streams, senders));
    // Nothing was lost: the feed reads whole, in order.
    read_whole_feed(&a, [127, 0, 0, 1], EVENTS).await;
}

/// The `id:` lines of an event stream's bytes, in order.
fn sse_ids(bytes: &[u8]) -> Vec<u64> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .filter_map(|id| id.trim().parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_event_stream_readers_hold_no_more_than_the_page_budget() {
    let (server, base, _dir) =
        server(&["--page-memory-mib", "16", "--polls-per-minute", "1000000"]).await;
    let pid = server.id().unwrap_or_else(|| panic!("no server pid"));
    let to = socket_addr(&base);
    let client = Client::new(&base);
    const EVENTS: usize = 12;
    let a = big_feed(&client, EVENTS).await;
    let before = rss_kib(pid);

    // 200 streams that read 4 KiB every 100 ms through a 4 KiB receive buffer.
    let request = format!(
        "GET {}/stream?after=0 HTTP/1.1\r\nHost: test\r\nAccept: text/event-stream\r\n\
         Authorization: Bearer {}\r\n\r\n",
        path_of(&a.events_url),
        a.token
    );
    let stop = Instant::now() + Duration::from_secs(8);
    let mut readers = Vec::new();
    for _ in 0..200 {
        let mut s = connect_from(to, [127, 0, 0, 1], Some(4096)).await;
        s.write_all(request.as_bytes()).await.expect("write");
        readers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while Instant::now() < stop {
                match tokio::time::timeout(Duration::from_millis(500), s.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => break,
                    Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
                    Err(_) => {}
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            got
        }));
    }
    let peak = peak_rss(pid, Duration::from_secs(8)).await;
    let grown_mib = peak.saturating_sub(before) / MIB;
    eprintln!(
        "200 slow event streams over {EVENTS} events of 950 KB: RSS {} MiB before, peak {} MiB \
         (+{grown_mib} MiB)",
        before / MIB,
        peak / MIB
    );
    assert!(
        grown_mib <= 16 + 64,
        "200 slow event streams grew the server by {grown_mib} MiB"
    );
    let mut with_events = 0;
    for (i, reader) in readers.into_iter().enumerate() {
        let got = reader.await.unwrap_or_else(|e| panic!("reader {i}: {e}"));
        assert!(
            got.starts_with(b"HTTP/1.1 200"),
            "reader {i}: {:?}",
            String::from_utf8_lossy(&got[..got.len().min(200)])
        );
        let ids = sse_ids(&got);
        let expected: Vec<u64> = (1..=ids.len() as u64).collect();
        assert_eq!(ids, expected, "reader {i}: every event once, in order");
        if !ids.is_empty() {
            with_events += 1;
        }
    }
    eprintln!("{with_events} of 200 slow streams got an event within 8 s");
    assert!(with_events > 0, "the budget lets streams through");
    // A reader of the stream from another client, afterwards, gets every event (those of
    // 127.0.0.1 that are still being torn down hold only their own client's share).
    let http = reqwest::Client::builder()
        .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))
        .build()
        .expect("client");
    let mut answer = http
        .get(format!("{}/stream?after=0", a.events_url))
        .bearer_auth(&a.token)
        .send()
        .await
        .expect("stream");
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while sse_ids(&got).len() < EVENTS && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(20), answer.chunk()).await {
            Ok(Ok(Some(chunk))) => got.extend_from_slice(&chunk),
            other => panic!("the stream ended early: {other:?}"),
        }
    }
    assert_eq!(sse_ids(&got), (1..=EVENTS as u64).collect::<Vec<_>>());
}

#[tokio::test]
async fn an_http2_connection_with_only_its_preface_is_idle_not_a_slow_head() {
    let (_server, base, _dir) = server(&[
        "--idle-timeout-seconds",
        "4",
        "--header-timeout-seconds",
        "1",
    ])
    .await;
    let to = socket_addr(&base);
    let mut s = connect_from(to, [127, 0, 0, 1], None).await;
    // The preface and an empty SETTINGS frame, then nothing.
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .expect("write");
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    let closed = loop {
        match tokio::time::timeout(Duration::from_secs(15), s.read(&mut buf)).await {
            Err(_) => panic!("the connection is still open after 15 s"),
            Ok(Ok(0)) | Ok(Err(_)) => break started.elapsed(),
            Ok(Ok(_)) => {}
        }
    };
    eprintln!("an HTTP/2 connection with only its preface was closed after {closed:?}");
    assert!(
        closed >= Duration::from_millis(3500) && closed < Duration::from_secs(10),
        "closed by the idle timeout (4 s), not the header timeout (1 s): {closed:?}"
    );
}

async fn subscribe_socket(
    base: &str,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>> {
    let url = format!("{}/api/v1/ws", base.replacen("http://", "ws://", 1));
    let (socket, _) = tokio_tungstenite::connect_async(&url)
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    socket
}

/// The close frame the server sends next (skipping pings and other frames), within 10 s.
async fn close_code<S>(socket: &mut S) -> Option<u16>
where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, socket.next()).await {
            Err(_) => panic!("no close frame within 10 s"),
            Ok(Some(Ok(Message::Close(frame)))) => return frame.map(|f| u16::from(f.code)),
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(e))) => panic!("the connection ended without a close frame: {e}"),
            Ok(None) => panic!("the connection ended without a close frame"),
        }
    }
}

#[tokio::test]
async fn websocket_frames_over_16_kib_are_closed_with_1009() {
    let (_server, base, _dir) = server(&[]).await;
    // One frame of 17 KiB, one of 1 MiB.
    for size in [17 * 1024, 1024 * 1024] {
        let mut socket = subscribe_socket(&base).await;
        let frame = format!(r#"{{"action":"ping","pad":"{}"}}"#, "x".repeat(size));
        socket
            .send(Message::Text(frame.into()))
            .await
            .expect("send");
        assert_eq!(
            close_code(&mut socket).await,
            Some(1009),
            "a {size}-byte frame"
        );
    }
    // A 17 KiB message in fragments of 4 KiB, none of them over the limit alone.
    let mut socket = subscribe_socket(&base).await;
    let piece = Bytes::from(vec![b'y'; 4096]);
    for i in 0..5 {
        let opcode = if i == 0 { Data::Text } else { Data::Continue };
        let frame = Frame::message(piece.clone(), OpCode::Data(opcode), i == 4);
        // The server may close before the last fragment: a failed send is fine then.
        if socket.send(Message::Frame(frame)).await.is_err() {
            break;
        }
    }
    assert_eq!(
        close_code(&mut socket).await,
        Some(1009),
        "a fragmented 20 KiB message"
    );
    // The server still serves sockets.
    let mut socket = subscribe_socket(&base).await;
    socket
        .send(Message::Text(r#"{"action":"ping"}"#.into()))
        .await
        .expect("send");
    let answer = tokio::time::timeout(Duration::from_secs(5), socket.next())
        .await
        .unwrap_or_else(|_| panic!("no pong"));
    assert!(
        matches!(&answer, Some(Ok(Message::Text(t))) if t.as_str().contains("pong")),
        "{answer:?}"
    );
    let _ = socket
        .close(Some(CloseFrame {
            code: 1000.into(),
            reason: "".into(),
        }))
        .await;
}

#[tokio::test]
async fn a_websocket_that_answers_nothing_is_pinged_then_closed() {
    let (_server, base, _dir) = server(&["--ws-ping-ms", "300"]).await;
    let to = socket_addr(&base);
    // A client that does the handshake, then never answers anything (a raw socket: WebSocket
    // libraries answer pings by themselves).
    let mut raw = connect_from(to, [127, 0, 0, 1], None).await;
    raw.write_all(
        b"GET /api/v1/ws HTTP/1.1\r\nHost: test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .await
    .expect("write");
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), raw.read(&mut buf)).await {
            Err(_) => panic!(
                "a silent socket is still open after 10 s: {:?}",
                String::from_utf8_lossy(&got)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
    let lived = started.elapsed();
    let head_end = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no 101 answer: {:?}", String::from_utf8_lossy(&got)));
    assert!(
        got.starts_with(b"HTTP/1.1 101"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    // Server frames are not masked: [0x89, 0] is an empty ping, [0x88, len, code…] a close.
    let frames = &got[head_end + 4..];
    assert!(
        frames.starts_with(&[0x89, 0x00]),
        "a ping first: {frames:?}"
    );
    let close = frames
        .windows(2)
        .position(|w| w[0] == 0x88)
        .unwrap_or_else(|| panic!("no close frame: {frames:?}"));
    assert_eq!(
        &frames[close + 2..close + 4],
        &1001u16.to_be_bytes(),
        "{frames:?}"
    );
    eprintln!("a silent socket was closed after {lived:?}");
    assert!(lived < Duration::from_secs(5), "{lived:?}");

    // A client that answers (tungstenite pongs by itself while it reads) stays open.
    let mut socket = subscribe_socket(&base).await;
    let until = Instant::now() + Duration::from_secs(3);
    let mut pings = 0;
    while Instant::now() < until {
        match tokio::time::timeout(Duration::from_millis(200), socket.next()).await {
            Err(_) => {}
            Ok(Some(Ok(Message::Ping(_)))) => pings += 1,
            Ok(other) => panic!("an answering socket got {other:?}"),
        }
    }
    assert!(pings >= 5, "pinged every 300 ms: {pings} pings in 3 s");
    socket
        .send(Message::Text(r#"{"action":"ping"}"#.into()))
        .await
        .expect("the answering socket was closed");
}
