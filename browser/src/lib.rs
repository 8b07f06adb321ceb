//! The pages of docs/API.md §13 in a real browser: Debian's `chromium`, driven over WebDriver
//! by `chromedriver` (the `chromium-driver` package; `scripts/test` installs both), headless.
//! Like the black-box suite it needs only a deployment's base URL, so the same scenarios
//! ([`scenarios`]) run against `agentaddress serve` and against the Lambda stack.
//!
//! Each [`Browser`] starts its own `chromedriver` on a free port and ends it when dropped.
//! Without Chromium the tests fail, saying how to install it: they never skip.
#![forbid(unsafe_code)]

pub mod home;
pub mod requests;
pub mod scenarios;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client as WebDriver, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{json, Value};
use tokio::process::{Child, Command};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// What a missing browser means, and how to get it.
fn install_hint() -> String {
    format!(
        "the browser tests need Debian's chromium and chromium-driver ({CHROMIUM}, \
         {CHROMEDRIVER}): `apt-get install -y chromium chromium-driver` (scripts/test installs \
         them)"
    )
}

/// A window size.
#[derive(Debug, Clone, Copy)]
pub struct Viewport {
    pub width: u32,
    pub height: u32,
}

pub const DESKTOP: Viewport = Viewport {
    width: 1280,
    height: 900,
};
/// A phone held upright (an iPhone 14's CSS pixels).
pub const PHONE: Viewport = Viewport {
    width: 390,
    height: 844,
};

/// A headless Chromium session and the chromedriver that drives it.
pub struct Browser {
    pub wd: WebDriver,
    driver: Child,
    /// Where Chromium saves downloads (`target/browser-downloads/{port}`), removed on drop.
    pub downloads: PathBuf,
}

