//! The schema and its migrations, applied in order on open (`PRAGMA user_version` counts them).

use rusqlite::Connection;

use crate::rows::sql_err;
use crate::store::{StoreError, StoreResult};

/// Migration `n` (from 1) brings the schema to `PRAGMA user_version = n`.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: the tables.
    r#"
CREATE TABLE addresses (
    id          TEXT PRIMARY KEY,
    name        TEXT,
    task_id     TEXT,
    email       TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER,
    deleted_at  INTEGER,
    purged_at   INTEGER,
    token_hash  TEXT NOT NULL,
    inbox_hash  TEXT NOT NULL,
    last_seq    INTEGER NOT NULL DEFAULT 0,
    state_keys  INTEGER NOT NULL DEFAULT 0,
    state_bytes INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX addresses_expiry ON addresses(expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE events (
    address_id  TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    id          TEXT NOT NULL,
    type        TEXT NOT NULL,
    source      TEXT,
    ingress     TEXT NOT NULL,
    received_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    acked_at    INTEGER,
    data        TEXT NOT NULL,
    http        TEXT,
    PRIMARY KEY (address_id, seq)
) WITHOUT ROWID;
CREATE INDEX events_expiry ON events(expires_at);
CREATE TABLE state (
    address_id  TEXT NOT NULL,
    key         TEXT NOT NULL,
    value       TEXT NOT NULL,
    revision    INTEGER NOT NULL,
    size        INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (address_id, key)
) WITHOUT ROWID;
CREATE TABLE idempotency (
    address_id  TEXT NOT NULL,
    key_hash    TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    event_id    TEXT NOT NULL,
    body_hash   TEXT NOT NULL,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (address_id, key_hash)
) WITHOUT ROWID;
CREATE INDEX idempotency_expiry ON idempotency(expires_at);
"#,
    // 2: the email key (docs/API.md §1): `email` lower-cased, unique, found by inbound email. Rows
    // written before it are backfilled with `lower(email)` (ASCII, as `ids::email_key`). The key is
    // a column of the address row, so it goes when the sweep forgets the tombstone.
    r#"
ALTER TABLE addresses ADD COLUMN email_key TEXT NOT NULL DEFAULT '';
UPDATE addresses SET email_key = lower(email);
CREATE UNIQUE INDEX addresses_email_key ON addresses(email_key);
"#,
    // 3: stored email messages (docs/API.md §10–§11), one per `email.received` event, with that
    // event's sequence and expiry. A rowid table: its rows hold blobs of up to the raw limit.
    r#"
CREATE TABLE emails (
    address_id  TEXT NOT NULL,
    email_id    TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    event_id    TEXT NOT NULL,
    size        INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    raw         BLOB NOT NULL
);
CREATE UNIQUE INDEX emails_by_id ON emails(address_id, email_id);
CREATE INDEX emails_by_seq ON emails(address_id, seq);
CREATE INDEX emails_expiry ON emails(expires_at);
"#,
    // 4: requests for a person (docs/API.md §12). `options` is a JSON array; the answer's
    // columns are set when it is answered; `key_hash`/`body_hash` are the creation's
    // Idempotency-Key claim. The address keeps its earliest open request's expiry, which every
    // feed read already loads.
    r#"
ALTER TABLE addresses ADD COLUMN next_request_expiry INTEGER;
CREATE TABLE requests (
    id             TEXT PRIMARY KEY,
    address_id     TEXT NOT NULL,
    title          TEXT NOT NULL,
    body           TEXT,
    options        TEXT NOT NULL,
    comment_mode   TEXT NOT NULL,
    created_at     INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    secret_hash    TEXT NOT NULL,
    status         TEXT NOT NULL,
    choice         TEXT,
    answer_comment TEXT,
    answered_at    INTEGER,
    key_hash       TEXT,
    body_hash      TEXT
) WITHOUT ROWID;
CREATE INDEX requests_open ON requests(address_id, status, expires_at);
CREATE UNIQUE INDEX requests_by_key ON requests(address_id, key_hash) WHERE key_hash IS NOT NULL;
CREATE INDEX requests_done ON requests(expires_at);
"#,
    // 5: an address's signing secret for verified webhooks (docs/API.md §15): the
    // configuration as JSON, secret included (`VerificationConfig::to_stored`).
    r#"
ALTER TABLE addresses ADD COLUMN verification TEXT;
"#,
    // 6: outbound email (docs/API.md §16). A contact per (address, lower-cased email), with its
    // current code's hash, expiry and tries, and the code mails of its `code_day` (a UTC day).
    // A send per `email.sent` event: its Idempotency-Key claim, the message as it will be
    // mailed (`refs`: a JSON array), its UTC `day` (the daily limit counts them), and its
    // delivery state. A send outlives its event by a day at least, so the day's count holds.
    r#"
CREATE TABLE contacts (
    address_id      TEXT NOT NULL,
    email           TEXT NOT NULL,
    status          TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    confirmed_at    INTEGER,
    code_hash       TEXT,
    code_expires_at INTEGER,
    code_tries      INTEGER NOT NULL DEFAULT 0,
    code_day        INTEGER NOT NULL DEFAULT 0,
    code_mails      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (address_id, email)
) WITHOUT ROWID;
CREATE TABLE sends (
    id              TEXT PRIMARY KEY,
    address_id      TEXT NOT NULL,
    key_hash        TEXT NOT NULL,
    body_hash       TEXT NOT NULL,
    seq             INTEGER NOT NULL,
    event_id        TEXT NOT NULL,
    day             INTEGER NOT NULL,
    recipient       TEXT NOT NULL,
    reply_to        TEXT NOT NULL,
    subject         TEXT NOT NULL,
    text            TEXT NOT NULL,
    message_id      TEXT NOT NULL,
    in_reply_to     TEXT,
    refs            TEXT NOT NULL,
    status          TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER,
    lease_until     INTEGER,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL
) WITHOUT ROWID;
CREATE UNIQUE INDEX sends_by_key ON sends(address_id, key_hash);
CREATE INDEX sends_by_day ON sends(address_id, day);
CREATE INDEX sends_due ON sends(next_attempt_at) WHERE status = 'pending';
CREATE INDEX sends_expiry ON sends(expires_at);
"#,
    // 7: server-wide daily counts (docs/API.md §16): the code mails of a UTC `day` per
    // `scope` (`code_to:{mailbox}`, `code_from:{client}`), counted in the transaction that
    // issues the code. The sweep forgets days before yesterday.
    r#"
CREATE TABLE daily_counts (
    scope TEXT NOT NULL,
    day   INTEGER NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (scope, day)
) WITHOUT ROWID;
"#,
    // 8: the inbox viewer's one-time sign-in codes (docs/API.md §13, "Sign-in links"): the
    // code's hash, and the read token sealed under a key only the code gives (never the code
    // or the token). A redeem deletes its row; the sweep removes expired ones.
    r#"
CREATE TABLE viewer_codes (
    code_hash   TEXT PRIMARY KEY,
    address_id  TEXT NOT NULL,
    sealed      TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX viewer_codes_by_address ON viewer_codes(address_id);
CREATE INDEX viewer_codes_expiry ON viewer_codes(expires_at);
"#,
    // 9: wake hooks (docs/API.md §19): a hook's settings, its secret and headers (stored as
    // given: sending needs them), its delivery state, and `woken_through`, the last event an
    // append found it woke for (set in the append's transaction), which with the cursor says
    // whether the wake loop has something to do. The address keeps its active hooks' types.
    r#"
ALTER TABLE addresses ADD COLUMN hook_types TEXT;
CREATE TABLE hooks (
    id                TEXT NOT NULL UNIQUE,
    address_id        TEXT NOT NULL,
    url               TEXT NOT NULL,
    types             TEXT NOT NULL,
    format            TEXT NOT NULL,
    headers           TEXT NOT NULL,
    secret            TEXT NOT NULL,
    debounce_seconds  INTEGER NOT NULL,
    status            TEXT NOT NULL,
    created_at        INTEGER NOT NULL,
    delivered_through INTEGER NOT NULL,
    woken_through     INTEGER NOT NULL,
    pending_to        INTEGER,
    attempts          INTEGER NOT NULL DEFAULT 0,
    not_before        INTEGER,
    lease_until       INTEGER,
    last_wake_at      INTEGER,
    failed_ranges     INTEGER NOT NULL DEFAULT 0,
    last_error        TEXT,
    revision          INTEGER NOT NULL
);
CREATE INDEX hooks_by_address ON hooks(address_id);
CREATE INDEX hooks_wanting ON hooks(not_before)
    WHERE status = 'active' AND (pending_to IS NOT NULL OR woken_through > delivered_through);
"#,
    // 10: timers (docs/API.md §20). A timer per row, pending until it fires (its event's id
    // and sequence set in the same transaction) or is cancelled; `key_hash`/`body_hash` are
    // the creation's Idempotency-Key claim. The address keeps its earliest pending `fire_at`
    // (which every feed read already loads), indexed for the scheduler that sleeps until the
    // earliest of all.
    r#"
ALTER TABLE addresses ADD COLUMN next_timer_at INTEGER;
CREATE INDEX addresses_next_timer ON addresses(next_timer_at) WHERE next_timer_at IS NOT NULL;
CREATE TABLE timers (
    id          TEXT PRIMARY KEY,
    address_id  TEXT NOT NULL,
    fire_at     INTEGER NOT NULL,
    type        TEXT NOT NULL,
    data        TEXT,
    created_at  INTEGER NOT NULL,
    status      TEXT NOT NULL,
    closed_at   INTEGER,
    event_id    TEXT,
    event_seq   INTEGER,
    key_hash    TEXT,
    body_hash   TEXT
) WITHOUT ROWID;
CREATE INDEX timers_pending ON timers(address_id, fire_at) WHERE status = 'pending';
CREATE INDEX timers_closed ON timers(address_id, closed_at) WHERE closed_at IS NOT NULL;
CREATE INDEX timers_done ON timers(closed_at) WHERE closed_at IS NOT NULL;
CREATE UNIQUE INDEX timers_by_key ON timers(address_id, key_hash) WHERE key_hash IS NOT NULL;
"#,
    // 11: an address's sender rules for inbound email (docs/API.md §10, "Sender rules"): the
    // policy as JSON (`EmailPolicy::to_stored`), and how many messages they refused.
    r#"
ALTER TABLE addresses ADD COLUMN email_policy TEXT;
ALTER TABLE addresses ADD COLUMN email_refused INTEGER NOT NULL DEFAULT 0;
"#,
];

pub(crate) fn migrate(conn: &mut Connection) -> StoreResult<()> {
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(sql_err)?;
    let known = MIGRATIONS.len() as i64;
    if version > known {
        return Err(StoreError::Internal(format!(
            "database schema version {version} is newer than this binary understands ({known})"
        )));
    }
    for (n, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        let tx = conn.transaction().map_err(sql_err)?;
        tx.execute_batch(sql).map_err(sql_err)?;
        tx.pragma_update(None, "user_version", n as i64 + 1)
            .map_err(sql_err)?;
        tx.commit().map_err(sql_err)?;
    }
    Ok(())
}
