//! Wake hooks' delivery machine (docs/API.md §19), written once for every deployment: one try
//! of one hook ([`attempt_wake`]: claim the range, call the receiver, record the outcome — the
//! state machine of a hook's cursor), what a queue consumer does for a hook ([`consume_wake`])
//! and for a message naming an address ([`consume_address`], the wake queue on AWS), and the
//! embedded deployment's wake loop
//! ([`WakeLoop`], woken by the commits that give a hook something to do). Nothing is kept only
//! in memory: what is pending is read back from each hook's cursor.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::sync::{watch, Semaphore};

use crate::domain::hooks::{
    try_outcome, wakes_for, TryOutcome, Wake, WakeEvent, FAILED_RANGES_TO_DISABLE, MAX_WAKE_EVENTS,
    WAKE_TIMEOUT,
};
use crate::domain::{Clock, Ingress, Limits, Millis};
use crate::relay::{HookCaller, NotSent};
use crate::send_delivery::clean_error;
use crate::store::{prelude::*, HookRecord, HookStatus, NewEvent, StoreError};

/// How long one try holds its hook: the receiver's time, and room to record the answer. A try
/// cut off by a crash lets the hook be tried again after it.
pub const WAKE_LEASE_MS: Millis = WAKE_TIMEOUT.as_millis() as Millis + 20_000;

/// Events of a range read to find its matching ones, at most (the feed retains 1,000 by
/// default): a longer range still wakes, listing what the first ones held.
pub const MAX_EXAMINED: usize = 1_000;

/// What one call of [`attempt_wake`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WakeAttempt {
    /// The receiver took the wake (2xx): the cursor is at `to_sequence`.
    Delivered { to_sequence: u64 },
    /// No 2xx; the same range is tried again at this time.
    Retrying { at: Millis },
    /// The range failed for good (`hook.failed` appended); `disabled` when it was the third
    /// in a row (`hook.disabled`).
    Failed { disabled: bool },
    /// Nothing to send now; `Some(at)`: something becomes due then (a debounce, a retry, the
    /// end of another try's lease).
    Idle { next: Option<Millis> },
    /// The hook or its address is gone.
    Gone,
}

/// Where a wake's `events_url` points: `{base}/api/v1/addresses/{id}/events?after=…`.
#[derive(Clone)]
pub struct Waking {
    pub caller: Arc<dyn HookCaller>,
    /// The public base URL of the API (no trailing slash).
    pub base_url: String,
}

impl std::fmt::Debug for Waking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waking")
            .field("allows_private", &self.caller.allows_private())
            .field("base_url", &self.base_url)
            .finish()
    }
}

fn gone(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::AddressGone | StoreError::AddressNotFound | StoreError::NotFound
    )
}

/// The matching events of `(after, through]` of `hook`'s address, at most
/// [`MAX_WAKE_EVENTS`], reading at most [`MAX_EXAMINED`] events.
async fn matching_events(
    store: &dyn Store, hook: &HookRecord, after: u64, through: u64, now: Millis,
) -> Result<Vec<WakeEvent>, StoreError> {
    let mut found = Vec::new();
    let mut cursor = after;
    let mut examined = 0usize;
    while cursor < through && examined < MAX_EXAMINED && found.len() < MAX_WAKE_EVENTS {
        let page = store
            .read_events(&hook.address_id, cursor, 100, 4 * 1024 * 1024, now)
            .await?;
        let Some(last) = page.events.last() else {
            break;
        };
        cursor = last.sequence;
        for e in &page.events {
            examined += 1;
            if e.sequence > through || found.len() == MAX_WAKE_EVENTS {
                break;
            }
            if wakes_for(&hook.types, &e.event_type) {
                found.push(WakeEvent {
                    id: e.id.clone(),
                    sequence: e.sequence,
                    event_type: e.event_type.clone(),
                    source: e.source.clone(),
                    created_at: e.received_at,
                });
            }
        }
        if !page.has_more {
            break;
        }
    }
    Ok(found)
}

/// The wake of `(from - 1, to]` for `hook` of an address with task `task_id`.
pub fn wake_of(
    hook: &HookRecord, task_id: Option<String>, from_after: u64, to: u64, events: Vec<WakeEvent>,
    base_url: &str,
) -> Wake {
    Wake {
        address_id: hook.address_id.clone(),
        task_id,
        hook_id: hook.id.clone(),
        from_sequence: from_after + 1,
        to_sequence: to,
        events,
        events_url: format!(
            "{base_url}/api/v1/addresses/{}/events?after={from_after}",
            hook.address_id
        ),
        test: None,
    }
}

