//! The workload: C concurrent clients doing a seeded random mix over a pool of addresses, with
//! long-poll consumers on every address, then the read-back.
//!
//! Planning around the server's limits (read from `GET {root}`):
//! - each address takes at most `cap` event-producing writes (90 % of the retained-events quota,
//!   at most 900): a write reserves room before it is sent and gives it back when the answer
//!   says it produced nothing. When every address is full, another is created.
//! - clients work on a window of the first few open addresses, so several clients contend for
//!   the same counters; a full address is "sealed" once its last step ended, and its consumers
//!   then read up to its `usage.last_sequence` and stop.
//! - feed polls are paced per address at 80 % of `polls_per_minute`; a 429 pushes the next poll
//!   of that address past `Retry-After`. Creations wait out their 429s too.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::history::WakeSeen;
use super::history::{
    email_message, lossy_body, OpKind, Outcome, Phase, COUNTER_PREFIX, DELIVERY_TYPE, FILTER,
    LOSSY_BODIES, TIMER_TYPE,
};
use super::http::{Recorder, Req};
use super::wakes::Receiver;
use super::Config;

/// CAS counters per address (`counter-0` …).
const COUNTERS: usize = 3;
/// Registers per address (`reg-0` …): unconditional and create-only writes, conditional deletes.
const REGISTERS: usize = 4;
/// Estimated event-producing writes per request of the mix, to plan the number of addresses.
const EVENTS_PER_REQUEST: f64 = 0.45;
/// How long consumers may take to read the rest of a sealed address.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(240);
/// How long the last deliveries may take to be woken for once the workload ended.
const WAKE_TIMEOUT: Duration = Duration::from_secs(90);

/// Every address of the run verifies Standard Webhooks signatures with this secret
/// (docs/API.md §15); the signed deliveries sign with it, the others send no signature.
pub(crate) const SIGNING_SECRET: &str = "whsec_YWdlbnRhZGRyZXNzLWNoZWNrZXItc2lnbmluZy1rZXk=";

/// The prefix of a signed delivery's `webhook-id` (and so of its marker).
pub(crate) const SIGNED_PREFIX: &str = "msg_";

fn counter(k: usize) -> String {
    format!("{COUNTER_PREFIX}{k}")
}

fn register(k: usize) -> String {
    format!("reg-{k}")
}

/// Every key the workload may write, for the final read-back.
fn all_keys() -> Vec<String> {
    (0..COUNTERS)
        .map(counter)
        .chain((0..REGISTERS).map(register))
        .collect()
}

/// An address as its creator holds it.
pub(crate) struct Addr {
    pub id: String,
    email: String,
    token: String,
    inbox: String,
    root: String,
    events: String,
    state: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Activity {
    /// No client has used it yet: its consumers wait (a parked long poll holds a Lambda
    /// instance).
    Idle,
    Active,
    /// No more writes will come: consumers read up to the final last_sequence and stop.
    Sealed,
}

struct Slot {
    addr: Arc<Addr>,
    reserved: u64,
    inflight: u64,
    closed: bool,
    activity: watch::Sender<Activity>,
    pacer: Arc<Pacer>,
    /// Event ids answered by deliveries, for single-event reads.
    known: Vec<String>,
    /// When every timer set on it has fallen due, with room for the deployment's lateness:
    /// its consumers drain only after then, so that no timer's event lands after the last
    /// read of the feed (docs/API.md §20).
    timers_due_by: Option<Instant>,
}

/// Spaces the feed polls of one address.
struct Pacer {
    next: Mutex<Instant>,
}

impl Pacer {
    async fn wait(&self, interval: Duration) {
        let at = {
            let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
            let at = (*next).max(Instant::now());
            *next = at + interval;
            at
        };
        tokio::time::sleep_until(at).await;
    }

    fn push_back(&self, by: Duration) {
        let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
        *next = (*next).max(Instant::now() + by);
    }
}

/// Seconds to wait after a 429 (header, then body), bounded.
fn retry_after(o: &Outcome) -> Duration {
    let header = match o {
        Outcome::Answer { retry_after, .. } => {
            retry_after.as_deref().and_then(|h| h.trim().parse().ok())
        }
        Outcome::Transport(_) => None,
    };
    let secs = header
        .or_else(|| o.body()["error"]["retry_after_seconds"].as_u64())
        .unwrap_or(1);
    Duration::from_secs(secs.clamp(1, 65))
}

pub(crate) struct Ctx {
    pub rec: Recorder,
    base: String,
    seed: u64,
    ops: u64,
    clients: usize,
    poll_wait: f64,
    verbose: bool,
    email_secret: Option<String>,
    limits: Mutex<Value>,
    slots: Mutex<Vec<Slot>>,
    grow: tokio::sync::Mutex<()>,
    cap: Mutex<u64>,
    window: Mutex<usize>,
    poll_interval: Mutex<Duration>,
    next_consumer: AtomicUsize,
    consumers: Mutex<Vec<JoinHandle<()>>>,
    /// The wake receiver, when wakes are checked (`Config::wakes`).
    wakes: Option<Arc<Receiver>>,
}

impl Ctx {
    pub fn new(cfg: &Config, rec: Recorder, wakes: Option<Arc<Receiver>>) -> Self {
        Self {
            rec,
            base: cfg.url.trim_end_matches('/').to_owned(),
            seed: cfg.seed,
            ops: cfg.ops,
            clients: cfg.clients.max(1),
            poll_wait: cfg.poll_wait_seconds,
            verbose: cfg.verbose,
            email_secret: cfg.email_ingest_secret.clone(),
            limits: Mutex::new(Value::Null),
            slots: Mutex::new(Vec::new()),
            grow: tokio::sync::Mutex::new(()),
            cap: Mutex::new(1),
            window: Mutex::new(1),
            poll_interval: Mutex::new(Duration::from_secs(3)),
            next_consumer: AtomicUsize::new(0),
            consumers: Mutex::new(Vec::new()),
            wakes,
        }
    }

    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn limits(&self) -> Value {
        Self::lock(&self.limits).clone()
    }

