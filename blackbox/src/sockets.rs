//! The wake-up socket (docs/API.md §17) over a real WebSocket client, for any deployment: the
//! socket's URL is the address's `endpoints.ws_url`. `serve` holds the sockets itself; on AWS
//! (here, the local Lambda stack) API Gateway holds them, the `ws` function answers their
//! frames, and the appending functions post `notify` to them.

use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::{Address, Client};

pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Where the deployment's sockets differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deployment {
    /// `agentaddress serve`: notifies of one socket only grow; a binary frame is answered with
    /// an error.
    Serve,
    /// API Gateway and the functions: each append's function posts its own `notify`, so two
    /// racing appends may be told in either order; API Gateway closes a socket that sends a
    /// binary frame (1003).
    Gateway,
}

/// The socket URL handed out with `a`.
pub fn ws_url(a: &Address) -> String {
    a.created["endpoints"]["ws_url"]
        .as_str()
        .unwrap_or_else(|| panic!("no endpoints.ws_url in {}", a.created))
        .to_owned()
}

pub async fn connect(url: &str) -> Ws {
    let (ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .unwrap_or_else(|e| panic!("connect the socket {url}: {e}"));
    ws
}

/// Opens the socket with a `User-Agent` of its own: API Gateway's Management API answers a
/// connection's `identity.userAgent` (`GET @connections/{id}`), by which a test finds its own
/// connection among the gateway's.
pub async fn connect_as(url: &str, user_agent: &str) -> Ws {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::http::HeaderValue;
    let mut request = url
        .into_client_request()
        .unwrap_or_else(|e| panic!("a socket request for {url}: {e}"));
    let agent = HeaderValue::from_str(user_agent)
        .unwrap_or_else(|e| panic!("User-Agent {user_agent:?}: {e}"));
    request.headers_mut().insert("user-agent", agent);
    let (ws, _) = tokio_tungstenite::connect_async(request)
        .await
        .unwrap_or_else(|e| panic!("connect the socket {url}: {e}"));
    ws
}

/// What a socket said next (within 10 s).
#[derive(Debug, Clone, PartialEq)]
pub enum Said {
    /// A text frame, as JSON.
    Frame(Value),
    /// The server closed the socket: its close frame's code, or `None` when it sent none or
    /// the connection broke.
    Closed(Option<u16>),
}

/// The next text frame, or how the socket closed.
pub async fn next_or_close(ws: &mut Ws) -> Said {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .unwrap_or_else(|_| panic!("no frame within 10 s"));
        match frame {
            Some(Ok(Message::Text(t))) => {
                return Said::Frame(serde_json::from_str(t.as_str()).unwrap_or(Value::Null))
            }
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(Message::Close(Some(cf)))) => return Said::Closed(Some(cf.code.into())),
            _ => return Said::Closed(None),
        }
    }
}

pub async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::Text(v.to_string().into()))
        .await
        .expect("send a frame");
}

/// The next text frame as JSON (within 10 s), or `None` when the socket closed.
pub async fn next(ws: &mut Ws) -> Option<Value> {
    match next_or_close(ws).await {
        Said::Frame(v) => Some(v),
        Said::Closed(_) => None,
    }
}

pub fn subscribe(a: &Address, after: u64) -> Value {
    json!({"action": "subscribe", "address_id": a.id, "read_token": a.token, "after": after})
}

/// Under 16 concurrent writers (160 appends), every append is covered by a later `notify`
/// (on `serve`, notifies only grow); a client that drops its socket and reconnects with its
/// cursor loses nothing.
pub async fn every_append_is_covered_under_16_writers(c: &Client, d: Deployment) {
    let a = c.new_address().await;
    let url = ws_url(&a);
    let mut ws = connect(&url).await;
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
        // A notify covering the 160th append comes.
        while told < 160 {
            let f = next(&mut ws).await.unwrap_or_default();
            assert_eq!(f["type"], "notify", "{f}");
            let last = f["last_sequence"].as_u64().unwrap_or(0);
            assert!(last <= 160, "{f}");
            if d == Deployment::Serve {
                assert!(last > told, "{last} after {told}");
            }
            told = told.max(last);
        }
    };
    let (_, ()) = tokio::join!(done, reader);
    assert_eq!(told, 160);

    // Dropped and reconnected with its cursor: the feed holds what came meanwhile.
    let _ = ws.close(None).await;
    drop(ws);
    for n in 0..5 {
        c.deliver(&a, &json!({"late": n}), None)
            .await
            .expect_status(202, "deliver");
    }
    let mut ws = connect(&url).await;
    send(&mut ws, subscribe(&a, told)).await;
    let f = next(&mut ws).await.unwrap_or_default();
    assert_eq!(f["last_sequence"], 165, "{f}");
    let page = c.events(&a, &format!("after={told}")).await;
    assert_eq!(page.json["events"].as_array().map(Vec::len), Some(5));
    // And it is told of what comes next.
    c.deliver(&a, &json!({"later": 1}), None)
        .await
        .expect_status(202, "deliver");
    let f = next(&mut ws).await.unwrap_or_default();
    assert_eq!(
        f,
        json!({"type": "notify", "address_id": a.id, "last_sequence": 166})
    );
}

/// A wrong token and an unknown address get the same answer, revealing nothing; deleting the
/// address says `gone` at once.
pub async fn wrong_token_learns_nothing_and_deletion_says_gone(c: &Client) {
    let a = c.new_address().await;
    let mut ws = connect(&ws_url(&a)).await;
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
    // Subscribing again: gone, not subscribed.
    send(&mut ws, subscribe(&a, 0)).await;
    assert_eq!(next(&mut ws).await.unwrap_or_default()["type"], "gone");
}

