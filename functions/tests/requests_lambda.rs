//! Requests for a person on the Lambda stack (docs/API.md §12): the `requests` function serves
//! the agent's routes and the person's page over DynamoDB, and the `events` function's long poll
//! returns the answer. The same scenarios run against `agentaddress serve` (cli/tests/blackbox.rs).
//!
//! `scripts/test` starts the stack and passes `AGENTADDRESS_LAMBDA_URL`; without it these tests
//! fail loudly, never skip.

use agentaddress_blackbox::requests;

use agentaddress_blackbox::stack_client as client;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_person_answers_while_the_agent_waits() {
    requests::a_person_answers_while_the_agent_waits(&client()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_answers_record_one() {
    requests::concurrent_answers_record_one(&client(), 12).await;
}
