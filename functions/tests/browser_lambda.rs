//! The pages (docs/API.md §13) in headless Chromium against the local Lambda stack: the same
//! browser scenarios as against `agentaddress serve`, served by the `service` function (page,
//! assets, discovery) and the API's functions. Screenshots go to
//! `target/screenshots/lambda-*.png`.
//!
//! `scripts/test` starts the stack and passes `AGENTADDRESS_LAMBDA_URL` and
//! `AGENTADDRESS_TEST_INGEST_SECRET`; without them these tests fail loudly, never skip.

use agentaddress_blackbox::Client;
use agentaddress_browser::scenarios::{self, Deployment};

use agentaddress_blackbox::stack_env as env;

fn with_stack<'a>(client: &'a Client, secret: &'a str) -> Deployment<'a> {
    Deployment {
        client,
        ingest_secret: secret,
        label: "lambda",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_shows_deliveries_live_and_acks_them() {
    let (c, secret) = (
        Client::behind_gateway(&env("AGENTADDRESS_LAMBDA_URL")),
        env("AGENTADDRESS_TEST_INGEST_SECRET"),
    );
    scenarios::live_feed_ack_and_state(&with_stack(&c, &secret)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_preview_their_data_on_one_line() {
    let (c, secret) = (
        Client::behind_gateway(&env("AGENTADDRESS_LAMBDA_URL")),
        env("AGENTADDRESS_TEST_INGEST_SECRET"),
    );
    scenarios::rows_preview_their_data(&with_stack(&c, &secret)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_and_a_gone_address_are_explained() {
    let (c, secret) = (
        Client::behind_gateway(&env("AGENTADDRESS_LAMBDA_URL")),
        env("AGENTADDRESS_TEST_INGEST_SECRET"),
    );
    scenarios::wrong_token_and_gone_address(&with_stack(&c, &secret)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_events_and_mail_render_as_text() {
    let (c, secret) = (
        Client::behind_gateway(&env("AGENTADDRESS_LAMBDA_URL")),
        env("AGENTADDRESS_TEST_INGEST_SECRET"),
    );
    scenarios::hostile_content_is_text(&with_stack(&c, &secret)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_works_on_a_phone_with_the_keyboard_only() {
    let (c, secret) = (
        Client::behind_gateway(&env("AGENTADDRESS_LAMBDA_URL")),
        env("AGENTADDRESS_TEST_INGEST_SECRET"),
    );
    scenarios::phone_and_keyboard(&with_stack(&c, &secret)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_carry_security_headers_and_discovery_names_everything() {
    let c = Client::behind_gateway(&env("AGENTADDRESS_LAMBDA_URL"));
    let weight = scenarios::headers_and_discovery(&c).await;
    assert!(weight > 1000, "the page has content: {weight} bytes");
}

/// The request's routes and page, served by the `requests` function (docs/API.md §12).
fn stack() -> (Client, String) {
    (
        Client::behind_gateway(&env("AGENTADDRESS_LAMBDA_URL")),
        env("AGENTADDRESS_TEST_INGEST_SECRET"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_answers_a_request_while_the_agent_waits() {
    let (c, secret) = stack();
    agentaddress_browser::requests::a_person_answers_while_the_agent_waits(&with_stack(
        &c, &secret,
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_page_names_the_asker_in_the_readers_time() {
    let (c, secret) = stack();
    agentaddress_browser::requests::the_asker_and_the_readers_time(&with_stack(&c, &secret)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_browsers_answering_at_once_record_one_answer() {
    let (c, secret) = stack();
    agentaddress_browser::requests::two_browsers_answer_at_once(&with_stack(&c, &secret)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_request_renders_as_text() {
    let (c, secret) = stack();
    agentaddress_browser::requests::hostile_request_is_text(&with_stack(&c, &secret)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_answered_on_a_phone_with_the_keyboard_only() {
    let (c, secret) = stack();
    agentaddress_browser::requests::phone_and_keyboard(&with_stack(&c, &secret)).await;
}

/// `/` in the browser, served by the `service` function (docs/API.md §13); screenshots
/// `lambda-home-{desktop,phone}.png`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_door_links_everything_on_a_desktop_and_a_phone() {
    let (c, secret) = stack();
    agentaddress_browser::home::front_door(&with_stack(&c, &secret)).await;
}

/// A one-time sign-in link (docs/API.md §13, "Sign-in links"), served by the `address`
/// function: signed in once, without the token in any URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_link_signs_the_viewer_in_once() {
    let (c, secret) = (
        Client::behind_gateway(&env("AGENTADDRESS_LAMBDA_URL")),
        env("AGENTADDRESS_TEST_INGEST_SECRET"),
    );
    let a = c.new_address().await;
    let link = scenarios::viewer_link(&c, &a).await;
    scenarios::sign_in_link(&with_stack(&c, &secret), &a, &link).await;
}