/// An address that expires (`expires_in_seconds: 60`) says `gone` to each of its two
/// subscribed sockets: not before it expires, and at most `within` after; then its feed
/// answers 410 and subscribing again says `gone`.
pub async fn expiry_says_gone(c: &Client, within: Duration) {
    let a = c
        .create_address(&json!({"name": "blackbox", "expires_in_seconds": 60}))
        .await;
    // The server set its expiry during the creation's (last) request: 60 s from a moment
    // before now, and at most a couple of seconds before (creating may have waited out a
    // rate limit first, so the moment before the call is no bound).
    let expires = Instant::now() + Duration::from_secs(60);
    let url = ws_url(&a);
    let mut sockets = Vec::new();
    for _ in 0..2 {
        let mut ws = connect(&url).await;
        send(&mut ws, subscribe(&a, 0)).await;
        let f = next(&mut ws).await.unwrap_or_default();
        assert_eq!(f["type"], "subscribed", "{f}");
        sockets.push(ws);
    }
    // A subscribe of a socket already subscribed changes nothing.
    send(&mut sockets[0], subscribe(&a, 0)).await;
    assert_eq!(
        next(&mut sockets[0]).await.unwrap_or_default()["type"],
        "subscribed"
    );
    let deadline = expires + within;
    let told = sockets.into_iter().map(|mut ws| {
        let id = a.id.clone();
        async move {
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let frame = tokio::time::timeout(left, ws.next())
                    .await
                    .unwrap_or_else(|_| panic!("no gone within {within:?} of the expiry"));
                match frame {
                    Some(Ok(Message::Text(t))) => {
                        let f: Value = serde_json::from_str(t.as_str()).unwrap_or(Value::Null);
                        assert_eq!(f, json!({"type": "gone", "address_id": id}));
                        // Never before it expires (slack for the creation's request).
                        assert!(
                            Instant::now() + Duration::from_secs(2) >= expires,
                            "gone {:?} before the expiry",
                            expires - Instant::now()
                        );
                        return ws;
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    other => panic!("the socket ended before gone: {other:?}"),
                }
            }
        }
    });
    let mut sockets = futures::future::join_all(told).await;
    let page = c.events(&a, "after=0").await;
    assert_eq!(page.status, 410, "{}", page.json);
    send(&mut sockets[0], subscribe(&a, 0)).await;
    assert_eq!(
        next(&mut sockets[0]).await.unwrap_or_default(),
        json!({"type": "gone", "address_id": a.id})
    );
}

/// 20 sockets per address (a place frees when one closes) and 20 addresses per socket.
pub async fn sockets_and_subscriptions_are_capped(c: &Client) {
    let a = c.new_address().await;
    let url = ws_url(&a);
    let mut sockets = Vec::new();
    for _ in 0..20 {
        let mut ws = connect(&url).await;
        send(&mut ws, subscribe(&a, 0)).await;
        assert_eq!(
            next(&mut ws).await.unwrap_or_default()["type"],
            "subscribed"
        );
        sockets.push(ws);
    }
    let mut extra = connect(&url).await;
    send(&mut extra, subscribe(&a, 0)).await;
    let refused = next(&mut extra).await.unwrap_or_default();
    assert_eq!(refused["code"], "quota_exceeded", "{refused}");
    // One closes: a place is free again.
    let mut first = sockets.remove(0);
    let _ = first.close(None).await;
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
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
    let mut ws = connect(&url).await;
    for n in 0..21 {
        let b = c.new_address().await;
        send(&mut ws, subscribe(&b, 0)).await;
        let f = next(&mut ws).await.unwrap_or_default();
        let want = if n < 20 { "subscribed" } else { "error" };
        assert_eq!(f["type"], want, "subscription {n}: {f}");
    }
}

/// Binary frames, invalid JSON, `subscribes` subscribes and a 1 MB frame: refused or closed,
/// and the deployment goes on answering (`health` is a URL that must still answer 200).
pub async fn hostile_frames_never_crash_anything(
    c: &Client, d: Deployment, subscribes: usize, health: &str,
) {
    let a = c.new_address().await;
    let url = ws_url(&a);
    let mut ws = connect(&url).await;
    ws.send(Message::Binary(vec![0u8, 159, 146, 150].into()))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    match d {
        Deployment::Serve => assert_eq!(
            next(&mut ws).await.unwrap_or_default()["code"],
            "invalid_request"
        ),
        Deployment::Gateway => {
            assert!(next(&mut ws).await.is_none(), "a binary frame closes");
            ws = connect(&url).await;
        }
    }
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
    // Many subscribes: the same address (answered each time), and bogus ones.
    for n in 0..subscribes {
        let frame = if n % 2 == 0 {
            subscribe(&a, 0)
        } else {
            json!({"action": "subscribe", "address_id": format!("addr_{n}"), "read_token": "x"})
        };
        send(&mut ws, frame).await;
    }
    let mut answers = 0;
    while answers < subscribes {
        let f = next(&mut ws).await.unwrap_or_default();
        assert!(
            f["type"] == "subscribed" || f["code"] == "unauthorized",
            "{f}"
        );
        answers += 1;
    }
    // A 1 MB frame closes the socket; the deployment goes on.
    let _ = ws.send(Message::Text("x".repeat(1 << 20).into())).await;
    assert!(next(&mut ws).await.is_none(), "the socket is closed");
    c.get(health, None)
        .await
        .expect_status(200, "the deployment still answers");
    let mut again = connect(&url).await;
    send(&mut again, subscribe(&a, 0)).await;
    assert_eq!(
        next(&mut again).await.unwrap_or_default()["type"],
        "subscribed"
    );
}
