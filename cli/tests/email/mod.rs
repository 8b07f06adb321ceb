//! Inbound email against `agentaddress serve`, over real sockets (docs/API.md §10–§11): the
//! black-box email scenarios (`agentaddress_blackbox::email`, which run against the Lambda stack
//! too) through the raw-MIME webhook door, with the kept messages counted in the database file;
//! and what only `serve` has: no door without a configured secret.

use std::path::{Path, PathBuf};

use agentaddress_blackbox::email::{self, BoxFuture, Kept, WebhookDoor};
use agentaddress_blackbox::Client;

use crate::common;

const SECRET: &str = "ingest-secret-for-the-black-box-suite";
const DOMAIN: &str = "inbox.test";

struct Serve {
    _child: tokio::process::Child,
    base: String,
    db: PathBuf,
    _dir: tempfile::TempDir,
}

async fn serve(extra: &[&str]) -> Serve {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("email.db");
    let mut args = vec!["--email-domain", DOMAIN];
    args.extend_from_slice(extra);
    let (child, base) = common::spawn_serve(&db, "127.0.0.1:0", &args).await;
    Serve {
        _child: child,
        base,
        db,
        _dir: dir,
    }
}

/// The messages `serve` keeps for an address: rows of its `emails` table.
struct Rows<'a>(&'a Path);

impl Kept for Rows<'_> {
    fn messages<'a>(&'a self, address_id: &'a str) -> BoxFuture<'a, usize> {
        Box::pin(async move {
            let conn = rusqlite::Connection::open(self.0).expect("open the db");
            let n: i64 = conn
                .query_row(
                    "SELECT count(*) FROM emails WHERE address_id = ?1",
                    [address_id],
                    |r| r.get(0),
                )
                .expect("count stored messages");
            usize::try_from(n).unwrap_or_default()
        })
    }
}

fn door() -> WebhookDoor {
    WebhookDoor {
        secret: SECRET.to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mail_reaches_a_waiting_long_poll_and_every_byte_reads_back() {
    let s = serve(&["--email-ingest-secret", SECRET]).await;
    email::mail_reaches_a_waiting_poll_and_reads_back(&Client::new(&s.base), &door(), &Rows(&s.db))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_address_never_reads_anothers_mail() {
    let s = serve(&["--email-ingest-secret", SECRET]).await;
    email::one_address_never_reads_anothers_mail(&Client::new(&s.base), &door()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_webhook_door_refuses_what_it_must() {
    let s = serve(&["--email-ingest-secret", SECRET, "--max-email-bytes", "4096"]).await;
    let c = Client::new(&s.base);
    email::webhook_refusals(&c, SECRET, 4096).await;

    // Without a configured secret the door does not exist.
    let off = serve(&[]).await;
    let a = Client::new(&off.base).new_address().await;
    let raw = email::message("m@example.com", &email::email_of(&a), b"x");
    email::ingest(
        &Client::new(&off.base),
        SECRET,
        &[&email::email_of(&a)],
        &raw,
    )
    .await
    .expect_error(404, "not_found", "the door without a secret");
}
