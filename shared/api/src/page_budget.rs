//! A bound on the memory that pages of events hold while they are being written
//! (docs/API.md, "Pages under memory pressure").
//!
//! A page of the feed is cut at 4 MiB (docs/API.md §4) and stays in memory until the client has
//! read it: a hundred clients that read slowly would otherwise hold a hundred pages. With a
//! budget, the pages being built and written share one amount of memory, and one client (an
//! IPv4 address or an IPv6 /64, `agentaddress_core::domain::client`) at most a share of it:
//! - a page is cut at what is free of both (`has_more: true` says so);
//! - when not even the next event fits, the request waits, first come first served, until
//!   enough is given back — a long poll for a bounded time, then 503 `unavailable` with
//!   `Retry-After`; an event stream for as long as it lives, reading nothing ahead meanwhile
//!   (the feed is durable: there is nothing to buffer);
//! - a page's share is given back when the server has handed its last byte to the kernel, or
//!   dropped the stream or the connection — over HTTP/1.1 and HTTP/2 alike: the share belongs
//!   to the bytes themselves ([`Charge::into_body`]), whoever holds them.
//!
//! Memory is counted in KiB, rounded up. Only `agentaddress serve` uses a budget; on Lambda the
//! gateway buffers each answer anyway.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use axum::body::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::store::{Event, EventPage, MatchingPage, StoreError, TypeFilter};
use crate::AppState;

/// The byte cap of one page of events (docs/API.md §4).
pub(crate) const PAGE_MAX_BYTES: u64 = 4 * 1024 * 1024;

const UNIT: u64 = 1024;

/// How long a long poll that has events to answer waits for memory before 503 `unavailable`.
pub const MEMORY_WAIT: Duration = Duration::from_secs(10);

fn units(bytes: u64) -> u64 {
    bytes.div_ceil(UNIT)
}

fn permits(units: u64) -> u32 {
    u32::try_from(units).unwrap_or(u32::MAX)
}

/// The shared amount of memory for pages in flight, and each client's share of it.
#[derive(Debug)]
pub struct PageBudget {
    total_units: u64,
    share_units: u64,
    total: Arc<Semaphore>,
    /// Each client's share, while the client holds or waits for some of it.
    clients: Mutex<HashMap<String, Weak<Semaphore>>>,
}

impl PageBudget {
    /// `total_bytes` in all, at most `per_client_bytes` of it for one client (0: no share,
    /// every client may take it all).
    pub fn new(total_bytes: u64, per_client_bytes: u64) -> Arc<Self> {
        let total_units = units(total_bytes).clamp(1, Semaphore::MAX_PERMITS as u64);
        let share_units = if per_client_bytes == 0 {
            total_units
        } else {
            units(per_client_bytes).clamp(1, total_units)
        };
        Arc::new(Self {
            total_units,
            share_units,
            total: Arc::new(Semaphore::new(usize::try_from(total_units).unwrap_or(1))),
            clients: Mutex::new(HashMap::new()),
        })
    }

    /// Bytes held by pages in flight now.
    pub fn in_use(&self) -> u64 {
        let free = self.total.available_permits() as u64;
        self.total_units.saturating_sub(free) * UNIT
    }

    pub fn total(&self) -> u64 {
        self.total_units * UNIT
    }

    /// The most one client may hold.
    pub fn share(&self) -> u64 {
        self.share_units * UNIT
    }

    fn client(&self, key: &str) -> Arc<Semaphore> {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(share) = clients.get(key).and_then(Weak::upgrade) {
            return share;
        }
        // Forget the clients that hold nothing any more before the map grows.
        if clients.len() >= 64 && clients.len().is_power_of_two() {
            clients.retain(|_, share| share.strong_count() > 0);
        }
        let share = Arc::new(Semaphore::new(
            usize::try_from(self.share_units).unwrap_or(1),
        ));
        clients.insert(key.to_owned(), Arc::downgrade(&share));
        share
    }

