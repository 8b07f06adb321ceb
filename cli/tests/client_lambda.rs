//! The command-line client against the local Lambda stack (`scripts/lambda-local`: the real
//! function binaries under `cargo lambda watch` over DynamoDB Local): the agent's whole
//! workflow, as against `agentaddress serve` (cli/tests/client.rs).
//!
//! `scripts/test` starts the stack and passes `AGENTADDRESS_LAMBDA_URL`; without it this test
//! fails loudly, never skips.

mod client_harness;

use client_harness::{workflow, Cli};

fn lambda_url() -> String {
    agentaddress_blackbox::stack_env("AGENTADDRESS_LAMBDA_URL")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_workflow_on_lambda() {
    let mut cli = Cli::new(&lambda_url());
    workflow(&mut cli, "lambda-task").await;
    // The unreachable and error paths do not depend on the deployment; one server error code
    // from the Lambda functions, with its exit code:
    cli.fails(&["state", "get", "lambda-task", "absent"], 4, "not_found")
        .await;
    let token = cli.token("lambda-task");
    cli.assert_never_printed(&token);
}