/// The request of `wake` for `hook` at `now`: its body, and its headers — the sender's, then
/// the hook's own (which replace a sender's header of the same name, `accept` or
/// `user-agent`; the signature's and `content-type` cannot be given).
pub fn request_of(hook: &HookRecord, wake: &Wake, now: Millis) -> (Vec<(String, String)>, Vec<u8>) {
    let body = wake.body(hook.format).to_string().into_bytes();
    let mut headers: Vec<(String, String)> = wake
        .headers(hook.format, &hook.secret, now.div_euclid(1_000), &body)
        .into_iter()
        .map(|(n, v)| (n.to_owned(), v))
        .collect();
    for (name, value) in &hook.headers {
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        headers.push((name.clone(), value.clone()));
    }
    (headers, body)
}

/// One try of hook `hook_id` of `address_id`: when it is active, not held and not waiting, it
/// claims the range `(delivered_through, head]` (or the range already pending, so every try of
/// it is the same wake), calls the receiver, and records the outcome: the cursor moved, a
/// retry, or `hook.failed` (and `hook.disabled` after three failed ranges in a row). A range
/// with no matching event moves the cursor without a call.
pub async fn attempt_wake(
    store: &dyn Store, waking: &Waking, limits: &Limits, clock: &dyn Clock, address_id: &str,
    hook_id: &str,
) -> Result<WakeAttempt, StoreError> {
    let now = clock.now();
    let address = match store.get_address(address_id, now).await? {
        Some(a) if !a.is_gone(now) => a,
        _ => return Ok(WakeAttempt::Gone),
    };
    let hook = match store.get_hook(address_id, hook_id, now).await {
        Ok(h) => h,
        Err(e) if gone(&e) => return Ok(WakeAttempt::Gone),
        Err(e) => return Err(e),
    };
    if hook.status != HookStatus::Active {
        return Ok(WakeAttempt::Idle { next: None });
    }
    let d = &hook.delivery;
    let held = d.lease_until.max(d.not_before).filter(|t| *t > now);
    let after = d.delivered_through;
    let to = match d.pending_to {
        Some(to) => to,
        None if address.last_sequence > after => address.last_sequence,
        None => return Ok(WakeAttempt::Idle { next: None }),
    };
    if let Some(at) = held {
        return Ok(WakeAttempt::Idle { next: Some(at) });
    }
    let events = matching_events(store, &hook, after, to, now).await?;
    if events.is_empty() && d.pending_to.is_none() {
        // Nothing of the range wakes this hook: the cursor passes it without a call.
        let mut passed = hook.clone();
        passed.delivery.delivered_through = to;
        return match store
            .save_hook(address_id, passed, Vec::new(), limits, now)
            .await
        {
            Ok(_) => Ok(WakeAttempt::Idle { next: None }),
            Err(e) if gone(&e) => Ok(WakeAttempt::Gone),
            Err(e) => Err(e),
        };
    }
    let mut claim = hook.clone();
    claim.delivery.pending_to = Some(to);
    claim.delivery.attempts = d.attempts.saturating_add(1);
    claim.delivery.lease_until = Some(now + WAKE_LEASE_MS);
    claim.delivery.not_before = None;
    claim.delivery.last_wake_at = Some(now);
    let claimed = match store
        .save_hook(address_id, claim, Vec::new(), limits, now)
        .await
    {
        Ok(Some(h)) => h,
        // Another try came first: it holds the hook now.
        Ok(None) => return Ok(WakeAttempt::Idle { next: None }),
        Err(e) if gone(&e) => return Ok(WakeAttempt::Gone),
        Err(e) => return Err(e),
    };
    let wake = wake_of(
        &claimed,
        address.task_id.clone(),
        after,
        to,
        events,
        &waking.base_url,
    );
    let (headers, body) = request_of(&claimed, &wake, now);
    let answer = waking.caller.call(&claimed.url, &headers, body).await;
    let (status, retry_after, error) = match &answer {
        Ok(a) => (
            Some(a.status),
            a.retry_after.clone(),
            format!("the receiver answered HTTP {}", a.status),
        ),
        Err(NotSent::Refused(why)) | Err(NotSent::Unreachable(why)) => {
            (None, None, clean_error(why))
        }
    };
    let retries = claimed.delivery.attempts.saturating_sub(1) as usize;
    let outcome = match &answer {
        // A receiver that may not be called now will not be callable on a retry either.
        Err(NotSent::Refused(_)) => TryOutcome::Permanent,
        _ => try_outcome(status, retry_after.as_deref(), retries),
    };
    tracing::info!(
        %address_id, %hook_id, to_sequence = to, attempt = claimed.delivery.attempts,
        status = status.unwrap_or(0), ?outcome, "wake sent"
    );
    finish(store, limits, clock, claimed, to, outcome, status, error).await
}

