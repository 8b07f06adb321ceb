//! Durable state: listing, reading, writing and deleting keys. Writes and deletes are appends
//! (crate docs): the state item rides in the same transaction as its feed event.

use crate::append::{Cancelled, StateChange};
use crate::domain::state::entry_size;
use crate::domain::{Limits, Millis};
use crate::item::*;
use crate::retry::with_append_retries;
use crate::store::rules::{self, check_expected, StateTotals};
use crate::store::{
    StateDeleted, StateEntry, StateListing, StateMeta, StateWritten, StoreError, StoreResult,
};
use crate::DynamoStore;

impl DynamoStore {
    /// `Store::list_state` (the trait impl in lib.rs delegates here).
    pub(crate) async fn list_state_impl(&self, id: &str, now: Millis) -> StoreResult<StateListing> {
        self.live(id, now).await?;
        let items = self
            .items_with_prefix(
                id,
                "S#",
                "#k, revision, #sz, updated_at",
                &[("#k", "key"), ("#sz", "size")],
                "Query state",
            )
            .await?;
        let mut keys: Vec<StateMeta> = items
            .iter()
            .map(|item| StateMeta {
                key: get_s(item, "key").unwrap_or_default(),
                revision: get_u(item, "revision"),
                size: get_u(item, "size"),
                updated_at: get_i(item, "updated_at").unwrap_or(0),
            })
            .collect();
        keys.sort_by(|a, b| a.key.cmp(&b.key));
        // The totals come from the items listed, not from META (read before the query): a
        // write between the two reads would otherwise show totals of another moment than the
        // keys (one state write changes one item, so the items themselves are always a
        // consistent set). META's counters, kept in the same transactions, agree at rest.
        Ok(StateListing {
            state_keys: keys.len() as u64,
            state_bytes: keys.iter().map(|k| k.size).sum(),
            keys,
        })
    }

    /// `Store::get_state` (the trait impl in lib.rs delegates here).
    pub(crate) async fn get_state_impl(
        &self,
        id: &str,
        k: &str,
        now: Millis,
    ) -> StoreResult<StateEntry> {
        self.live(id, now).await?;
        let item = self
            .get(id, format!("S#{k}"))
            .await?
            .ok_or(StoreError::NotFound)?;
        Ok(StateEntry {
            key: get_s(&item, "key").unwrap_or_default(),
            value: get_s(&item, "value").unwrap_or_default(),
            revision: get_u(&item, "revision"),
            updated_at: get_i(&item, "updated_at").unwrap_or(0),
        })
    }

    /// `Store::put_state` (the trait impl in lib.rs delegates here).
    pub(crate) async fn put_state_impl(
        &self,
        id: &str,
        k: &str,
        value: String,
        expected: Option<u64>,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<StateWritten> {
        let value = &value;
        with_append_retries(|| async move {
            let address = self.live(id, now).await?;
            let current = self.get(id, format!("S#{k}")).await?;
            let read_revision = current.as_ref().map(|i| get_u(i, "revision"));
            check_expected(expected, read_revision)?;
            let size = entry_size(k, value);
            let totals = rules::state_after_put(
                StateTotals::of(&address),
                current.as_ref().map(|item| get_u(item, "size")),
                size,
                limits,
            )?;
            let seq = address.last_sequence + 1;
            if !self.quota_allows(id, seq, limits, now).await? {
                return Err(StoreError::QuotaExceeded);
            }
            let event = rules::state_updated_event(k, seq, value);
            let change = StateChange::Put {
                key: k.to_owned(),
                value: value.clone(),
                size,
                read_revision,
                keys: totals.keys,
                bytes: totals.bytes,
            };
            match self
                .append_tx(&address, &event, None, Some(&change), limits, now)
                .await?
            {
                Ok(event_ref) => Ok(Some(StateWritten {
                    entry: StateEntry {
                        key: k.to_owned(),
                        value: value.clone(),
                        revision: event_ref.sequence,
                        updated_at: now,
                    },
                    event: event_ref,
                })),
                Err(Cancelled::Gone) => Err(StoreError::AddressGone),
                Err(Cancelled::StateConflict(current)) if expected.is_some() => {
                    check_expected(expected, current).map(|()| None)
                }
                Err(_) => Ok(None),
            }
        })
        .await
    }

    /// `Store::delete_state` (the trait impl in lib.rs delegates here).
    pub(crate) async fn delete_state_impl(
        &self,
        id: &str,
        k: &str,
        expected: Option<u64>,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<StateDeleted> {
        with_append_retries(|| async move {
            let address = self.live(id, now).await?;
            let current = self
                .get(id, format!("S#{k}"))
                .await?
                .ok_or(StoreError::NotFound)?;
            let read_revision = get_u(&current, "revision");
            check_expected(expected, Some(read_revision))?;
            let seq = address.last_sequence + 1;
            if !self.quota_allows(id, seq, limits, now).await? {
                return Err(StoreError::QuotaExceeded);
            }
            let event = rules::state_deleted_event(k, seq);
            let totals =
                rules::state_after_delete(StateTotals::of(&address), get_u(&current, "size"));
            let change = StateChange::Delete {
                key: k.to_owned(),
                read_revision,
                keys: totals.keys,
                bytes: totals.bytes,
            };
            match self
                .append_tx(&address, &event, None, Some(&change), limits, now)
                .await?
            {
                Ok(event_ref) => Ok(Some(StateDeleted {
                    key: k.to_owned(),
                    revision: event_ref.sequence,
                    event: event_ref,
                })),
                Err(Cancelled::Gone) => Err(StoreError::AddressGone),
                Err(Cancelled::StateConflict(None)) => Err(StoreError::NotFound),
                Err(Cancelled::StateConflict(current)) if expected.is_some() => {
                    check_expected(expected, current).map(|()| None)
                }
                Err(_) => Ok(None),
            }
        })
        .await
    }
}
