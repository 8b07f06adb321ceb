//! The Store conformance suite on in-memory SQLite (the test double) and on a SQLite file.

mod memory {
    use agentaddress_sqlite::SqliteStore;
    use std::sync::Arc;

    agentaddress_core::store_conformance_tests!(Arc::new(
        SqliteStore::open_in_memory().expect("open in-memory SQLite")
    ));
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
}

/// Behaviour of the SQLite file itself: persistence across reopening, migrations, WAL.
mod file_specific {
    use agentaddress_core::domain::{ids, Ingress, Limits};
    use agentaddress_core::store::{NewAddress, NewEvent, Store, StoreError};
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
        assert_eq!((mode.as_str(), version), ("wal", 1));
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
