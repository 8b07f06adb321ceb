//! The gateway emulator over real sockets: a WebSocket client (tokio-tungstenite), the AWS SDK's
//! management client, plain HTTP, and a small Lambda Invoke API (standing in for `cargo lambda
//! watch`) that records every event and answers as each test scripts.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentaddress_wsgateway::{start, Config, Running};
use aws_lambda_events::apigw::ApiGatewayWebsocketProxyRequest;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Client = WebSocketStream<MaybeTlsStream<TcpStream>>;
type Script = Arc<dyn Fn(&Value) -> (StatusCode, Value) + Send + Sync>;
/// The Invoke API's state: the recorded events and the script.
type Shared = (Arc<Mutex<Vec<Value>>>, Arc<Mutex<Script>>);

/// The Lambda side: records events, answers with the current script.
#[derive(Clone)]
struct Lambda {
    events: Arc<Mutex<Vec<Value>>>,
    script: Arc<Mutex<Script>>,
    url: String,
}

/// `$connect` and `$disconnect` → 200; `$default` echoes the body.
fn echo(event: &Value) -> (StatusCode, Value) {
    match event["requestContext"]["routeKey"].as_str() {
        Some("$default") => (
            StatusCode::OK,
            json!({"statusCode": 200, "body": event["body"]}),
        ),
        _ => (StatusCode::OK, json!({"statusCode": 200})),
    }
}

impl Lambda {
    async fn start() -> Lambda {
        let events = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Mutex<Script>> = Arc::new(Mutex::new(Arc::new(echo)));
        let app = Router::new()
            .route(
                "/2015-03-31/functions/{name}/invocations",
                post(
                    |State((events, script)): State<Shared>,
                     Path(name): Path<String>,
                     Json(event): Json<Value>| async move {
                        assert_eq!(name, "ws");
                        events.lock().unwrap().push(event.clone());
                        let script = script.lock().unwrap().clone();
                        let (status, answer) = script(&event);
                        (status, Json(answer))
                    },
                ),
            )
            .with_state((events.clone(), script.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Lambda {
            events,
            script,
            url,
        }
    }

    fn script(&self, f: impl Fn(&Value) -> (StatusCode, Value) + Send + Sync + 'static) {
        *self.script.lock().unwrap() = Arc::new(f);
    }

    fn events(&self, route: &str) -> Vec<Value> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e["requestContext"]["routeKey"] == route)
            .cloned()
            .collect()
    }

