//! The Store conformance suite on DynamoDB Local, plus DynamoDB-only behaviour (purge).
//!
//! `scripts/test` starts DynamoDB Local, creates a fresh table for the run with the project's
//! resource script, and passes its name in `AGENTADDRESS_TEST_TABLE` (endpoints come through
//! the SDK's own `AWS_ENDPOINT_URL_DYNAMODB`). Without them these tests fail loudly: they
//! never skip.

use std::sync::Arc;

use agentaddress_core::store::Store;
use agentaddress_dynamodb::DynamoStore;

fn table() -> String {
    match std::env::var("AGENTADDRESS_TEST_TABLE") {
        Ok(t) if !t.is_empty() => t,
        _ => panic!(
            "AGENTADDRESS_TEST_TABLE is not set: run scripts/test, which starts DynamoDB Local \
             and creates a fresh table"
        ),
    }
}

async fn dynamo() -> DynamoStore {
    if std::env::var("AWS_ENDPOINT_URL_DYNAMODB").is_err()
        && std::env::var("AWS_ENDPOINT_URL").is_err()
    {
        panic!("no DynamoDB endpoint: run scripts/test (it exports AWS_ENDPOINT_URL_DYNAMODB)");
    }
    DynamoStore::new(DynamoStore::client_from_env().await, table(), 30 * 86_400)
}

async fn make() -> Arc<dyn Store> {
    Arc::new(dynamo().await)
}

mod conformance {
    agentaddress_core::store_conformance_tests!(super::make().await);
}

mod dynamodb_only {
    use agentaddress_core::domain::{ids, Ingress, Limits};
    use agentaddress_core::store::conformance::T0;
    use agentaddress_core::store::{IdempotencyClaim, NewAddress, NewEvent, Store, StoreError};
    use agentaddress_dynamodb::handle_purge_message;
    use aws_sdk_dynamodb::types::AttributeValue;

    async fn items_of(store: &super::DynamoStore, id: &str) -> Vec<String> {
        let client = super::DynamoStore::client_from_env().await;
        let out = client
            .query()
            .table_name(store.table())
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", AttributeValue::S(format!("A#{id}")))
            .consistent_read(true)
            .send()
            .await
            .expect("query the partition");
        out.items()
            .iter()
            .filter_map(|i| i.get("sk").and_then(|v| v.as_s().ok()).cloned())
            .collect()
    }

    #[tokio::test]
    async fn purge_removes_everything_but_the_tombstone() {
        let store = super::dynamo().await;
        let limits = Limits::default();
        let id = ids::new_address_id();
        store
            .create_address(NewAddress {
                id: id.clone(),
                name: None,
                task_id: None,
                email: format!("{id}@x.test"),
                created_at: T0,
                expires_at: None,
                token_hash: ids::hash_secret("t"),
                inbox_hash: ids::hash_secret("i"),
            })
            .await
            .expect("create");
        let big = format!("\"{}\"", "x".repeat(700_000));
        for n in 0..30 {
            let data = if n == 0 { big.clone() } else { n.to_string() };
            let event = NewEvent {
                event_type: "t".into(),
                source: None,
                ingress: Ingress::Http,
                data,
                http: None,
            };
            let claim = IdempotencyClaim {
                key_hash: ids::sha256_hex(format!("k{n}").as_bytes()),
                body_hash: "b".into(),
            };
            store
                .append_event(&id, event, Some(claim), &limits, T0)
                .await
                .expect("append");
        }
        store
            .put_state(&id, "k", "1".into(), None, &limits, T0)
            .await
            .expect("put");
        let before = items_of(&store, &id).await;
        assert!(
            before.iter().any(|sk| sk.contains("#001")),
            "the big event was chunked: {before:?}"
        );
        assert!(before.len() >= 30 + 30 + 1 + 1 + 2);
        assert!(
            handle_purge_message(&store, &format!("{{\"address_id\":\"{id}\"}}"), 1, T0)
                .await
                .is_err(),
            "a live address is never purged"
        );
        store.delete_address(&id, T0).await.expect("delete");
        let mut done = false;
        for _ in 0..10 {
            let p = store.purge_address(&id, 25, T0).await.expect("purge step");
            if p.done {
                done = true;
                break;
            }
        }
        assert!(done, "purge finishes in bounded steps");
        assert_eq!(items_of(&store, &id).await, vec!["META".to_owned()]);
        assert_eq!(
            store.read_events(&id, 0, 10, 1 << 22, T0).await.map(|_| ()),
            Err(StoreError::AddressGone)
        );
        assert!(handle_purge_message(&store, "not json", 1, T0)
            .await
            .is_err());
    }
}

/// The Lambda functions' SDK configuration (`lambda_sdk_config`: the region, credentials and
/// endpoints of the environment only) reaches the same table, and an address written through
/// it reads back through the default chain's configuration.
mod lambda_config {
    use agentaddress_core::domain::ids;
    use agentaddress_core::store::conformance::T0;
    use agentaddress_core::store::{NewAddress, Store};
    use agentaddress_dynamodb::{lambda_sdk_config, AwsConfig, DynamoStore};

    #[tokio::test]
    async fn reaches_the_table_from_the_environment_alone() {
        let _ = super::dynamo().await; // the same loud checks of the environment
        let sdk = lambda_sdk_config().await;
        assert_eq!(
            sdk.region().map(|r| r.as_ref().to_owned()),
            std::env::var("AWS_REGION").ok(),
            "the region is AWS_REGION"
        );
        let aws = AwsConfig {
            table: super::table(),
            purge_queue_url: None,
        };
        let lean = aws.store_with(&sdk, 30 * 86_400);
        let id = ids::new_address_id();
        lean.create_address(NewAddress {
            id: id.clone(),
            name: Some("lean".into()),
            task_id: None,
            email: format!("{id}@x.test"),
            created_at: T0,
            expires_at: None,
            token_hash: ids::hash_secret("t"),
            inbox_hash: ids::hash_secret("i"),
        })
        .await
        .expect("create through the Lambda configuration");
        let full = DynamoStore::new(DynamoStore::client_from_env().await, super::table(), 86_400);
        let read = full
            .get_address(&id, T0)
            .await
            .expect("read")
            .expect("the address is there");
        assert_eq!(read.name.as_deref(), Some("lean"));
    }
}