/// Records the end of a try of range `to` on the hook as claimed (or as it is now, when
/// something else — a pause — was written meanwhile and the range is still pending).
#[allow(clippy::too_many_arguments)]
async fn finish(
    store: &dyn Store, limits: &Limits, clock: &dyn Clock, claimed: HookRecord, to: u64,
    outcome: TryOutcome, status: Option<u16>, error: String,
) -> Result<WakeAttempt, StoreError> {
    let mut hook = claimed;
    for _ in 0..5 {
        let now = clock.now();
        let (next, events, result) = ended(&hook, to, &outcome, status, &error, now);
        match store
            .save_hook(&hook.address_id, next, events, limits, now)
            .await
        {
            Ok(Some(_)) => return Ok(result),
            Ok(None) => {}
            Err(e) if gone(&e) => return Ok(WakeAttempt::Gone),
            Err(e) => return Err(e),
        }
        hook = match store.get_hook(&hook.address_id, &hook.id, now).await {
            Ok(h) if h.delivery.pending_to == Some(to) => h,
            // Another try recorded this range (ours had outlived its lease): nothing to add.
            Ok(_) => return Ok(WakeAttempt::Idle { next: None }),
            Err(e) if gone(&e) => return Ok(WakeAttempt::Gone),
            Err(e) => return Err(e),
        };
    }
    Err(StoreError::Unavailable(
        "a hook kept changing while a wake's outcome was recorded".into(),
    ))
}

/// The hook after a try of range `to` ended with `outcome`, the reports to append with it, and
/// what the try did.
fn ended(
    hook: &HookRecord, to: u64, outcome: &TryOutcome, status: Option<u16>, error: &str, now: Millis,
) -> (HookRecord, Vec<NewEvent>, WakeAttempt) {
    let mut next = hook.clone();
    let d = &mut next.delivery;
    d.lease_until = None;
    let debounce = (hook.debounce_seconds > 0)
        .then(|| d.last_wake_at.unwrap_or(now) + (hook.debounce_seconds as Millis) * 1_000);
    match outcome {
        TryOutcome::Delivered => {
            d.delivered_through = to;
            d.pending_to = None;
            d.attempts = 0;
            d.failed_ranges = 0;
            d.last_error = None;
            d.not_before = debounce;
            (next, Vec::new(), WakeAttempt::Delivered { to_sequence: to })
        }
        TryOutcome::Retry { after: Some(after) } => {
            let at = now + Millis::try_from(after.as_millis()).unwrap_or(Millis::MAX / 2);
            d.not_before = Some(at);
            d.last_error = Some(error.to_owned());
            (next, Vec::new(), WakeAttempt::Retrying { at })
        }
        TryOutcome::Retry { after: None } | TryOutcome::Permanent => {
            let attempts = d.attempts;
            d.delivered_through = to;
            d.pending_to = None;
            d.attempts = 0;
            d.failed_ranges = d.failed_ranges.saturating_add(1);
            d.last_error = Some(error.to_owned());
            d.not_before = debounce;
            let mut data = json!({
                "hook_id": hook.id,
                "error": error,
                "attempts": attempts,
                "to_sequence": to,
            });
            if let (Some(s), Some(o)) = (status, data.as_object_mut()) {
                o.insert("status".into(), json!(s));
            }
            let mut events = vec![report("hook.failed", data)];
            let disabled = d.failed_ranges >= FAILED_RANGES_TO_DISABLE;
            if disabled {
                next.status = HookStatus::Disabled;
                events.push(report(
                    "hook.disabled",
                    json!({
                        "hook_id": hook.id,
                        "failed_ranges": next.delivery.failed_ranges,
                        "error": error,
                    }),
                ));
            }
            (next, events, WakeAttempt::Failed { disabled })
        }
    }
}

fn report(event_type: &str, data: serde_json::Value) -> NewEvent {
    NewEvent {
        event_type: event_type.into(),
        source: Some("agentaddress".into()),
        ingress: Ingress::Outbound,
        data: data.to_string(),
        http: None,
    }
}