    /// Takes up to `wanted` bytes for `client`, as much as is free now, if that is at least
    /// `least` bytes (else none).
    pub fn try_reserve(self: &Arc<Self>, client: &str, least: u64, wanted: u64) -> Charge {
        let share = self.client(client);
        let want = units(wanted)
            .min(share.available_permits() as u64)
            .min(self.total.available_permits() as u64);
        let mut charge = Charge::empty(self, share);
        if want > 0 && want >= units(least) {
            let _ = charge.try_grow_units(want);
        }
        charge
    }

    /// Takes `bytes` for `client` (at most its share), waiting first come first served until
    /// they are free or `deadline` passes (`None`: then).
    pub async fn reserve(
        self: &Arc<Self>, client: &str, bytes: u64, deadline: Instant,
    ) -> Option<Charge> {
        let share = self.client(client);
        let want = permits(units(bytes).clamp(1, self.share_units));
        let acquire = async {
            // The client's own share first: waiting for it holds nothing of the others'.
            let mine = Arc::clone(&share).acquire_many_owned(want).await.ok()?;
            let all = Arc::clone(&self.total)
                .acquire_many_owned(want)
                .await
                .ok()?;
            Some((mine, all))
        };
        let (mine, all) = tokio::time::timeout_at(deadline, acquire).await.ok()??;
        Some(Charge {
            budget: Arc::clone(self),
            share,
            held: Some((mine, all)),
        })
    }
}

/// A share of the budget, given back when dropped.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<PageBudget>,
    share: Arc<Semaphore>,
    /// The client's permits and the total's, as many of each.
    held: Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)>,
}

impl Charge {
    fn empty(budget: &Arc<PageBudget>, share: Arc<Semaphore>) -> Self {
        Self {
            budget: Arc::clone(budget),
            share,
            held: None,
        }
    }

    fn units(&self) -> u64 {
        self.held
            .as_ref()
            .map_or(0, |(mine, _)| mine.num_permits() as u64)
    }

    pub fn bytes(&self) -> u64 {
        self.units() * UNIT
    }

    fn try_grow_units(&mut self, more: u64) -> bool {
        let n = permits(more);
        let Ok(mine) = Arc::clone(&self.share).try_acquire_many_owned(n) else {
            return false;
        };
        let Ok(all) = Arc::clone(&self.budget.total).try_acquire_many_owned(n) else {
            return false;
        };
        match &mut self.held {
            Some((m, a)) => {
                m.merge(mine);
                a.merge(all);
            }
            None => self.held = Some((mine, all)),
        }
        true
    }

    /// Makes the share `bytes` if that much is free now: `false` (and the share unchanged)
    /// otherwise. Shrinking always succeeds.
    pub fn try_resize(&mut self, bytes: u64) -> bool {
        let want = units(bytes);
        let have = self.units();
        if want > have {
            return self.try_grow_units(want - have);
        }
        drop(self.split_units(have - want));
        true
    }

    fn split_units(&mut self, n: u64) -> Charge {
        let mut part = Charge::empty(&self.budget, Arc::clone(&self.share));
        if n == 0 {
            return part;
        }
        if n >= self.units() {
            part.held = self.held.take();
            return part;
        }
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        if let Some((mine, all)) = &mut self.held {
            if let (Some(m), Some(a)) = (mine.split(n), all.split(n)) {
                part.held = Some((m, a));
            }
        }
        part
    }

    /// Takes `bytes` (rounded up to whole KiB, at most all of it) off this share into a share
    /// of its own: a part of a page that is handed on alone.
    pub fn split(&mut self, bytes: u64) -> Charge {
        self.split_units(units(bytes))
    }

