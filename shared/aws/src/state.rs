//! Durable state: listing, reading, writing and deleting keys. Writes and deletes are appends
//! (crate docs): the state item rides in the same transaction as its feed event.

use crate::append::{Cancelled, StateChange};
use crate::domain::state::entry_size;
use crate::domain::{Limits, Millis};
use crate::item::*;
use crate::retry::with_append_retries;
use crate::store::rules::{self, check_expected, StateTotals};
use crate::store::States;
use crate::store::{
    StateDeleted, StateEntry, StateListing, StateMeta, StateWritten, StoreError, StoreResult,
};
use crate::Tell;
use crate::{DynamoStore, Item};
use async_trait::async_trait;

#[async_trait]
impl States for DynamoStore {
    async fn list_state(&self, id: &str, now: Millis) -> StoreResult<StateListing> {
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
            .map(StateMeta::from_item)
            .collect::<StoreResult<_>>()?;
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

    async fn get_state(&self, id: &str, k: &str, now: Millis) -> StoreResult<StateEntry> {
        self.live(id, now).await?;
        let item = self
            .get(id, format!("S#{k}"))
            .await?
            .ok_or(StoreError::NotFound)?;
        StateEntry::from_item(&item)
    }

    async fn put_state(
        &self, id: &str, k: &str, value: String, expected: Option<u64>, limits: &Limits,
        now: Millis,
    ) -> StoreResult<StateWritten> {
        let commit = async {
            let value = &value;
            with_append_retries(|| async move {
                let address = self.live(id, now).await?;
                let current = self
                    .get(id, format!("S#{k}"))
                    .await?
                    .map(|item| StateMeta::from_item(&item))
                    .transpose()?;
                let read_revision = current.as_ref().map(|c| c.revision);
                check_expected(expected, read_revision)?;
                let size = entry_size(k, value);
                let totals = rules::state_after_put(
                    StateTotals::of(&address),
                    current.as_ref().map(|c| c.size),
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
        };
        self.telling(now, commit, |w| {
            Tell::Head(
                id.to_owned(),
                w.event.sequence,
                vec![rules::UPDATED_TYPE.to_owned()],
            )
        })
        .await
    }

    async fn delete_state(
        &self, id: &str, k: &str, expected: Option<u64>, limits: &Limits, now: Millis,
    ) -> StoreResult<StateDeleted> {
        let commit = async {
            with_append_retries(|| async move {
                let address = self.live(id, now).await?;
                let current = self
                    .get(id, format!("S#{k}"))
                    .await?
                    .ok_or(StoreError::NotFound)?;
                let current = StateMeta::from_item(&current)?;
                let read_revision = current.revision;
                check_expected(expected, Some(read_revision))?;
                let seq = address.last_sequence + 1;
                if !self.quota_allows(id, seq, limits, now).await? {
                    return Err(StoreError::QuotaExceeded);
                }
                let event = rules::state_deleted_event(k, seq);
                let totals = rules::state_after_delete(StateTotals::of(&address), current.size);
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
        };
        self.telling(now, commit, |d| {
            Tell::Head(
                id.to_owned(),
                d.event.sequence,
                vec![rules::DELETED_TYPE.to_owned()],
            )
        })
        .await
    }
}

/// A state item `S#{key}`: key, value (compact JSON), revision, size, updated_at.
impl FromItem for StateMeta {
    fn from_item(item: &Item) -> StoreResult<Self> {
        let f = Fields::of(item, "state");
        Ok(StateMeta {
            key: f.s("key")?,
            revision: f.u("revision")?,
            size: f.u("size")?,
            updated_at: f.i("updated_at")?,
        })
    }
}

impl FromItem for StateEntry {
    fn from_item(item: &Item) -> StoreResult<Self> {
        let f = Fields::of(item, "state");
        Ok(StateEntry {
            key: f.s("key")?,
            value: f.s("value")?,
            revision: f.u("revision")?,
            updated_at: f.i("updated_at")?,
        })
    }
}
