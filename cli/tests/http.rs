//! The HTTP transport of a real `agentaddress serve`, over real sockets:
//! - an HTTP/1.1 answer given before the request body was read (413 on a declared length over
//!   the limit, 401/404 on a wrong inbox URL) says `Connection: close` and closes; an answer
//!   that read its body keeps the connection for the next request;
//! - a client that sends a whole over-limit body still reads the 413 (the server lingers on
//!   close, reading what still arrives, instead of resetting the connection);
//! - a pooling client (reqwest) never sends a request on a connection the server is closing;
//! - HTTP/2 with prior knowledge (h2c) serves the same API on the same port, and many long
//!   polls share one connection, each woken by its own delivery; SIGTERM answers them and the
//!   server exits although the client keeps its connection.

mod common;

use std::time::Duration;

use agentaddress_blackbox::Client;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn server() -> (tokio::process::Child, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (child, base) =
        common::spawn_serve(&dir.path().join("agentaddress.db"), "127.0.0.1:0", &[]).await;
    (child, base, dir)
}

/// Host and port of a base URL such as `http://127.0.0.1:1234`.
fn authority(base: &str) -> &str {
    base.strip_prefix("http://")
        .unwrap_or_else(|| panic!("not an http URL: {base}"))
}

/// Path part of an absolute URL.
fn path_of(url: &str) -> String {
    let rest = authority(url);
    rest.find('/')
        .map(|i| rest[i..].to_owned())
        .unwrap_or_else(|| panic!("no path in {url}"))
}

