//! The proxy against a tiny recording upstream: each kind of fault behaves as specified, the
//! relay is faithful, rules and the admin endpoints work, and the binary prints its URL first
//! and its stats on SIGTERM.

use std::io::{BufRead, BufReader, Read as _};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentaddress_faultproxy::{Action, FaultConfig, FaultProxy, Rule};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the upstream received.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path_and_query: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

/// The body the upstream answers with: not UTF-8, so a lossy relay would show.
const UPSTREAM_BODY: &[u8] = b"\x00\xff{\"ok\":true}\xfe";

struct Upstream {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Upstream {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind upstream");
        let addr = listener.local_addr().expect("upstream addr");
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let record = Arc::clone(&seen);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let record = Arc::clone(&record);
                tokio::spawn(async move {
                    let service = service_fn(move |req: Request<Incoming>| {
                        let record = Arc::clone(&record);
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body.collect().await?.to_bytes();
                            record.lock().expect("lock").push(Seen {
                                method: parts.method.to_string(),
                                path_and_query: parts
                                    .uri
                                    .path_and_query()
                                    .map(|p| p.to_string())
                                    .unwrap_or_default(),
                                headers: parts
                                    .headers
                                    .iter()
                                    .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                                    .collect(),
                                body: body.to_vec(),
                            });
                            let resp = Response::builder()
                                .status(StatusCode::CREATED)
                                .header("x-upstream", "yes")
                                .header("content-type", "application/x-amz-json-1.0")
                                .body(Full::new(Bytes::from_static(UPSTREAM_BODY)))
                                .expect("response");
                            Ok::<_, hyper::Error>(resp)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self { addr, seen }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }
}

async fn proxy(upstream: &Upstream, config: FaultConfig) -> FaultProxy {
    FaultProxy::start(
        "127.0.0.1:0".parse().expect("addr"),
        &upstream.url(),
        config,
    )
    .await
    .expect("start the proxy")
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client")
}

async fn call(
    proxy: &FaultProxy, op: &str, body: &'static [u8],
) -> Result<reqwest::Response, reqwest::Error> {
    client()
        .post(format!("{}/", proxy.url()))
        .header("x-amz-target", format!("DynamoDB_20120810.{op}"))
        .header("content-type", "application/x-amz-json-1.0")
        .body(body)
        .send()
        .await
}

#[tokio::test]
async fn relays_status_headers_and_bodies_byte_for_byte() {
    let upstream = Upstream::start().await;
    let proxy = proxy(&upstream, FaultConfig::passthrough(1)).await;
    let body: &'static [u8] = b"{\"TableName\":\"t\"}\x00\xc3\x28 raw";
    let resp = client()
        .post(format!("{}/some/path?x=1&y=%20", proxy.url()))
        .header("x-amz-target", "DynamoDB_20120810.GetItem")
        .header(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=test/20240101/us-east-1/dynamodb/aws4_request, \
             SignedHeaders=host;x-amz-date, Signature=abc",
        )
        .header("x-amz-date", "20240101T000000Z")
        .body(body)
        .send()
        .await
        .expect("relayed");
    assert_eq!(resp.status(), StatusCode::CREATED);
    assert_eq!(
        resp.headers().get("x-upstream").map(|v| v.as_bytes()),
        Some(&b"yes"[..])
    );
    assert_eq!(
        resp.bytes().await.expect("body").as_ref(),
        UPSTREAM_BODY,
        "the upstream's body, byte for byte"
    );
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].path_and_query, "/some/path?x=1&y=%20");
    assert_eq!(seen[0].body, body, "the request body, byte for byte");
    let header = |name: &str| {
        seen[0]
            .headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(
        header("x-amz-target").as_deref(),
        Some(&b"DynamoDB_20120810.GetItem"[..])
    );
    assert!(header("authorization").is_some_and(|v| v.ends_with(b"Signature=abc")));
    assert_eq!(
        header("x-amz-date").as_deref(),
        Some(&b"20240101T000000Z"[..])
    );
    let stats = proxy.shutdown().await;
    assert_eq!((stats.requests, stats.forwarded), (1, 1));
    assert_eq!((stats.failed_before.total, stats.dropped_after), (0, 0));
    assert_eq!(stats.operations["GetItem"].requests, 1);
}

#[tokio::test]
async fn fail_rate_one_answers_retryable_errors_without_forwarding() {
    let upstream = Upstream::start().await;
    let proxy = proxy(&upstream, FaultConfig::rates(1.0, 0.0, 1)).await;
    let mut answers = Vec::new();
    for _ in 0..3 {
        let resp = call(&proxy, "PutItem", b"{}").await.expect("answered");
        let status = resp.status().as_u16();
        assert_eq!(
            resp.headers()
                .get("content-type")
                .map(|v| v.as_bytes().to_vec()),
            Some(b"application/x-amz-json-1.0".to_vec())
        );
        let v: Value = resp.json().await.expect("JSON error body");
        answers.push((status, v["__type"].as_str().unwrap_or("").to_owned()));
        assert_eq!(v["message"], "injected");
    }
    assert_eq!(
        answers,
        vec![
            (
                500,
                "com.amazonaws.dynamodb.v20120810#InternalServerError".to_owned()
            ),
            (
                400,
                "com.amazonaws.dynamodb.v20120810#ThrottlingException".to_owned()
            ),
            (
                400,
                "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"
                    .to_owned()
            ),
        ]
    );
    assert!(upstream.seen().is_empty(), "nothing was forwarded");
    let stats = proxy.shutdown().await;
    assert_eq!((stats.requests, stats.forwarded), (3, 0));
    assert_eq!(stats.failed_before.total, 3);
    assert_eq!(
        (
            stats.failed_before.internal_server_error,
            stats.failed_before.throttling,
            stats.failed_before.provisioned_throughput_exceeded
        ),
        (1, 1, 1)
    );
    assert_eq!(stats.operations["PutItem"].failed_before, 3);
}

#[tokio::test]
async fn drop_rate_one_forwards_then_closes_without_answering() {
    let upstream = Upstream::start().await;
    let proxy = proxy(&upstream, FaultConfig::rates(0.0, 1.0, 1)).await;
    let err = call(&proxy, "TransactWriteItems", b"{\"a\":1}")
        .await
        .expect_err("the client sees no response");
    assert!(
        err.is_request() || err.is_body() || err.is_decode(),
        "a transport error, not a status: {err:?}"
    );
    assert!(err.status().is_none());

    // On the wire: the request is read and forwarded, and not one byte comes back.
    let mut raw = TcpStream::connect(proxy.addr()).await.expect("connect");
    raw.write_all(
        b"POST / HTTP/1.1\r\nhost: x\r\nx-amz-target: DynamoDB_20120810.PutItem\r\n\
          content-length: 2\r\n\r\n{}",
    )
    .await
    .expect("write");
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), raw.read_to_end(&mut got))
        .await
        .expect("the proxy closes the connection");
    assert!(
        got.is_empty(),
        "no response bytes: {:?}",
        String::from_utf8_lossy(&got)
    );
    if let Err(e) = read {
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
    }

