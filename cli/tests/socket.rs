//! The wake-up socket of `agentaddress serve` (`GET /api/v1/ws`, docs/API.md §17), over a real
//! socket with a real WebSocket client: every append is covered by a later `notify` under 16
//! concurrent writers, a reconnect with its cursor loses nothing, a wrong token learns nothing,
//! the caps, `gone` after deletion, and hostile frames.

mod common;

use std::time::{Duration, Instant};

use agentaddress_blackbox::{Address, Client};
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

struct Server {
    _child: tokio::process::Child,
    base: String,
    _dir: tempfile::TempDir,
}

async fn server() -> Server {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let (child, base) = common::spawn_serve(
        &dir.path().join("ws.db"),
        "127.0.0.1:0",
        &["--creations-per-minute", "10000"],
    )
    .await;
    Server {
        _child: child,
        base,
        _dir: dir,
    }
}

async fn connect(base: &str) -> Ws {
    let url = format!("{}/api/v1/ws", base.replacen("http://", "ws://", 1));
    let (ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .unwrap_or_else(|e| panic!("connect the socket: {e}"));
    ws
}

async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::Text(v.to_string().into()))
        .await
        .unwrap_or_else(|e| panic!("send a frame: {e}"));
}

/// The next text frame as JSON (within 5 s), or `None` when the socket closed.
async fn next(ws: &mut Ws) -> Option<Value> {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .unwrap_or_else(|_| panic!("no frame within 5 s"));
        match frame {
            Some(Ok(Message::Text(t))) => {
                return Some(serde_json::from_str(t.as_str()).unwrap_or(Value::Null))
            }
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            _ => return None,
        }
    }
}

