//! Outbound email on `agentaddress serve` (docs/API.md §16), over real sockets between real
//! servers: server A relays through server B's SMTP door (`--smtp-relay smtp://…`), B's
//! addresses stand for people's mailboxes, and the person's reply reaches A's SMTP door from
//! lettre. A code mailed to a contact arrives in B's feed, confirms the contact on A, a send
//! arrives with `Reply-To` and threading, and the reply lands in A's feed threaded to the send.
//! Then the abuse cases, each refused with its code and nothing sent, and the relay's failures.

mod client_harness;
mod common;

use std::time::{Duration, Instant};

use common::smtp::{agent_server, create, serve, Address, Serve};
use common::ServeCommand;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::BufReader;
use tokio::process::{Child, ChildStdout};

fn http() -> reqwest::Client {
    reqwest::Client::new()
}

/// What these tests ask of an address besides its feed (`common::smtp::Address::events`).
impl Address {
    fn url(&self, path: &str) -> String {
        format!("{}/api/v1/addresses/{}{path}", self.base, self.id)
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        let r = http()
            .get(self.url(path))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, key: Option<&str>, body: Value) -> (StatusCode, Value) {
        let mut req = http()
            .post(self.url(path))
            .bearer_auth(&self.token)
            .json(&body);
        if let Some(k) = key {
            req = req.header("idempotency-key", k);
        }
        let r = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn add_contact(&self, email: &str) -> (StatusCode, Value) {
        self.post("/email/contacts", None, json!({ "email": email }))
            .await
    }

    async fn confirm(&self, email: &str, code: &str) -> (StatusCode, Value) {
        self.post(
            "/email/contacts",
            None,
            json!({ "email": email, "code": code }),
        )
        .await
    }

    async fn send(&self, key: &str, body: Value) -> (StatusCode, Value) {
        self.post("/email/send", Some(key), body).await
    }

    /// The events of `event_type`, once there are `n` of them (within 25 s).
    async fn wait_for(&self, event_type: &str, n: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(25);
        loop {
            let found: Vec<Value> = self
                .events()
                .await
                .into_iter()
                .filter(|e| e["type"] == event_type)
                .collect();
            if found.len() >= n {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "{} has {} {event_type} events, not {n}",
                self.email,
                found.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn expect_error(answer: &(StatusCode, Value), status: u16, code: &str, what: &str) {
    assert_eq!(answer.0.as_u16(), status, "{what}: {}", answer.1);
    assert_eq!(answer.1["error"]["code"], code, "{what}: {}", answer.1);
}

/// The six-digit code of a code mail's event.
fn code_of(event: &Value) -> String {
    let text = event["data"]["text"].as_str().unwrap_or_default();
    let at = text
        .find("code: ")
        .unwrap_or_else(|| panic!("no code in {text:?}"));
    let code: String = text[at + 6..].chars().take(6).collect();
    assert!(code.chars().all(|c| c.is_ascii_digit()), "{text}");
    code
}

fn other_code(code: &str) -> String {
    let n: u32 = code.parse().unwrap_or(0);
    format!("{:06}", (n + 1) % 1_000_000)
}

/// Adds `person` as a contact of `agent` and confirms it with the code mailed to it.
async fn confirmed(agent: &Address, person: &Address) {
    let codes_before = person.wait_for("email.received", 0).await.len();
    let (status, v) = agent.add_contact(&person.email).await;
    assert_eq!(status, 202, "{v}");
    let mails = person.wait_for("email.received", codes_before + 1).await;
    let code = code_of(&mails[codes_before]);
    let (status, v) = agent.confirm(&person.email, &code).await;
    assert_eq!(status, 200, "{v}");
}

/// The person replies to `mail` (an `email.received` event of theirs) through `to_server`'s
/// SMTP door.
async fn reply_by_smtp(to_server: &Serve, person: &Address, agent_email: &str, mail: &Value) {
    use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
    let parent = mail["data"]["message_id"].as_str().unwrap_or_default();
    let message = Message::builder()
        .from(person.email.parse().expect("from"))
        .to(agent_email.parse().expect("to"))
        .subject(format!(
            "Re: {}",
            mail["data"]["subject"].as_str().unwrap_or_default()
        ))
        .message_id(Some("<reply-1@people.test>".into()))
        .in_reply_to(parent.to_owned())
        .references(parent.to_owned())
        .body("Yes, go ahead.".to_owned())
        .expect("build the reply");
    AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(to_server.smtp.ip().to_string())
        .port(to_server.port())
        .build()
        .send(message)
        .await
        .expect("send the reply");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_a_send_and_its_reply_round_trip_between_two_servers() {
    let people = serve("people.test", &[]).await;
    let agents = agent_server(&people, &[]).await;
    let person = people.new_address().await;
    let agent = agents.new_address().await;

    let (status, v) = agent.get("/email/contacts").await;
    assert_eq!(status, 200);
    assert_eq!(v, json!({"contacts": [], "outbound_configured": true}));

    // The code mail arrives in the person's mailbox (an email.received event on B).
    let (status, v) = agent.add_contact(&person.email.to_uppercase()).await;
    assert_eq!(status, 202, "{v}");
    assert_eq!(v["contact"]["email"], person.email.to_lowercase());
    assert_eq!(v["contact"]["status"], "pending");
    assert!(v["code_expires_at"].is_string(), "{v}");
    assert!(
        !v.to_string().contains("code\":\""),
        "the code is never answered: {v}"
    );
    let mail = &person.wait_for("email.received", 1).await[0];
    assert_eq!(mail["source"], "mail@agents.test");
    assert_eq!(mail["data"]["reply_to"], agent.email.as_str());
    let code = code_of(mail);

    // A wrong code counts a try; the right one confirms.
    let wrong = agent.confirm(&person.email, &other_code(&code)).await;
    expect_error(&wrong, 422, "invalid_code", "a wrong code");
    assert_eq!(wrong.1["error"]["tries_left"], 4);
    let (status, v) = agent.confirm(&person.email, &code).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["contact"]["status"], "confirmed");
    let (_, v) = agent.get("/email/contacts").await;
    assert_eq!(v["contacts"][0]["status"], "confirmed", "{v}");
    assert!(v["contacts"][0]["confirmed_at"].is_string(), "{v}");

    // A send: accepted with its email.sent event; the same key again sends nothing more.
    let body =
        json!({"to": person.email, "subject": "Deploy?", "text": "Shall I deploy v2?\nIt passed."});
    let (status, first) = agent.send("deploy-1", body.clone()).await;
    assert_eq!(status, 202, "{first}");
    assert_eq!(first["status"], "accepted");
    let (status, again) = agent.send("deploy-1", body).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["event"], first["event"]);
    let sent = &agent.wait_for("email.sent", 1).await[0];
    assert_eq!(sent["id"], first["event"]["id"]);
    assert_eq!(sent["ingress_surface"], "outbound");
    assert_eq!(sent["data"]["to"], person.email.to_lowercase());
    assert_eq!(sent["data"]["subject"], "Deploy?");
    let message_id = sent["data"]["message_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(message_id.ends_with("@agents.test>"), "{message_id}");

    // It arrives from the operator's sender, replies going to the agent's address.
    let mail = person.wait_for("email.received", 2).await[1].clone();
    assert_eq!(mail["data"]["subject"], "Deploy?");
    assert_eq!(mail["data"]["message_id"], message_id.as_str());
    assert_eq!(mail["data"]["reply_to"], agent.email.as_str());
    assert_eq!(mail["data"]["from"], "Agents <mail@agents.test>");
    assert!(
        mail["data"]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("Shall I deploy v2?"),
        "{mail}"
    );

    // The person's reply lands in the agent's feed, threaded to the send.
    reply_by_smtp(&agents, &person, &agent.email, &mail).await;
    let reply = agent.wait_for("email.received", 1).await[0].clone();
    assert_eq!(reply["data"]["in_reply_to"], message_id.as_str());
    assert_eq!(reply["source"], person.email.to_lowercase());

    // The agent answers the reply: `Re: `, In-Reply-To and References follow the thread.
    let (status, v) = agent
        .send(
            "deploy-2",
            json!({"to": person.email, "subject": "Deploying", "text": "On it.",
                   "reply_to_event_id": reply["id"]}),
        )
        .await;
    assert_eq!(status, 202, "{v}");
    let mail = person.wait_for("email.received", 3).await[2].clone();
    assert_eq!(mail["data"]["subject"], "Re: Deploying");
    assert_eq!(mail["data"]["in_reply_to"], "<reply-1@people.test>");
    assert_eq!(
        mail["data"]["references"],
        json!([message_id, "<reply-1@people.test>"])
    );
    let sent = agent.wait_for("email.sent", 2).await;
    assert_eq!(sent[1]["data"]["in_reply_to"], "<reply-1@people.test>");

    // Nothing was sent twice: three mails in all.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(person.wait_for("email.received", 3).await.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abuse_is_refused_with_its_code_and_nothing_is_sent() {
    let people = serve("people.test", &[]).await;
    let agents = agent_server(&people, &["--max-contacts", "3"]).await;
    let person = people.new_address().await;
    let agent = agents.new_address().await;

    // Sending needs a confirmed contact: unknown, then pending.
    let body = |to: &str| json!({"to": to, "subject": "Hi", "text": "Hello."});
    expect_error(
        &agent.send("k0", body(&person.email)).await,
        403,
        "contact_not_confirmed",
        "an unknown recipient",
    );
    let (status, _) = agent.add_contact(&person.email).await;
    assert_eq!(status, 202);
    expect_error(
        &agent.send("k0", body(&person.email)).await,
        403,
        "contact_not_confirmed",
        "a pending recipient",
    );

    // Guessing: five wrong codes spend the code; the right one is then refused too.
    let code = code_of(&person.wait_for("email.received", 1).await[0]);
    for left in (0..5).rev() {
        let wrong = agent.confirm(&person.email, &other_code(&code)).await;
        expect_error(&wrong, 422, "invalid_code", "a guess");
        assert_eq!(wrong.1["error"]["tries_left"], left);
    }
    let spent = agent.confirm(&person.email, &code).await;
    expect_error(
        &spent,
        422,
        "invalid_code",
        "the right code after five guesses",
    );
    assert_eq!(spent.1["error"]["tries_left"], 0);
    expect_error(
        &agent.confirm(&person.email, "12345").await,
        400,
        "invalid_request",
        "a code that is not six digits",
    );
    // A new code (the second mail of the day) works; a fourth mail in a day is refused.
    let (status, _) = agent.add_contact(&person.email).await;
    assert_eq!(status, 202);
    let code = code_of(&person.wait_for("email.received", 2).await[1]);
    let (status, v) = agent.confirm(&person.email, &code).await;
    assert_eq!(status, 200, "{v}");
    let other = people.new_address().await;
    for _ in 0..3 {
        let (status, v) = agent.add_contact(&other.email).await;
        assert_eq!(status, 202, "{v}");
    }
    let fourth = agent.add_contact(&other.email).await;
    expect_error(&fourth, 429, "rate_limited", "a fourth code mail in a day");
    assert!(fourth.1["error"]["retry_after_seconds"].as_u64() > Some(0));
    // The contact cap (--max-contacts 3).
    let third = people.new_address().await;
    let (status, _) = agent.add_contact(&third.email).await;
    assert_eq!(status, 202);
    expect_error(
        &agent.add_contact("fourth@people.test").await,
        409,
        "quota_exceeded",
        "a contact over the cap",
    );

    // Header injection through `to` and `subject`, and encoded-words: refused before anything.
    for (what, to, subject) in [
        (
            "CRLF in to",
            format!("{}\r\nBcc: eve@evil.test", person.email),
            "Hi".to_owned(),
        ),
        (
            "LF in to",
            format!("{}\nBcc: eve@evil.test", person.email),
            "Hi".to_owned(),
        ),
        (
            "a display name in to",
            format!("Eve <{}>", person.email),
            "Hi".to_owned(),
        ),
        (
            "two recipients",
            format!("{},eve@evil.test", person.email),
            "Hi".to_owned(),
        ),
        (
            "an encoded-word in to",
            "=?utf-8?q?x?=@people.test".to_owned(),
            "Hi".to_owned(),
        ),
        (
            "CRLF in subject",
            person.email.clone(),
            "Hi\r\nBcc: eve@evil.test".to_owned(),
        ),
        (
            "LF in subject",
            person.email.clone(),
            "Hi\nBcc: eve@evil.test".to_owned(),
        ),
        (
            "an encoded-word in subject",
            person.email.clone(),
            "=?utf-8?b?SGkNCkJjYzogZXZl?=".to_owned(),
        ),
        ("an empty subject", person.email.clone(), String::new()),
        (
            "a 201-character subject",
            person.email.clone(),
            "s".repeat(201),
        ),
    ] {
        expect_error(
            &agent
                .send("inject", json!({"to": to, "subject": subject, "text": "x"}))
                .await,
            400,
            "invalid_request",
            what,
        );
    }
    expect_error(
        &agent
            .add_contact(&format!("{}\r\nBcc: eve@evil.test", person.email))
            .await,
        400,
        "invalid_request",
        "CRLF in a contact",
    );
    // The text: 10,000 bytes go, 10,001 do not.
    expect_error(
        &agent
            .send(
                "long",
                json!({"to": person.email, "subject": "Long", "text": "x".repeat(10_001)}),
            )
            .await,
        400,
        "invalid_request",
        "a 10,001-byte text",
    );
    // No Idempotency-Key.
    expect_error(
        &agent.post("/email/send", None, body(&person.email)).await,
        400,
        "invalid_request",
        "a send without an Idempotency-Key",
    );
    // A reply to an event that is not an email, and to none.
    let (_, events) = agent.get("/events?after=0").await;
    assert_eq!(
        events["events"],
        json!([]),
        "nothing appended by any refusal"
    );
    let (status, first) = agent.send("k1", body(&person.email)).await;
    assert_eq!(status, 202, "{first}");
    expect_error(
        &agent
            .send(
                "k2",
                json!({"to": person.email, "subject": "Hi", "text": "x",
                               "reply_to_event_id": first["event"]["id"]}),
            )
            .await,
        400,
        "invalid_request",
        "a reply to an email.sent event",
    );
    expect_error(
        &agent
            .send(
                "k2",
                json!({"to": person.email, "subject": "Hi", "text": "x",
                               "reply_to_event_id": "evt_0000000000099"}),
            )
            .await,
        404,
        "not_found",
        "a reply to no event",
    );
    // The same key with another body.
    expect_error(
        &agent
            .send(
                "k1",
                json!({"to": person.email, "subject": "Other", "text": "x"}),
            )
            .await,
        422,
        "idempotency_key_reused",
        "a replayed key with another body",
    );
    // 20 sends a day (k1 and 19 more, one of 10,000 bytes); the 21st is refused.
    let (status, v) = agent
        .send(
            "k-long",
            json!({"to": person.email, "subject": "Long", "text": "x".repeat(10_000)}),
        )
        .await;
    assert_eq!(status, 202, "{v}");
    for n in 3..=20 {
        let (status, v) = agent.send(&format!("k{n}"), body(&person.email)).await;
        assert_eq!(status, 202, "send {n}: {v}");
    }
    let over = agent.send("k21", body(&person.email)).await;
    expect_error(&over, 429, "rate_limited", "the 21st send of the day");
    assert!(over.1["error"]["retry_after_seconds"].as_u64() > Some(0));

    // What was sent: the person's 2 code mails and the 20 sends, nothing else.
    let received = person.wait_for("email.received", 22).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(person.events().await.len(), 22, "{received:?}");
    assert!(received.iter().all(|m| !m["data"]["text"]
        .as_str()
        .unwrap_or_default()
        .contains("evil")));
    assert_eq!(agent.wait_for("email.sent", 20).await.len(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_failures_are_retried_then_reported() {
    let mut people = serve("people.test", &[]).await;
    let agents = agent_server(
        &people,
        &[
            "--outbound-retry-first-ms",
            "300",
            "--outbound-attempts",
            "3",
            "--outbound-tick-ms",
            "50",
        ],
    )
    .await;
    let person = people.new_address().await;
    let gone = people.new_address().await;
    let agent = agents.new_address().await;
    confirmed(&agent, &person).await;
    confirmed(&agent, &gone).await;

    // A permanent refusal (the relay answers 550 for a deleted mailbox): reported at once.
    let r = http()
        .delete(gone.url(""))
        .bearer_auth(&gone.token)
        .send()
        .await
        .expect("DELETE");
    assert!(r.status().is_success());
    let (status, v) = agent
        .send(
            "p1",
            json!({"to": gone.email, "subject": "Hi", "text": "x"}),
        )
        .await;
    assert_eq!(status, 202, "{v}");
    let failed = agent.wait_for("email.send_failed", 1).await[0].clone();
    assert_eq!(failed["data"]["event_id"], v["event"]["id"]);
    assert_eq!(failed["data"]["permanent"], true);
    assert_eq!(failed["data"]["attempts"], 1);
    assert!(
        failed["data"]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("550"),
        "{failed}"
    );

    // The relay is down: tried 3 times (300 ms, then 1.2 s apart), then reported.
    people.child.kill().await.expect("stop B");
    let _ = people.child.wait().await;
    let started = Instant::now();
    let (status, v) = agent
        .send(
            "t1",
            json!({"to": person.email, "subject": "Hi", "text": "x"}),
        )
        .await;
    assert_eq!(status, 202, "{v}");
    let failed = agent.wait_for("email.send_failed", 2).await[1].clone();
    assert_eq!(failed["data"]["event_id"], v["event"]["id"]);
    assert_eq!(failed["data"]["permanent"], false);
    assert_eq!(failed["data"]["attempts"], 3);
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "the retries waited: {:?}",
        started.elapsed()
    );
    // A code mail the relay cannot take now is 503, safe to retry.
    let (status, v) = agent.add_contact("someone@people.test").await;
    assert_eq!(status, 503, "{v}");
    assert_eq!(v["error"]["code"], "unavailable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_relay_the_routes_say_so() {
    let alone = serve("agents.test", &[]).await;
    let agent = alone.new_address().await;
    let (status, v) = agent.get("/email/contacts").await;
    assert_eq!(status, 200);
    assert_eq!(v["outbound_configured"], false);
    expect_error(
        &agent.add_contact("ada@example.com").await,
        503,
        "outbound_not_configured",
        "a contact",
    );
    expect_error(
        &agent
            .send(
                "k",
                json!({"to": "ada@example.com", "subject": "Hi", "text": "x"}),
            )
            .await,
        503,
        "outbound_not_configured",
        "a send",
    );
    // A sender without a relay is a start-up error.
    let out = ServeCommand::new()
        .args(["--db", ":memory:", "--listen", "127.0.0.1:0"])
        .args(["--email-from", "mail@agents.test"])
        .output(Duration::from_secs(30))
        .await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--smtp-relay"));
    let out = ServeCommand::new()
        .args(["--db", ":memory:", "--listen", "127.0.0.1:0"])
        .args([
            "--email-from",
            "mail@agents.test",
            "--smtp-relay",
            "smtp://u:pw@127.0.0.1:25",
        ])
        .output(Duration::from_secs(30))
        .await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("password"), "{stderr}");
    assert!(
        !stderr.contains("pw@"),
        "the password is not repeated: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_adds_confirms_and_sends() {
    let people = serve("people.test", &[]).await;
    let agents = agent_server(&people, &[]).await;
    let person = people.new_address().await;
    let mut cli = client_harness::Cli::new(&agents.base);
    cli.create(&["create", "mail-task"]).await;

    let listed = cli.ok(&["contacts", "mail-task"]).await;
    assert_eq!(listed, json!({"contacts": [], "outbound_configured": true}));
    let added = cli.ok(&["contact", "mail-task", &person.email]).await;
    assert_eq!(added["contact"]["status"], "pending");
    let code = code_of(&person.wait_for("email.received", 1).await[0]);
    let wrong = cli
        .fails(
            &[
                "contact",
                "mail-task",
                &person.email,
                "--code",
                &other_code(&code),
            ],
            2,
            "invalid_code",
        )
        .await;
    assert_eq!(wrong["tries_left"], 4);
    let confirmed = cli
        .ok(&["contact", "mail-task", &person.email, "--code", &code])
        .await;
    assert_eq!(confirmed["contact"]["status"], "confirmed");

    let args = [
        "send",
        "mail-task",
        "--to",
        &person.email,
        "--subject",
        "From the CLI",
    ];
    let out = cli
        .run_with(&args, Some(&agents.base), Some(b"Line one\nLine two\n"))
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let first = out.json();
    assert_eq!(first["status"], "accepted");
    // The same command again: the default key is the message's hash, nothing is sent twice.
    let out = cli
        .run_with(&args, Some(&agents.base), Some(b"Line one\nLine two\n"))
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["duplicate"], true);
    assert_eq!(out.json()["event"], first["event"]);
    let mail = person.wait_for("email.received", 2).await[1].clone();
    assert_eq!(mail["data"]["subject"], "From the CLI");
    assert!(mail["data"]["text"]
        .as_str()
        .unwrap_or_default()
        .contains("Line two"));
    // Not a contact: exit 2.
    let out = cli
        .run_with(
            &[
                "send",
                "mail-task",
                "--to",
                "eve@people.test",
                "--subject",
                "Hi",
            ],
            Some(&agents.base),
            Some(b"x"),
        )
        .await;
    client_harness::check_failure(&out, 2, "contact_not_confirmed");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(person.events().await.len(), 2, "one code mail and one send");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_tools_add_confirm_and_send() {
    use agentaddress_blackbox::mcp::Mcp;
    let people = serve("people.test", &[]).await;
    let agents = agent_server(&people, &[]).await;
    let person = people.new_address().await;
    let mcp = Mcp::connect(&agents.base).await;
    let (a, _) = mcp.create(json!({"task_id": "mcp-mail"})).await;
    let with = |extra: Value| {
        let mut args = json!({"address_id": a.id, "read_token": a.token});
        if let (Some(m), Value::Object(e)) = (args.as_object_mut(), extra) {
            m.extend(e);
        }
        args
    };
    let listed = mcp.call("list_contacts", with(json!({}))).await;
    assert_eq!(listed.ok("list_contacts")["outbound_configured"], true);
    let added = mcp
        .call("add_contact", with(json!({"email": person.email})))
        .await;
    assert_eq!(added.ok("add_contact")["contact"]["status"], "pending");
    let code = code_of(&person.wait_for("email.received", 1).await[0]);
    mcp.call(
        "add_contact",
        with(json!({"email": person.email, "code": other_code(&code)})),
    )
    .await
    .expect_error("invalid_code", "a wrong code");
    let confirmed = mcp
        .call(
            "add_contact",
            with(json!({"email": person.email, "code": code})),
        )
        .await;
    assert_eq!(
        confirmed.ok("add_contact")["contact"]["status"],
        "confirmed"
    );
    let args = with(
        json!({"to": person.email, "subject": "Over MCP", "text": "Hello.",
                           "idempotency_key": "mcp-1"}),
    );
    let sent = mcp.call("send_email", args.clone()).await;
    assert_eq!(sent.ok("send_email")["status"], "accepted");
    let again = mcp.call("send_email", args).await;
    assert_eq!(again.ok("send_email")["duplicate"], true);
    mcp.call(
        "send_email",
        with(json!({"to": person.email, "subject": "No key", "text": "x"})),
    )
    .await
    .expect_error("invalid_request", "no idempotency_key");
    mcp.call(
        "send_email",
        with(
            json!({"to": "eve@people.test", "subject": "Hi", "text": "x", "idempotency_key": "k"}),
        ),
    )
    .await
    .expect_error("contact_not_confirmed", "a stranger");
    let mail = person.wait_for("email.received", 2).await[1].clone();
    assert_eq!(mail["data"]["subject"], "Over MCP");
    mcp.close().await;
}

/// An agent server relaying to `relay_url` (with `extra` flags) whose trace-level log goes to
/// `dir/NAME.log`: the server, its base URL and the log's path.
async fn logged_agent_server(
    dir: &std::path::Path, name: &str, relay_url: &str, extra: &[&str],
) -> (Child, String, std::path::PathBuf, BufReader<ChildStdout>) {
    let log_path = dir.join(format!("{name}.log"));
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut args = vec![
        "--email-domain",
        "agents.test",
        "--email-from",
        "mail@agents.test",
        "--smtp-relay",
        relay_url,
    ];
    args.extend_from_slice(extra);
    let (child, base, stdout) = common::spawn_serve_with(
        &dir.join(format!("{name}.db")),
        "127.0.0.1:0",
        &args,
        "trace",
        std::process::Stdio::from(log),
    )
    .await;
    (child, base, log_path, stdout)
}

/// The log of a stopped server.
async fn stop_and_read_log(mut child: Child, log_path: &std::path::Path) -> String {
    let _ = child.kill().await;
    let _ = child.wait().await;
    std::fs::read_to_string(log_path).expect("read log")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codes_and_relay_passwords_are_never_logged() {
    let people = serve("people.test", &[]).await;
    let person = people.new_address().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let password_file = dir.path().join("relay-password");
    std::fs::write(&password_file, "pw-Zq8xVt3Lm0\n").unwrap();
    // A relay user with a password: B's door offers no AUTH, so every mail fails, and the
    // failures are logged.
    let password_arg = password_file.to_str().unwrap_or_default();
    let (child, base, log_path, _stdout) = logged_agent_server(
        dir.path(),
        "a",
        &format!("smtp://mailer@{}", people.smtp),
        &["--smtp-relay-password-file", password_arg],
    )
    .await;
    let a = create(&http(), &base).await;
    let (status, v) = a.add_contact(&person.email).await;
    assert!(status.is_server_error() || status == 400, "{status} {v}");
    let text = stop_and_read_log(child, &log_path).await;
    assert!(
        text.contains("email/contacts"),
        "the log records the request"
    );
    assert!(
        !text.contains("pw-Zq8xVt3Lm0"),
        "the relay password is in the log"
    );

    // A code that reaches its contact is never in the agent server's log either.
    let (child, base, log_path, _stdout) =
        logged_agent_server(dir.path(), "b", &format!("smtp://{}", people.smtp), &[]).await;
    let agent = create(&http(), &base).await;
    confirmed(&agent, &person).await;
    let code = code_of(
        person
            .wait_for("email.received", 1)
            .await
            .last()
            .unwrap_or(&Value::Null),
    );
    let text = stop_and_read_log(child, &log_path).await;
    assert!(
        text.contains("contact confirmed"),
        "the log records the confirmation"
    );
    // As a word of its own: a timestamp's microseconds may hold the same six digits.
    let as_word = text.match_indices(code.as_str()).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + code.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_digit() || c == '.')
            && !after.is_some_and(|c| c.is_ascii_digit())
    });
    assert!(!as_word, "the code {code} is in the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_speaks_starttls_and_checks_the_certificate() {
    let certs = tempfile::tempdir().expect("temp dir");
    let ck =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("rcgen");
    let cert = certs.path().join("cert.pem");
    let key = certs.path().join("key.pem");
    std::fs::write(&cert, ck.cert.pem()).expect("write cert");
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let people = serve(
        "people.test",
        &["--smtp-tls-cert", &cert, "--smtp-tls-key", &key],
    )
    .await;
    let port = people.port();
    let url = format!("smtp://localhost:{port}?tls=required");
    let person = people.new_address().await;

    // The relay's certificate is self-signed: refused without the CA file (503, retry later)…
    let strict = serve(
        "agents.test",
        &["--email-from", "mail@agents.test", "--smtp-relay", &url],
    )
    .await;
    let a = strict.new_address().await;
    let (status, v) = a.add_contact(&person.email).await;
    assert_eq!(status, 503, "{v}");
    // … and trusted with it: the code mail goes over STARTTLS.
    let trusting = serve(
        "agents.test",
        &[
            "--email-from",
            "mail@agents.test",
            "--smtp-relay",
            &url,
            "--smtp-relay-ca-file",
            &cert,
        ],
    )
    .await;
    let agent = trusting.new_address().await;
    confirmed(&agent, &person).await;
    assert_eq!(person.wait_for("email.received", 1).await.len(), 1);
}
