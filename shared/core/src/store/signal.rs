//! In-process wake-ups for long polls: one `watch` channel per address carrying its last
//! sequence, created when a poller subscribes and dropped when no poller is left.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::{watch, Notify};

#[derive(Debug, Default)]
pub struct FeedSignal {
    senders: Mutex<HashMap<String, watch::Sender<u64>>>,
    /// Told after a commit that gave a wake hook something to do (docs/API.md §19): an event
    /// its types wake for, or a hook made active.
    hooks: Notify,
    /// Told after a commit that may have changed the earliest pending timer (docs/API.md §20).
    timers: Notify,
}

impl FeedSignal {
    /// Wakes the wake loop. Called after the commit, never before.
    pub fn wake_hooks(&self) {
        self.hooks.notify_one();
    }

    /// Resolves at the next [`FeedSignal::wake_hooks`] (or at once for one made since the last
    /// wait: a wake is never lost between two waits).
    pub async fn hooks_woken(&self) {
        self.hooks.notified().await;
    }

    /// Wakes the timer scheduler. Called after the commit, never before.
    pub fn wake_timers(&self) {
        self.timers.notify_one();
    }

    /// Resolves at the next [`FeedSignal::wake_timers`] (or at once for one made since the
    /// last wait).
    pub async fn timers_changed(&self) {
        self.timers.notified().await;
    }

    /// A receiver that changes when `notify` is called for `address_id` after this call.
    pub fn subscribe(&self, address_id: &str) -> watch::Receiver<u64> {
        let mut senders = self
            .senders
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match senders.get(address_id) {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = watch::channel(0);
                senders.insert(address_id.to_owned(), tx);
                rx
            }
        }
    }

    /// Wakes every poller of `address_id`. Called after the commit, never before.
    pub fn notify(&self, address_id: &str, sequence: u64) {
        let mut senders = self
            .senders
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(tx) = senders.get(address_id) {
            if tx.receiver_count() == 0 {
                senders.remove(address_id);
            } else {
                tx.send_replace(sequence);
            }
        }
    }

    /// Wakes every poller of `address_id` without a new sequence: something they wait for
    /// besides the feed changed (a request for a person was created, whose expiry an open
    /// event stream must learn, docs/API.md §14).
    pub fn touch(&self, address_id: &str) {
        let senders = self
            .senders
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(tx) = senders.get(address_id) {
            tx.send_modify(|_| {});
        }
    }

    /// Drops channels nobody listens to any more.
    pub fn prune(&self) {
        self.senders
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|_, tx| tx.receiver_count() > 0);
    }

    /// Addresses with at least one channel (for tests and metrics).
    pub fn len(&self) -> usize {
        self.senders
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
