//! The Store conformance suite on in-memory SQLite (the test double) and on a SQLite file.

mod memory {
    use agentaddress_shared::store::sqlite::SqliteStore;
    use std::sync::Arc;

    agentaddress_shared::store_conformance_tests!(Arc::new(
        SqliteStore::open_in_memory().expect("open in-memory SQLite")
    ));
}

mod file {
    use agentaddress_shared::store::sqlite::{SqliteStore, Synchronous};
    use std::sync::Arc;

    fn open() -> Arc<SqliteStore> {
        let dir = tempfile::tempdir().expect("temp dir").keep();
        Arc::new(
            SqliteStore::open(&dir.join("conformance.db"), Synchronous::Full)
                .expect("open SQLite file"),
        )
    }

    agentaddress_shared::store_conformance_tests!(open());
}
