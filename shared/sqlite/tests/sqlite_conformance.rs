//! The Store conformance suite on in-memory SQLite (the test double) and on a SQLite file.

mod memory {
    use agentaddress_sqlite::SqliteStore;
    use std::sync::Arc;

    agentaddress_core::store_conformance_tests!(Arc::new(
        SqliteStore::open_in_memory().expect("open in-memory SQLite")
    ));

    mod email {
        use super::*;
        agentaddress_core::store_email_conformance_tests!(Arc::new(
            SqliteStore::open_in_memory().expect("open in-memory SQLite")
        ));
    }

    mod requests {
        use super::*;
        agentaddress_core::store_request_conformance_tests!(Arc::new(
            SqliteStore::open_in_memory().expect("open in-memory SQLite")
        ));
    }

    mod outbound {
        use super::*;
        agentaddress_core::store_outbound_conformance_tests!(Arc::new(
            SqliteStore::open_in_memory().expect("open in-memory SQLite")
        ));
    }

    mod viewer {
        use super::*;
        agentaddress_core::store_viewer_conformance_tests!(Arc::new(
            SqliteStore::open_in_memory().expect("open in-memory SQLite")
        ));
    }

    mod hooks {
        use super::*;
        agentaddress_core::store_hook_conformance_tests!(Arc::new(
            SqliteStore::open_in_memory().expect("open in-memory SQLite")
        ));
    }

    mod timers {
        use super::*;
        agentaddress_core::store_timer_conformance_tests!(Arc::new(
            SqliteStore::open_in_memory().expect("open in-memory SQLite")
        ));
    }
}

mod file {
    use agentaddress_sqlite::{SqliteStore, Synchronous};
    use std::sync::Arc;

    fn open() -> Arc<SqliteStore> {
        let dir = tempfile::tempdir().expect("temp dir").keep();
        Arc::new(
            SqliteStore::open(&dir.join("conformance.db"), Synchronous::Full)
                .expect("open SQLite file"),
        )
    }

    agentaddress_core::store_conformance_tests!(open());

    mod email {
        agentaddress_core::store_email_conformance_tests!(super::open());
    }

    mod requests {
        agentaddress_core::store_request_conformance_tests!(super::open());
    }

    mod outbound {
        agentaddress_core::store_outbound_conformance_tests!(super::open());
    }

    mod viewer {
        agentaddress_core::store_viewer_conformance_tests!(super::open());
    }

    mod hooks {
        agentaddress_core::store_hook_conformance_tests!(super::open());
    }

    mod timers {
        agentaddress_core::store_timer_conformance_tests!(super::open());
    }
}

/// Behaviour of the SQLite file itself: persistence across reopening, migrations, WAL.
mod file_specific {
    use agentaddress_core::domain::{ids, Ingress, Limits};
    use agentaddress_core::store::{prelude::*, NewAddress, NewEvent, StoreError};
    use agentaddress_sqlite::{SqliteStore, Synchronous};

    const T0: i64 = 1_800_000_000_000;

    fn address(id: &str) -> NewAddress {
        NewAddress {
            id: id.into(),
            name: None,
            task_id: None,
            email: format!("{id}@x.test"),
            created_at: T0,
            expires_at: None,
            token_hash: ids::hash_secret("t"),
            inbox_hash: ids::hash_secret("i"),
            verification: None,
            email_policy: None,
            hooks: Vec::new(),
        }
    }