    /// The wakes received, when they are checked.
    pub fn wakes_seen(&self) -> Option<Vec<WakeSeen>> {
        self.wakes.as_ref().map(|r| r.seen())
    }

    pub fn address_ids(&self) -> Vec<String> {
        Self::lock(&self.slots)
            .iter()
            .map(|s| s.addr.id.clone())
            .collect()
    }

    fn addr(&self, a: usize) -> Arc<Addr> {
        Arc::clone(&Self::lock(&self.slots)[a].addr)
    }

    fn say(&self, msg: &str) {
        if self.verbose {
            eprintln!(
                "agentaddress-check: [{:>6.1} s] {msg}",
                self.rec.elapsed().as_secs_f64()
            );
        }
    }

    /// Waits as an unknown outcome asks before trying again.
    async fn pause(o: &Outcome) {
        match o {
            Outcome::Transport(_) => tokio::time::sleep(Duration::from_millis(150)).await,
            o if o.is_gateway_error() => tokio::time::sleep(Duration::from_millis(150)).await,
            o if o.is(503) => tokio::time::sleep(retry_after(o).min(Duration::from_secs(2))).await,
            _ => {}
        }
    }

    // ------------------------------------------------------------------ requests

    /// Creates an address, waiting out 429s (up to 15 minutes in all); gives up when the
    /// server gives no answer (or only 503s) for `unreachable` in a row.
    async fn create(&self, who: &str, phase: Phase, unreachable: Duration) -> Result<Addr, String> {
        let url = format!("{}/api/v1/addresses", self.base);
        let mut body = json!({
            "name": "agentaddress-check",
            "task_id": format!("seed-{}", self.seed),
            "verification": {"scheme": "standard-webhooks", "secret": SIGNING_SECRET},
        });
        if let Some(r) = &self.wakes {
            body["hooks"] = super::wakes::hook(&r.url);
        }
        let deadline = Instant::now() + Duration::from_secs(900);
        let mut last = String::new();
        let mut answered = Instant::now();
        while Instant::now() < deadline {
            let o = self
                .rec
                .send(
                    who,
                    phase,
                    None,
                    OpKind::Create,
                    Req::new(Method::POST, url.clone()).json(&body),
                )
                .await;
            match o.status() {
                Some(201) => {
                    let b = o.body();
                    let s = |p: &str| {
                        b.pointer(p)
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                            .ok_or_else(|| format!("the create answer lacks {p}: {b}"))
                    };
                    let events = s("/endpoints/events_url")?;
                    if let Some(r) = &self.wakes {
                        r.expect(&s("/address/id")?, &s("/hooks/0/signing_secret")?);
                    }
                    return Ok(Addr {
                        id: s("/address/id")?,
                        email: s("/address/email")?,
                        token: s("/credentials/read_token")?,
                        inbox: s("/endpoints/inbox_url")?,
                        root: events.trim_end_matches("/events").to_owned(),
                        state: s("/endpoints/state_url")?,
                        events,
                    });
                }
                Some(429) => {
                    answered = Instant::now();
                    let wait = retry_after(&o);
                    self.say(&format!(
                        "creation rate limited: waiting {} s",
                        wait.as_secs()
                    ));
                    tokio::time::sleep(wait).await;
                }
                None | Some(503) => {
                    last = match &o {
                        Outcome::Transport(e) => e.clone(),
                        o => o.label(),
                    };
                    if answered.elapsed() > unreachable {
                        return Err(format!(
                            "POST {url}: no answer for {} s (last: {last})",
                            unreachable.as_secs()
                        ));
                    }
                    Self::pause(&o).await;
                    tokio::time::sleep(Duration::from_millis(350)).await;
                }
                Some(s) => return Err(format!("POST {url} answered {s}: {}", o.body())),
            }
        }
        Err(format!(
            "address creation did not succeed within 15 minutes (last: {last})"
        ))
    }

    async fn inspect(&self, who: &str, phase: Phase, a: usize) -> Outcome {
        let ad = self.addr(a);
        let req = Req::new(Method::GET, ad.root.clone()).bearer(&ad.token);
        self.rec
            .send(who, phase, Some(a), OpKind::Inspect, req)
            .await
    }