/// One HTTP/1.1 answer read off a raw socket.
struct Answer {
    status: u16,
    /// Header names lower-cased.
    headers: Vec<(String, String)>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one answer (head and a `Content-Length` body) from `sock`, within 10 s.
async fn read_answer(sock: &mut TcpStream) -> Answer {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let mut lines = head.split("\r\n");
            let status_line = lines.next().unwrap_or_default();
            let status = status_line
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
            let headers: Vec<(String, String)> = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
                .collect();
            let len: usize = headers
                .iter()
                .find(|(k, _)| k == "content-length")
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or_else(|| panic!("answer without Content-Length: {head}"));
            while buf.len() < end + 4 + len {
                let n = tokio::time::timeout_at(deadline, sock.read(&mut chunk))
                    .await
                    .unwrap_or_else(|_| panic!("the answer's body did not arrive"))
                    .expect("reading the answer");
                assert!(n > 0, "the connection closed inside the answer's body");
                buf.extend_from_slice(&chunk[..n]);
            }
            assert_eq!(
                buf.len(),
                end + 4 + len,
                "bytes after the answer that nobody asked for"
            );
            return Answer { status, headers };
        }
        let n = tokio::time::timeout_at(deadline, sock.read(&mut chunk))
            .await
            .unwrap_or_else(|_| panic!("no answer within 10 s; got {buf:?}"))
            .expect("reading the answer");
        assert!(n > 0, "the connection closed before an answer");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Sends `POST path` with `body` on `sock` (writing as much of the body as the server takes:
/// it may answer and stop reading early).
async fn post(sock: &mut TcpStream, host: &str, path: &str, body: &[u8]) {
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    sock.write_all(head.as_bytes())
        .await
        .expect("writing the request head");
    // The server may refuse from the head and close: a failed body write is expected then.
    let _ = tokio::time::timeout(Duration::from_secs(5), sock.write_all(body)).await;
}

/// The socket reaches end-of-file (or a reset) within 5 s: the server closed it, and sent
/// nothing after its answer.
async fn expect_closed(sock: &mut TcpStream, what: &str) {
    let mut chunk = [0u8; 4096];
    match tokio::time::timeout(Duration::from_secs(5), sock.read(&mut chunk)).await {
        Err(_) => panic!("{what}: the server kept the connection open"),
        Ok(Ok(0)) | Ok(Err(_)) => {}
        Ok(Ok(n)) => panic!(
            "{what}: unexpected bytes after the answer: {:?}",
            String::from_utf8_lossy(&chunk[..n])
        ),
    }
}

#[tokio::test]
async fn an_answer_before_the_body_was_read_closes_the_connection_and_says_so() {
    let (_child, base, _dir) = server().await;
    let host = authority(&base).to_owned();
    let c = Client::new(&base);
    let a = c.new_address().await;
    let limit = c.limits(&a).await["max_inbox_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no max_inbox_bytes in the limits"));
    let inbox = path_of(&a.inbox_url);
    let too_big = vec![b'a'; usize::try_from(limit).unwrap_or(usize::MAX) + 1];

    // 413 from the declared length: refused before reading, so the connection ends.
    let mut sock = TcpStream::connect(&host).await.expect("connect");
    post(&mut sock, &host, &inbox, &too_big).await;
    let ans = read_answer(&mut sock).await;
    assert_eq!(ans.status, 413);
    assert_eq!(ans.header("connection"), Some("close"), "413 over HTTP/1.1");
    expect_closed(&mut sock, "after a 413").await;

    // A wrong inbox secret is refused from the path, with 100 KB of body unread.
    let wrong = format!("{}x", inbox.trim_end_matches(|ch: char| ch != '/'));
    let mut sock = TcpStream::connect(&host).await.expect("connect");
    post(&mut sock, &host, &wrong, &vec![b'b'; 100_000]).await;
    let ans = read_answer(&mut sock).await;
    assert!(
        ans.status == 401 || ans.status == 404,
        "a wrong inbox secret: {}",
        ans.status
    );
    assert_eq!(ans.header("connection"), Some("close"), "wrong inbox URL");
    expect_closed(&mut sock, "after a refused inbox URL").await;

    // A body read to its end keeps the connection: two deliveries on one socket.
    let mut sock = TcpStream::connect(&host).await.expect("connect");
    for n in 0..2 {
        post(&mut sock, &host, &inbox, format!("delivery {n}").as_bytes()).await;
        let ans = read_answer(&mut sock).await;
        assert_eq!(ans.status, 202, "delivery {n}");
        assert_eq!(ans.header("connection"), None, "delivery {n} kept alive");
    }
    let r = c
        .get(&format!("{}/events?after=0", a.root), Some(&a.token))
        .await;
    r.expect_status(200, "read the feed");
    let texts: Vec<&str> = r.json["events"]
        .as_array()
        .map(|evs| {
            evs.iter()
                .filter_map(|e| e["data"]["text"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(texts, ["delivery 0", "delivery 1"], "{}", r.text);
}

/// A client that sends all of an over-limit body (no `Expect: 100-continue`) while the server
/// has already answered 413 and closes: the answer must reach it. A server that closes with
/// the body's bytes unread in its socket makes the kernel answer them with a reset, and the
/// reset destroys the 413 before the client reads it; `serve` reads and discards what still
/// arrives, for a while, after it shuts its side.
#[tokio::test]
async fn a_refused_body_does_not_reset_the_answer() {
    let (_child, base, _dir) = server().await;
    let c = Client::new(&base);
    let a = c.new_address().await;
    let host = authority(&base).to_owned();
    let path = path_of(&a.inbox_url);
    let body = vec![b'a'; 4_000_000];
    for round in 0..20 {
        let sock = TcpStream::connect(&host).await.expect("connect");
        let (mut rd, mut wr) = sock.into_split();
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        let body = body.clone();
        let writer = tokio::spawn(async move {
            let _ = wr.write_all(head.as_bytes()).await;
            // The server may refuse before reading it: a failed write is its business.
            let _ = wr.write_all(&body).await;
            wr
        });
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), rd.read_to_end(&mut got))
            .await
            .unwrap_or_else(|_| panic!("round {round}: the server neither answered nor closed"));
        let text = String::from_utf8_lossy(&got);
        assert!(
            read.is_ok() && text.starts_with("HTTP/1.1 413 "),
            "round {round}: the 413 did not arrive whole ({read:?}): {text:?}"
        );
        assert!(
            text.to_ascii_lowercase().contains("connection: close"),
            "{text}"
        );
        let _ = writer.await;
    }
    // The same through a pooling client, which reports a failed body write as a failed request.
    for round in 0..20 {
        c.send(
            "POST",
            &a.inbox_url,
            None,
            &[("content-type", "text/plain")],
            Some(body.clone()),
        )
        .await
        .expect_error(413, "payload_too_large", &format!("round {round}"));
    }
}

#[tokio::test]
async fn a_pooling_client_never_reuses_a_closing_connection() {
    let (_child, base, _dir) = server().await;
    // One connection pool for everything, as an agent's HTTP client has.
    let c = Client::new(&base);
    let a = c.new_address().await;
    let limit = c.limits(&a).await["max_inbox_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no max_inbox_bytes in the limits"));
    let too_big = vec![b'a'; usize::try_from(limit).unwrap_or(usize::MAX) + 1];
    for round in 0..25 {
        c.send(
            "POST",
            &a.inbox_url,
            None,
            &[("content-type", "text/plain")],
            Some(too_big.clone()),
        )
        .await
        .expect_error(413, "payload_too_large", "over the inbox limit");
        // The next request goes out at once; before `Connection: close` it now and then went
        // out on the connection the server was closing, and failed to send.
        c.send(
            "POST",
            &a.inbox_url,
            None,
            &[("content-type", "text/plain")],
            Some(format!("round {round}").into_bytes()),
        )
        .await
        .expect_status(202, "the delivery after a 413");
    }
    let r = c
        .get(
            &format!("{}/events?after=0&limit=100", a.root),
            Some(&a.token),
        )
        .await;
    r.expect_status(200, "read the feed");
    assert_eq!(r.json["events"].as_array().map(Vec::len), Some(25));
}

/// An HTTP/2 client with prior knowledge: every request is a stream of one connection.
fn h2c() -> reqwest::Client {
    reqwest::Client::builder()
        .http2_prior_knowledge()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("cannot build an HTTP/2 client")
}

async fn send_h2(req: reqwest::RequestBuilder, what: &str) -> (u16, Value) {
    let resp = req.send().await.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(resp.version(), reqwest::Version::HTTP_2, "{what}");
    let status = resp.status().as_u16();
    let body = resp
        .bytes()
        .await
        .unwrap_or_else(|e| panic!("{what}: reading the answer: {e}"));
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// An address created over HTTP/2: its events URL, inbox URL and read token.
struct H2Address {
    events: String,
    inbox: String,
    token: String,
}

async fn create_h2(http: &reqwest::Client, base: &str, name: &str) -> H2Address {
    let (status, created) = send_h2(
        http.post(format!("{base}/api/v1/addresses"))
            .json(&json!({ "name": name })),
        "create",
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let s = |p: &str| {
        created
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no {p} in {created}"))
            .to_owned()
    };
    H2Address {
        events: s("/endpoints/events_url"),
        inbox: s("/endpoints/inbox_url"),
        token: s("/credentials/read_token"),
    }
}

#[tokio::test]
async fn http2_with_prior_knowledge_serves_many_long_polls_on_one_connection() {
    let (_child, base, _dir) = server().await;
    let http = h2c();
    let (status, health) = send_h2(http.get(format!("{base}/healthz")), "healthz").await;
    assert_eq!(status, 200);
    assert_eq!(health["status"], "ok");

    // Addresses over HTTP/2 (within the creation limit of a fresh server).
    let mut addrs = Vec::new();
    for n in 0..8 {
        let a = create_h2(&http, &base, &format!("h2 {n}")).await;
        assert!(
            a.inbox.starts_with(&format!("{base}/api/v1/inbox/")),
            "URLs name the host the client used (HTTP/2's :authority): {}",
            a.inbox
        );
        addrs.push((a.events, a.inbox, a.token));
    }

    // A long poll on each, all streams of the one connection, all waiting at once.
    let polls: Vec<_> = addrs
        .iter()
        .map(|(events, _, token)| {
            let http = http.clone();
            let req = http
                .get(format!("{events}?after=0&wait=25"))
                .bearer_auth(token);
            tokio::spawn(async move {
                let started = tokio::time::Instant::now();
                let (status, body) = send_h2(req, "long poll").await;
                (status, body, started.elapsed())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (n, (_, inbox, _)) in addrs.iter().enumerate() {
        let (status, body) = send_h2(http.post(inbox).json(&json!({"n": n})), "delivery").await;
        assert_eq!(status, 202, "{body}");
    }
    for (n, poll) in polls.into_iter().enumerate() {
        let (status, body, took) = poll.await.unwrap_or_else(|e| panic!("poll task {n}: {e}"));
        assert_eq!(status, 200, "poll {n}: {body}");
        let events = body["events"].as_array().cloned().unwrap_or_default();
        assert_eq!(events.len(), 1, "poll {n}: {body}");
        assert_eq!(events[0]["data"]["n"], n, "poll {n} got its own delivery");
        assert!(
            took < Duration::from_secs(20),
            "poll {n} was answered by its delivery, not its timeout ({took:?})"
        );
    }

    // Refusals over HTTP/2 are the same answers; the connection goes on serving.
    let (_, inbox, _) = &addrs[0];
    let (status, body) = send_h2(
        http.post(inbox).body(vec![b'a'; 2_000_000]),
        "too big over HTTP/2",
    )
    .await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "payload_too_large");
    let (status, _) = send_h2(http.get(format!("{base}/healthz")), "after a 413").await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn sigterm_answers_http2_long_polls_and_exits_cleanly() {
    let (mut child, base, _dir) = server().await;
    let http = h2c();
    let mut polls = Vec::new();
    for n in 0..4 {
        let H2Address { events, token, .. } =
            create_h2(&http, &base, &format!("h2 shutdown {n}")).await;
        let req = http
            .get(format!("{events}?after=0&wait=25"))
            .bearer_auth(token);
        polls.push(tokio::spawn(send_h2(req, "long poll at shutdown")));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let signalled = tokio::time::Instant::now();
    let pid = child
        .id()
        .unwrap_or_else(|| panic!("the server exited early"));
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success());
    for (n, poll) in polls.into_iter().enumerate() {
        let (status, body) = poll.await.unwrap_or_else(|e| panic!("poll task {n}: {e}"));
        assert_eq!(status, 200, "poll {n} is answered at shutdown: {body}");
        assert_eq!(body["events"], json!([]), "poll {n}");
    }
    assert!(
        signalled.elapsed() < Duration::from_secs(5),
        "answered at shutdown, not at the wait deadline"
    );
    // The client still holds its HTTP/2 connection open: the server must close it and exit.
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap_or_else(|_| panic!("the server did not exit within 10 s of SIGTERM"))
        .expect("wait");
    assert!(status.success(), "clean exit: {status}");
    drop(http);
}
