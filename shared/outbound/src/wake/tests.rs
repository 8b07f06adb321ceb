//! The sender against receivers on real sockets: a small HTTP/1.1 server written on a
//! `TcpListener`, so each test says exactly what the receiver does (answers, redirects,
//! stalls, floods).

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What a receiver was sent: each request's head (as text) and body.
type Seen = Arc<std::sync::Mutex<Vec<(String, Vec<u8>)>>>;

/// What the receiver does with a request.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Answers `status` (with `Retry-After: 120` on 429).
    Answer(u16),
    /// Answers 302 to another path of itself.
    Redirect,
    /// Reads the request and never answers.
    Stall,
    /// Answers 200 with a 50 MB body, written 64 KiB at a time.
    Flood,
}

struct Receiver {
    url: String,
    /// Each request received: its head (request line and headers) and its body.
    requests: Seen,
    /// Bytes of answer body written before the client went away (Flood).
    written: Arc<AtomicUsize>,
}

async fn receiver(behaviour: Behaviour) -> Receiver {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let requests = Arc::new(std::sync::Mutex::new(Vec::new()));
    let written = Arc::new(AtomicUsize::new(0));
    let (seen, count) = (requests.clone(), written.clone());
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            let (seen, count) = (seen.clone(), count.clone());
            tokio::spawn(async move { serve_one(socket, behaviour, port, seen, count).await });
        }
    });
    Receiver {
        url: format!("http://127.0.0.1:{port}/wake/path"),
        requests,
        written,
    }
}

