//! Requests for a person (docs/API.md §12): a row per request; answering and expiring each append
//! their event in the same transaction that closes the request, and keep the address's
//! `next_request_expiry` (the earliest open expiry) current.

use crate::store::Requests;
use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};

use crate::append::append_in_tx;
use crate::connections::Tx;
use crate::domain::request::{CommentMode, RequestStatus};
use crate::domain::{Limits, Millis};
use crate::rows::*;
use crate::store::rules;
use crate::store::{
    AddressRecord, Answer, AnswerOutcome, CreatedRequest, NewRequest, RequestRecord, StoreError,
    StoreResult,
};
use crate::SqliteStore;

const REQUEST_COLUMNS: &str = "id, address_id, title, body, options, comment_mode, created_at, \
     expires_at, secret_hash, status, choice, answer_comment, answered_at";

fn request_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RequestRecord> {
    let options: String = r.get(4)?;
    let comment: String = r.get(5)?;
    let status: String = r.get(9)?;
    let choice: Option<String> = r.get(10)?;
    let answered_at: Option<Millis> = r.get(12)?;
    Ok(RequestRecord {
        id: r.get(0)?,
        address_id: r.get(1)?,
        title: r.get(2)?,
        body: r.get(3)?,
        options: serde_json::from_str(&options).unwrap_or_default(),
        comment: CommentMode::parse(&comment).unwrap_or_default(),
        created_at: r.get(6)?,
        expires_at: r.get(7)?,
        secret_hash: r.get(8)?,
        status: RequestStatus::parse(&status).unwrap_or(RequestStatus::Open),
        answer: match (choice, answered_at) {
            (Some(choice), Some(answered_at)) => Some(Answer {
                choice,
                comment: r.get(11)?,
                answered_at,
            }),
            _ => None,
        },
    })
}

fn load_request(conn: &Connection, request_id: &str) -> StoreResult<Option<RequestRecord>> {
    conn.prepare_cached(&format!(
        "SELECT {REQUEST_COLUMNS} FROM requests WHERE id = ?1"
    ))
    .map_err(sql_err)?
    .query_row([request_id], request_row)
    .optional()
    .map_err(sql_err)
}

/// Sets the address's `next_request_expiry` to its earliest open request's expiry.
fn refresh_next_expiry(conn: &Connection, address_id: &str) -> StoreResult<()> {
    conn.prepare_cached(
        "UPDATE addresses SET next_request_expiry = (SELECT min(expires_at) FROM requests \
         WHERE address_id = ?1 AND status = 'open') WHERE id = ?1",
    )
    .map_err(sql_err)?
    .execute([address_id])
    .map_err(sql_err)?;
    Ok(())
}

/// Expires the address's open requests due at `now`, each with its `request.expired` event,
/// inside the caller's transaction; returns the sequences appended. Stops at a full feed.
pub(crate) fn expire_in_tx(
    conn: &Tx<'_>, address: &AddressRecord, limits: &Limits, now: Millis,
) -> StoreResult<Vec<u64>> {
    let due: Vec<String> = conn
        .prepare_cached(
            "SELECT id FROM requests WHERE address_id = ?1 AND status = 'open' \
             AND expires_at <= ?2 ORDER BY expires_at, id",
        )
        .map_err(sql_err)?
        .query_map(params![address.id, now], |r| r.get(0))
        .map_err(sql_err)?
        .collect::<Result<_, _>>()
        .map_err(sql_err)?;
    let mut address = address.clone();
    let mut appended = Vec::new();
    for id in due {
        let event = rules::request_expired_event(&id);
        let e = match append_in_tx(conn, &address, &event, limits, now) {
            Ok(e) => e,
            Err(StoreError::QuotaExceeded) => break,
            Err(e) => return Err(e),
        };
        address.last_sequence = e.sequence;
        conn.prepare_cached("UPDATE requests SET status = 'expired' WHERE id = ?1")
            .map_err(sql_err)?
            .execute([&id])
            .map_err(sql_err)?;
        appended.push(e.sequence);
    }
    if !appended.is_empty() {
        refresh_next_expiry(conn, &address.id)?;
    }
    Ok(appended)
}

