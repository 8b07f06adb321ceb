//! Wake hooks as stored (docs/API.md §19): a hook's settings, its signing secret and headers
//! (stored as given: sending needs them; never shown), and its delivery state — the cursor
//! `delivered_through`, the range in flight, when it may be tried again. The wake machine
//! (`agentaddress_api::wake_delivery`) decides every change; a store persists it with a
//! compare-and-set on the hook's `revision`.

use async_trait::async_trait;

use super::{NewEvent, StoreResult};
use crate::domain::hooks::HookFormat;
use crate::domain::{Limits, Millis};

/// Whether a hook wakes (docs/API.md §19).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookStatus {
    Active,
    /// Set by its owner (`PUT …/hooks/{id}`): events are not lost, only not sent for until it
    /// is active again.
    Paused,
    /// After [`crate::domain::hooks::FAILED_RANGES_TO_DISABLE`] failed ranges in a row, until a
    /// `PUT` sets it active.
    Disabled,
}

impl HookStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Paused => "paused",
            Self::Disabled => "disabled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Active, Self::Paused, Self::Disabled]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

/// A hook to add, every field already checked by `crate::domain::hooks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewHook {
    pub id: String,
    pub url: String,
    /// Its type patterns (`crate::domain::hooks::TypePatterns`), as given.
    pub types: Vec<String>,
    pub format: HookFormat,
    /// Header names (lower case) and values, sent with every wake.
    pub headers: Vec<(String, String)>,
    /// `whsec_…`: the key its wakes are signed with.
    pub secret: String,
    pub debounce_seconds: u64,
}

/// Where a hook's wakes stand: what the wake machine reads and writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookDelivery {
    /// Every matching event up to this sequence was covered by a wake the receiver took (or
    /// reported `hook.failed`). At creation: the feed's head.
    pub delivered_through: u64,
    /// The range being woken for, `(delivered_through, to]`: fixed at its first try, so every
    /// try of it carries the same `webhook-id`.
    pub pending_to: Option<u64>,
    /// Tries of the pending range so far.
    pub attempts: u32,
    /// No try before this time: a retry's, or the debounce after the last wake.
    pub not_before: Option<Millis>,
    /// Held by one try until then (a try cut off by a crash lets the hook be tried again after).
    pub lease_until: Option<Millis>,
    /// When the last wake was sent.
    pub last_wake_at: Option<Millis>,
    /// Failed ranges in a row.
    pub failed_ranges: u32,
    /// The last failure, one line (`error` of `hook.failed`).
    pub last_error: Option<String>,
}

/// A hook as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRecord {
    pub id: String,
    pub address_id: String,
    pub url: String,
    pub types: Vec<String>,
    pub format: HookFormat,
    pub headers: Vec<(String, String)>,
    pub secret: String,
    pub debounce_seconds: u64,
    pub status: HookStatus,
    pub created_at: Millis,
    pub delivery: HookDelivery,
    /// Counts the hook's writes: [`Hooks::save_hook`] writes only over the revision it read.
    pub revision: u64,
}

impl HookRecord {
    /// The stored hook of a new one, at `created_at` with its cursor at `head`.
    pub fn new(address_id: &str, hook: NewHook, head: u64, created_at: Millis) -> Self {
        Self {
            id: hook.id,
            address_id: address_id.to_owned(),
            url: hook.url,
            types: hook.types,
            format: hook.format,
            headers: hook.headers,
            secret: hook.secret,
            debounce_seconds: hook.debounce_seconds,
            status: HookStatus::Active,
            created_at,
            delivery: HookDelivery {
                delivered_through: head,
                ..HookDelivery::default()
            },
            revision: 1,
        }
    }
}

/// The union of the patterns of an address's active hooks, kept with the address
/// ([`crate::store::AddressRecord::hook_types`]) so an append decides whether anything needs
/// waking without another read.
pub fn hook_types<'a>(hooks: impl IntoIterator<Item = &'a HookRecord>) -> Vec<String> {
    let mut types: Vec<String> = Vec::new();
    for hook in hooks {
        if hook.status != HookStatus::Active {
            continue;
        }
        for t in &hook.types {
            if !types.contains(t) {
                types.push(t.clone());
            }
        }
    }
    types
}

/// What [`Hooks::due_hooks`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DueHooks {
    /// (address id, hook id) of the hooks with a wake to try now.
    pub due: Vec<(String, String)>,
    /// The earliest time a hook with a wake to send becomes due later (a retry, a debounce, a
    /// lease), if any: when the loop looks again.
    pub next_at: Option<Millis>,
}

/// An address's wake hooks (docs/API.md §19). Part of [`crate::store::Store`].
#[async_trait]
pub trait Hooks: Send + Sync + 'static {
    /// Adds `hooks` to live address `id` in one atomic step, each active with its cursor at the
    /// feed's head; the address's [`hook_types`] follow. [`crate::store::StoreError::QuotaExceeded`]
    /// when the address would hold more than `max` hooks (nothing is added).
    async fn add_hooks(
        &self, id: &str, hooks: Vec<NewHook>, max: usize, now: Millis,
    ) -> StoreResult<Vec<HookRecord>>;

    /// The live address's hooks, oldest first.
    async fn list_hooks(&self, id: &str, now: Millis) -> StoreResult<Vec<HookRecord>>;

    /// One hook of the live address, else [`crate::store::StoreError::NotFound`].
    async fn get_hook(&self, id: &str, hook_id: &str, now: Millis) -> StoreResult<HookRecord>;

    /// Writes `hook`'s status and delivery state when its stored revision is still
    /// `hook.revision`, with `events` (a hook's own reports, `hook.failed`, `hook.disabled`)
    /// appended in the same atomic step — beyond the feed quota if need be: there is at most
    /// one report per range the feed accepted. Answers the hook as written (its revision one
    /// more), or `None` when another write came first; the address's [`hook_types`] follow a
    /// change of status. [`crate::store::StoreError::NotFound`] once the hook is deleted.
    async fn save_hook(
        &self, id: &str, hook: HookRecord, events: Vec<NewEvent>, limits: &Limits, now: Millis,
    ) -> StoreResult<Option<HookRecord>>;

    /// Deletes a hook of the live address (its wakes stop; one in flight may still arrive),
    /// else [`crate::store::StoreError::NotFound`].
    async fn delete_hook(&self, id: &str, hook_id: &str, now: Millis) -> StoreResult<()>;

    /// Active hooks of live addresses with a wake to try at `now` — a matching event beyond
    /// their cursor, or a pending range — not held and not waiting for a retry or a debounce,
    /// at most `limit`: what the embedded deployment's wake loop tries. Stores whose wakes are
    /// driven by a queue (DynamoDB: the wake queue) answer none.
    async fn due_hooks(&self, now: Millis, limit: usize) -> StoreResult<DueHooks> {
        let _ = (now, limit);
        Ok(DueHooks::default())
    }
}