    /// `GET {root}` until it answers 200 (bounded); the answer's body.
    async fn inspect_ok(&self, who: &str, phase: Phase, a: usize) -> Option<Value> {
        for _ in 0..200 {
            let o = self.inspect(who, phase, a).await;
            if o.is(200) {
                return Some(o.body().clone());
            }
            Self::pause(&o).await;
            if !o.is_ambiguous() {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        None
    }

    async fn list_state(&self, who: &str, phase: Phase, a: usize) -> Outcome {
        let ad = self.addr(a);
        let req = Req::new(Method::GET, ad.state.clone()).bearer(&ad.token);
        self.rec
            .send(who, phase, Some(a), OpKind::ListState, req)
            .await
    }

    async fn read_key(&self, who: &str, phase: Phase, a: usize, key: &str) -> Outcome {
        let ad = self.addr(a);
        let req = Req::new(Method::GET, format!("{}/{key}", ad.state)).bearer(&ad.token);
        let kind = OpKind::ReadKey {
            key: key.to_owned(),
        };
        self.rec.send(who, phase, Some(a), kind, req).await
    }

    async fn put(
        &self, who: &str, a: usize, key: &str, value: Value, if_revision: Option<u64>,
        if_match: bool,
    ) -> Outcome {
        let ad = self.addr(a);
        let mut req = Req::new(Method::PUT, format!("{}/{key}", ad.state)).bearer(&ad.token);
        let body = match (if_revision, if_match) {
            (Some(r), true) => {
                req = req.header("if-match", r.to_string());
                json!({ "value": value })
            }
            (Some(r), false) => json!({ "value": value, "if_revision": r }),
            (None, _) => json!({ "value": value }),
        };
        let kind = OpKind::Put {
            key: key.to_owned(),
            value,
            if_revision,
        };
        self.rec
            .send(who, Phase::Workload, Some(a), kind, req.json(&body))
            .await
    }

    async fn delete(
        &self, who: &str, a: usize, key: &str, if_revision: u64, if_match: bool,
    ) -> Outcome {
        let ad = self.addr(a);
        let req = if if_match {
            Req::new(Method::DELETE, format!("{}/{key}", ad.state))
                .header("if-match", if_revision.to_string())
        } else {
            Req::new(
                Method::DELETE,
                format!("{}/{key}?if_revision={if_revision}", ad.state),
            )
        };
        let kind = OpKind::Delete {
            key: key.to_owned(),
            if_revision,
        };
        self.rec
            .send(who, Phase::Workload, Some(a), kind, req.bearer(&ad.token))
            .await
    }

    async fn deliver(
        &self, who: &str, a: usize, idempotency_key: Option<&str>, data: &Value, other_body: bool,
    ) -> Outcome {
        let ad = self.addr(a);
        let mut req = Req::new(Method::POST, ad.inbox.clone());
        if let Some(k) = idempotency_key {
            req = req.header("idempotency-key", k);
        }
        let body = json!({"type": DELIVERY_TYPE, "data": data});
        let kind = OpKind::Deliver {
            idempotency_key: idempotency_key.map(str::to_owned),
            data: data.clone(),
            other_body,
        };
        let o = self
            .rec
            .send(who, Phase::Workload, Some(a), kind, req.json(&body))
            .await;
        self.remember_event(a, &o);
        o
    }

    /// Keeps the event id a delivery was answered with, for single-event reads.
    fn remember_event(&self, a: usize, o: &Outcome) {
        if o.is(202) || o.is(200) {
            if let Some(id) = o.body()["event"]["id"].as_str() {
                let mut slots = Self::lock(&self.slots);
                let known = &mut slots[a].known;
                if known.len() < 2000 {
                    known.push(id.to_owned());
                }
            }
        }
    }

    /// Delivers a [`lossy_body`] as `application/json` with an Idempotency-Key.
    async fn deliver_raw(&self, who: &str, a: usize, key: &str, body: &str) -> Outcome {
        let ad = self.addr(a);
        let mut req = Req::new(Method::POST, ad.inbox.clone())
            .header("idempotency-key", key)
            .header("content-type", "application/json");
        req.body = Some(body.as_bytes().to_vec());
        let kind = OpKind::DeliverRaw {
            idempotency_key: key.to_owned(),
            body: body.to_owned(),
        };
        let o = self
            .rec
            .send(who, Phase::Workload, Some(a), kind, req)
            .await;
        self.remember_event(a, &o);
        o
    }

    /// A provider's delivery: the body signed as Standard Webhooks with `webhook-id` = `id` and
    /// no Idempotency-Key, so the server keys it by `id` (docs/API.md §15). Each attempt signs
    /// anew with the current time, as a provider's redelivery does; the history records it as
    /// a delivery keyed by `id`.
    async fn deliver_signed(&self, who: &str, a: usize, id: &str, data: &Value) -> Outcome {
        let ad = self.addr(a);
        let body = json!({"type": DELIVERY_TYPE, "data": data}).to_string();
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let mut req =
            Req::new(Method::POST, ad.inbox.clone()).header("content-type", "application/json");
        for (name, value) in
            crate::verification::standard_headers(SIGNING_SECRET, id, timestamp, body.as_bytes())
        {
            req = match name.as_str() {
                "webhook-id" => req.header("webhook-id", value),
                "webhook-timestamp" => req.header("webhook-timestamp", value),
                _ => req.header("webhook-signature", value),
            };
        }
        req.body = Some(body.into_bytes());
        let kind = OpKind::Deliver {
            idempotency_key: Some(id.to_owned()),
            data: data.clone(),
            other_body: false,
        };
        let o = self
            .rec
            .send(who, Phase::Workload, Some(a), kind, req)
            .await;
        self.remember_event(a, &o);
        o
    }

    /// A signed delivery, redelivered while its outcome is unknown.
    async fn deliver_signed_resolved(
        &self, who: &str, a: usize, id: &str, data: &Value,
    ) -> Outcome {
        let mut o = self.deliver_signed(who, a, id, data).await;
        for _ in 0..80 {
            if !o.is_ambiguous() {
                break;
            }
            Self::pause(&o).await;
            o = self.deliver_signed(who, a, id, data).await;
        }
        o
    }

    /// Delivers with a key, retrying the same key and body while the outcome is unknown, so a
    /// first attempt that may or may not have landed resolves.
    async fn deliver_resolved(&self, who: &str, a: usize, key: &str, data: &Value) -> Outcome {
        let mut o = self.deliver(who, a, Some(key), data, false).await;
        for _ in 0..80 {
            if !o.is_ambiguous() {
                break;
            }
            Self::pause(&o).await;
            o = self.deliver(who, a, Some(key), data, false).await;
        }
        o
    }

    /// One attempt of email `marker` to `a` through the webhook door.
    async fn email(&self, who: &str, a: usize, marker: &str, secret: &str) -> Outcome {
        let ad = self.addr(a);
        let url = format!(
            "{}/api/v1/email/inbound?rcpt={}",
            self.base,
            ad.email.replace('+', "%2B")
        );
        let mut req = Req::new(Method::POST, url)
            .bearer(secret)
            .header("content-type", "message/rfc822");
        req.body = Some(email_message(marker));
        let kind = OpKind::Email {
            marker: marker.to_owned(),
        };
        self.rec
            .send(who, Phase::Workload, Some(a), kind, req)
            .await
    }

    /// An email, resent (the same bytes) while the outcome is unknown, and sometimes again
    /// after it landed, as a relay that lost the answer would: one event either way.
    async fn email_delivery(&self, who: &str, a: usize, n: u64, rng: &mut StdRng) {
        let Some(secret) = self.email_secret.clone() else {
            return;
        };
        if !self.reserve(a) {
            return;
        }
        let marker = format!("{:x}-{who}-{n}-email", self.seed);
        let mut o = self.email(who, a, &marker, &secret).await;
        for _ in 0..80 {
            if !o.is_ambiguous() {
                break;
            }
            Self::pause(&o).await;
            o = self.email(who, a, &marker, &secret).await;
        }
        let landed = o.is(200)
            && o.body()["accepted"]
                .as_array()
                .is_some_and(|v| !v.is_empty());
        if !landed {
            if !o.is_ambiguous() {
                self.unreserve(a);
            }
            return;
        }
        if rng.gen_bool(0.3) {
            let again = self.email(who, a, &marker, &secret).await;
            Self::pause(&again).await;
        }
    }

    async fn read_event(&self, who: &str, a: usize, id: &str) -> Outcome {
        let ad = self.addr(a);
        let req = Req::new(Method::GET, format!("{}/{id}", ad.events)).bearer(&ad.token);
        let kind = OpKind::ReadEvent {
            event_id: id.to_owned(),
        };
        self.rec
            .send(who, Phase::Workload, Some(a), kind, req)
            .await
    }

    // ------------------------------------------------------------------ the address pool

    /// Adds a created address to the pool and starts its consumers.
    fn add(self: &Arc<Self>, addr: Addr) -> usize {
        self.rec.progress.created(&addr.id);
        let (tx, _) = watch::channel(Activity::Idle);
        let a = {
            let mut slots = Self::lock(&self.slots);
            slots.push(Slot {
                addr: Arc::new(addr),
                reserved: 0,
                inflight: 0,
                closed: false,
                activity: tx,
                pacer: Arc::new(Pacer {
                    next: Mutex::new(Instant::now()),
                }),
                known: Vec::new(),
                timers_due_by: None,
            });
            slots.len() - 1
        };
        // Every third address has a second consumer, which reads only [`FILTER`]'s events.
        let n = if a % 3 == 0 { 2 } else { 1 };
        for k in 0..n {
            let c = self.next_consumer.fetch_add(1, Ordering::Relaxed);
            let ctx = Arc::clone(self);
            let task = tokio::spawn(async move { ctx.consumer(a, c, k == 1).await });
            Self::lock(&self.consumers).push(task);
        }
        a
    }

    /// An open address for the next step (one of the first `window` open ones), or a new one
    /// when all are full; `None` when no address can be created.
    async fn acquire(self: &Arc<Self>, rng: &mut StdRng) -> Option<usize> {
        loop {
            if let Some(a) = self.try_acquire(rng) {
                return Some(a);
            }
            let _grow = self.grow.lock().await;
            if let Some(a) = self.try_acquire(rng) {
                return Some(a);
            }
            self.say("every address is full: creating another");
            match self
                .create("grow", Phase::Workload, Duration::from_secs(120))
                .await
            {
                Ok(addr) => {
                    self.add(addr);
                }
                Err(e) => {
                    self.say(&format!("cannot create another address: {e}"));
                    return None;
                }
            }
        }
    }

    fn try_acquire(&self, rng: &mut StdRng) -> Option<usize> {
        let window = *Self::lock(&self.window);
        let mut slots = Self::lock(&self.slots);
        let open: Vec<usize> = (0..slots.len())
            .filter(|&i| !slots[i].closed)
            .take(window)
            .collect();
        if open.is_empty() {
            return None;
        }
        let a = open[rng.gen_range(0..open.len())];
        let s = &mut slots[a];
        s.inflight += 1;
        if *s.activity.borrow() == Activity::Idle {
            s.activity.send_replace(Activity::Active);
        }
        Some(a)
    }

    fn release(&self, a: usize) {
        let mut slots = Self::lock(&self.slots);
        let s = &mut slots[a];
        s.inflight -= 1;
        if s.closed && s.inflight == 0 {
            s.activity.send_replace(Activity::Sealed);
        }
    }

    /// Room for one more event on `a`; `false` (and the address closes) when it is full.
    fn reserve(&self, a: usize) -> bool {
        let cap = *Self::lock(&self.cap);
        let mut slots = Self::lock(&self.slots);
        let s = &mut slots[a];
        if s.closed {
            return false;
        }
        s.reserved += 1;
        if s.reserved >= cap {
            s.closed = true;
        }
        true
    }

    /// Gives back the room of a write whose answer says it produced no event.
    fn unreserve(&self, a: usize) {
        let mut slots = Self::lock(&self.slots);
        slots[a].reserved = slots[a].reserved.saturating_sub(1);
    }

    fn seal_all(&self) {
        let mut slots = Self::lock(&self.slots);
        for s in slots.iter_mut() {
            s.closed = true;
            if s.inflight == 0 {
                s.activity.send_replace(Activity::Sealed);
            }
        }
    }

    // ------------------------------------------------------------------ the run

    pub async fn run(self: &Arc<Self>) -> Result<(), String> {
        // Setup: one address, the server's limits, then the planned number of addresses.
        let first = self
            .create("setup", Phase::Setup, Duration::from_secs(30))
            .await?;
        let a0 = self.add(first);
        let details = self
            .inspect_ok("setup", Phase::Setup, a0)
            .await
            .ok_or("GET {root} of the first address never answered 200")?;
        let limits = details["limits"].clone();
        let max_events = limits["max_retained_events"].as_u64().unwrap_or(1000);
        let cap = (max_events * 9 / 10).clamp(1, 900);
        let ppm = limits["polls_per_minute"].as_u64().unwrap_or(30).max(1);
        let interval = Duration::from_secs_f64(60.0 / (ppm as f64 * 0.8));
        let max_wait = limits["max_wait_seconds"].as_f64().unwrap_or(25.0);
        let planned = ((self.ops as f64 * EVENTS_PER_REQUEST / cap as f64).ceil() as usize).max(1);
        let window = self.clients.div_ceil(4).max(2).min(planned);
        *Self::lock(&self.limits) = limits;
        *Self::lock(&self.cap) = cap;
        *Self::lock(&self.window) = window;
        *Self::lock(&self.poll_interval) = interval;
        self.say(&format!(
            "{} ops, {} clients, seed {}: {planned} addresses of ≤ {cap} events, {window} at a time; \
             polls every {:.1} s per address (limit {ppm}/min), long polls wait {:.0} s",
            self.ops,
            self.clients,
            self.seed,
            interval.as_secs_f64(),
            self.poll_wait.min(max_wait)
        ));
        for _ in 1..planned {
            let addr = self
                .create("setup", Phase::Setup, Duration::from_secs(30))
                .await?;
            self.add(addr);
        }
        self.say(&format!("{planned} addresses created; workload starts"));

        // The workload.
        let ticker = {
            let ctx = Arc::clone(self);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    let p = &ctx.rec.progress;
                    ctx.say(&format!(
                        "{} requests issued (target {})",
                        p.issued(),
                        ctx.ops
                    ));
                    if p.workload_done() {
                        break;
                    }
                }
            })
        };
        let clients: Vec<_> = (0..self.clients)
            .map(|w| {
                let ctx = Arc::clone(self);
                tokio::spawn(async move { ctx.client(w).await })
            })
            .collect();
        for c in clients {
            c.await.map_err(|e| format!("a client task failed: {e}"))?;
        }
        self.rec.progress.finish_workload();
        self.seal_all();
        ticker.abort();
        self.say("workload done; consumers draining");