#[async_trait]
impl Requests for SqliteStore {
    async fn create_request(
        &self, id: &str, r: NewRequest, limits: &Limits, now: Millis,
    ) -> StoreResult<CreatedRequest> {
        let id = id.to_owned();
        let limits = limits.clone();
        self.write(move |conn| {
            live_address(conn, &id, now)?;
            if let Some(claim) = &r.claim {
                let earlier: Option<(String, String)> = conn
                    .prepare_cached(
                        "SELECT id, body_hash FROM requests WHERE address_id = ?1 AND key_hash = ?2",
                    )
                    .map_err(sql_err)?
                    .query_row(params![id, claim.key_hash], |row| {
                        Ok((row.get(0)?, row.get(1)?))
                    })
                    .optional()
                    .map_err(sql_err)?;
                if let Some((request_id, body_hash)) = earlier {
                    rules::repeated_claim(&body_hash, &claim.body_hash)?;
                    let request = load_request(conn, &request_id)?.ok_or_else(|| {
                        StoreError::Internal(format!("request {request_id} vanished"))
                    })?;
                    return Ok(CreatedRequest {
                        request,
                        duplicate: true,
                    });
                }
            }
            let open: i64 = conn
                .prepare_cached(
                    "SELECT count(*) FROM requests WHERE address_id = ?1 AND status = 'open' \
                     AND expires_at > ?2",
                )
                .map_err(sql_err)?
                .query_row(params![id, now], |row| row.get(0))
                .map_err(sql_err)?;
            rules::open_request_quota(u(open), &limits)?;
            let options = serde_json::to_string(&r.options)
                .map_err(|e| StoreError::Internal(e.to_string()))?;
            conn.prepare_cached(
                "INSERT INTO requests (id, address_id, title, body, options, comment_mode, \
                 created_at, expires_at, secret_hash, status, key_hash, body_hash) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'open', ?10, ?11)",
            )
            .map_err(sql_err)?
            .execute(params![
                r.id,
                id,
                r.title,
                r.body,
                options,
                r.comment.as_str(),
                r.created_at,
                r.expires_at,
                r.secret_hash,
                r.claim.as_ref().map(|c| c.key_hash.as_str()),
                r.claim.as_ref().map(|c| c.body_hash.as_str()),
            ])
            .map_err(sql_err)?;
            refresh_next_expiry(conn, &id)?;
            let request = load_request(conn, &r.id)?
                .ok_or_else(|| StoreError::Internal(format!("request {} vanished", r.id)))?;
            Ok(CreatedRequest {
                request,
                duplicate: false,
            })
        })
        .await
    }

    async fn get_request(
        &self, id: &str, request_id: &str, now: Millis,
    ) -> StoreResult<RequestRecord> {
        let (id, request_id) = (id.to_owned(), request_id.to_owned());
        self.read(move |conn| {
            live_address(conn, &id, now)?;
            match load_request(conn, &request_id)? {
                Some(r) if r.address_id == id => Ok(r),
                _ => Err(StoreError::NotFound),
            }
        })
        .await
    }

    async fn find_request(
        &self, request_id: &str, now: Millis,
    ) -> StoreResult<Option<RequestRecord>> {
        let request_id = request_id.to_owned();
        self.read(move |conn| {
            let Some(r) = load_request(conn, &request_id)? else {
                return Ok(None);
            };
            match load_address(conn, &r.address_id)? {
                Some(a) if !a.is_gone(now) => Ok(Some(r)),
                _ => Ok(None),
            }
        })
        .await
    }

    /// serialises answers: the first finds the request open, the rest find it answered.
    async fn answer_request(
        &self, request_id: &str, answer: Answer, limits: &Limits, now: Millis,
    ) -> StoreResult<AnswerOutcome> {
        let request_id = request_id.to_owned();
        let limits = limits.clone();
        let outcome = self
            .write(move |conn| {
                let Some(r) = load_request(conn, &request_id)? else {
                    return Err(StoreError::NotFound);
                };
                let address = match live_address(conn, &r.address_id, now) {
                    Ok(a) => a,
                    Err(StoreError::AddressGone | StoreError::AddressNotFound) => {
                        return Err(StoreError::NotFound)
                    }
                    Err(e) => return Err(e),
                };
                if r.status_at(now) != RequestStatus::Open {
                    return Ok(AnswerOutcome::Closed(r));
                }
                let event = rules::request_answered_event(&r.id, &answer);
                let event = append_in_tx(conn, &address, &event, &limits, now)?;
                conn.prepare_cached(
                    "UPDATE requests SET status = 'answered', choice = ?2, answer_comment = ?3, \
                     answered_at = ?4 WHERE id = ?1",
                )
                .map_err(sql_err)?
                .execute(params![
                    r.id,
                    answer.choice,
                    answer.comment,
                    answer.answered_at
                ])
                .map_err(sql_err)?;
                refresh_next_expiry(conn, &r.address_id)?;
                let request = load_request(conn, &r.id)?
                    .ok_or_else(|| StoreError::Internal(format!("request {} vanished", r.id)))?;
                Ok(AnswerOutcome::Answered { request, event })
            })
            .await?;
        Ok(outcome)
    }

    async fn expire_requests(&self, id: &str, limits: &Limits, now: Millis) -> StoreResult<u64> {
        let owned = id.to_owned();
        let limits = limits.clone();
        let appended = self
            .write(move |conn| {
                let address = live_address(conn, &owned, now)?;
                expire_in_tx(conn, &address, &limits, now)
            })
            .await?;
        Ok(appended.len() as u64)
    }
}
