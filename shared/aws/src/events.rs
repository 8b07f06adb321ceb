//! The feed: appending a delivery (with its idempotency key), reading pages of events (joining
//! chunk items), one event by id, acknowledging, and the feed head from the META item.

use crate::store::Feed;
use crate::Tell;
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{ReturnConsumedCapacity, ReturnValue};

use crate::append::{Cancelled, Claim};
use crate::capacity::Tally;
use crate::domain::{ids, Limits, Millis};
use crate::item::*;
use crate::retry::{resend_on_conflict, with_append_retries};
use crate::store::rules;
use crate::store::{
    Acked, Appended, Event, EventPage, EventRef, IdempotencyClaim, MatchingPage, NewEvent,
    StoreError, StoreResult, TypeFilter,
};
use crate::{DynamoStore, Item};

impl DynamoStore {
    /// The address's last sequence from its META item; `consistent: false` is half the read
    /// units and may lag a write by a moment.
    pub(crate) async fn feed_head(
        &self, id: &str, now: Millis, consistent: bool,
    ) -> StoreResult<u64> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(pk(id), "META".into())))
            .projection_expression("id, seq, deleted_at, expires_at")
            .consistent_read(consistent)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics)
            .map_err(|e| sdk_err("GetItem seq", e))?;
        let item = out.item.ok_or(StoreError::AddressNotFound)?;
        if item.contains_key("deleted_at") || get_i(&item, "expires_at").is_some_and(|e| e <= now) {
            return Err(StoreError::AddressGone);
        }
        Fields::of(&item, "META").count("seq")
    }

    /// The live idempotency record of `claim`, if any.
    pub(crate) async fn idempotency(
        &self, id: &str, claim: &IdempotencyClaim, now: Millis,
    ) -> StoreResult<Option<(EventRef, String)>> {
        let item = self.get(id, format!("I#{}", claim.key_hash)).await?;
        item.filter(|i| get_i(i, "expires_at").is_some_and(|e| e > now))
            .map(|i| KeyRecord::from_item(&i).map(|k| (k.event, k.body_hash)))
            .transpose()
    }
}

#[async_trait]
impl Feed for DynamoStore {
    async fn append_event(
        &self, id: &str, event: NewEvent, claim: Option<IdempotencyClaim>, limits: &Limits,
        now: Millis,
    ) -> StoreResult<Appended> {
        let appended = vec![event.event_type.clone()];
        let commit = async {
            let record = claim.as_ref().map(Claim::delivery);
            let (event, claim, record) = (&event, claim.as_ref(), record.as_ref());
            with_append_retries(|| async move {
                let address = self.live(id, now).await?;
                if !self
                    .quota_allows(id, address.last_sequence + 1, limits, now)
                    .await?
                {
                    if let Some(claim) = claim {
                        if let Some((event, hash)) = self.idempotency(id, claim, now).await? {
                            return rules::repeated_delivery(event, &hash, claim).map(Some);
                        }
                    }
                    return Err(StoreError::QuotaExceeded);
                }
                match self
                    .append_tx(&address, event, record, None, limits, now)
                    .await?
                {
                    Ok(event) => Ok(Some(Appended {
                        event,
                        duplicate: false,
                    })),
                    Err(Cancelled::Idempotent { event, body_hash }) => match claim {
                        Some(claim) => {
                            let body_hash = body_hash.ok_or_else(|| {
                                StoreError::Internal(
                                    "a delivery's key record without body_hash".into(),
                                )
                            })?;
                            rules::repeated_delivery(event, &body_hash, claim).map(Some)
                        }
                        None => Ok(None),
                    },
                    Err(Cancelled::Gone) => Err(StoreError::AddressGone),
                    Err(Cancelled::StateConflict(_))
                    | Err(Cancelled::RequestClosed(_))
                    | Err(Cancelled::Retry) => Ok(None),
                }
            })
            .await
        };
        self.telling(now, commit, |a| {
            Tell::Head(id.to_owned(), a.event.sequence, appended)
        })
        .await
    }

    async fn read_events(
        &self, id: &str, after: u64, limit: usize, max_bytes: u64, now: Millis,
    ) -> StoreResult<EventPage> {
        Ok(self
            .read_feed(id, after, None, limit, max_bytes, now)
            .await?
            .page)
    }

    async fn read_matching(
        &self, id: &str, after: u64, filter: &TypeFilter, limit: usize, max_bytes: u64, now: Millis,
    ) -> StoreResult<MatchingPage> {
        self.read_feed(id, after, Some(filter), limit, max_bytes, now)
            .await
    }

    async fn get_event(&self, id: &str, event_id: &str, now: Millis) -> StoreResult<Event> {
        self.live(id, now).await?;
        let seq = ids::event_sequence(event_id).ok_or(StoreError::NotFound)?;
        let page = self.read_events(id, seq - 1, 1, u64::MAX, now).await?;
        match page.events.into_iter().next() {
            Some(e) if e.sequence == seq && e.id == event_id => Ok(e),
            _ => Err(StoreError::NotFound),
        }
    }

