//! The pages (docs/API.md §13) in headless Chromium against `agentaddress serve`: the browser
//! scenarios of `agentaddress-browser` (which run against the Lambda stack too), the 429
//! message (a server allowing few polls), and the figures of docs/PERFORMANCE.md ("Pages").
//! Screenshots go to `target/screenshots/serve-*.png`.

mod client_harness;
mod common;

use agentaddress_blackbox::Client;
use agentaddress_browser::scenarios::{self, Deployment};

const SECRET: &str = "ingest-secret-for-the-browser-suite";

struct Serve {
    _child: tokio::process::Child,
    client: Client,
    _dir: tempfile::TempDir,
}

async fn serve(extra: &[&str]) -> Serve {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut args = vec!["--email-ingest-secret", SECRET];
    args.extend_from_slice(extra);
    let (child, base) =
        common::spawn_serve(&dir.path().join("pages.db"), "127.0.0.1:0", &args).await;
    Serve {
        _child: child,
        client: Client::new(&base),
        _dir: dir,
    }
}

fn deployment(s: &Serve) -> Deployment<'_> {
    Deployment {
        client: &s.client,
        ingest_secret: SECRET,
        label: "serve",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_shows_deliveries_live_and_acks_them() {
    let s = serve(&[]).await;
    scenarios::live_feed_ack_and_state(&deployment(&s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_preview_their_data_on_one_line() {
    let s = serve(&[]).await;
    scenarios::rows_preview_their_data(&deployment(&s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_and_a_gone_address_are_explained() {
    let s = serve(&[]).await;
    scenarios::wrong_token_and_gone_address(&deployment(&s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_feed_is_explained_and_waited_out() {
    let s = serve(&["--polls-per-minute", "2"]).await;
    scenarios::rate_limit_is_explained(&deployment(&s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_events_and_mail_render_as_text() {
    let s = serve(&[]).await;
    scenarios::hostile_content_is_text(&deployment(&s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_shows_its_own_text_and_the_whole_message_on_a_click() {
    let s = serve(&[]).await;
    scenarios::mail_shows_its_reply_first(&deployment(&s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_works_on_a_phone_with_the_keyboard_only() {
    let s = serve(&[]).await;
    scenarios::phone_and_keyboard(&deployment(&s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_carry_security_headers_and_discovery_names_everything() {
    let s = serve(&[]).await;
    let weight = scenarios::headers_and_discovery(&s.client).await;
    assert!(weight > 1000, "the page has content: {weight} bytes");
}

/// A 5 MB attachment (the size that on AWS comes from a link: functions/tests/email_lambda.rs)
/// is saved from the page with its bytes; serve answers them itself, so through a Blob URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attachment_is_saved_from_the_page() {
    use agentaddress_blackbox::email;
    let s = serve(&[]).await;
    let a = s.client.new_address().await;
    let to = email::email_of(&a);
    let pdf: Vec<u8> = (0..5_000_000u32).map(|n| (n % 251) as u8).collect();
    let raw = email::message(&format!("{}@example.com", email::unique("page")), &to, &pdf);
    let r = email::ingest(&s.client, SECRET, &[to.as_str()], &raw).await;
    r.expect_status(200, "ingest the mail");
    scenarios::attachment_is_saved(&s.client, &a, "serve", &pdf, false).await;
}

/// Prints the figures of docs/PERFORMANCE.md ("Pages"); asserts only that they were measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measure_page_weight_first_render_and_delivery_delay() {
    let s = serve(&["--polls-per-minute", "100000"]).await;
    let f = scenarios::measure(&s.client, 10, 100).await;
    let q = |v: &[f64], p: f64| scenarios::quantile(v, p);
    println!(
        "pages: /inbox weighs {} bytes (HTML + JS + CSS); first contentful paint p50 {:.0} ms \
         (max {:.0} ms, {} loads reported one), DOMContentLoaded p50 {:.0} ms over {} loads; webhook to row p50 \
         {:.1} ms, p99 {:.1} ms, max {:.1} ms over {} deliveries",
        f.weight,
        q(&f.first_paint_ms, 0.5),
        q(&f.first_paint_ms, 1.0),
        f.first_paint_ms.len(),
        q(&f.dom_ready_ms, 0.5),
        f.dom_ready_ms.len(),
        q(&f.delivery_ms, 0.5),
        q(&f.delivery_ms, 0.99),
        q(&f.delivery_ms, 1.0),
        f.delivery_ms.len(),
    );
    assert_eq!(f.delivery_ms.len(), 100);
    assert!(
        !f.first_paint_ms.is_empty(),
        "Chromium reported a first contentful paint"
    );
    assert!(
        f.delivery_ms.iter().all(|d| d.is_finite() && *d > 0.0),
        "{:?}",
        f.delivery_ms
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_answers_a_request_while_the_agent_waits() {
    let s = serve(&[]).await;
    agentaddress_browser::requests::a_person_answers_while_the_agent_waits(&deployment(&s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_page_names_the_asker_in_the_readers_time() {
    let s = serve(&[]).await;
    agentaddress_browser::requests::the_asker_and_the_readers_time(&deployment(&s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_browsers_answering_at_once_record_one_answer() {
    let s = serve(&[]).await;
    agentaddress_browser::requests::two_browsers_answer_at_once(&deployment(&s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_request_renders_as_text() {
    let s = serve(&[]).await;
    agentaddress_browser::requests::hostile_request_is_text(&deployment(&s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_answered_on_a_phone_with_the_keyboard_only() {
    let s = serve(&[]).await;
    agentaddress_browser::requests::phone_and_keyboard(&deployment(&s)).await;
}

/// `/` in the browser (docs/API.md §13): every link answers, the MCP line and the version, the
/// JSON index for a program, the icon, `/inbox/`; screenshots `serve-home-{desktop,phone}.png`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_door_links_everything_on_a_desktop_and_a_phone() {
    let s = serve(&[]).await;
    agentaddress_browser::home::front_door(&deployment(&s)).await;
}

/// The link of `agentaddress inbox TASK --print` (docs/CLI.md), for an address made with the
/// API and adopted with `import`, opened in Chromium: the viewer signed in without the token in
/// any URL, once (`scenarios::sign_in_link`; screenshots `serve-inbox-link-*.png`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_link_signs_the_viewer_in_once() {
    let s = serve(&[]).await;
    let a = s.client.new_address().await;
    let mut cli = client_harness::Cli::new(&s.client.base);
    let file = cli.scratch("token");
    std::fs::write(&file, &a.token).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let file = file.display().to_string();
    cli.ok(&["import", "viewer", "--id", &a.id, "--token-file", &file])
        .await;
    let out = cli.ok(&["inbox", "viewer", "--print"]).await;
    let link = out["viewer_url"]
        .as_str()
        .unwrap_or_else(|| panic!("no viewer_url: {out}"))
        .to_owned();
    scenarios::sign_in_link(&deployment(&s), &a, &link).await;
    cli.assert_never_printed(&a.token);
}
