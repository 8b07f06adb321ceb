//! The wake-up socket on the local Lambda stack (docs/API.md §17): API Gateway's WebSocket API
//! as agentaddress-wsgateway emulates it, the `ws` function answering its frames over DynamoDB
//! Local, and the appending functions posting `notify` through its Management API. The same
//! scenarios as `serve`'s (`agentaddress_blackbox::sockets`).

use agentaddress_blackbox::sockets::{self, Deployment};
use agentaddress_blackbox::Client;

use agentaddress_blackbox::stack_client as client;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_append_is_covered_by_a_notify_under_16_writers() {
    sockets::every_append_is_covered_under_16_writers(&client(), Deployment::Gateway).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_socket_is_told_only_of_matches() {
    agentaddress_blackbox::filtered::a_filtered_socket_is_told_only_of_matches(&client()).await;
}

/// A timer fires with nobody reading: its watch (a delayed message on the purge queue, handled
/// by the purge worker) appends its event and tells the socket within 5 s (docs/API.md §20).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_fires_on_its_own_and_tells_a_socket() {
    agentaddress_blackbox::timers::a_timer_fires_on_its_own_and_tells_a_socket(
        &client(),
        std::time::Duration::from_secs(5),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_timer_never_fires() {
    agentaddress_blackbox::timers::a_cancelled_timer_never_fires(&client()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_learns_nothing_and_deletion_says_gone() {
    sockets::wrong_token_learns_nothing_and_deletion_says_gone(&client()).await;
}

/// The expiry watch: a delayed message on the purge queue, handled by the purge worker (the
/// purge function on AWS); SQS's delays are whole seconds, and the worker may be busy with a
/// purge of the same batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_says_gone() {
    sockets::expiry_says_gone(&client(), std::time::Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_and_subscriptions_are_capped() {
    sockets::sockets_and_subscriptions_are_capped(&client()).await;
}

/// On the gateway every frame is its own invocation of the `ws` function, which keeps nothing
/// between frames (a connection's subscriptions are items, capped by the store): a thousand
/// frames (half of them subscribes of the address, half bogus) ask the same of it as ten
/// thousand, at a tenth of the suite's time (serve, which holds each connection's state in
/// memory, is sent 10,000: cli/tests/socket.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_frames_never_crash_anything() {
    sockets::hostile_frames_never_crash_anything(&client(), Deployment::Gateway, 1_000, "/healthz")
        .await;
}

/// The Lambda stack's table, and a DynamoDB client for it.
async fn stack_table() -> (String, aws_sdk_dynamodb::Client) {
    let table = agentaddress_blackbox::stack_env("AGENTADDRESS_LAMBDA_TABLE");
    let sdk = agentaddress_aws::sdk_config().await;
    (table, aws_sdk_dynamodb::Client::new(&sdk))
}

/// The gateway emulator's base (`http://HOST:PORT`), from the socket URL handed out.
fn gateway(ws_url: &str) -> String {
    let rest = ws_url.trim_start_matches("ws://");
    format!("http://{}", rest.split('/').next().unwrap_or(rest))
}

/// 25 sockets subscribing at once: exactly 20 are taken (the subscribe transactions are
/// conditioned on the address's counter, so racing subscribes cannot all pass the cap).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_subscribes_respect_the_cap_exactly() {
    let c = client();
    let a = c.new_address().await;
    let url = sockets::ws_url(&a);
    let mut all = Vec::new();
    for _ in 0..25 {
        all.push(sockets::connect(&url).await);
    }
    let answers = futures::future::join_all(all.iter_mut().map(|ws| {
        let frame = sockets::subscribe(&a, 0);
        async move {
            // `unavailable` (contention outlasted the server's retries) is safe to retry.
            let mut answer = serde_json::Value::Null;
            for _ in 0..3 {
                sockets::send(ws, frame.clone()).await;
                answer = sockets::next(ws).await.unwrap_or_default();
                if answer["code"] != "unavailable" {
                    break;
                }
            }
            answer
        }
    }))
    .await;
    let taken = answers.iter().filter(|f| f["type"] == "subscribed").count();
    let refused = answers
        .iter()
        .filter(|f| f["code"] == "quota_exceeded")
        .count();
    assert_eq!((taken, refused), (20, 5), "{answers:?}");
}

/// A subscription whose connection vanished without `$disconnect` (API Gateway answers 410
/// for it) is removed by the first notifier that meets it; a throttled post (429) is tried
/// again, and the subscriber is still told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_connections_are_unsubscribed_and_throttled_posts_retried() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let c = client();
    let (table, ddb) = stack_table().await;
    let a = c.new_address().await;
    let ttl = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
        + 3600)
        .to_string();
    ddb.put_item()
        .table_name(&table)
        .item("pk", AttributeValue::S(format!("A#{}", a.id)))
        .item("sk", AttributeValue::S("W#vanishedConnId=".into()))
        .item("conn", AttributeValue::S("vanishedConnId=".into()))
        .item("ttl", AttributeValue::N(ttl))
        .send()
        .await
        .expect("put a dangling subscription");
    let url = sockets::ws_url(&a);
    let mut ws = sockets::connect(&url).await;
    sockets::send(&mut ws, sockets::subscribe(&a, 0)).await;
    assert_eq!(
        sockets::next(&mut ws).await.unwrap_or_default()["type"],
        "subscribed"
    );
    let http = reqwest::Client::new();
    let gw = gateway(&url);
    let stats = |http: reqwest::Client, gw: String| async move {
        http.get(format!("{gw}/__wsgateway/stats"))
            .send()
            .await
            .expect("stats")
            .json::<serde_json::Value>()
            .await
            .unwrap_or_default()
    };
    let before = stats(http.clone(), gw.clone()).await;
    http.post(format!("{gw}/__wsgateway/throttle"))
        .json(&serde_json::json!({"posts": 2}))
        .send()
        .await
        .expect("throttle");
    c.deliver(&a, &serde_json::json!({"n": 1}), None)
        .await
        .expect_status(202, "deliver");
    let f = sockets::next(&mut ws).await.unwrap_or_default();
    assert_eq!(f["type"], "notify", "{f}");
    assert_eq!(f["last_sequence"], 1, "{f}");
    let after = stats(http.clone(), gw.clone()).await;
    let grew = |k: &str| after[k].as_u64().unwrap_or(0) > before[k].as_u64().unwrap_or(0);
    assert!(
        grew("throttled"),
        "posts were throttled: {before} -> {after}"
    );
    assert!(
        grew("gone"),
        "the vanished connection was answered 410: {before} -> {after}"
    );
    let left = ddb
        .get_item()
        .table_name(&table)
        .key("pk", AttributeValue::S(format!("A#{}", a.id)))
        .key("sk", AttributeValue::S("W#vanishedConnId=".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("get");
    assert!(left.item.is_none(), "the gone connection is unsubscribed");
}

/// Ends the gateway's connection whose client said `agent` as its `User-Agent`, as API
/// Gateway does at the end of a connection's 2 hours: `DELETE @connections/{id}` (the
/// Management API the functions use), found through the emulator's list of live connections.
async fn drop_connection_of(http: &reqwest::Client, ws_url: &str, agent: &str) {
    let ids: Vec<String> = http
        .get(format!("{}/__wsgateway/connections", gateway(ws_url)))
        .send()
        .await
        .expect("list connections")
        .json()
        .await
        .expect("list connections");
    let mut stage = reqwest::Url::parse(ws_url).unwrap_or_else(|e| panic!("{ws_url}: {e}"));
    if stage.set_scheme("http").is_err() {
        panic!("{ws_url} is not a ws:// URL");
    }
    for id in ids {
        let mut conn = stage.clone();
        conn.path_segments_mut()
            .unwrap_or_else(|()| panic!("{ws_url} has no path"))
            .pop_if_empty()
            .push("@connections")
            .push(&id);
        let info = http
            .get(conn.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {conn}: {e}"));
        if info.status() != 200 {
            continue; // it closed meanwhile
        }
        let info: serde_json::Value = info.json().await.unwrap_or_default();
        if info["identity"]["userAgent"] == agent {
            let r = http
                .delete(conn.clone())
                .send()
                .await
                .unwrap_or_else(|e| panic!("DELETE {conn}: {e}"));
            assert_eq!(r.status(), 204, "DELETE {conn}");
            return;
        }
    }
    panic!("no live connection of {agent}");
}

/// Reads the feed from `cursor` to its end, following `next_cursor`; a read the address's poll
/// limit refuses is tried again after its `retry_after_seconds`.
async fn read_feed(
    c: &Client, a: &agentaddress_blackbox::Address, cursor: &mut u64,
    read: &mut Vec<serde_json::Value>,
) {
    loop {
        let page = c.events(a, &format!("after={cursor}")).await;
        if page.status == 429 {
            let wait = page.json["error"]["retry_after_seconds"]
                .as_u64()
                .unwrap_or(1);
            tokio::time::sleep(std::time::Duration::from_secs(wait)).await;
            continue;
        }
        assert_eq!(page.status, 200, "read the feed: {}", page.text);
        for e in page.json["events"].as_array().cloned().unwrap_or_default() {
            read.push(e);
        }
        *cursor = page.json["next_cursor"].as_u64().unwrap_or(*cursor);
        if page.json["has_more"] != true {
            return;
        }
    }
}

/// API Gateway ends every socket after at most 2 hours, and may end one sooner: a client that
/// reconnects and subscribes with its cursor loses nothing (docs/API.md §17). Four writers
/// deliver while the gateway drops the reader's socket twice; after each drop two more events
/// arrive before the reader is back. The reader follows every `notify` (and each `subscribed`
/// ahead of its cursor) with a feed read, and reads every event once, in order; `$disconnect`
/// removes the dropped connections' subscriptions.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_socket_the_gateway_drops_is_resumed_with_its_cursor_and_loses_nothing() {
    use agentaddress_blackbox::sockets::Said;
    use aws_sdk_dynamodb::types::AttributeValue;
    use serde_json::json;
    use std::time::{Duration, Instant};

    const WRITERS: u64 = 4;
    const EACH: u64 = 4;
    const DROPS: u64 = 2;
    const TOTAL: u64 = WRITERS * EACH + DROPS * 2;
    let c = client();
    let a = c.new_address().await;
    let url = sockets::ws_url(&a);
    let agent = format!("agentaddress-test-reconnect/{}", a.id);
    let http = reqwest::Client::new();

    let (mut cursor, mut read, mut closes) = (0u64, Vec::new(), Vec::new());
    let mut ws = sockets::connect_as(&url, &agent).await;
    sockets::send(&mut ws, sockets::subscribe(&a, cursor)).await;
    let f = sockets::next(&mut ws).await.unwrap_or_default();
    assert_eq!(f["type"], "subscribed", "{f}");

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (c, a) = (c.clone(), a.clone());
            tokio::spawn(async move {
                for n in 0..EACH {
                    c.deliver(&a, &json!({"writer": w, "n": n}), None)
                        .await
                        .expect_status(202, "deliver");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        })
        .collect();

    let deadline = Instant::now() + Duration::from_secs(120);
    let mut drops = 0;
    while cursor < TOTAL {
        assert!(
            Instant::now() < deadline,
            "read {cursor} of {TOTAL} in 2 minutes"
        );
        match sockets::next_or_close(&mut ws).await {
            Said::Frame(f) if f["type"] == "notify" => {
                assert_eq!(f["address_id"], a.id.as_str(), "{f}");
                if f["last_sequence"].as_u64().unwrap_or(0) > cursor {
                    read_feed(&c, &a, &mut cursor, &mut read).await;
                }
            }
            Said::Frame(f) => panic!("an unexpected frame: {f}"),
            Said::Closed(code) => {
                closes.push(code);
                for k in 0..2 {
                    c.deliver(&a, &json!({"gap": closes.len(), "k": k}), None)
                        .await
                        .expect_status(202, "deliver while the reader is away");
                }
                ws = sockets::connect_as(&url, &agent).await;
                sockets::send(&mut ws, sockets::subscribe(&a, cursor)).await;
                // A writer's `notify` may come before the answer: its append committed after
                // the subscription did, while the `ws` function was still answering.
                let f = loop {
                    let f = sockets::next(&mut ws).await.unwrap_or_default();
                    if f["type"] != "notify" {
                        break f;
                    }
                };
                assert_eq!(f["type"], "subscribed", "{f}");
                assert!(
                    f["last_sequence"].as_u64().unwrap_or(0) >= cursor + 2,
                    "subscribed tells what came meanwhile: {f} after {cursor}"
                );
                read_feed(&c, &a, &mut cursor, &mut read).await;
            }
        }
        // The gateway drops the socket after a quarter of the events, and again after half.
        if drops < DROPS && cursor >= (drops + 1) * TOTAL / 4 {
            drop_connection_of(&http, &url, &agent).await;
            drops += 1;
        }
    }
    for w in writers {
        w.await.expect("a writer failed");
    }

    let sequences: Vec<u64> = read.iter().filter_map(|e| e["sequence"].as_u64()).collect();
    assert_eq!(
        sequences,
        (1..=TOTAL).collect::<Vec<_>>(),
        "each event once, in order"
    );
    let mut bodies: Vec<String> = read.iter().map(|e| e["data"].to_string()).collect();
    bodies.sort();
    let mut sent: Vec<String> = (0..WRITERS)
        .flat_map(|w| (0..EACH).map(move |n| json!({"writer": w, "n": n}).to_string()))
        .chain((1..=DROPS).flat_map(|g| (0..2).map(move |k| json!({"gap": g, "k": k}).to_string())))
        .collect();
    sent.sort();
    assert_eq!(bodies, sent, "every delivery was read");
    // The gateway's own close (1001 "Going away"), each time.
    assert_eq!(closes, vec![Some(1001); DROPS as usize]);

    // Still subscribed on the last socket: the next event is told.
    c.deliver(&a, &json!({"after": "all"}), None)
        .await
        .expect_status(202, "deliver");
    let told = loop {
        match sockets::next_or_close(&mut ws).await {
            Said::Frame(f) if f["last_sequence"] == TOTAL + 1 => break f,
            Said::Frame(f) => assert_eq!(f["type"], "notify", "{f}"),
            Said::Closed(code) => panic!("closed ({code:?}) before the last notify"),
        }
    };
    assert_eq!(told["type"], "notify", "{told}");

    // `$disconnect` took the dropped connections' subscriptions: one is left, the live one's.
    let (table, ddb) = stack_table().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let subs = ddb
            .query()
            .table_name(&table)
            .key_condition_expression("pk = :pk AND begins_with(sk, :w)")
            .expression_attribute_values(":pk", AttributeValue::S(format!("A#{}", a.id)))
            .expression_attribute_values(":w", AttributeValue::S("W#".into()))
            .consistent_read(true)
            .send()
            .await
            .expect("query the subscriptions");
        let left: Vec<String> = subs
            .items()
            .iter()
            .filter_map(|i| i.get("sk").and_then(|v| v.as_s().ok()).cloned())
            .collect();
        if left.len() == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the dropped connections' subscriptions are left: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