fn subscribe(a: &Address, after: u64) -> Value {
    json!({"action": "subscribe", "address_id": a.id, "read_token": a.token, "after": after})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_append_is_covered_by_a_notify_under_16_writers() {
    let s = server().await;
    let c = Client::new(&s.base);
    let a = c.new_address().await;
    let mut ws = connect(&s.base).await;
    send(&mut ws, subscribe(&a, 0)).await;
    let subscribed = next(&mut ws).await.unwrap_or_default();
    assert_eq!(subscribed["type"], "subscribed", "{subscribed}");
    assert_eq!(subscribed["last_sequence"], 0);
    send(&mut ws, json!({"action": "ping"})).await;
    assert_eq!(next(&mut ws).await.unwrap_or_default()["type"], "pong");

    let writers = (0..16).map(|w| {
        let (c, a) = (c.clone(), a.clone());
        tokio::spawn(async move {
            for n in 0..10 {
                c.deliver(&a, &json!({"writer": w, "n": n}), None)
                    .await
                    .expect_status(202, "deliver");
            }
        })
    });
    let done = futures::future::join_all(writers);
    let mut told = 0;
    let reader = async {
        // Notifies only grow, and one covers the 160th append.
        while told < 160 {
            let f = next(&mut ws).await.unwrap_or_default();
            assert_eq!(f["type"], "notify", "{f}");
            let last = f["last_sequence"].as_u64().unwrap_or(0);
            assert!(last > told, "{last} after {told}");
            told = last;
        }
    };
    let (_, ()) = tokio::join!(done, reader);
    assert_eq!(told, 160);

    // Dropped and reconnected with its cursor: the feed holds what came meanwhile.
    drop(ws);
    for n in 0..5 {
        c.deliver(&a, &json!({"late": n}), None)
            .await
            .expect_status(202, "deliver");
    }
    let mut ws = connect(&s.base).await;
    send(&mut ws, subscribe(&a, told)).await;
    let f = next(&mut ws).await.unwrap_or_default();
    assert_eq!(f["last_sequence"], 165, "{f}");
    let page = c.events(&a, &format!("after={told}")).await;
    assert_eq!(page.json["events"].as_array().map(Vec::len), Some(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_learns_nothing_and_deletion_says_gone() {
    let s = server().await;
    let c = Client::new(&s.base);
    let a = c.new_address().await;
    let mut ws = connect(&s.base).await;
    send(
        &mut ws,
        json!({"action": "subscribe", "address_id": a.id, "read_token": "aat_wrong"}),
    )
    .await;
    let wrong = next(&mut ws).await.unwrap_or_default();
    send(
        &mut ws,
        json!({"action": "subscribe", "address_id": "addr_nobody", "read_token": "aat_wrong"}),
    )
    .await;
    let unknown = next(&mut ws).await.unwrap_or_default();
    assert_eq!(wrong["code"], "unauthorized", "{wrong}");
    assert_eq!(
        wrong, unknown,
        "a wrong token and an unknown address look the same"
    );
    assert!(!wrong.to_string().contains("last_sequence"));

    send(&mut ws, subscribe(&a, 0)).await;
    assert_eq!(
        next(&mut ws).await.unwrap_or_default()["type"],
        "subscribed"
    );
    let started = Instant::now();
    c.send("DELETE", &a.root, Some(&a.token), &[], None)
        .await
        .expect_status(204, "delete");
    let gone = next(&mut ws).await.unwrap_or_default();
    assert_eq!(gone, json!({"type": "gone", "address_id": a.id}));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_and_subscriptions_are_capped() {
    let s = server().await;
    let c = Client::new(&s.base);
    let a = c.new_address().await;
    let mut sockets = Vec::new();
    for _ in 0..20 {
        let mut ws = connect(&s.base).await;
        send(&mut ws, subscribe(&a, 0)).await;
        assert_eq!(
            next(&mut ws).await.unwrap_or_default()["type"],
            "subscribed"
        );
        sockets.push(ws);
    }
    let mut extra = connect(&s.base).await;
    send(&mut extra, subscribe(&a, 0)).await;
    let refused = next(&mut extra).await.unwrap_or_default();
    assert_eq!(refused["code"], "quota_exceeded", "{refused}");
    // One closes: a place is free again.
    let mut first = sockets.remove(0);
    let _ = first.close(None).await;
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        send(&mut extra, subscribe(&a, 0)).await;
        let f = next(&mut extra).await.unwrap_or_default();
        if f["type"] == "subscribed" {
            break;
        }
        assert!(Instant::now() < deadline, "{f}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // 20 addresses per socket.
    let mut ws = connect(&s.base).await;
    for n in 0..21 {
        let b = c.new_address().await;
        send(&mut ws, subscribe(&b, 0)).await;
        let f = next(&mut ws).await.unwrap_or_default();
        let want = if n < 20 { "subscribed" } else { "error" };
        assert_eq!(f["type"], want, "subscription {n}: {f}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_frames_never_crash_anything() {
    let s = server().await;
    let c = Client::new(&s.base);
    let a = c.new_address().await;
    let mut ws = connect(&s.base).await;
    ws.send(Message::Binary(vec![0u8, 159, 146, 150].into()))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        next(&mut ws).await.unwrap_or_default()["code"],
        "invalid_request"
    );
    for bad in [
        "{",
        "[]",
        "null",
        "{\"action\": 5}",
        "{\"action\": \"explode\"}",
    ] {
        ws.send(Message::Text(bad.into()))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let f = next(&mut ws).await.unwrap_or_default();
        assert_eq!(f["code"], "invalid_request", "{bad}: {f}");
    }
    // 10,000 subscribes: the same address (answered once each), and bogus ones.
    for n in 0..10_000 {
        let frame = if n % 2 == 0 {
            subscribe(&a, 0)
        } else {
            json!({"action": "subscribe", "address_id": format!("addr_{n}"), "read_token": "x"})
        };
        send(&mut ws, frame).await;
    }
    let mut answers = 0;
    while answers < 10_000 {
        let f = next(&mut ws).await.unwrap_or_default();
        assert!(
            f["type"] == "subscribed" || f["code"] == "unauthorized",
            "{f}"
        );
        answers += 1;
    }
    // A 1 MB frame closes the socket; the server goes on.
    let _ = ws.send(Message::Text("x".repeat(1 << 20).into())).await;
    assert!(next(&mut ws).await.is_none(), "the socket is closed");
    c.get(&format!("{}/healthz", s.base), None)
        .await
        .expect_status(200, "the server still answers");
    let mut again = connect(&s.base).await;
    send(&mut again, subscribe(&a, 0)).await;
    assert_eq!(
        next(&mut again).await.unwrap_or_default()["type"],
        "subscribed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_socket_outlives_the_idle_timeout_and_closes_at_shutdown() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let (mut child, base) = common::spawn_serve(
        &dir.path().join("ws.db"),
        "127.0.0.1:0",
        &[
            "--idle-timeout-seconds",
            "1",
            "--header-timeout-seconds",
            "1",
        ],
    )
    .await;
    let c = Client::new(&base);
    let a = c.new_address().await;
    let mut ws = connect(&base).await;
    send(&mut ws, subscribe(&a, 0)).await;
    assert_eq!(
        next(&mut ws).await.unwrap_or_default()["type"],
        "subscribed"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    c.deliver(&a, &json!({"after": "idle"}), None)
        .await
        .expect_status(202, "deliver");
    let f = next(&mut ws).await.unwrap_or_default();
    assert_eq!(f["type"], "notify", "{f}");
    // SIGTERM: the socket is closed with 1001 (going away).
    let pid = child.id().unwrap_or_else(|| panic!("no pid"));
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let close = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                Some(Ok(_)) => continue,
                _ => return None,
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the socket was not closed at shutdown"));
    assert_eq!(close, Some(1001));
    let _ = child.wait().await;
}