/// What a queue consumer does with one message naming hook `hook_id` of `address_id` (the
/// wake queue on AWS): tries until nothing is due now, then says when to see the message again
/// — `None` when the hook has nothing left to send (or is gone), else the time something is
/// due (a retry, a debounce, another try's lease), to hide the message until then.
pub async fn consume_wake(
    store: &dyn Store, waking: &Waking, limits: &Limits, clock: &dyn Clock, address_id: &str,
    hook_id: &str,
) -> Result<Option<Millis>, StoreError> {
    // A delivered range may leave another behind it (events that came during the try).
    for _ in 0..4 {
        match attempt_wake(store, waking, limits, clock, address_id, hook_id).await? {
            WakeAttempt::Delivered { .. } | WakeAttempt::Failed { .. } => continue,
            WakeAttempt::Retrying { at } => return Ok(Some(at)),
            WakeAttempt::Idle { next } => return Ok(next),
            WakeAttempt::Gone => return Ok(None),
        }
    }
    Ok(Some(clock.now()))
}

/// What a queue consumer does with a message naming address `address_id` (the wake queue on
/// AWS): [`consume_wake`] for each of its hooks, side by side (a slow receiver delays no other): `None` when none has
/// anything left to send (or the address is gone), else the earliest time one has.
pub async fn consume_address(
    store: &dyn Store, waking: &Waking, limits: &Limits, clock: &dyn Clock, address_id: &str,
) -> Result<Option<Millis>, StoreError> {
    let hooks = match store.list_hooks(address_id, clock.now()).await {
        Ok(hooks) => hooks,
        Err(StoreError::AddressGone | StoreError::AddressNotFound) => return Ok(None),
        Err(e) => return Err(e),
    };
    let tries = hooks
        .iter()
        .map(|hook| consume_wake(store, waking, limits, clock, address_id, &hook.id));
    let mut next: Option<Millis> = None;
    let mut error = None;
    for outcome in futures::future::join_all(tries).await {
        match outcome {
            Ok(Some(at)) => next = Some(next.map_or(at, |n| n.min(at))),
            Ok(None) => {}
            Err(e) => error = Some(e),
        }
    }
    // A hook whose try failed is tried again when the message comes back (the queue's
    // visibility timeout): the others' outcomes are recorded on their cursors meanwhile.
    match error {
        Some(e) => Err(e),
        None => Ok(next),
    }
}

/// The embedded deployment's wake loop: tries every due hook — at once when a commit gives one
/// something to do (the store's feed signal), at the earliest time a retry or debounce ends,
/// and otherwise every `tick` — each try on its own task, at most `concurrency` at a time, so
/// a slow receiver delays no other hook.
pub struct WakeLoop {
    pub concurrency: usize,
    pub tick: Duration,
}

impl Default for WakeLoop {
    fn default() -> Self {
        Self {
            concurrency: 64,
            tick: Duration::from_secs(5),
        }
    }
}

impl WakeLoop {
    /// Runs until `shutdown` turns `true`.
    pub async fn run(
        self, store: Arc<dyn Store>, waking: Arc<Waking>, limits: Limits, clock: Arc<dyn Clock>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let permits = Arc::new(Semaphore::new(self.concurrency.max(1)));
        let running: Arc<Mutex<HashSet<String>>> = Arc::default();
        loop {
            if *shutdown.borrow() {
                return;
            }
            let now = clock.now();
            let mut sleep_for = self.tick;
            match store.due_hooks(now, 256).await {
                Ok(due) => {
                    for (address_id, hook_id) in due.due {
                        let fresh = running
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .insert(hook_id.clone());
                        if !fresh {
                            continue;
                        }
                        let Ok(permit) = permits.clone().acquire_owned().await else {
                            return;
                        };
                        let (store, waking, limits, clock, running) = (
                            store.clone(),
                            waking.clone(),
                            limits.clone(),
                            clock.clone(),
                            running.clone(),
                        );
                        tokio::spawn(async move {
                            let result = attempt_wake(
                                store.as_ref(),
                                &waking,
                                &limits,
                                clock.as_ref(),
                                &address_id,
                                &hook_id,
                            )
                            .await;
                            if let Err(e) = result {
                                tracing::warn!(%address_id, %hook_id, error = %e, "a wake could not be recorded");
                            }
                            running
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .remove(&hook_id);
                            drop(permit);
                            // Its range may have grown meanwhile: look again.
                            if let Some(signal) = store.feed_signal() {
                                signal.wake_hooks();
                            }
                        });
                    }
                    if let Some(at) = due.next_at {
                        let ms = u64::try_from((at - now).max(1)).unwrap_or(1);
                        sleep_for = sleep_for.min(Duration::from_millis(ms));
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot list the hooks due"),
            }
            let signal = store.clone();
            tokio::select! {
                _ = async {
                    match signal.feed_signal() {
                        Some(s) => s.hooks_woken().await,
                        None => std::future::pending().await,
                    }
                } => {}
                _ = tokio::time::sleep(sleep_for) => {}
                _ = shutdown.changed() => {}
            }
        }
    }
}

#[cfg(test)]
mod tests;