async fn serve_one(
    mut socket: TcpStream, behaviour: Behaviour, port: u16, seen: Seen, written: Arc<AtomicUsize>,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let Ok(n) = socket.read(&mut chunk).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let length = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .and_then(|v| v.trim().parse::<usize>().ok())
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    seen.lock()
        .expect("requests")
        .push((head, buf[head_end..head_end + length].to_vec()));
    match behaviour {
        Behaviour::Answer(status) => {
            let extra = if status == 429 {
                "retry-after: 120\r\n"
            } else {
                ""
            };
            let _ = socket
                .write_all(
                    format!("HTTP/1.1 {status} X\r\n{extra}content-length: 2\r\n\r\nok").as_bytes(),
                )
                .await;
        }
        Behaviour::Redirect => {
            let _ = socket
                .write_all(
                    format!(
                        "HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:{port}/elsewhere\r\ncontent-length: 0\r\n\r\n"
                    )
                    .as_bytes(),
                )
                .await;
        }
        Behaviour::Stall => {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        Behaviour::Flood => {
            let total = 50 << 20;
            if socket
                .write_all(format!("HTTP/1.1 200 OK\r\ncontent-length: {total}\r\n\r\n").as_bytes())
                .await
                .is_err()
            {
                return;
            }
            let block = vec![b'x'; 64 * 1024];
            let mut sent = 0;
            while sent < total {
                if socket.write_all(&block).await.is_err() {
                    return;
                }
                sent += block.len();
                written.fetch_add(block.len(), Ordering::SeqCst);
            }
        }
    }
}

fn headers() -> Vec<(String, String)> {
    vec![
        ("content-type".into(), "application/json".into()),
        ("webhook-id".into(), "hk_1_7".into()),
        ("authorization".into(), "Bearer s3cret".into()),
    ]
}

#[tokio::test]
async fn a_wake_is_posted_with_its_headers_and_body() {
    let r = receiver(Behaviour::Answer(204)).await;
    let sender = WakeSender::new(true).expect("sender");
    let answered = sender
        .send(&r.url, &headers(), br#"{"type":"address.wake"}"#.to_vec())
        .await
        .expect("answered");
    assert_eq!(answered.status, 204);
    let seen = r.requests.lock().expect("requests").clone();
    assert_eq!(seen.len(), 1);
    let (head, body) = &seen[0];
    assert!(head.starts_with("POST /wake/path HTTP/1.1\r\n"), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(
        lower.contains("\r\ncontent-type: application/json\r\n"),
        "{head}"
    );
    assert!(lower.contains("\r\nwebhook-id: hk_1_7\r\n"), "{head}");
    assert!(
        lower.contains("\r\nauthorization: bearer s3cret\r\n"),
        "{head}"
    );
    assert!(lower.contains("\r\nuser-agent: agentaddress/"), "{head}");
    assert_eq!(body, br#"{"type":"address.wake"}"#);
}

#[tokio::test]
async fn the_answer_and_its_retry_after_are_read() {
    let r = receiver(Behaviour::Answer(429)).await;
    let sender = WakeSender::new(true).expect("sender");
    let answered = sender
        .send(&r.url, &headers(), b"{}".to_vec())
        .await
        .expect("answered");
    assert_eq!(answered.status, 429);
    assert_eq!(answered.retry_after.as_deref(), Some("120"));
}

#[tokio::test]
async fn redirects_are_answers_not_followed() {
    let r = receiver(Behaviour::Redirect).await;
    let sender = WakeSender::new(true).expect("sender");
    let answered = sender
        .send(&r.url, &headers(), b"{}".to_vec())
        .await
        .expect("answered");
    assert_eq!(answered.status, 302);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        r.requests.lock().expect("requests").len(),
        1,
        "one request only"
    );
}

#[tokio::test]
async fn a_receiver_that_never_answers_runs_out_of_time() {
    let r = receiver(Behaviour::Stall).await;
    let sender = WakeSender::with_timeout(true, Duration::from_secs(1)).expect("sender");
    let started = Instant::now();
    let e = sender
        .send(&r.url, &headers(), b"{}".to_vec())
        .await
        .expect_err("no answer");
    assert!(
        matches!(&e, NotSent::Unreachable(m) if m.contains("no answer")),
        "{e:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn at_most_64_kib_of_an_answer_is_read() {
    let r = receiver(Behaviour::Flood).await;
    let sender = WakeSender::new(true).expect("sender");
    let answered = sender
        .send(&r.url, &headers(), b"{}".to_vec())
        .await
        .expect("answered");
    assert_eq!(answered.status, 200);
    drop(sender);
    // The client stopped reading and closed: the receiver could write what the socket buffers
    // hold, not the 50 MB it offered.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let written = r.written.load(Ordering::SeqCst);
    assert!(written < 16 << 20, "the receiver wrote {written} bytes");
}

#[tokio::test]
async fn private_receivers_are_refused_unless_allowed() {
    let r = receiver(Behaviour::Answer(200)).await;
    let sender = WakeSender::new(false).expect("sender");
    // http:// to a loopback literal: refused by the URL's own rule, nothing sent.
    let e = sender
        .send(&r.url, &headers(), b"{}".to_vec())
        .await
        .expect_err("refused");
    assert!(matches!(e, NotSent::Refused(_)), "{e:?}");
    let https = r.url.replace("http://", "https://");
    let e = sender
        .send(&https, &headers(), b"{}".to_vec())
        .await
        .expect_err("refused");
    assert!(
        matches!(&e, NotSent::Refused(m) if m.contains("not a public address")),
        "{e:?}"
    );
    assert!(sender.check("https://localhost/").await.is_err());
    assert!(r.requests.lock().expect("requests").is_empty());
}

/// A name (not a literal) that resolves to loopback gets past the URL's rule and is refused by
/// the resolver the client connects through: this machine's own host name.
#[tokio::test]
async fn a_name_resolving_to_a_private_address_is_refused_at_connect() {
    let host = std::fs::read_to_string("/etc/hostname")
        .expect("this machine's host name (/etc/hostname)")
        .trim()
        .to_owned();
    let resolved = PublicOnly::new(true, system_lookup())
        .lookup(&host)
        .await
        .expect("the host name resolves");
    assert!(
        resolved.iter().any(|a| !is_public(a.ip())),
        "this test needs {host} to resolve to a private address: {resolved:?}"
    );
    let r = receiver(Behaviour::Answer(200)).await;
    let port = r
        .url
        .split(':')
        .nth(2)
        .and_then(|p| p.split('/').next())
        .expect("port");
    let url = format!("https://{host}:{port}/wake");
    assert!(
        check_hook_url(&url, false).is_ok(),
        "the URL's own rule passes {url}"
    );
    let sender = WakeSender::new(false).expect("sender");
    let e = sender
        .send(&url, &headers(), b"{}".to_vec())
        .await
        .expect_err("refused");
    assert!(
        matches!(&e, NotSent::Refused(m) if m.contains("resolves to") && m.contains("not a public address")),
        "{e:?}"
    );
    let refused = sender.check(&url).await.expect_err("refused at creation").0;
    assert!(refused.contains("resolves to"), "{refused}");
    assert!(
        r.requests.lock().expect("requests").is_empty(),
        "nothing reached it"
    );
}

#[tokio::test]
async fn an_unresolvable_name_is_unreachable() {
    let sender = WakeSender::with_timeout(false, Duration::from_secs(5)).expect("sender");
    let e = sender
        .send(
            "https://no-such-host.invalid/wake",
            &headers(),
            b"{}".to_vec(),
        )
        .await
        .expect_err("unreachable");
    assert!(matches!(e, NotSent::Unreachable(_)), "{e:?}");
}

/// DNS rebinding: a name that resolves to a public address when the hook is made and to
/// loopback when the wake is sent is refused at the send, before any connection.
#[tokio::test]
async fn a_name_that_turns_private_after_creation_is_refused_at_send() {
    let r = receiver(Behaviour::Answer(200)).await;
    let port = url::Url::parse(&r.url).expect("url").port().expect("port");
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let lookup: Lookup = Arc::new(move |_host: String| {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let ip: std::net::IpAddr = if n == 0 {
                std::net::Ipv4Addr::new(93, 184, 216, 34).into()
            } else {
                std::net::Ipv4Addr::LOCALHOST.into()
            };
            Ok(vec![SocketAddr::new(ip, 0)])
        })
    });
    let sender = WakeSender::with_lookup(false, Duration::from_secs(5), lookup).expect("sender");
    let url = format!("https://rebinding.example:{port}/wake");
    sender.check(&url).await.expect("public at creation");
    let e = sender
        .send(&url, &headers(), b"{}".to_vec())
        .await
        .expect_err("refused at send");
    assert!(
        matches!(&e, NotSent::Refused(m) if m.contains("resolves to 127.0.0.1")),
        "{e:?}"
    );
    assert!(calls.load(Ordering::SeqCst) >= 2, "resolved again at send");
    assert!(
        r.requests.lock().expect("requests").is_empty(),
        "nothing reached it"
    );
}