    /// The encoded page as a body whose memory stays charged until the last copy of it is
    /// dropped (by the server, once written; or with its stream or connection). The share is
    /// made the encoded size first, when that much is free; a page is read within its share,
    /// so it can only be over by what the encoding adds.
    pub fn into_body(mut self, encoded: Vec<u8>) -> Bytes {
        let _ = self.try_resize(encoded.len() as u64);
        Bytes::from_owner(Charged {
            encoded,
            _charge: self,
        })
    }
}

/// What an event's metadata and recorded headers add to its data, at most (an estimate: an
/// event over it is still read, alone).
const EVENT_OVERHEAD: u64 = 64 * 1024;

/// Copies of a page that exist at once while it is read and encoded: the events as read, their
/// views (each event's data as a JSON value of its own), and the encoded bytes. A read holds
/// room for all of them; once encoded, only the bytes stay charged.
pub const WORKING_COPIES: u64 = 3;

/// Reads the page of `address_id`'s feed after `after` (at most `limit` events, of the types of
/// `filter` when one is given) within the page budget, waiting until `deadline` for memory when
/// not even the next event fits. `None`: no memory came by then. The charge returned holds room
/// for [`WORKING_COPIES`] of the page: the caller encodes it, then makes the charge the encoded
/// size ([`Charge::into_body`]). Without a budget (Lambda) the page is cut at 4 MiB and holds
/// no charge. An empty page holds no memory either.
pub(crate) async fn read_page(
    state: &AppState, client: &str, address_id: &str, after: u64, filter: Option<&TypeFilter>,
    limit: usize, deadline: Instant,
) -> Result<Option<(MatchingPage, Option<Charge>)>, StoreError> {
    let store = &state.store;
    let read = |max_bytes: u64| async move {
        let now = state.clock.now();
        match filter {
            None => store
                .read_events(address_id, after, limit, max_bytes, now)
                .await
                .map(|page| MatchingPage::all(page, after)),
            Some(f) => {
                store
                    .read_matching(address_id, after, f, limit, max_bytes, now)
                    .await
            }
        }
    };
    let Some(budget) = &state.page_budget else {
        return Ok(Some((read(PAGE_MAX_BYTES).await?, None)));
    };
    // A read is only started with room for the largest event, so that it never reads (and
    // then drops) an event it cannot keep; what the page does not need is given back at once.
    let largest = (state.config.limits.max_inbox_bytes)
        .saturating_add(EVENT_OVERHEAD)
        .min(PAGE_MAX_BYTES)
        .saturating_mul(WORKING_COPIES)
        .min(budget.share());
    let mut charge = budget.try_reserve(client, largest, PAGE_MAX_BYTES * WORKING_COPIES);
    loop {
        if charge.bytes() == 0 {
            // Nothing is free for this client: wait for memory only when there is something
            // to read (a waiting long poll holds none).
            if store.last_sequence(address_id, state.clock.now()).await? <= after {
                let page = EventPage {
                    events: Vec::new(),
                    has_more: false,
                };
                return Ok(Some((MatchingPage::all(page, after), None)));
            }
            match budget.reserve(client, largest, deadline).await {
                Some(c) => charge = c,
                None => return Ok(None),
            }
        }
        let max_bytes = (charge.bytes() / WORKING_COPIES).max(1);
        let page = read(max_bytes).await?;
        let needed: u64 =
            page.page.events.iter().map(Event::page_bytes).sum::<u64>() * WORKING_COPIES;
        // An event larger than a whole share (only with a share set below the largest event)
        // goes out alone once the client holds its whole share.
        if charge.try_resize(needed) || charge.bytes() >= budget.share() {
            return Ok(Some((page, Some(charge).filter(|c| c.bytes() > 0))));
        }
        // The first event alone is larger than what is free: give everything back and wait,
        // in turn, for room for it; nothing read is held meanwhile.
        drop((page, charge));
        match budget.reserve(client, needed, deadline).await {
            Some(c) => charge = c,
            None => return Ok(None),
        }
    }
}

struct Charged {
    encoded: Vec<u8>,
    _charge: Charge,
}

