//! The embedded deployment's timer scheduler (docs/API.md §20): one task that sleeps until the
//! earliest pending `fire_at` of any address (an index on it), woken early by every commit that
//! may move it (a timer set or cancelled), and fires what is due. Correctness does not rest on
//! it: every read of the feed fires due timers first (`crate::extract::Current`); it makes a
//! timer fire on time for a waiting reader, a socket or a wake hook, and for nobody at all.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::domain::{Clock, Limits};
use crate::store::Store;

/// Longest sleep between looks, whatever the earliest timer: a clock set back or forward, or a
/// write without a wake-up, costs at most this much lateness.
const MAX_SLEEP: Duration = Duration::from_secs(30);
/// Shortest sleep while something is due but nothing fired (a full feed): the feed must drain
/// first, and looking again at once would spin.
const STUCK_SLEEP: Duration = Duration::from_secs(1);
/// Addresses fired per step; more due ones are fired by the next step at once.
const ADDRESSES_PER_STEP: usize = 256;

/// Runs until `shutdown` turns `true`.
pub async fn run(
    store: Arc<dyn Store>, limits: Limits, clock: Arc<dyn Clock>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        if *shutdown.borrow() {
            return;
        }
        let now = clock.now();
        let fired = match store
            .fire_due_timers(&limits, now, ADDRESSES_PER_STEP)
            .await
        {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "cannot fire the due timers");
                0
            }
        };
        if fired > 0 {
            tracing::debug!(fired, "timers fired");
        }
        let sleep_for = match store.next_timer_due(clock.now()).await {
            Ok(None) => MAX_SLEEP,
            Ok(Some(at)) => {
                let ms = u64::try_from(at - clock.now()).unwrap_or(0);
                if ms == 0 {
                    // Due now: it fell due after this step looked (the sleep ended a moment
                    // early), or more addresses are due than a step fires — go on at once;
                    // else a feed that is full: wait for it to drain.
                    if fired > 0 || now < at {
                        continue;
                    }
                    STUCK_SLEEP
                } else {
                    Duration::from_millis(ms).min(MAX_SLEEP)
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the next timer");
                STUCK_SLEEP
            }
        };
        let signal = store.clone();
        tokio::select! {
            _ = async {
                match signal.feed_signal() {
                    Some(s) => s.timers_changed().await,
                    None => std::future::pending().await,
                }
            } => {}
            _ = tokio::time::sleep(sleep_for) => {}
            _ = shutdown.changed() => {}
        }
    }
}