    let seen = upstream.seen();
    assert_eq!(seen.len(), 2, "both requests reached the upstream");
    assert_eq!(seen[0].body, b"{\"a\":1}");
    let stats = proxy.shutdown().await;
    assert_eq!(
        (stats.requests, stats.forwarded, stats.dropped_after),
        (2, 2, 2)
    );
    assert_eq!(stats.operations["TransactWriteItems"].dropped_after, 1);
    assert_eq!(stats.operations["PutItem"].dropped_after, 1);
}

#[tokio::test]
async fn rules_and_the_admin_endpoints() {
    let upstream = Upstream::start().await;
    let proxy = proxy(&upstream, FaultConfig::passthrough(1)).await;
    let admin = |path: &str| format!("{}/__faultproxy/{path}", proxy.url());
    let resp = client()
        .post(admin("config"))
        .body(r#"{"rules": [{"operation": "PutItem", "action": "drop", "count": 1}]}"#)
        .send()
        .await
        .expect("config");
    assert_eq!(resp.status(), StatusCode::OK);
    let view: Value = resp.json().await.expect("json");
    assert_eq!(view["rules"][0]["operation"], "PutItem");

    assert_eq!(
        call(&proxy, "GetItem", b"{}")
            .await
            .expect("passes")
            .status(),
        StatusCode::CREATED
    );
    assert!(
        call(&proxy, "PutItem", b"{}").await.is_err(),
        "the first PutItem is dropped"
    );
    assert_eq!(
        call(&proxy, "PutItem", b"{}")
            .await
            .expect("passes")
            .status(),
        StatusCode::CREATED,
        "the second PutItem passes"
    );
    proxy.push_rule(Rule::new("UpdateItem", Action::Throttling, 2));
    for _ in 0..2 {
        let r = call(&proxy, "UpdateItem", b"{}").await.expect("answered");
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    }
    assert_eq!(
        call(&proxy, "UpdateItem", b"{}")
            .await
            .expect("passes")
            .status(),
        StatusCode::CREATED
    );
    assert_eq!(upstream.seen().len(), 4, "GetItem, 2 PutItem, 1 UpdateItem");

    let bad = client()
        .post(admin("config"))
        .body(r#"{"fail_rate": 0.8, "drop_rate": 0.8}"#)
        .send()
        .await
        .expect("answered");
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let ok = client()
        .post(admin("config"))
        .body(r#"{"fail_rate": 1.0}"#)
        .send()
        .await
        .expect("answered");
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(
        call(&proxy, "Query", b"{}")
            .await
            .expect("answered")
            .status(),
        StatusCode::INTERNAL_SERVER_ERROR
    );

    let stats: Value = client()
        .get(admin("stats"))
        .send()
        .await
        .expect("stats")
        .json()
        .await
        .expect("json");
    assert_eq!(
        stats["requests"], 7,
        "admin requests are not counted: {stats}"
    );
    assert_eq!(stats["dropped_after"], 1);
    assert_eq!(stats["failed_before"]["throttling"], 2);
    assert_eq!(stats["failed_before"]["internal_server_error"], 1);
    assert_eq!(stats["operations"]["PutItem"]["requests"], 2);
    assert_eq!(stats["operations"]["PutItem"]["dropped_after"], 1);
    assert_eq!(stats["operations"]["UpdateItem"]["failed_before"], 2);
    assert_eq!(
        client()
            .get(admin("nope"))
            .send()
            .await
            .expect("answered")
            .status(),
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_502() {
    let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = closed.local_addr().expect("addr");
    drop(closed);
    let proxy = FaultProxy::start(
        "127.0.0.1:0".parse().expect("addr"),
        &format!("http://{addr}"),
        FaultConfig::passthrough(1),
    )
    .await
    .expect("start");
    let resp = call(&proxy, "GetItem", b"{}").await.expect("answered");
    assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(proxy.shutdown().await.upstream_errors, 1);
    assert!(FaultProxy::start(
        "127.0.0.1:0".parse().expect("addr"),
        "https://example.invalid/x",
        FaultConfig::passthrough(1)
    )
    .await
    .is_err());
}

#[tokio::test]
async fn the_binary_prints_its_url_first_and_its_stats_on_sigterm() {
    let upstream = Upstream::start().await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentaddress-faultproxy"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &upstream.url(),
            "--fail-rate",
            "0",
            "--drop-rate",
            "0",
            "--seed",
            "7",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the binary");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    stdout.read_line(&mut first).expect("first line");
    let url = first
        .trim_end()
        .strip_prefix("faultproxy listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let resp = client()
        .post(format!("{url}/"))
        .header("x-amz-target", "DynamoDB_20120810.ListTables")
        .body("{}")
        .send()
        .await
        .expect("relayed");
    assert_eq!(resp.status(), StatusCode::CREATED);
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = child.wait().expect("wait");
    assert!(exit.success(), "exit 0 on SIGTERM: {exit:?}");
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).expect("rest of stdout");
    let stats = rest
        .lines()
        .find(|l| l.starts_with("faultproxy stats: "))
        .unwrap_or_else(|| panic!("no stats line in {rest:?}"));
    assert!(
        stats.contains("requests=1 forwarded=1 failed_before=0"),
        "{stats}"
    );
    assert!(stats.contains("ListTables=1/0/0"), "{stats}");
}