    async fn ack_event(&self, id: &str, event_id: &str, now: Millis) -> StoreResult<Acked> {
        self.live(id, now).await?;
        let seq = ids::event_sequence(event_id).ok_or(StoreError::NotFound)?;
        // Idempotent: a re-send after an applied attempt keeps the first `acked_at`.
        let result = resend_on_conflict(|| {
            self.client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(key(pk(id), event_sk(seq))))
                .update_expression("SET acked_at = if_not_exists(acked_at, :now)")
                .condition_expression("attribute_exists(pk) AND id = :id AND expires_at > :now")
                .expression_attribute_values(":now", n(now))
                .expression_attribute_values(":id", s(event_id))
                .return_values(ReturnValue::AllNew)
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
        })
        .await
        .tally(&self.metrics);
        match result {
            Ok(out) => {
                let at = out
                    .attributes()
                    .and_then(|a| get_i(a, "acked_at"))
                    .unwrap_or(now);
                Ok(Acked {
                    event: EventRef {
                        id: event_id.to_owned(),
                        sequence: seq,
                    },
                    acknowledged_at: at,
                })
            }
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Err(StoreError::NotFound)
            }
            Err(e) => Err(sdk_err("UpdateItem ack", e)),
        }
    }

    async fn last_sequence(&self, id: &str, now: Millis) -> StoreResult<u64> {
        self.feed_head(id, now, true).await
    }

    async fn feed_head_hint(&self, id: &str, now: Millis) -> StoreResult<u64> {
        self.feed_head(id, now, false).await
    }
}

impl DynamoStore {
    /// The feed after `after` (every event, or those `filter` matches among at most
    /// `filter.examine`), joining each event's chunk items. A filter is applied here, after the
    /// read: DynamoDB charges the items examined either way, and a `FilterExpression` cannot
    /// say a pattern's whole segments.
    async fn read_feed(
        &self, id: &str, after: u64, filter: Option<&TypeFilter>, limit: usize, max_bytes: u64,
        now: Millis,
    ) -> StoreResult<MatchingPage> {
        self.live(id, now).await?;
        let mut page = PageBuilder {
            events: Vec::new(),
            bytes: 0,
            max_bytes,
            examined_through: after,
        };
        let mut examined = 0usize;
        let mut start: Option<Item> = None;
        // The event being read (its head, its data so far); chunk items follow their head.
        let mut pending: Option<(Item, String)> = None;
        let lo = event_sk(after.saturating_add(1));
        // Items per Query: the page and two more (a chunk, the next head) unfiltered; the
        // examined bound and one more filtered.
        let per_query = match filter {
            None => limit.saturating_add(2),
            Some(f) => f.examine.saturating_add(1),
        };
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk AND sk BETWEEN :lo AND :hi")
                .expression_attribute_values(":pk", s(pk(id)))
                .expression_attribute_values(":lo", s(&lo))
                .expression_attribute_values(":hi", s("E#~"))
                .consistent_read(true)
                .limit(i32::try_from(per_query).unwrap_or(1_000))
                .set_exclusive_start_key(start.take())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .tally(&self.metrics)
                .map_err(|e| sdk_err("Query events", e))?;
            for item in out.items() {
                if let Some(part) = get_s(item, "part") {
                    if let Some((_, data)) = pending.as_mut() {
                        data.push_str(&part);
                    }
                    continue;
                }
                if let Some((head, data)) = pending.take() {
                    if !page.push(event_from(&head, data)?) {
                        return Ok(page.done(true));
                    }
                }
                if get_i(item, "expires_at").is_none_or(|e| e <= now) {
                    continue;
                }
                let f = Fields::of(item, "event");
                if let Some(filter) = filter {
                    if examined == filter.examine {
                        return Ok(page.done(true));
                    }
                    examined += 1;
                    if !filter.types.matches(&f.s("type")?) {
                        page.examined_through = f.u("seq")?;
                        continue;
                    }
                }
                if page.events.len() == limit {
                    return Ok(page.done(true));
                }
                pending = Some((item.clone(), f.s("data")?));
            }
            match out.last_evaluated_key {
                Some(k) => start = Some(k),
                None => break,
            }
        }
        if let Some((head, data)) = pending.take() {
            if !page.push(event_from(&head, data)?) {
                return Ok(page.done(true));
            }
        }
        Ok(page.done(false))
    }
}

/// The events of a page being read, cut at `max_bytes` (never empty when an event was read).
struct PageBuilder {
    events: Vec<Event>,
    bytes: u64,
    max_bytes: u64,
    examined_through: u64,
}

impl PageBuilder {
    /// Adds `e` unless the page is full; false when it is.
    fn push(&mut self, e: Event) -> bool {
        if !self.events.is_empty() && self.bytes + e.page_bytes() > self.max_bytes {
            return false;
        }
        self.bytes += e.page_bytes();
        self.examined_through = e.sequence;
        self.events.push(e);
        true
    }

    fn done(self, has_more: bool) -> MatchingPage {
        MatchingPage {
            page: EventPage {
                events: self.events,
                has_more,
            },
            examined_through: self.examined_through,
        }
    }
}