impl AsRef<[u8]> for Charged {
    fn as_ref(&self) -> &[u8] {
        &self.encoded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = 1024;

    fn soon() -> Instant {
        Instant::now() + Duration::from_millis(50)
    }

    #[tokio::test]
    async fn reserves_what_is_free_and_gives_it_back() {
        let budget = PageBudget::new(10 * K, 0);
        let a = budget.try_reserve("c", 0, 6 * K);
        assert_eq!(a.bytes(), 6 * K);
        assert_eq!(
            budget.try_reserve("c", 5 * K, 6 * K).bytes(),
            0,
            "less than the least"
        );
        let b = budget.try_reserve("c", 0, 6 * K);
        assert_eq!(b.bytes(), 4 * K, "only what is left");
        let c = budget.try_reserve("c", 0, 6 * K);
        assert_eq!(c.bytes(), 0);
        assert_eq!(budget.in_use(), 10 * K);
        drop(a);
        assert_eq!(budget.in_use(), 4 * K);
        drop((b, c));
        assert_eq!(budget.in_use(), 0);
    }

    #[tokio::test]
    async fn one_client_takes_at_most_its_share() {
        let budget = PageBudget::new(100 * K, 25 * K);
        let a = budget.try_reserve("greedy", 0, 100 * K);
        assert_eq!(a.bytes(), 25 * K);
        assert_eq!(budget.try_reserve("greedy", 0, 10 * K).bytes(), 0);
        assert!(budget.reserve("greedy", K, soon()).await.is_none());
        let other = budget.try_reserve("other", 0, 10 * K);
        assert_eq!(other.bytes(), 10 * K, "another client still gets memory");
        drop(a);
        assert_eq!(budget.try_reserve("greedy", 0, 10 * K).bytes(), 10 * K);
    }

    #[tokio::test]
    async fn a_waiting_reservation_gets_what_is_given_back() {
        let budget = PageBudget::new(8 * K, 0);
        let held = budget.try_reserve("a", 0, 8 * K);
        let waiter = {
            let budget = Arc::clone(&budget);
            tokio::spawn(async move {
                budget
                    .reserve("b", 3 * K, Instant::now() + Duration::from_secs(5))
                    .await
                    .map(|c| c.bytes())
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "nothing is free yet");
        drop(held);
        let got = waiter.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, Some(3 * K));
        assert_eq!(budget.in_use(), 0);
    }

    #[tokio::test]
    async fn resizing_never_goes_over_and_split_parts_are_charged() {
        let budget = PageBudget::new(10 * K, 0);
        let mut charge = budget.try_reserve("c", 0, 4 * K);
        assert!(charge.try_resize(10 * K));
        assert!(!charge.try_resize(11 * K), "more than the budget");
        assert_eq!(charge.bytes(), 10 * K);
        assert!(charge.try_resize(3 * K + 1));
        assert_eq!(charge.bytes(), 4 * K, "whole KiB, rounded up");
        let part = charge.split(K);
        assert_eq!((part.bytes(), charge.bytes()), (K, 3 * K));
        assert_eq!(budget.in_use(), 4 * K);
        drop(charge);
        assert_eq!(budget.in_use(), K);
        drop(part);
        assert_eq!(budget.in_use(), 0);
    }

    #[tokio::test]
    async fn a_body_holds_its_share_until_its_last_copy_is_dropped() {
        let budget = PageBudget::new(100 * K, 0);
        let charge = budget.try_reserve("c", 0, 100 * K);
        let body = charge.into_body(vec![b'x'; 40 * 1024]);
        assert_eq!(budget.in_use(), 40 * K, "charged at the encoded size");
        let half = body.slice(20 * 1024..);
        drop(body);
        assert_eq!(budget.in_use(), 40 * K);
        assert_eq!(&half[..], &[b'x'; 20 * 1024][..]);
        drop(half);
        assert_eq!(budget.in_use(), 0);
    }
}
