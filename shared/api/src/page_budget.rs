//! A bound on the memory that pages of events hold while they are being written.
//!
//! A page of the feed is cut at 4 MiB (docs/API.md §4) and stays in memory until the client has
//! read it: a hundred clients that read slowly would otherwise hold a hundred pages. With a
//! budget, the pages being built and written share one amount of memory: a page is cut at what
//! is left of it (always at least one event, docs/API.md "Pages under memory pressure"), and its
//! share is given back when the server has handed the page's last byte to the kernel — or
//! dropped the connection. Clients still read every event: a shorter page says `has_more`.
//! Only `agentaddress serve` uses one; on Lambda the gateway buffers each answer anyway.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Bytes;

/// The shared amount of memory for pages in flight.
#[derive(Debug)]
pub struct PageBudget {
    total: u64,
    in_use: AtomicU64,
}

impl PageBudget {
    pub fn new(total_bytes: u64) -> Arc<Self> {
        Arc::new(Self {
            total: total_bytes,
            in_use: AtomicU64::new(0),
        })
    }

    /// Bytes held by pages in flight now.
    pub fn in_use(&self) -> u64 {
        self.in_use.load(Ordering::Acquire)
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// Takes up to `wanted` bytes, as much as is free now (possibly none).
    pub fn reserve(self: &Arc<Self>, wanted: u64) -> Charge {
        let mut used = self.in_use.load(Ordering::Acquire);
        loop {
            let grant = wanted.min(self.total.saturating_sub(used));
            match self.in_use.compare_exchange_weak(
                used,
                used + grant,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Charge {
                        budget: Arc::clone(self),
                        bytes: grant,
                    }
                }
                Err(now) => used = now,
            }
        }
    }
}

/// A share of the budget, given back when dropped.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<PageBudget>,
    bytes: u64,
}

impl Charge {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Makes the share exactly `bytes`: the page as it was encoded. It may go over the budget by
    /// one event, the least a page holds.
    pub fn set(&mut self, bytes: u64) {
        if bytes > self.bytes {
            self.budget
                .in_use
                .fetch_add(bytes - self.bytes, Ordering::AcqRel);
        } else {
            self.budget
                .in_use
                .fetch_sub(self.bytes - bytes, Ordering::AcqRel);
        }
        self.bytes = bytes;
    }

    /// The encoded page as a body whose memory stays charged until the last copy of it is
    /// dropped (by the server, once written).
    pub fn into_body(mut self, encoded: Vec<u8>) -> Bytes {
        self.set(encoded.len() as u64);
        Bytes::from_owner(Charged {
            encoded,
            _charge: self,
        })
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.in_use.fetch_sub(self.bytes, Ordering::AcqRel);
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

    #[test]
    fn reserves_what_is_free_and_gives_it_back() {
        let budget = PageBudget::new(10);
        let a = budget.reserve(6);
        assert_eq!(a.bytes(), 6);
        let b = budget.reserve(6);
        assert_eq!(b.bytes(), 4, "only what is left");
        let c = budget.reserve(6);
        assert_eq!(c.bytes(), 0);
        assert_eq!(budget.in_use(), 10);
        drop(a);
        assert_eq!(budget.in_use(), 4);
        drop((b, c));
        assert_eq!(budget.in_use(), 0);
    }

    #[test]
    fn a_body_holds_its_share_until_its_last_copy_is_dropped() {
        let budget = PageBudget::new(100);
        let mut charge = budget.reserve(100);
        charge.set(30);
        assert_eq!(budget.in_use(), 30);
        let body = charge.into_body(vec![b'x'; 40]);
        assert_eq!(budget.in_use(), 40, "charged at the encoded size");
        let half = body.slice(20..);
        drop(body);
        assert_eq!(budget.in_use(), 40);
        assert_eq!(&half[..], &[b'x'; 20][..]);
        drop(half);
        assert_eq!(budget.in_use(), 0);
    }

    #[test]
    fn the_least_page_may_go_over() {
        let budget = PageBudget::new(10);
        let mut charge = budget.reserve(100);
        charge.set(25);
        assert_eq!(budget.in_use(), 25);
        assert_eq!(budget.reserve(5).bytes(), 0);
        drop(charge);
        assert_eq!(budget.in_use(), 0);
    }
}