    #[tokio::test]
    async fn data_survives_reopening_and_migrations_run_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("reopen.db");
        let limits = Limits::default();
        {
            let store = SqliteStore::open(&path, Synchronous::Full).expect("open");
            store
                .create_address(address("addr_a"))
                .await
                .expect("create");
            let event = NewEvent {
                event_type: "t".into(),
                source: None,
                ingress: Ingress::Http,
                data: "{\"x\":1}".into(),
                http: None,
            };
            store
                .append_event("addr_a", event, None, &limits, T0)
                .await
                .expect("append");
            store
                .put_state("addr_a", "k", "[1]".into(), Some(0), &limits, T0)
                .await
                .expect("put");
        }
        for _ in 0..2 {
            let store = SqliteStore::open(&path, Synchronous::Normal).expect("reopen");
            let page = store
                .read_events("addr_a", 0, 10, 1 << 20, T0)
                .await
                .expect("read");
            assert_eq!(page.events.len(), 2);
            assert_eq!(page.events[0].data, "{\"x\":1}");
            let s = store.get_state("addr_a", "k", T0).await.expect("state");
            assert_eq!((s.value.as_str(), s.revision), ("[1]", 2));
        }
        let conn = rusqlite::Connection::open(&path).expect("open directly");
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .expect("journal mode");
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .expect("user_version");
        assert_eq!((mode.as_str(), version), ("wal", 11));
    }

    /// The schema of a database file written before migration 2 (the email key), as migration
    /// 1 created it; frozen here, since old files on disk keep it.
    const SCHEMA_V1: &str = r#"
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
"#;

    #[tokio::test]
    async fn an_address_from_before_email_keys_is_found_by_its_key() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("v1.db");
        let old_id = "addr_3mJr0VZkOldSchema";
        {
            let conn = rusqlite::Connection::open(&path).expect("create a v1 file");
            conn.execute_batch(SCHEMA_V1).expect("migration 1's schema");
            conn.pragma_update(None, "user_version", 1)
                .expect("user_version 1");
            conn.execute(
                "INSERT INTO addresses (id, email, created_at, token_hash, inbox_hash) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                rusqlite::params![
                    old_id,
                    format!("{old_id}@Inbox.Example"),
                    T0,
                    ids::hash_secret("t"),
                    ids::hash_secret("i")
                ],
            )
            .expect("an old address row");
        }
        let store = SqliteStore::open(&path, Synchronous::Full).expect("open and migrate");
        let key = ids::email_key(&format!("{old_id}@inbox.example"));
        assert_eq!(key, "addr_3mjr0vzkoldschema@inbox.example");
        let found = store
            .address_by_email(&key, T0)
            .await
            .expect("lookup")
            .expect("the old address is found by its lower-cased key");
        assert_eq!(found.id, old_id);
        assert_eq!(found.email, format!("{old_id}@Inbox.Example"));
        assert!(ids::verify_secret("t", &found.token_hash));
        let twin = "addr_3MJR0VZKOLDSCHEMA";
        assert_eq!(
            store
                .create_address(NewAddress {
                    email: format!("{twin}@inbox.example"),
                    ..address(twin)
                })
                .await,
            Err(StoreError::AddressExists),
            "the backfilled key is unique too"
        );
        store
            .create_address(address("addr_new"))
            .await
            .expect("new addresses still create");
        assert!(store
            .address_by_email("addr_new@x.test", T0)
            .await
            .expect("lookup")
            .is_some());
        drop(store);
        let version: i64 = rusqlite::Connection::open(&path)
            .and_then(|c| c.query_row("PRAGMA user_version", [], |r| r.get(0)))
            .expect("user_version");
        assert_eq!(version, 11);
    }

    #[tokio::test]
    async fn a_newer_schema_is_refused_not_corrupted() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("newer.db");
        drop(SqliteStore::open(&path, Synchronous::Full).expect("open"));
        rusqlite::Connection::open(&path)
            .and_then(|c| c.pragma_update(None, "user_version", 99))
            .expect("set a future schema version");
        match SqliteStore::open(&path, Synchronous::Full) {
            Err(StoreError::Internal(m)) => assert!(m.contains("newer"), "{m}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// What the file keeps of a viewer sign-in code (docs/API.md §13) is the code's hash and the
    /// token sealed: neither the code nor the read token is in the database or its WAL, and a
    /// redeemed code's row is gone.
    #[tokio::test]
    async fn a_viewer_code_at_rest_reveals_neither_code_nor_token() {
        use agentaddress_core::domain::viewer;
        use agentaddress_core::store::NewViewerCode;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("viewer.db");
        let store = SqliteStore::open(&path, Synchronous::Full).expect("open");
        store
            .create_address(address("addr_v"))
            .await
            .expect("create");
        let code = viewer::new_viewer_code();
        let token = agentaddress_core::domain::ids::new_read_token();
        let new = NewViewerCode {
            code_hash: viewer::code_hash(&code),
            sealed_token: viewer::seal_token(&code, "addr_v", &token).expect("seal"),
            created_at: T0,
            expires_at: T0 + viewer::VIEWER_CODE_VALID_MS,
        };
        store
            .create_viewer_code("addr_v", new.clone(), T0)
            .await
            .expect("store the code");
        let on_disk = || {
            let mut bytes = std::fs::read(&path).expect("read the database");
            if let Ok(wal) = std::fs::read(path.with_extension("db-wal")) {
                bytes.extend_from_slice(&wal);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        };
        let text = on_disk();
        assert!(
            text.contains(&new.code_hash),
            "the hash is kept (this test looks in the right place)"
        );
        assert!(!text.contains(&code), "the code is not kept");
        assert!(!text.contains(&token), "the read token is not kept");
        assert!(!text.contains(&token[4..]), "nor any plain part of it");
        let got = store
            .redeem_viewer_code(&new.code_hash, T0)
            .await
            .expect("redeem");
        assert!(got.is_some());
        let conn = rusqlite::Connection::open(&path).expect("open directly");
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM viewer_codes", [], |r| r.get(0))
            .expect("count");
        assert_eq!(rows, 0, "a redeemed code is gone");
    }

    #[tokio::test]
    async fn an_unwritable_path_is_a_clear_error() {
        match SqliteStore::open(
            std::path::Path::new("/nonexistent-dir/x/agentaddress.db"),
            Synchronous::Full,
        ) {
            Err(StoreError::Internal(m)) => assert!(m.contains("cannot open"), "{m}"),
            other => panic!("expected an error, got {other:?}"),
        }
    }
}
