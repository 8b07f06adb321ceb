//! The Python client (`clients/python`, docs/API.md §23), tested as its users get it:
//! `scripts/client-python` (which `scripts/test` runs first) builds the wheel and installs it
//! into a clean venv, and these tests run, with that venv's Python, the package's pytest suite
//! (against real `agentaddress serve`s its fixtures start: this crate's binary), the README's
//! examples (`clients/python/smoke.py`), and `mypy --strict` and `ruff` over the package's
//! source: three tests, which nextest runs side by side.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn package() -> PathBuf {
    root().join("clients/python")
}

/// The clean venv's Python, with the wheel of the current source installed: a venv made by
/// `scripts/client-python --install-only` is required (this test does not download
/// anything); the script is run again here only to rebuild the wheel when the source changed
/// since (fast, no network, serialised by its lock).
fn venv_python() -> PathBuf {
    let root = root();
    let python = root.join(".cache/client-python-venv/bin/python");
    let tools = root.join(".cache/client-python-tools/bin/python");
    assert!(
        python.exists() && tools.exists(),
        "{} is missing: run scripts/client-python --install-only (scripts/test does)",
        python.display()
    );
    let out = Command::new(root.join("scripts/client-python"))
        .arg("--install-only")
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/client-python --install-only");
    assert!(
        out.status.success(),
        "scripts/client-python --install-only failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    python
}

fn show(what: &str, out: &Output) -> String {
    format!(
        "{what}: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A command run from a temporary directory outside the package (so the source tree is never
/// on `sys.path`), with the server binary in `AGENTADDRESS_BIN` and none of the user's
/// agentaddress settings.
fn python_command(python: &Path, cwd: &Path) -> Command {
    let mut cmd = Command::new(python);
    cmd.current_dir(cwd)
        .env("AGENTADDRESS_BIN", env!("CARGO_BIN_EXE_agentaddress"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONSAFEPATH", "1")
        .env_remove("PYTHONPATH")
        .env_remove("AGENTADDRESS_URL")
        .env_remove("AGENTADDRESS_HOME")
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null());
    cmd
}

/// The package's pytest suite (`clients/python/tests`: the whole surface, the credentials
/// files shared with the CLI both ways, hostile answers, a server restart mid-iteration, the
/// models against `/openapi.json`, wakes, the framework adapters) with the clean venv: the
/// tests import the installed wheel (`--import-mode=importlib` puts no test directory on
/// `sys.path`, the working directory is outside the package, and one test checks that the
/// package comes from site-packages). Its fixtures start `serve` themselves.
#[test]
fn python_client_pytest() {
    let python = venv_python();
    let dir = tempfile::tempdir().expect("temp dir");
    let tests = package().join("tests");
    let out = python_command(&python, dir.path())
        .args([
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--import-mode=importlib",
            "-q",
            "-rfE",
            "--durations=5",
            "--rootdir",
        ])
        .arg(&tests)
        .arg(&tests)
        .output()
        .expect("run pytest");
    let text = show("pytest clients/python/tests", &out);
    assert!(out.status.success(), "{text}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(" passed") && !stdout.contains(" skipped"),
        "{text}"
    );
}

/// Every example of clients/python/README.md, run in order against a real `serve`.
#[test]
fn python_client_readme_examples_run() {
    let python = venv_python();
    let dir = tempfile::tempdir().expect("temp dir");
    let out = python_command(&python, dir.path())
        .arg(package().join("smoke.py"))
        .arg(package().join("README.md"))
        .output()
        .expect("run smoke.py");
    let text = show("smoke.py", &out);
    assert!(out.status.success(), "{text}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("examples of README.md ran"),
        "{text}"
    );
}

/// `mypy --strict` over the package's source (its imports — httpx, the Agents SDK, LangGraph —
/// resolved in the clean venv), then `ruff check` and `ruff format --check` over the package,
/// its tests and scripts.
#[test]
fn python_client_typechecks_and_lints() {
    let python = venv_python();
    let tools = root().join(".cache/client-python-tools/bin");
    let cache = root().join(".cache/client-python-mypy");
    let pkg = package();
    let out = Command::new(tools.join("mypy"))
        .current_dir(&pkg)
        .args([
            "--strict",
            "--python-version",
            "3.10",
            "--python-executable",
        ])
        .arg(&python)
        .arg("--cache-dir")
        .arg(&cache)
        .arg("src/agentaddress_client")
        .stdin(Stdio::null())
        .output()
        .expect("run mypy");
    let text = show("mypy --strict", &out);
    assert!(out.status.success(), "{text}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Success: no issues found"),
        "{text}"
    );
    for args in [
        &["check", "--no-cache", "src", "tests", "smoke.py", "bench"][..],
        &[
            "format",
            "--check",
            "--no-cache",
            "src",
            "tests",
            "smoke.py",
            "bench",
        ][..],
    ] {
        let out = Command::new(tools.join("ruff"))
            .current_dir(&pkg)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run ruff");
        assert!(
            out.status.success(),
            "{}",
            show(&format!("ruff {args:?}"), &out)
        );
    }
}