    /// Waits (10 s at most) for an event of `route` on `connection`.
    async fn wait(&self, route: &str, connection: &str) -> Value {
        for _ in 0..200 {
            if let Some(e) = self
                .events(route)
                .into_iter()
                .find(|e| e["requestContext"]["connectionId"] == connection)
            {
                return e;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no {route} event for {connection}");
    }
}

fn config(lambda: &Lambda) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        invoke_url: lambda.url.clone(),
        function: "ws".into(),
        stage: "local".into(),
        api_id: "local".into(),
        route_selection_field: "action".into(),
        mock_routes: vec![("ping".into(), r#"{"type": "pong"}"#.into())],
        idle_timeout_seconds: 600,
        max_connection_seconds: 7200,
    }
}

async fn gateway(lambda: &Lambda) -> Running {
    start(config(lambda)).await.unwrap()
}

/// Connects and returns the client with its connection id (the only new live one).
async fn connect(addr: SocketAddr, query: &str) -> (Client, String) {
    let before = connections(addr).await;
    let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/local{query}"))
        .await
        .unwrap();
    let id = connections(addr)
        .await
        .into_iter()
        .find(|id| !before.contains(id))
        .expect("a new live connection");
    (ws, id)
}

async fn connections(addr: SocketAddr) -> Vec<String> {
    reqwest::get(format!("http://{addr}/__wsgateway/connections"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn stats(addr: SocketAddr) -> Value {
    reqwest::get(format!("http://{addr}/__wsgateway/stats"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The next data or close frame (pings skipped), 10 s at most.
async fn next(ws: &mut Client) -> Message {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("a frame within 10 s")
            .expect("an open stream")
            .expect("no error");
        if !matches!(m, Message::Ping(_) | Message::Pong(_)) {
            return m;
        }
    }
}

async fn next_text(ws: &mut Client) -> String {
    match next(ws).await {
        Message::Text(t) => t.to_string(),
        other => panic!("expected text, got {other:?}"),
    }
}

async fn close_code(ws: &mut Client) -> (CloseCode, String) {
    match next(ws).await {
        Message::Close(Some(f)) => (f.code, f.reason.to_string()),
        other => panic!("expected a close frame, got {other:?}"),
    }
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

/// A `$connect` event captured from API Gateway (aws_lambda_events' fixture
/// `example-apigw-websocket-request-without-method.json`, the shape AWS documents).
const AWS_CONNECT_EVENT: &str = r#"{
  "headers": {"Host": "asdfasdf.execute-api.us-west-2.amazonaws.com", "Sec-WebSocket-Key": "asdfasdf==",
    "Sec-WebSocket-Version": "13", "X-Amzn-Trace-Id": "Root=1-asdf-asdfasdf", "x-api-key": "asdfasdf",
    "X-Forwarded-For": "10.0.0.13", "X-Forwarded-Port": "443", "X-Forwarded-Proto": "https"},
  "multiValueHeaders": {"Host": ["asdfasdf.execute-api.us-west-2.amazonaws.com"]},
  "requestContext": {
    "routeKey": "$connect", "eventType": "CONNECT", "extendedRequestId": "asdfasdf=",
    "requestTime": "22/Feb/2022:19:07:37 +0000", "messageDirection": "IN", "stage": "dev",
    "connectedAt": 1645556857902, "requestTimeEpoch": 1645556857902,
    "identity": {"apiKey": "asdfasdf", "apiKeyId": "asdf", "sourceIp": "10.0.0.13"},
    "requestId": "asdf=", "domainName": "asdfasdf.execute-api.us-west-2.amazonaws.com",
    "connectionId": "asdfasdf=", "apiId": "asdfasdf"
  },
  "isBase64Encoded": false
}"#;

#[tokio::test]
async fn connect_and_disconnect_events_have_aws_shape() {
    let lambda = Lambda::start().await;
    let gw = gateway(&lambda).await;
    let (mut ws, id) = connect(gw.addr, "?token=abc&x=1&x=2").await;
    assert_eq!(id.len(), 16, "AWS-like id: {id}");

    let raw = lambda.wait("$connect", &id).await;
    let event: ApiGatewayWebsocketProxyRequest = serde_json::from_value(raw.clone()).unwrap();
    let rc = &event.request_context;
    assert_eq!(rc.event_type.as_deref(), Some("CONNECT"));
    assert_eq!(rc.route_key.as_deref(), Some("$connect"));
    assert_eq!(rc.connection_id.as_deref(), Some(id.as_str()));
    assert_eq!(rc.stage.as_deref(), Some("local"));
    assert_eq!(rc.apiid.as_deref(), Some("local"));
    assert_eq!(rc.message_direction.as_deref(), Some("IN"));
    assert_eq!(
        rc.domain_name.as_deref(),
        Some(gw.addr.to_string().as_str())
    );
    assert_eq!(rc.identity.source_ip.as_deref(), Some("127.0.0.1"));
    assert!(
        rc.identity.user_agent.is_none(),
        "tungstenite sends no User-Agent"
    );
    assert!(rc.connected_at > 0 && rc.request_time_epoch >= rc.connected_at);
    let time = rc.request_time.as_deref().unwrap();
    chrono::DateTime::parse_from_str(time, "%d/%b/%Y:%H:%M:%S %z").unwrap();
    assert_eq!(event.query_string_parameters.first("token"), Some("abc"));
    assert_eq!(
        event.multi_value_query_string_parameters.all("x"),
        Some(vec!["1", "2"])
    );
    // AWS's JSON shapes: single values, and lists in the multi-value maps.
    assert_eq!(raw["queryStringParameters"]["token"], "abc");
    assert_eq!(
        raw["multiValueQueryStringParameters"]["x"],
        json!(["1", "2"])
    );
    assert_eq!(
        raw["multiValueHeaders"]["x-forwarded-proto"],
        json!(["http"])
    );
    assert_eq!(event.headers["x-forwarded-proto"], "http");
    assert!(event.headers.contains_key("sec-websocket-key"));
    assert!(event.body.is_none());

    // Every key of AWS's event is there (the crate's serialisation adds null/empty extras).
    let aws: Value = serde_json::from_str(AWS_CONNECT_EVENT).unwrap();
    let missing = |theirs: &Value, ours: &Value| -> Vec<String> {
        keys(theirs).difference(&keys(ours)).cloned().collect()
    };
    assert_eq!(missing(&aws, &raw), Vec::<String>::new());
    assert_eq!(
        missing(&aws["requestContext"], &raw["requestContext"]),
        Vec::<String>::new()
    );
    assert!(raw["requestContext"]["identity"]["sourceIp"].is_string());
    // Header names AWS adds (compared case-insensitively: ours are lower-case).
    for name in keys(&aws["headers"]) {
        if name != "x-api-key" {
            assert!(
                raw["headers"].get(name.to_lowercase()).is_some(),
                "header {name}"
            );
        }
    }

    ws.close(Some(tungstenite::protocol::CloseFrame {
        code: CloseCode::Normal,
        reason: "bye".into(),
    }))
    .await
    .unwrap();
    let raw = lambda.wait("$disconnect", &id).await;
    let event: ApiGatewayWebsocketProxyRequest = serde_json::from_value(raw).unwrap();
    let rc = &event.request_context;
    assert_eq!(rc.event_type.as_deref(), Some("DISCONNECT"));
    assert_eq!(rc.disconnect_status_code, Some(1000));
    assert_eq!(rc.disconnect_reason.as_deref(), Some("bye"));
    assert!(connections(gw.addr).await.is_empty());
    gw.shutdown().await;
}

#[tokio::test]
async fn connect_refusal_and_function_error_refuse_the_handshake() {
    let lambda = Lambda::start().await;
    let gw = gateway(&lambda).await;
    let url = format!("ws://{}/local", gw.addr);

    lambda.script(|_| (StatusCode::OK, json!({"statusCode": 401, "body": "no"})));
    match tokio_tungstenite::connect_async(&url).await {
        Err(tungstenite::Error::Http(r)) => assert_eq!(r.status(), 401),
        other => panic!("expected 401, got {other:?}"),
    }
    lambda.script(|_| {
        (
            StatusCode::OK,
            json!({"errorType": "Boom", "errorMessage": "it broke"}),
        )
    });
    match tokio_tungstenite::connect_async(&url).await {
        Err(tungstenite::Error::Http(r)) => assert_eq!(r.status(), 500),
        other => panic!("expected 500, got {other:?}"),
    }
    lambda.script(|_| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"message": "crashed"}),
        )
    });
    match tokio_tungstenite::connect_async(&url).await {
        Err(tungstenite::Error::Http(r)) => assert_eq!(r.status(), 500),
        other => panic!("expected 500, got {other:?}"),
    }
    // A wrong stage is not the API.
    let wrong = format!("ws://{}/prod", gw.addr);
    assert!(tokio_tungstenite::connect_async(&wrong).await.is_err());

    let s = stats(gw.addr).await;
    assert_eq!(s["refused"], 3);
    assert_eq!(s["connects"], 0);
    assert!(
        lambda.events("$disconnect").is_empty(),
        "no $disconnect without a connection"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn mock_route_default_route_and_function_errors() {
    let lambda = Lambda::start().await;
    let gw = gateway(&lambda).await;
    let (mut ws, id) = connect(gw.addr, "").await;

    // The mock route answers without the function.
    let invocations = stats(gw.addr).await["invocations"].clone();
    ws.send(Message::text(r#"{"action": "ping"}"#))
        .await
        .unwrap();
    let pong: Value = serde_json::from_str(&next_text(&mut ws).await).unwrap();
    assert_eq!(pong, json!({"type": "pong"}));
    assert_eq!(stats(gw.addr).await["invocations"], invocations);

    // Everything else goes to $default, in order; its body comes back.
    for text in ["one", r#"{"action": "subscribe", "n": 2}"#, "three"] {
        ws.send(Message::text(text)).await.unwrap();
    }
    for text in ["one", r#"{"action": "subscribe", "n": 2}"#, "three"] {
        assert_eq!(next_text(&mut ws).await, text);
    }
    let messages = lambda.events("$default");
    assert_eq!(messages.len(), 3);
    let event: ApiGatewayWebsocketProxyRequest =
        serde_json::from_value(messages[0].clone()).unwrap();
    assert_eq!(event.request_context.event_type.as_deref(), Some("MESSAGE"));
    assert_eq!(
        event.request_context.connection_id.as_deref(),
        Some(id.as_str())
    );
    assert!(event.request_context.message_id.is_some());
    assert_eq!(event.body.as_deref(), Some("one"));
    assert!(!event.is_base64_encoded);
    assert!(event.headers.is_empty(), "MESSAGE events carry no headers");

    // An empty body or a non-2xx status sends nothing back; a function error sends AWS's message.
    lambda.script(|e| match e["requestContext"]["routeKey"].as_str() {
        Some("$default") if e["body"] == "quiet" => (StatusCode::OK, json!({"statusCode": 200})),
        Some("$default") => (
            StatusCode::OK,
            json!({"errorType": "Boom", "errorMessage": "x"}),
        ),
        _ => (StatusCode::OK, json!({"statusCode": 200})),
    });
    ws.send(Message::text("quiet")).await.unwrap();
    ws.send(Message::text("fail")).await.unwrap();
    let error: Value = serde_json::from_str(&next_text(&mut ws).await).unwrap();
    assert_eq!(error["message"], "Internal server error");
    assert_eq!(error["connectionId"], id.as_str());
    let failed = lambda.events("$default").pop().unwrap();
    assert_eq!(error["requestId"], failed["requestContext"]["requestId"]);
    gw.shutdown().await;
}

#[tokio::test]
async fn management_api_post_get_delete_gone_throttle() {
    let lambda = Lambda::start().await;
    let gw = gateway(&lambda).await;
    let (mut ws, id) = connect(gw.addr, "").await;
    let http = reqwest::Client::new();
    let url = |id: &str| {
        let escaped: String = id
            .replace('+', "%2B")
            .replace('/', "%2F")
            .replace('=', "%3D");
        format!("http://{}/local/@connections/{escaped}", gw.addr)
    };

    let r = http
        .post(url(&id))
        .body(r#"{"type":"notify"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(next_text(&mut ws).await, r#"{"type":"notify"}"#);

    // Posts over one frame arrive whole (sent as 32 KB fragments).
    let big = "y".repeat(100 * 1024);
    let r = http.post(url(&id)).body(big.clone()).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(next_text(&mut ws).await, big);

    let r = http
        .post(url(&id))
        .body("z".repeat(129 * 1024))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(r.headers()["x-amzn-errortype"], "PayloadTooLargeException");

    let info: Value = http
        .get(url(&id))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(info["identity"]["sourceIp"], "127.0.0.1");
    chrono::DateTime::parse_from_rfc3339(info["connectedAt"].as_str().unwrap()).unwrap();
    chrono::DateTime::parse_from_rfc3339(info["lastActiveAt"].as_str().unwrap()).unwrap();

    // Throttled posts answer 429, then posts go through again.
    let r = http
        .post(format!("http://{}/__wsgateway/throttle", gw.addr))
        .json(&json!({"posts": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    for _ in 0..2 {
        let r = http.post(url(&id)).body("x").send().await.unwrap();
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()["x-amzn-errortype"], "LimitExceededException");
    }
    let r = http.post(url(&id)).body("after").send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(next_text(&mut ws).await, "after");

    // Unknown ids are gone.
    let r = http
        .post(url("AAAAAAAAAAAAAAA="))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 410);
    assert_eq!(r.headers()["x-amzn-errortype"], "GoneException");
    let body: Value = r.json().await.unwrap();
    assert!(body["message"].is_string());
    assert_eq!(
        http.get(url("AAAAAAAAAAAAAAA="))
            .send()
            .await
            .unwrap()
            .status(),
        410
    );

    // DELETE closes the socket (1001), then $disconnect; the id is gone.
    let r = http.delete(url(&id)).send().await.unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(close_code(&mut ws).await.0, CloseCode::Away);
    let disconnect = lambda.wait("$disconnect", &id).await;
    assert_eq!(disconnect["requestContext"]["disconnectStatusCode"], 1001);
    assert_eq!(
        http.post(url(&id)).body("x").send().await.unwrap().status(),
        410
    );
    assert_eq!(http.delete(url(&id)).send().await.unwrap().status(), 410);

    let s = stats(gw.addr).await;
    assert_eq!(s["posts"], 3);
    assert_eq!(s["throttled"], 2);
    assert_eq!(s["gone"], 4);
    assert_eq!(s["disconnects"], 1);
    gw.shutdown().await;
}

#[tokio::test]
async fn oversized_and_binary_frames_close_the_socket() {
    let lambda = Lambda::start().await;
    let gw = gateway(&lambda).await;

    let (mut ws, id) = connect(gw.addr, "").await;
    ws.send(Message::text("x".repeat(1024 * 1024)))
        .await
        .unwrap();
    assert_eq!(close_code(&mut ws).await.0, CloseCode::Size);
    let d = lambda.wait("$disconnect", &id).await;
    assert_eq!(d["requestContext"]["disconnectStatusCode"], 1009);
    assert!(lambda.events("$default").is_empty());

    // One frame of 33 KB is over the frame quota even though the message is small enough.
    let (mut ws, id) = connect(gw.addr, "").await;
    ws.send(Message::text("x".repeat(33 * 1024))).await.unwrap();
    assert_eq!(close_code(&mut ws).await.0, CloseCode::Size);
    lambda.wait("$disconnect", &id).await;

    let (mut ws, id) = connect(gw.addr, "").await;
    ws.send(Message::binary(vec![1u8, 2, 3])).await.unwrap();
    assert_eq!(close_code(&mut ws).await.0, CloseCode::Unsupported);
    let d = lambda.wait("$disconnect", &id).await;
    assert_eq!(d["requestContext"]["disconnectStatusCode"], 1003);
    gw.shutdown().await;
}

#[tokio::test]
async fn idle_timeout_and_max_duration_close_and_disconnect() {
    let lambda = Lambda::start().await;
    let mut c = config(&lambda);
    c.max_connection_seconds = 2;
    let gw = start(c).await.unwrap();
    let (mut ws, id) = connect(gw.addr, "").await;
    let started = std::time::Instant::now();
    // Activity does not extend the connection's lifetime.
    ws.send(Message::text("keep")).await.unwrap();
    assert_eq!(next_text(&mut ws).await, "keep");
    assert_eq!(
        close_code(&mut ws).await,
        (CloseCode::Away, "Going away".into())
    );
    assert!(started.elapsed() >= Duration::from_millis(1500));
    lambda.wait("$disconnect", &id).await;
    gw.shutdown().await;

    // Posts to the client keep it from idling out; silence closes it.
    let mut c = config(&lambda);
    c.idle_timeout_seconds = 2;
    let gw = start(c).await.unwrap();
    let (mut ws, id) = connect(gw.addr, "").await;
    let url = format!(
        "http://{}/local/@connections/{}",
        gw.addr,
        id.replace('+', "%2B").replace('/', "%2F")
    );
    let http = reqwest::Client::new();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert_eq!(
            http.post(&url).body("tick").send().await.unwrap().status(),
            200
        );
        assert_eq!(next_text(&mut ws).await, "tick");
    }
    let silent = std::time::Instant::now();
    assert_eq!(close_code(&mut ws).await.0, CloseCode::Away);
    assert!(silent.elapsed() >= Duration::from_millis(1500));
    let d = lambda.wait("$disconnect", &id).await;
    assert_eq!(d["requestContext"]["disconnectStatusCode"], 1001);
    gw.shutdown().await;
}

/// The AWS SDK's client, as the notifying functions build it, against the emulator.
fn sdk_client(addr: SocketAddr) -> aws_sdk_apigatewaymanagement::Client {
    use aws_sdk_apigatewaymanagement::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_apigatewaymanagement::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("AKIDTEST", "secret", None, None, "test"))
        .endpoint_url(format!("http://{addr}/local"))
        .http_client(agentaddress_aws::sdk_http_client())
        .build();
    aws_sdk_apigatewaymanagement::Client::from_conf(config)
}

#[tokio::test]
async fn aws_sdk_posts_and_sees_gone_exception() {
    use aws_sdk_apigatewaymanagement::operation::post_to_connection::PostToConnectionError;
    use aws_sdk_apigatewaymanagement::primitives::Blob;
    let lambda = Lambda::start().await;
    let gw = gateway(&lambda).await;
    let sdk = sdk_client(gw.addr);
    // An id with '+' or '/' (base64 like AWS's; the SDK percent-encodes it in the path): about
    // one in three has one, so 30 tries all but never miss.
    let (mut ws, id) = {
        let (mut ws, mut id) = connect(gw.addr, "").await;
        for _ in 0..30 {
            if id.contains(['+', '/']) {
                break;
            }
            ws.close(None).await.unwrap();
            (ws, id) = connect(gw.addr, "").await;
        }
        (ws, id)
    };

    sdk.post_to_connection()
        .connection_id(&id)
        .data(Blob::new(r#"{"type":"notify","last_sequence":3}"#))
        .send()
        .await
        .unwrap();
    assert_eq!(
        next_text(&mut ws).await,
        r#"{"type":"notify","last_sequence":3}"#
    );
    let info = sdk
        .get_connection()
        .connection_id(&id)
        .send()
        .await
        .unwrap();
    assert!(info.connected_at().is_some());
    assert_eq!(
        info.identity().and_then(|i| i.source_ip()),
        Some("127.0.0.1")
    );

    // Throttled: the SDK retries 429 LimitExceededException (a throttling error) and gets through.
    reqwest::Client::new()
        .post(format!("http://{}/__wsgateway/throttle", gw.addr))
        .json(&json!({"posts": 1}))
        .send()
        .await
        .unwrap();
    let throttled = sdk
        .post_to_connection()
        .connection_id(&id)
        .data(Blob::new("retried"))
        .send()
        .await;
    assert!(throttled.is_ok(), "{throttled:?}");
    assert_eq!(next_text(&mut ws).await, "retried");
    assert_eq!(stats(gw.addr).await["throttled"], 1);
    // Throttled beyond the SDK's attempts: the error is LimitExceededException.
    reqwest::Client::new()
        .post(format!("http://{}/__wsgateway/throttle", gw.addr))
        .json(&json!({"posts": 10}))
        .send()
        .await
        .unwrap();
    let err = sdk
        .post_to_connection()
        .connection_id(&id)
        .data(Blob::new("dropped"))
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(
        matches!(err, PostToConnectionError::LimitExceededException(_)),
        "expected LimitExceededException, got {err:?}"
    );
    reqwest::Client::new()
        .post(format!("http://{}/__wsgateway/throttle", gw.addr))
        .json(&json!({"posts": 0}))
        .send()
        .await
        .unwrap();

    ws.close(None).await.unwrap();
    lambda.wait("$disconnect", &id).await;
    let err = sdk
        .post_to_connection()
        .connection_id(&id)
        .data(Blob::new("late"))
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(
        matches!(err, PostToConnectionError::GoneException(_)),
        "expected GoneException, got {err:?}"
    );
    let d = lambda.wait("$disconnect", &id).await;
    assert_eq!(d["requestContext"]["disconnectStatusCode"], 1005);
    assert_eq!(
        d["requestContext"]["disconnectReason"],
        "Client-side close frame status not set"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn binary_prints_its_address_and_closes_sockets_on_sigterm() {
    use tokio::io::AsyncBufReadExt;
    let lambda = Lambda::start().await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentaddress-wsgateway"))
        .args(["--listen", "127.0.0.1:0", "--invoke-url", &lambda.url])
        .args(["--mock-route", r#"ping={"type":"pong"}"#])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let addr: SocketAddr = line
        .strip_prefix("wsgateway listening on http://")
        .expect("the listening line")
        .parse()
        .unwrap();
    let (mut ws, id) = connect(addr, "").await;
    ws.send(Message::text(r#"{"action":"ping"}"#))
        .await
        .unwrap();
    assert_eq!(next_text(&mut ws).await, r#"{"type":"pong"}"#);

    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    assert_eq!(close_code(&mut ws).await.0, CloseCode::Away);
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "exit status {status}");
    lambda.wait("$disconnect", &id).await;
    assert!(
        lines.next_line().await.unwrap().is_none(),
        "one line on stdout"
    );
}
