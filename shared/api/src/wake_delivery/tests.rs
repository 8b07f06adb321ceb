//! The wake machine on an in-memory SQLite store, calling a receiver on loopback over HTTP with
//! the real sender (private receivers allowed), on a clock the tests move.

use std::collections::VecDeque;
use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::*;
use crate::domain::hooks::{new_hook_id, new_signing_secret, HookFormat};
use crate::domain::verification::{verify, VerificationConfig};
use crate::domain::{ids, ManualClock};
use crate::store::{NewAddress, NewHook};
use agentaddress_outbound::wake::WakeSender;
use agentaddress_sqlite::SqliteStore;

const T0: Millis = 1_800_000_000_000;

/// What the receiver was sent, and what it answers next (then 200).
#[derive(Default)]
struct Receiver {
    seen: Mutex<Vec<(HeaderMap, Bytes)>>,
    answers: Mutex<VecDeque<(u16, Option<&'static str>)>>,
}

impl Receiver {
    fn answer(&self, status: u16, retry_after: Option<&'static str>) {
        self.answers
            .lock()
            .expect("answers")
            .push_back((status, retry_after));
    }

    fn seen(&self) -> Vec<(HeaderMap, Bytes)> {
        self.seen.lock().expect("seen").clone()
    }
}

async fn receiver() -> (Arc<Receiver>, String) {
    let r = Arc::new(Receiver::default());
    let state = r.clone();
    let app = axum::Router::new().route(
        "/wake",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let r = state.clone();
            async move {
                r.seen.lock().expect("seen").push((headers, body));
                let (status, retry_after) = r
                    .answers
                    .lock()
                    .expect("answers")
                    .pop_front()
                    .unwrap_or((200, None));
                let mut answer = axum::response::Response::new(axum::body::Body::from("ok"));
                *answer.status_mut() = StatusCode::from_u16(status).expect("status");
                if let Some(ra) = retry_after {
                    answer
                        .headers_mut()
                        .insert("retry-after", ra.parse().expect("header"));
                }
                answer
            }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/wake", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (r, url)
}

struct World {
    store: Arc<dyn Store>,
    clock: Arc<ManualClock>,
    waking: Waking,
    limits: Limits,
    address_id: String,
    hook: NewHook,
    receiver: Arc<Receiver>,
}

impl World {
    async fn new(types: &[&str], debounce_seconds: u64) -> Self {
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open_in_memory().expect("in-memory SQLite"));
        let (receiver, url) = receiver().await;
        let address_id = ids::new_address_id();
        let hook = NewHook {
            id: new_hook_id(),
            url,
            types: types.iter().map(|t| (*t).to_owned()).collect(),
            format: HookFormat::Standard,
            headers: vec![("authorization".into(), "Bearer t0ken".into())],
            secret: new_signing_secret(),
            debounce_seconds,
        };
        store
            .create_address(NewAddress {
                id: address_id.clone(),
                name: None,
                task_id: Some("task-7".into()),
                email: format!("{address_id}@inbox.test"),
                created_at: T0,
                expires_at: None,
                token_hash: ids::hash_secret("token"),
                inbox_hash: ids::hash_secret("inbox"),
                verification: None,
                email_policy: None,
                hooks: vec![hook.clone()],
            })
            .await
            .expect("create");
        let sender = WakeSender::new(true).expect("sender");
        Self {
            store,
            clock: Arc::new(ManualClock::new(T0)),
            waking: Waking {
                caller: Arc::new(sender),
                base_url: "https://agents.example".into(),
            },
            limits: Limits::default(),
            address_id,
            hook,
            receiver,
        }
    }

    async fn append(&self, event_type: &str) -> u64 {
        self.store
            .append_event(
                &self.address_id,
                NewEvent {
                    event_type: event_type.into(),
                    source: Some("test".into()),
                    ingress: Ingress::Http,
                    data: "{}".into(),
                    http: None,
                },
                None,
                &self.limits,
                self.clock.now(),
            )
            .await
            .expect("append")
            .event
            .sequence
    }

    async fn attempt(&self) -> WakeAttempt {
        attempt_wake(
            self.store.as_ref(),
            &self.waking,
            &self.limits,
            self.clock.as_ref(),
            &self.address_id,
            &self.hook.id,
        )
        .await
        .expect("attempt")
    }

    async fn hook(&self) -> HookRecord {
        self.store
            .get_hook(&self.address_id, &self.hook.id, self.clock.now())
            .await
            .expect("hook")
    }

    async fn events(&self) -> Vec<(String, Value)> {
        self.store
            .read_events(&self.address_id, 0, 100, u64::MAX, self.clock.now())
            .await
            .expect("read")
            .events
            .into_iter()
            .map(|e| (e.event_type, serde_json::from_str(&e.data).expect("data")))
            .collect()
    }
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> &'a str {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no {name} header"))
}

#[tokio::test]
async fn a_wake_lists_the_matching_events_and_is_signed() {
    let w = World::new(&["email.*"], 0).await;
    w.append("email.received").await;
    w.append("state.updated").await;
    w.append("email.sent").await;
    assert_eq!(w.attempt().await, WakeAttempt::Delivered { to_sequence: 3 });
    let seen = w.receiver.seen();
    assert_eq!(seen.len(), 1);
    let (headers, body) = &seen[0];
    assert_eq!(header(headers, "webhook-id"), format!("{}_3", w.hook.id));
    assert_eq!(header(headers, "authorization"), "Bearer t0ken");
    assert_eq!(header(headers, "content-type"), "application/json");
    assert!(header(headers, "user-agent").starts_with("agentaddress/"));
    // The inbound verifier of Standard Webhooks accepts it with the hook's secret.
    let config = VerificationConfig::from_json(
        &json!({"scheme": "standard-webhooks", "secret": w.hook.secret}),
    )
    .expect("config");
    let names = ["webhook-id", "webhook-timestamp", "webhook-signature"];
    let pairs: Vec<(&str, &[u8])> = names
        .iter()
        .map(|n| (*n, headers.get(*n).expect("signed").as_bytes()))
        .collect();
    let checked = verify(&config, &pairs, body, w.clock.now());
    assert_eq!(checked.reason, None, "the wake verifies");
    let wake: Value = serde_json::from_slice(body).expect("json");
    assert_eq!(wake["type"], "address.wake");
    assert_eq!(wake["task_id"], "task-7");
    assert_eq!(wake["from_sequence"], 1);
    assert_eq!(wake["to_sequence"], 3);
    let types: Vec<&str> = wake["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["type"].as_str().expect("type"))
        .collect();
    assert_eq!(types, vec!["email.received", "email.sent"]);
    assert!(wake["events"][0].get("data").is_none(), "no event data");
    assert_eq!(
        wake["events_url"],
        format!(
            "https://agents.example/api/v1/addresses/{}/events?after=0",
            w.address_id
        )
    );
    let hook = w.hook().await;
    assert_eq!(hook.delivery.delivered_through, 3);
    assert_eq!(hook.delivery.pending_to, None);
    assert_eq!(w.attempt().await, WakeAttempt::Idle { next: None });
    assert_eq!(w.receiver.seen().len(), 1, "nothing more to send");
}

#[tokio::test]
async fn a_range_with_nothing_matching_is_passed_without_a_call() {
    let w = World::new(&["request.answered"], 0).await;
    w.append("email.received").await;
    assert_eq!(w.attempt().await, WakeAttempt::Idle { next: None });
    assert!(w.receiver.seen().is_empty());
    assert_eq!(w.hook().await.delivery.delivered_through, 1);
}

#[tokio::test]
async fn failures_are_retried_with_the_same_id_then_the_cursor_moves_once() {
    let w = World::new(&["*"], 0).await;
    w.append("email.received").await;
    w.receiver.answer(503, None);
    w.receiver.answer(500, None);
    assert_eq!(w.attempt().await, WakeAttempt::Retrying { at: T0 + 10_000 });
    assert_eq!(
        w.attempt().await,
        WakeAttempt::Idle {
            next: Some(T0 + 10_000)
        },
        "not before its retry"
    );
    // Events arriving meanwhile do not change the pending range.
    w.append("email.received").await;
    w.clock.advance_secs(10);
    assert_eq!(w.attempt().await, WakeAttempt::Retrying { at: T0 + 70_000 });
    assert_eq!(w.hook().await.delivery.delivered_through, 0);
    w.clock.advance_secs(60);
    assert_eq!(w.attempt().await, WakeAttempt::Delivered { to_sequence: 1 });
    let ids: Vec<String> = w
        .receiver
        .seen()
        .iter()
        .map(|(h, _)| header(h, "webhook-id").to_owned())
        .collect();
    assert_eq!(ids, vec![format!("{}_1", w.hook.id); 3]);
    assert_eq!(w.hook().await.delivery.delivered_through, 1);
    // Then the next range, with the event that came during the retries.
    assert_eq!(w.attempt().await, WakeAttempt::Delivered { to_sequence: 2 });
    assert_eq!(
        header(&w.receiver.seen()[3].0, "webhook-id"),
        format!("{}_2", w.hook.id)
    );
}

#[tokio::test]
async fn retry_after_is_honoured_and_3xx_is_not_followed() {
    let w = World::new(&["*"], 0).await;
    w.append("x.y").await;
    w.receiver.answer(429, Some("120"));
    w.receiver.answer(302, None);
    assert_eq!(
        w.attempt().await,
        WakeAttempt::Retrying { at: T0 + 120_000 }
    );
    w.clock.advance_secs(120);
    assert_eq!(
        w.attempt().await,
        WakeAttempt::Retrying {
            at: T0 + 120_000 + 60_000
        }
    );
    assert_eq!(w.receiver.seen().len(), 2);
}

#[tokio::test]
async fn permanent_failures_are_reported_and_three_disable_the_hook() {
    let w = World::new(&["*"], 0).await;
    for range in 1..=3u64 {
        w.append("x.y").await;
        w.receiver.answer(404, None);
        let disabled = range == 3;
        assert_eq!(w.attempt().await, WakeAttempt::Failed { disabled });
    }
    let events = w.events().await;
    let reports: Vec<&(String, Value)> = events
        .iter()
        .filter(|(t, _)| t.starts_with("hook."))
        .collect();
    assert_eq!(reports.len(), 4, "{events:?}");
    assert_eq!(reports[0].0, "hook.failed");
    assert_eq!(reports[0].1["hook_id"], w.hook.id.as_str());
    assert_eq!(reports[0].1["status"], 404);
    assert_eq!(reports[0].1["attempts"], 1);
    assert_eq!(reports[0].1["to_sequence"], 1);
    assert_eq!(reports[3].0, "hook.disabled");
    let hook = w.hook().await;
    assert_eq!(hook.status, HookStatus::Disabled);
    // The reports did not wake anything: after the disabling, nothing is tried.
    w.append("x.y").await;
    assert_eq!(w.attempt().await, WakeAttempt::Idle { next: None });
    assert_eq!(w.receiver.seen().len(), 3);
    let address = w
        .store
        .get_address(&w.address_id, w.clock.now())
        .await
        .expect("get")
        .expect("address");
    assert!(address.hook_types.is_empty());
}

#[tokio::test]
async fn the_last_retry_fails_the_range() {
    let w = World::new(&["*"], 0).await;
    w.append("x.y").await;
    for _ in 0..7 {
        w.receiver.answer(500, None);
    }
    let mut failed = None;
    for _ in 0..7 {
        match w.attempt().await {
            WakeAttempt::Retrying { at } => w.clock.advance_ms(at - w.clock.now()),
            other => {
                failed = Some(other);
                break;
            }
        }
    }
    assert_eq!(failed, Some(WakeAttempt::Failed { disabled: false }));
    assert_eq!(w.receiver.seen().len(), 7, "one try and six retries");
    let events = w.events().await;
    let (kind, data) = events.last().expect("a report");
    assert_eq!(kind, "hook.failed");
    assert_eq!(data["attempts"], 7);
    assert_eq!(data["status"], 500);
}

#[tokio::test]
async fn debounce_holds_the_next_wake() {
    let w = World::new(&["*"], 30).await;
    w.append("x.y").await;
    assert_eq!(w.attempt().await, WakeAttempt::Delivered { to_sequence: 1 });
    w.append("x.y").await;
    w.append("x.y").await;
    assert_eq!(
        w.attempt().await,
        WakeAttempt::Idle {
            next: Some(T0 + 30_000)
        }
    );
    w.clock.advance_secs(30);
    assert_eq!(w.attempt().await, WakeAttempt::Delivered { to_sequence: 3 });
    assert_eq!(w.receiver.seen().len(), 2, "two events, one wake");
}

#[tokio::test]
async fn paused_and_deleted_hooks_and_gone_addresses_send_nothing() {
    let w = World::new(&["*"], 0).await;
    w.append("x.y").await;
    let mut paused = w.hook().await;
    paused.status = HookStatus::Paused;
    w.store
        .save_hook(&w.address_id, paused, Vec::new(), &w.limits, T0)
        .await
        .expect("save")
        .expect("written");
    assert_eq!(w.attempt().await, WakeAttempt::Idle { next: None });
    w.store
        .delete_hook(&w.address_id, &w.hook.id, T0)
        .await
        .expect("delete");
    assert_eq!(w.attempt().await, WakeAttempt::Gone);
    let other = World::new(&["*"], 0).await;
    other.append("x.y").await;
    other
        .store
        .delete_address(&other.address_id, T0)
        .await
        .expect("delete address");
    assert_eq!(other.attempt().await, WakeAttempt::Gone);
    assert!(w.receiver.seen().is_empty() && other.receiver.seen().is_empty());
}

#[tokio::test]
async fn the_loop_wakes_at_a_commit_and_survives_a_restart() {
    let w = World::new(&["email.*"], 0).await;
    let (stop, stopped) = watch::channel(false);
    let waking = Arc::new(w.waking.clone());
    let clock: Arc<dyn Clock> = Arc::new(crate::domain::SystemClock);
    let looping = tokio::spawn(WakeLoop::default().run(
        w.store.clone(),
        waking.clone(),
        w.limits.clone(),
        clock.clone(),
        stopped,
    ));
    w.append("email.received").await;
    let started = std::time::Instant::now();
    while w.receiver.seen().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(5), "no wake came");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.send(true).expect("stop");
    looping.await.expect("loop ends");
    // A wake found pending by a new loop (nothing kept in memory): the cursor says so.
    w.append("email.received").await;
    let (_stop, stopped) = watch::channel(false);
    tokio::spawn(WakeLoop::default().run(
        w.store.clone(),
        waking,
        w.limits.clone(),
        clock,
        stopped,
    ));
    let started = std::time::Instant::now();
    while w.receiver.seen().len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no wake after the restart"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
