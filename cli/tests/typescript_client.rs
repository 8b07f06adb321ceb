//! The TypeScript client (clients/typescript, npm package `agentaddress-client`), built,
//! packed and installed from its tarball into a clean directory by scripts/client-typescript
//! (which `scripts/test` runs first): its sources and tests pass `tsc --strict`, its
//! `node --test` suite passes from that install (the tests import `agentaddress-client` and
//! `agentaddress-client/ai` by name, and each starts its own `agentaddress serve` from this
//! build), and the README's examples run (the second run 2 long-polls its full 25 s).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The clean install of the packed package, checked to be there and current.
fn app_dir() -> PathBuf {
    let root = root();
    let app = root.join(".cache/client-typescript-app");
    let check = std::process::Command::new(root.join("scripts/client-typescript"))
        .arg("--check")
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/client-typescript --check");
    assert!(
        check.status.success(),
        "{} is missing or out of date: run scripts/client-typescript --install-only (scripts/test does)\n{}",
        app.display(),
        String::from_utf8_lossy(&check.stderr)
    );
    app
}

/// A fresh directory inside the install holding the package's tests (so that their imports
/// resolve to the installed tarball), removed when dropped.
fn tests_in_app() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("run-")
        .tempdir_in(app_dir())
        .expect("a directory in the install");
    let tests = root().join("clients/typescript/test");
    for entry in std::fs::read_dir(&tests).expect("read clients/typescript/test") {
        let path = entry.expect("a test file").path();
        if path.extension().is_some_and(|e| e == "mjs") {
            std::fs::copy(&path, dir.path().join(path.file_name().expect("a name")))
                .expect("copy a test file");
        }
    }
    dir
}

async fn run(mut command: tokio::process::Command, what: &str, limit: u64) -> (String, String) {
    command
        .env("AGENTADDRESS_BIN", env!("CARGO_BIN_EXE_agentaddress"))
        .env_remove("AGENTADDRESS_URL")
        .env_remove("AGENTADDRESS_HOME")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(limit), command.output())
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {limit} s"))
        .unwrap_or_else(|e| panic!("run {what}: {e} (is node installed?)"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

/// `tsc --strict --noEmit` of the sources, then of the sources with the tests and the bench
/// (JavaScript checked with `checkJs`), with clients/typescript's pinned TypeScript.
#[tokio::test]
async fn typescript_client_type_checks() {
    app_dir();
    let pkg = root().join("clients/typescript");
    let tsc = pkg.join("node_modules/.bin/tsc");
    for project in ["tsconfig.json", "tsconfig.test.json"] {
        let mut command = tokio::process::Command::new(&tsc);
        command
            .args(["--strict", "--noEmit", "-p", project])
            .current_dir(&pkg);
        run(command, &format!("tsc --strict --noEmit -p {project}"), 300).await;
    }
}

/// The package's `node --test` suite, from the clean install, against real `serve`s.
#[tokio::test]
async fn typescript_client_tests_pass_from_the_packed_tarball() {
    let dir = tests_in_app();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .expect("read the tests")
        .map(|e| e.expect("an entry").path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".test.mjs"))
        })
        .collect();
    files.sort();
    assert!(files.len() >= 5, "the tests: {files:?}");
    let mut command = tokio::process::Command::new("node");
    command
        .arg("--test")
        .arg("--test-reporter=spec")
        .args(&files)
        .current_dir(dir.path());
    let (stdout, _) = run(command, "node --test (clients/typescript/test)", 600).await;
    assert!(stdout.contains("fail 0"), "{stdout}");
}

/// The README's examples (run 1 and run 2, the wake receiver, the Vercel AI SDK tools with a
/// mock model), as the installed package's README shows them.
#[tokio::test]
async fn typescript_client_readme_examples_run() {
    let dir = tests_in_app();
    let mut command = tokio::process::Command::new("node");
    command.arg("smoke.mjs").current_dir(dir.path());
    let (stdout, stderr) = run(command, "node smoke.mjs (the README's examples)", 300).await;
    assert!(
        stdout.lines().any(|l| l == "smoke: ok"),
        "{stdout}\n{stderr}"
    );
}