impl Browser {
    /// Starts chromedriver on a free port and a headless Chromium of `viewport`.
    pub async fn start(viewport: Viewport) -> Browser {
        for path in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                std::path::Path::new(path).exists(),
                "{path} is missing: {}",
                install_hint()
            );
        }
        let mut last = String::new();
        // A free port may be taken between asking for it and chromedriver binding it: try again.
        for _ in 0..5 {
            let port = free_port();
            // Its own process group, with the browser it starts: see `Drop`.
            let mut driver = Command::new(CHROMEDRIVER)
                .arg(format!("--port={port}"))
                .process_group(0)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {CHROMEDRIVER}: {e}; {}", install_hint()));
            let url = format!("http://127.0.0.1:{port}");
            if !ready(&url, &mut driver).await {
                last = format!("chromedriver on port {port} did not become ready");
                let _ = driver.kill().await;
                continue;
            }
            let downloads = screenshot_dir()
                .with_file_name("browser-downloads")
                .join(port.to_string());
            let _ = std::fs::remove_dir_all(&downloads);
            std::fs::create_dir_all(&downloads)
                .unwrap_or_else(|e| panic!("create {}: {e}", downloads.display()));
            let mut options = json!({
                "binary": CHROMIUM,
                "prefs": {
                    "download.default_directory": downloads.to_string_lossy(),
                    "download.prompt_for_download": false,
                },
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
                    format!("--window-size={},{}", viewport.width.max(500), viewport.height),
                ],
            });
            // A window is at least 500 px wide: a phone's screen is emulated instead.
            if viewport.width < 500 {
                options["mobileEmulation"] = json!({"deviceMetrics": {
                    "width": viewport.width, "height": viewport.height, "pixelRatio": 2.0,
                    "mobile": true, "touch": true,
                }});
            }
            let caps = json!({
                "browserName": "chrome",
                "goog:loggingPrefs": {"browser": "ALL"},
                "goog:chromeOptions": options,
            });
            let caps = caps.as_object().cloned().unwrap_or_default();
            let mut builder = ClientBuilder::new(HttpConnector::new());
            builder.capabilities(caps);
            match builder.connect(&url).await {
                Ok(wd) => {
                    return Browser {
                        wd,
                        driver,
                        downloads,
                    }
                }
                Err(e) => {
                    last = format!("cannot start a Chromium session: {e}; {}", install_hint());
                    let _ = driver.kill().await;
                }
            }
        }
        panic!("{last}");
    }

    /// Opens `url` and waits for the page's `load` event.
    pub async fn open(&self, url: &str) {
        self.wd
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("open {url}: {e}"));
    }

    /// Opens `url` and checks that every style sheet it links has arrived: a page laid out
    /// without its sheet is wider than a phone and unstyled, and the test would fail far from
    /// the cause. A load whose sheet did not arrive (the local Lambda stack's gateway emulator
    /// now and then answers an asset request with a 500 of its own under load) is said on
    /// stderr with what the page fetched, and loaded again, twice at most.
    pub async fn open_styled(&self, url: &str) {
        const STYLED: &str = "return [...document.querySelectorAll('link[rel=stylesheet]')]\
            .every(l => { try { return !!l.sheet && l.sheet.cssRules.length > 0 } \
                          catch (e) { return false } })";
        for attempt in 1..=3 {
            self.open(url).await;
            if self.js(STYLED, vec![]).await == Value::Bool(true) {
                return;
            }
            let fetched = self.resources_fetched().await;
            assert!(
                attempt < 3,
                "{url}: a style sheet did not arrive in three loads; fetched {fetched}"
            );
            eprintln!("{url}: a style sheet did not arrive (fetched {fetched}); loading it again");
        }
    }

    /// What the page fetched, each with its HTTP status and duration: said when a page did not come up whole.
    pub async fn resources_fetched(&self) -> Value {
        self.js(
            "return performance.getEntriesByType('resource')\
             .map(r => r.name + ' ' + (r.responseStatus ?? '?') + ' ' + Math.round(r.duration) + ' ms')",
            vec![],
        )
        .await
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page.
    pub async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.wd
            .execute(script, args)
            .await
            .unwrap_or_else(|e| panic!("run {script:?} in the page: {e}"))
    }

    /// Waits up to `within` until `script` (given `args`) returns a truthy value; returns it,
    /// or panics with `what`.
    pub async fn until(&self, within: Duration, what: &str, script: &str, args: &[Value]) -> Value {
        match self.try_until(within, script, args).await {
            Some(v) => v,
            None => panic!(
                "{what}: not within {within:?}; the page says: {}",
                self.page_text().await
            ),
        }
    }

    /// [`Browser::until`], answering `None` when `within` passes.
    pub async fn try_until(&self, within: Duration, script: &str, args: &[Value]) -> Option<Value> {
        let deadline = Instant::now() + within;
        loop {
            let v = self.js(script, args.to_vec()).await;
            let truthy =
                !matches!(&v, Value::Null | Value::Bool(false)) && v != json!(0) && v != json!("");
            if truthy {
                return Some(v);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The visible text of the page, for failure messages.
    pub async fn page_text(&self) -> String {
        self.wd
            .execute(
                "return document.body ? document.body.innerText : ''",
                vec![],
            )
            .await
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// Types `text` into the element `css`.
    pub async fn type_into(&self, css: &str, text: &str) {
        self.wd
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("find {css}: {e}"))
            .send_keys(text)
            .await
            .unwrap_or_else(|e| panic!("type into {css}: {e}"));
    }

    /// Clicks the element `css`.
    pub async fn click(&self, css: &str) {
        self.wd
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("find {css}: {e}"))
            .click()
            .await
            .unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    /// Sends keys to whatever has the focus (keyboard-only use).
    pub async fn keys(&self, keys: &str) {
        self.wd
            .active_element()
            .await
            .expect("the focused element")
            .send_keys(keys)
            .await
            .expect("send keys");
    }

    /// Saves a screenshot as `target/screenshots/{name}.png`; returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self
            .wd
            .screenshot()
            .await
            .unwrap_or_else(|e| panic!("screenshot {name}: {e}"));
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }

    /// The browser's console log since the last call (chromedriver's `goog:loggingPrefs`).
    pub async fn console(&self) -> Vec<Value> {
        match self.wd.issue_cmd(BrowserLog).await {
            Ok(Value::Array(entries)) => entries,
            Ok(other) => panic!("the browser log is not a list: {other}"),
            Err(e) => panic!("read the browser log: {e}"),
        }
    }

    /// Runs the Chrome DevTools Protocol command `cmd` with `params` in the page (chromedriver's
    /// `goog/cdp/execute`), e.g. `Emulation.setTimezoneOverride` to read a page as a person in
    /// another time zone would; returns its result.
    pub async fn cdp(&self, cmd: &str, params: Value) -> Value {
        self.wd
            .issue_cmd(Cdp {
                cmd: cmd.to_owned(),
                params,
            })
            .await
            .unwrap_or_else(|e| panic!("CDP {cmd}: {e}"))
    }

    /// Panics when the console reports a Content-Security-Policy violation: our own page and
    /// assets never cause one, and markup smuggled in by an event would.
    pub async fn assert_no_csp_violation(&self, what: &str) {
        let violations: Vec<Value> = self
            .console()
            .await
            .into_iter()
            .filter(|e| {
                let m = e["message"].as_str().unwrap_or("");
                m.contains("Content Security Policy") || m.contains("Content-Security-Policy")
            })
            .collect();
        assert!(
            violations.is_empty(),
            "{what}: CSP violations: {violations:?}"
        );
    }

    /// Waits up to `within` for Chromium to have saved `name` whole (`len` bytes; a download in
    /// progress is a `.crdownload` file beside it) in [`Browser::downloads`]; returns its bytes.
    pub async fn downloaded(&self, within: Duration, name: &str, len: usize) -> Vec<u8> {
        let path = self.downloads.join(name);
        let deadline = Instant::now() + within;
        loop {
            if let Ok(bytes) = std::fs::read(&path) {
                if bytes.len() == len {
                    return bytes;
                }
            }
            if Instant::now() >= deadline {
                let listing: Vec<String> = std::fs::read_dir(&self.downloads)
                    .map(|d| {
                        d.filter_map(|e| e.ok())
                            .map(|e| e.file_name().to_string_lossy().into_owned())
                            .collect()
                    })
                    .unwrap_or_default();
                panic!(
                    "{name} ({len} bytes) was not saved within {within:?}; the download folder \
                     holds {listing:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Ends the session (Chromium quits); dropping the browser then ends chromedriver.
    pub async fn close(self) {
        let _ = self.wd.clone().close().await;
    }
}

/// A test that panics never reaches [`Browser::close`]: chromedriver and the Chromium it
/// started (its process group) are killed, so no browser outlives its test.
impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(pid) = self.driver.id() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.downloads);
    }
}

/// `POST /session/{id}/se/log {"type": "browser"}`: chromedriver's console log.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self, base_url: &url::Url, session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!("session/{}/se/log", session_id.unwrap_or("")))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type":"browser"}"#.to_owned()))
    }
}

/// `POST /session/{id}/goog/cdp/execute {"cmd", "params"}`: a DevTools command.
#[derive(Debug)]
struct Cdp {
    cmd: String,
    params: Value,
}

impl WebDriverCompatibleCommand for Cdp {
    fn endpoint(
        &self, base_url: &url::Url, session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/goog/cdp/execute",
            session_id.unwrap_or("")
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        let body = json!({"cmd": self.cmd, "params": self.params});
        (http::Method::POST, Some(body.to_string()))
    }
}

/// `target/screenshots`, beside the test binaries (`target/debug/deps/…`).
pub fn screenshot_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(|p| p.to_path_buf()))
        .unwrap_or_else(|| PathBuf::from("target"))
        .join("screenshots")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
}

/// Whether chromedriver at `url` answers `/status` within 10 s.
async fn ready(url: &str, driver: &mut Child) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = driver.try_wait() {
            return false;
        }
        let addr = url.trim_start_matches("http://");
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}
