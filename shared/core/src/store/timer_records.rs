//! Timers as stored (docs/API.md §20): a timer's event (type and data), when it fires, and its
//! status. Firing is one atomic step of the store — the event appended and the timer `fired`,
//! conditioned on its being pending — so that a timer fires once however many readers, the
//! scheduler and a cancel race for it.

use async_trait::async_trait;

use super::{EventRef, IdempotencyClaim, NewEvent, Requests, StoreResult};
use crate::domain::timer::{fired_data, TIMER_SOURCE};
use crate::domain::{Ingress, Limits, Millis};

/// Where a timer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerStatus {
    Pending,
    /// Its event was appended.
    Fired,
    /// Cancelled before it fired.
    Cancelled,
}

impl TimerStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Fired => "fired",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Pending, Self::Fired, Self::Cancelled]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

/// A timer to add, every field already checked by [`crate::domain::timer::TimerSpec`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTimer {
    pub id: String,
    pub fire_at: Millis,
    pub event_type: String,
    /// The compact JSON of its `data`, if given.
    pub data: Option<String>,
    pub created_at: Millis,
    /// The `Idempotency-Key` of the creation, if any.
    pub claim: Option<IdempotencyClaim>,
}

/// A timer as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerRecord {
    pub id: String,
    pub fire_at: Millis,
    pub event_type: String,
    pub data: Option<String>,
    pub created_at: Millis,
    pub status: TimerStatus,
    /// When it fired or was cancelled.
    pub closed_at: Option<Millis>,
    /// The event it appended, once fired.
    pub event: Option<EventRef>,
}

impl TimerRecord {
    /// The stored timer of a new one: pending.
    pub fn new(timer: &NewTimer) -> Self {
        Self {
            id: timer.id.clone(),
            fire_at: timer.fire_at,
            event_type: timer.event_type.clone(),
            data: timer.data.clone(),
            created_at: timer.created_at,
            status: TimerStatus::Pending,
            closed_at: None,
            event: None,
        }
    }

    /// The event it appends when it fires: its type, `source: "timer"`, and data
    /// `{"timer_id", "data"}` (docs/API.md §20).
    pub fn fired_event(&self) -> NewEvent {
        NewEvent {
            event_type: self.event_type.clone(),
            source: Some(TIMER_SOURCE.to_owned()),
            ingress: Ingress::Timer,
            data: fired_data(&self.id, self.data.as_deref()),
            http: None,
        }
    }
}

/// What [`Timers::create_timer`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedTimer {
    pub timer: TimerRecord,
    /// `true` when an earlier creation with the same Idempotency-Key made `timer`.
    pub duplicate: bool,
}

/// What [`Timers::cancel_timer`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// Cancelled now, or earlier (cancelling twice answers the same).
    Cancelled(TimerRecord),
    /// It fired first: nothing changed (docs/API.md §20, 409 `timer_fired`).
    Fired(TimerRecord),
}

/// Timers of an address (docs/API.md §20). Part of [`super::Store`].
#[async_trait]
pub trait Timers: Requests {
    /// Stores a new pending timer of address `id`. With a claim whose key an earlier timer of
    /// this address holds: the same body hash returns that timer (whatever its status now)
    /// with `duplicate: true` and stores nothing; another body is
    /// [`super::StoreError::IdempotencyKeyReused`]. An address with
    /// [`crate::domain::timer::MAX_PENDING_TIMERS`] pending timers is
    /// [`super::StoreError::QuotaExceeded`]. Keeps [`super::AddressRecord::next_timer_at`] the
    /// earliest pending `fire_at`.
    async fn create_timer(
        &self, id: &str, timer: NewTimer, limits: &Limits, now: Millis,
    ) -> StoreResult<CreatedTimer>;

    /// The address's pending timers (earliest `fire_at` first), then its last
    /// [`crate::domain::timer::KEPT_CLOSED_TIMERS`] fired or cancelled ones (most recently
    /// closed first).
    async fn list_timers(&self, id: &str, now: Millis) -> StoreResult<Vec<TimerRecord>>;

    /// Cancels pending timer `timer_id` of address `id`, conditioned on its still being pending:
    /// under a race with its firing exactly one wins. A cancelled timer answers
    /// [`CancelOutcome::Cancelled`] again; a fired one [`CancelOutcome::Fired`];
    /// [`super::StoreError::NotFound`] when the address has no such timer (or no longer lists
    /// it).
    async fn cancel_timer(
        &self, id: &str, timer_id: &str, now: Millis,
    ) -> StoreResult<CancelOutcome>;

    /// Fires every pending timer of address `id` due at `now`, earliest first: each appends its
    /// event in the same atomic step that marks it fired, conditioned on its still being pending
    /// (two concurrent callers fire it once); updates
    /// [`super::AddressRecord::next_timer_at`]. Returns how many it fired. A full feed leaves
    /// the rest pending for a later call.
    async fn fire_timers(&self, id: &str, limits: &Limits, now: Millis) -> StoreResult<u64>;

    /// The earliest `fire_at` of any pending timer of an address live at `now`: when an
    /// embedded deployment's scheduler wakes next (docs/API.md §20). `None` when there is none,
    /// and from stores whose timers fire by other means (DynamoDB's delayed queue messages).
    async fn next_timer_due(&self, now: Millis) -> StoreResult<Option<Millis>> {
        let _ = now;
        Ok(None)
    }

    /// Fires the due timers of up to `addresses` addresses whose earliest pending timer is due
    /// at `now`: the embedded deployment's scheduler. Returns how many it fired.
    async fn fire_due_timers(
        &self, limits: &Limits, now: Millis, addresses: usize,
    ) -> StoreResult<u64> {
        let _ = (limits, now, addresses);
        Ok(0)
    }

    /// The feed's order rule for what falls due (docs/API.md §12, §20): a request's
    /// `request.expired` and a timer's event come before anything appended or read after their
    /// time. So every read of the feed or a request, and every append, calls this first with
    /// the address record it loaded; it costs nothing unless
    /// [`super::AddressRecord::next_due`] has passed, and then runs
    /// [`Requests::expire_requests`] and [`Timers::fire_timers`] for what is due.
    async fn append_due(
        &self, address: &super::AddressRecord, limits: &Limits, now: Millis,
    ) -> StoreResult<()> {
        if address.next_request_expiry.is_some_and(|t| t <= now) {
            self.expire_requests(&address.id, limits, now).await?;
        }
        if address.next_timer_at.is_some_and(|t| t <= now) {
            self.fire_timers(&address.id, limits, now).await?;
        }
        Ok(())
    }

    /// [`Timers::append_due`] for an address not read yet (a wait whose due time came):
    /// expires and fires whatever is due; returns how many events that appended.
    async fn append_due_of(&self, id: &str, limits: &Limits, now: Millis) -> StoreResult<u64> {
        Ok(
            self.expire_requests(id, limits, now).await?
                + self.fire_timers(id, limits, now).await?,
        )
    }
}