        // Consumers read to the end of each feed.
        loop {
            let task = Self::lock(&self.consumers).pop();
            let Some(task) = task else { break };
            task.await
                .map_err(|e| format!("a consumer task failed: {e}"))?;
        }
        self.say("consumers done; reading everything back");

        // The read-back.
        let n = Self::lock(&self.slots).len();
        let reads: Vec<_> = (0..n)
            .map(|a| {
                let ctx = Arc::clone(self);
                tokio::spawn(async move { ctx.read_back(a).await })
            })
            .collect();
        for r in reads {
            r.await
                .map_err(|e| format!("a read-back task failed: {e}"))?;
        }
        self.wait_for_wakes().await;
        Ok(())
    }

    /// With wakes checked: waits (up to [`WAKE_TIMEOUT`]) until every address's wakes cover
    /// the last delivery its feed was read to hold; what is still uncovered then is the
    /// verifier's to report.
    async fn wait_for_wakes(&self) {
        let Some(r) = &self.wakes else { return };
        let ids = self.address_ids();
        let mut due: Vec<(String, u64)> = self.rec.with_ops(|ops| {
            let mut last = vec![0u64; ids.len()];
            for op in ops {
                let (Some(a), OpKind::Poll { .. }, true) =
                    (op.address, &op.kind, op.outcome.is(200))
                else {
                    continue;
                };
                for e in op.outcome.body()["events"]
                    .as_array()
                    .map_or(&[][..], |v| v)
                {
                    if let (Some(s), true) = (e["sequence"].as_u64(), e["type"] == DELIVERY_TYPE) {
                        if let Some(l) = last.get_mut(a) {
                            *l = (*l).max(s);
                        }
                    }
                }
            }
            ids.iter()
                .cloned()
                .zip(last)
                .filter(|(_, s)| *s > 0)
                .collect()
        });
        self.say(&format!("waiting for the wakes of {} addresses", due.len()));
        let deadline = Instant::now() + WAKE_TIMEOUT;
        loop {
            due.retain(|(id, s)| r.covered(id) < *s);
            if due.is_empty() {
                self.say("every delivery was woken for");
                return;
            }
            if Instant::now() >= deadline {
                self.say(&format!(
                    "{} addresses' last deliveries not woken for after {} s",
                    due.len(),
                    WAKE_TIMEOUT.as_secs()
                ));
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn read_back(&self, a: usize) {
        let _ = self.inspect_ok("final", Phase::Final, a).await;
        let mut keys = all_keys();
        for _ in 0..200 {
            let o = self.list_state("final", Phase::Final, a).await;
            if o.is(200) {
                for k in o.body()["keys"].as_array().map_or(&[][..], |v| v) {
                    if let Some(k) = k["key"].as_str() {
                        if !keys.iter().any(|x| x == k) {
                            keys.push(k.to_owned());
                        }
                    }
                }
                break;
            }
            Self::pause(&o).await;
        }
        for key in keys {
            for _ in 0..200 {
                let o = self.read_key("final", Phase::Final, a, &key).await;
                if o.is(200) || o.is(404) {
                    break;
                }
                Self::pause(&o).await;
            }
        }
    }

    // ------------------------------------------------------------------ workload clients

    async fn client(self: Arc<Self>, w: usize) {
        let who = format!("w{w}");
        let mut rng = StdRng::seed_from_u64(
            self.seed ^ (0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(w as u64 + 1)),
        );
        let mut n = 0u64;
        while self.rec.progress.issued() < self.ops {
            let Some(a) = self.acquire(&mut rng).await else {
                break;
            };
            n += 1;
            let x: f64 = rng.gen();
            if x < 0.30 {
                self.cas_increment(&who, a, &mut rng).await;
            } else if x < 0.42 {
                let value =
                    json!({"w": format!("{who}.{n}"), "pad": "x".repeat(rng.gen_range(0..48))});
                self.write(
                    &who,
                    a,
                    &register(rng.gen_range(0..REGISTERS)),
                    value,
                    None,
                    &mut rng,
                )
                .await;
            } else if x < 0.48 {
                let value = json!({"w": format!("{who}.{n}"), "created": true});
                self.write(
                    &who,
                    a,
                    &register(rng.gen_range(0..REGISTERS)),
                    value,
                    Some(0),
                    &mut rng,
                )
                .await;
            } else if x < 0.56 {
                self.conditional_delete(&who, a, &mut rng).await;
            } else if x < 0.72 {
                self.idempotent_delivery(&who, a, n, &mut rng).await;
            } else if x < 0.78 {
                self.signed_delivery(&who, a, n, &mut rng).await;
            } else if x < 0.83 {
                self.plain_delivery(&who, a, n).await;
            } else if x < 0.85 {
                self.lossy_delivery(&who, a, n, &mut rng).await;
            } else if x < 0.88 && self.email_secret.is_some() {
                self.email_delivery(&who, a, n, &mut rng).await;
            } else if (0.88..0.91).contains(&x) {
                self.timer(&who, a, n, &mut rng).await;
            } else {
                self.read(&who, a, &mut rng).await;
            }
            self.release(a);
        }
    }

    /// Read the counter, PUT read+1 with `if_revision` = the revision read; again on 409.
    async fn cas_increment(&self, who: &str, a: usize, rng: &mut StdRng) {
        let key = counter(rng.gen_range(0..COUNTERS));
        for _ in 0..8 {
            let r = self.read_key(who, Phase::Workload, a, &key).await;
            let (value, rev) = match r.status() {
                Some(200) => match (r.body()["value"].as_u64(), r.body()["revision"].as_u64()) {
                    (Some(v), Some(rev)) => (v + 1, rev),
                    _ => return, // the verifier reports the malformed read
                },
                Some(404) => (1, 0),
                _ => {
                    Self::pause(&r).await;
                    return;
                }
            };
            if !self.reserve(a) {
                return;
            }
            let w = self
                .put(who, a, &key, json!(value), Some(rev), rng.gen_bool(0.3))
                .await;
            match w.status() {
                Some(200) => return,
                Some(409) if w.code() == "revision_conflict" => {
                    self.unreserve(a);
                    tokio::time::sleep(Duration::from_millis(rng.gen_range(0..5))).await;
                }
                Some(s) if s != 503 => {
                    self.unreserve(a);
                    return;
                }
                _ => {
                    Self::pause(&w).await;
                    return;
                }
            }
        }
    }

    async fn write(
        &self, who: &str, a: usize, key: &str, value: Value, if_revision: Option<u64>,
        rng: &mut StdRng,
    ) {
        if !self.reserve(a) {
            return;
        }
        let o = self
            .put(who, a, key, value, if_revision, rng.gen_bool(0.3))
            .await;
        if !o.is(200) && !o.is_ambiguous() {
            self.unreserve(a);
        }
        Self::pause(&o).await;
    }

    /// Read a register, then delete it with `If-Match`/`?if_revision` = the revision read, or a
    /// stale one (must be 409), or — when it was missing — revision 1 (must be 404 or 409).
    async fn conditional_delete(&self, who: &str, a: usize, rng: &mut StdRng) {
        let key = register(rng.gen_range(0..REGISTERS));
        let r = self.read_key(who, Phase::Workload, a, &key).await;
        let rev = match r.status() {
            Some(200) => match r.body()["revision"].as_u64() {
                Some(rev) if rng.gen_bool(0.25) => rev.saturating_sub(1),
                Some(rev) => rev,
                None => return,
            },
            Some(404) => 1,
            _ => {
                Self::pause(&r).await;
                return;
            }
        };
        if !self.reserve(a) {
            return;
        }
        let o = self.delete(who, a, &key, rev, rng.gen_bool(0.5)).await;
        if !o.is(200) && !o.is_ambiguous() {
            self.unreserve(a);
        }
        Self::pause(&o).await;
    }

    /// A delivery with a fresh Idempotency-Key (first attempt sometimes sent 3 times at once),
    /// retried until its outcome is known; then sometimes retried again (sequentially or
    /// concurrently) and sometimes reused with another body.
    async fn idempotent_delivery(&self, who: &str, a: usize, n: u64, rng: &mut StdRng) {
        if !self.reserve(a) {
            return;
        }
        let key = format!("{:x}-{who}-{n}", self.seed);
        let data =
            json!({"marker": key, "client": who, "n": n, "pad": "y".repeat(rng.gen_range(0..64))});
        let concurrent_first = rng.gen_bool(0.1);
        let answers: Vec<Outcome> = if concurrent_first {
            futures::future::join_all((0..3).map(|_| self.deliver_resolved(who, a, &key, &data)))
                .await
        } else {
            vec![self.deliver_resolved(who, a, &key, &data).await]
        };
        let landed = answers.iter().any(|o| o.is(202) || o.is(200));
        if !landed {
            if answers.iter().all(|o| !o.is_ambiguous()) {
                self.unreserve(a);
            }
            return;
        }
        if rng.gen_bool(0.3) {
            for _ in 0..rng.gen_range(1..=2) {
                self.deliver_resolved(who, a, &key, &data).await;
            }
        }
        if rng.gen_bool(0.15) {
            futures::future::join_all((0..3).map(|_| self.deliver_resolved(who, a, &key, &data)))
                .await;
        }
        if rng.gen_bool(0.08) {
            let mut other = data.clone();
            other["other"] = json!(true);
            let mut o = self.deliver(who, a, Some(&key), &other, true).await;
            for _ in 0..20 {
                if !o.is_ambiguous() {
                    break;
                }
                Self::pause(&o).await;
                o = self.deliver(who, a, Some(&key), &other, true).await;
            }
        }
    }

    /// A timer 1–3 s ahead (docs/API.md §20), set with its marker as Idempotency-Key (an
    /// unknown outcome is sent again, sometimes a landed one too); a third are cancelled at
    /// once or a moment later, racing their firing. Each fires exactly once unless a cancel
    /// answered 200 first.
    async fn timer(&self, who: &str, a: usize, n: u64, rng: &mut StdRng) {
        if !self.reserve(a) {
            return;
        }
        let marker = format!("{:x}-{who}-t{n}", self.seed);
        let in_seconds = rng.gen_range(1..=3u64);
        {
            // Lateness: 1 s on `serve`, 5 s on AWS; the drain waits this long past the time.
            let due = Instant::now() + Duration::from_secs(in_seconds + 8);
            let mut slots = Self::lock(&self.slots);
            let by = &mut slots[a].timers_due_by;
            *by = Some(by.map_or(due, |b| b.max(due)));
        }
        let mut o = self.set_timer(who, a, &marker, in_seconds).await;
        for _ in 0..80 {
            if !o.is_ambiguous() {
                break;
            }
            Self::pause(&o).await;
            o = self.set_timer(who, a, &marker, in_seconds).await;
        }
        if !(o.is(201) || o.is(200)) {
            if !o.is_ambiguous() {
                self.unreserve(a);
            }
            return;
        }
        if rng.gen_bool(0.2) {
            self.set_timer(who, a, &marker, in_seconds).await;
        }
        let Some(id) = o.body()["timer"]["id"].as_str().map(str::to_owned) else {
            return;
        };
        if rng.gen_bool(0.33) {
            let pause = rng.gen_range(0..=(in_seconds * 1000 + 500));
            tokio::time::sleep(Duration::from_millis(pause)).await;
            let ad = self.addr(a);
            let req =
                Req::new(Method::DELETE, format!("{}/timers/{id}", ad.root)).bearer(&ad.token);
            let kind = OpKind::CancelTimer { timer_id: id };
            let c = self
                .rec
                .send(who, Phase::Workload, Some(a), kind, req)
                .await;
            if c.is(200) {
                self.unreserve(a);
            }
        }
    }

    async fn set_timer(&self, who: &str, a: usize, marker: &str, in_seconds: u64) -> Outcome {
        let ad = self.addr(a);
        let body =
            json!({"in_seconds": in_seconds, "type": TIMER_TYPE, "data": {"marker": marker}});
        let req = Req::new(Method::POST, format!("{}/timers", ad.root))
            .bearer(&ad.token)
            .header("idempotency-key", marker)
            .json(&body);
        let kind = OpKind::SetTimer {
            marker: marker.to_owned(),
            in_seconds,
        };
        self.rec
            .send(who, Phase::Workload, Some(a), kind, req)
            .await
    }

    /// A provider's signed delivery (no Idempotency-Key), sometimes redelivered by the
    /// "provider" — again, or three times at once — after it landed: one event in all.
    async fn signed_delivery(&self, who: &str, a: usize, n: u64, rng: &mut StdRng) {
        if !self.reserve(a) {
            return;
        }
        let id = format!("{SIGNED_PREFIX}{:x}_{who}_{n}", self.seed);
        let data = json!({"marker": id, "client": who, "n": n, "signed": true});
        let first = self.deliver_signed_resolved(who, a, &id, &data).await;
        if !(first.is(202) || first.is(200)) {
            if !first.is_ambiguous() {
                self.unreserve(a);
            }
            return;
        }
        if rng.gen_bool(0.3) {
            self.deliver_signed_resolved(who, a, &id, &data).await;
        }
        if rng.gen_bool(0.1) {
            futures::future::join_all(
                (0..3).map(|_| self.deliver_signed_resolved(who, a, &id, &data)),
            )
            .await;
        }
    }

    /// A delivery without a key: never retried (a retry would be a second event).
    async fn plain_delivery(&self, who: &str, a: usize, n: u64) {
        if !self.reserve(a) {
            return;
        }
        let data = json!({"marker": format!("{:x}-{who}-{n}-plain", self.seed), "client": who});
        let o = self.deliver(who, a, None, &data, false).await;
        if !o.is(202) && !o.is_ambiguous() {
            self.unreserve(a);
        }
        Self::pause(&o).await;
    }

    /// A body that parsing would change (the poison event nested 125 deep, a repeated key,
    /// `1E5`), with a fresh Idempotency-Key, retried until its outcome is known: it must read
    /// back as its exact text (docs/API.md, "Inbox.").
    async fn lossy_delivery(&self, who: &str, a: usize, n: u64, rng: &mut StdRng) {
        if !self.reserve(a) {
            return;
        }
        let key = format!("{:x}-{who}-{n}-lossy", self.seed);
        let body = lossy_body(rng.gen_range(0..LOSSY_BODIES), &key);
        let mut o = self.deliver_raw(who, a, &key, &body).await;
        for _ in 0..80 {
            if !o.is_ambiguous() {
                break;
            }
            Self::pause(&o).await;
            o = self.deliver_raw(who, a, &key, &body).await;
        }
        if !(o.is(202) || o.is(200) || o.is_ambiguous()) {
            self.unreserve(a);
        }
        Self::pause(&o).await;
    }

    async fn read(&self, who: &str, a: usize, rng: &mut StdRng) {
        let o = match rng.gen_range(0..4) {
            0 => self.list_state(who, Phase::Workload, a).await,
            1 => self.inspect(who, Phase::Workload, a).await,
            2 => {
                let id = {
                    let slots = Self::lock(&self.slots);
                    let known = &slots[a].known;
                    (!known.is_empty()).then(|| known[rng.gen_range(0..known.len())].clone())
                };
                match id {
                    Some(id) => self.read_event(who, a, &id).await,
                    None => self.inspect(who, Phase::Workload, a).await,
                }
            }
            _ => {
                let keys = all_keys();
                let key = &keys[rng.gen_range(0..keys.len())];
                self.read_key(who, Phase::Workload, a, key).await
            }
        };
        Self::pause(&o).await;
    }

    // ------------------------------------------------------------------ consumers

    /// Reads the whole feed of address `a` with `after = next_cursor`, long-polling while the
    /// address is active, acking some events (some twice); once the address is sealed, reads up
    /// to its final `usage.last_sequence` and stops.
    async fn consumer(self: Arc<Self>, a: usize, c: usize, filtered: bool) {
        let who = format!("c{c}");
        let mut rng = StdRng::seed_from_u64(self.seed ^ 0x5bd1_e995 ^ ((c as u64 + 1) << 32));
        let (mut activity, pacer, addr) = {
            let slots = Self::lock(&self.slots);
            (
                slots[a].activity.subscribe(),
                Arc::clone(&slots[a].pacer),
                Arc::clone(&slots[a].addr),
            )
        };
        while *activity.borrow_and_update() == Activity::Idle {
            if activity.changed().await.is_err() {
                return;
            }
        }
        let mut cursor = 0u64;
        let mut target: Option<u64> = None;
        let mut deadline: Option<Instant> = None;
        let mut failures = 0;
        loop {
            if target.is_none() && *activity.borrow() == Activity::Sealed {
                // Every timer set on the address fires before the feed's end is taken.
                let due_by = Self::lock(&self.slots)[a].timers_due_by;
                if let Some(at) = due_by {
                    tokio::time::sleep_until(at).await;
                }
                deadline = Some(Instant::now() + DRAIN_TIMEOUT);
                match self.inspect_ok(&who, Phase::Drain, a).await {
                    Some(b) => target = b["usage"]["last_sequence"].as_u64(),
                    None => return,
                }
            }
            if let Some(t) = target {
                if cursor >= t || deadline.is_some_and(|d| Instant::now() > d) {
                    return;
                }
            }
            let interval = *Self::lock(&self.poll_interval);
            pacer.wait(interval).await;
            let (phase, wait) = if target.is_some() {
                (Phase::Drain, 0.0)
            } else {
                (Phase::Workload, self.poll_wait)
            };
            let limit = 100;
            let types = if filtered {
                format!("&types={FILTER}")
            } else {
                String::new()
            };
            let req = Req::new(
                Method::GET,
                format!(
                    "{}?after={cursor}&wait={wait}&limit={limit}{types}",
                    addr.events
                ),
            )
            .bearer(&addr.token);
            let kind = OpKind::Poll {
                consumer: c,
                after: cursor,
                limit,
                wait,
                filtered,
            };
            let o = self.rec.send(&who, phase, Some(a), kind, req).await;
            match o.status() {
                Some(200) => {
                    let b = o.body();
                    let ids: Vec<String> = b["events"]
                        .as_array()
                        .map_or(&[][..], |v| v)
                        .iter()
                        .filter_map(|e| e["id"].as_str().map(str::to_owned))
                        .collect();
                    match b["next_cursor"].as_u64() {
                        Some(n) => cursor = n,
                        None => failures += 1,
                    }
                    for id in ids {
                        if rng.gen_bool(0.08) {
                            let times = if rng.gen_bool(0.3) { 2 } else { 1 };
                            for _ in 0..times {
                                self.ack_resolved(&who, phase, a, &id).await;
                            }
                        }
                    }
                }
                Some(429) => pacer.push_back(retry_after(&o)),
                None | Some(503) => Self::pause(&o).await,
                Some(_) => {
                    failures += 1;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
            if failures > 30 {
                self.say(&format!(
                    "consumer {c} of address #{a} gives up after 30 failed polls"
                ));
                return;
            }
        }
    }

    async fn ack_resolved(&self, who: &str, phase: Phase, a: usize, id: &str) {
        for _ in 0..40 {
            let o = self.ack_once(who, phase, a, id).await;
            if !o.is_ambiguous() {
                return;
            }
            Self::pause(&o).await;
        }
    }

    async fn ack_once(&self, who: &str, phase: Phase, a: usize, id: &str) -> Outcome {
        let ad = self.addr(a);
        let req = Req::new(Method::POST, format!("{}/{id}/ack", ad.events)).bearer(&ad.token);
        let kind = OpKind::Ack {
            event_id: id.to_owned(),
        };
        self.rec.send(who, phase, Some(a), kind, req).await
    }
}

#[cfg(test)]
mod tests {
    /// The signing the workload uses signs the Standard Webhooks specification's own example
    /// as it says.
    #[test]
    fn signs_the_standard_webhooks_example() {
        let headers = crate::verification::standard_headers(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            br#"{"test": 2432232314}"#,
        );
        assert!(headers.contains(&(
            "webhook-signature".to_owned(),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=".to_owned()
        )));
    }
}
