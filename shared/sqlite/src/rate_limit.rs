//! Rate-limit counters: in memory, one per scope and minute window (the sweep drops old windows);
//! and the waiting slots (docs/API.md §6, "Waiting polls"), in memory too: one process holds
//! them all, so the cap is exact.

use crate::domain::Millis;
use crate::store::rules::rate_window;
use crate::store::RateLimits;
use crate::store::StoreResult;
use crate::SqliteStore;
use async_trait::async_trait;

#[async_trait]
impl RateLimits for SqliteStore {
    async fn hit_rate_limit(
        &self, scope: &str, limit: u64, now: Millis,
    ) -> StoreResult<Option<u64>> {
        let (window, retry_after) = rate_window(now);
        let mut windows = self
            .inner
            .rate
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if windows.len() > 100_000 {
            windows.retain(|_, (w, _)| *w >= window);
        }
        let entry = windows.entry(scope.to_owned()).or_insert((window, 0));
        if entry.0 != window {
            *entry = (window, 0);
        }
        entry.1 += 1;
        Ok((entry.1 > limit).then_some(retry_after))
    }

    async fn acquire_wait_slot(
        &self, cap: u64, until: Millis, now: Millis,
    ) -> StoreResult<Option<String>> {
        let mut slots = self
            .inner
            .wait_slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        slots.retain(|_, free_at| *free_at > now);
        if u64::try_from(slots.len()).unwrap_or(u64::MAX) >= cap {
            return Ok(None);
        }
        let slot = crate::domain::ids::new_wait_slot_id();
        slots.insert(slot.clone(), until);
        Ok(Some(slot))
    }

    async fn release_wait_slot(&self, slot: &str) -> StoreResult<()> {
        self.inner
            .wait_slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(slot);
        Ok(())
    }
}
