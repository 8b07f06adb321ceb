//! The browser scenarios, for any deployment: the inbox viewer's live feed, acks and state; its
//! 401, 410 and 429 messages; hostile events and mail shown as text; a reply's own text first;
//! a phone and a keyboard; the pages' headers and the discovery documents; and the figures of
//! docs/PERFORMANCE.md.
//! Screenshots of each state go to `target/screenshots/{label}-….png`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agentaddress_blackbox::email::{email_of, ingest, unique};
use agentaddress_blackbox::{Address, Client};
use serde_json::{json, Value};

use crate::{Browser, DESKTOP, PHONE};

/// A deployment under test.
pub struct Deployment<'a> {
    pub client: &'a Client,
    /// Its raw-MIME webhook door's secret (docs/API.md §10), to send mail.
    pub ingest_secret: &'a str,
    /// Names its screenshots (`serve`, `lambda`).
    pub label: &'a str,
}

const SOON: Duration = Duration::from_secs(15);
const TAB: &str = "\u{E004}";
const ENTER: &str = "\u{E007}";

/// Whether the row of event `arguments[0]` is on the page.
const ROW: &str = "return !!document.querySelector('li[data-event-id=\"' + arguments[0] + '\"]')";

/// Opens `/inbox` and waits until its script has run (`<html data-ready>`). A load whose script
/// did not arrive (the local Lambda stack, loaded by the checker beside it, has failed an asset
/// request) is said on stderr with what the page fetched, and loaded again, twice at most: a
/// form without its script would submit natively and the test would fail far from the cause.
async fn open_inbox(b: &Browser, c: &Client) {
    const READY: &str = "return document.documentElement.dataset.ready === 'true'";
    for attempt in 1..=3 {
        b.open(&c.url("/inbox")).await;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if b.js(READY, vec![]).await == json!(true) {
                return;
            }
            if std::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let fetched = b.resources_fetched().await;
        assert!(
            attempt < 3,
            "the inbox page's script did not run in 3 loads; the last one fetched {fetched}"
        );
        eprintln!("the inbox page's script did not run (load {attempt}); it fetched {fetched}; loading it again");
    }
}

/// Opens `/inbox`, types the credentials and waits for the first read of the feed.
async fn log_in(b: &Browser, c: &Client, a: &Address) {
    open_inbox(b, c).await;
    b.type_into("#address-id", &a.id).await;
    b.type_into("#read-token", &a.token).await;
    b.click("#open").await;
    viewer_is_live(b).await;
}

async fn viewer_is_live(b: &Browser) {
    b.until(
        SOON,
        "the viewer reads the feed",
        "return !document.getElementById('viewer').hidden \
         && document.getElementById('live').textContent.startsWith('Live')",
        &[],
    )
    .await;
}

async fn deliver(c: &Client, a: &Address, body: &Value) -> String {
    let r = c.deliver(a, body, None).await;
    r.expect_status(202, "deliver");
    r.json["event"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no event id: {}", r.text))
        .to_owned()
}

async fn text_of(b: &Browser, css: &str) -> String {
    b.js(
        "const e = document.querySelector(arguments[0]); return e ? e.textContent : null",
        vec![json!(css)],
    )
    .await
    .as_str()
    .unwrap_or_else(|| panic!("no element {css}"))
    .to_owned()
}

/// The token is typed once, kept in session storage only, and the page reads the feed live: a
/// delivery appears without a reload, an ack in the page is the API's `acknowledged_at`, a state
/// write shows its key and value.
pub async fn live_feed_ack_and_state(d: &Deployment<'_>) {
    let c = d.client;
    let a = c.new_address().await;
    let b = Browser::start(DESKTOP).await;
    open_inbox(&b, c).await;
    b.screenshot(&format!("{}-inbox-login", d.label)).await;
    log_in(&b, c, &a).await;
    assert_eq!(
        b.wd.current_url().await.map(|u| u.to_string()).ok(),
        Some(c.url("/inbox")),
        "the URL carries no credential"
    );
    let kept = b
        .js("return [document.cookie, sessionStorage.getItem('agentaddress.inbox'), localStorage.length]", vec![])
        .await;
    assert_eq!(kept[0], "", "no cookie");
    assert!(
        kept[1].as_str().is_some_and(|s| s.contains(&a.token)),
        "the token is in session storage: {kept}"
    );
    assert_eq!(kept[2], 0, "nothing in local storage");

    b.js("window.__sameDocument = 42", vec![]).await;
    let id = deliver(
        c,
        &a,
        &json!({"type": "ci.finished", "source": "ci", "data": {"build": 7, "ok": true}}),
    )
    .await;
    b.until(SOON, "the delivery appears", ROW, &[json!(id)])
        .await;
    assert_eq!(
        b.js("return window.__sameDocument", vec![]).await,
        42,
        "the row came without a reload"
    );
    let row = format!("li[data-event-id=\"{id}\"]");
    let text = text_of(&b, &row).await;
    assert!(
        text.contains("ci.finished") && text.contains("\"build\": 7"),
        "{text}"
    );

    let r = c
        .json(
            "PUT",
            &format!("{}/progress", a.state_url),
            Some(&a.token),
            &json!({"value": {"step": 1}}),
        )
        .await;
    r.expect_status(200, "write state");
    b.until(
        SOON,
        "the state key is shown",
        "const t = document.getElementById('state').textContent; \
         return t.includes('progress') && t.includes('\"step\": 1')",
        &[],
    )
    .await;

    b.click(&format!("{row} button.ack")).await;
    let at = b
        .until(
            SOON,
            "the ack is shown",
            "const e = document.querySelector(arguments[0] + ' .acked'); \
             return e && e.dataset.acknowledgedAt",
            &[json!(row)],
        )
        .await;
    let r = c
        .get(&format!("{}/events/{id}", a.root), Some(&a.token))
        .await;
    r.expect_status(200, "read the event");
    assert_eq!(
        r.json["event"]["acknowledged_at"], at,
        "the API shows the page's ack"
    );
    b.screenshot(&format!("{}-inbox-live", d.label)).await;
    b.assert_no_csp_violation("the live viewer").await;

    // Readable without the style sheet: the same text, in document order.
    b.js(
        "for (const s of document.styleSheets) s.disabled = true",
        vec![],
    )
    .await;
    let plain = b.page_text().await;
    for text in [
        "Events",
        "ci.finished",
        "Acknowledged at",
        "State",
        "progress",
    ] {
        assert!(
            plain.contains(text),
            "without CSS the page shows {text:?}: {plain}"
        );
    }
    b.screenshot(&format!("{}-inbox-no-css", d.label)).await;
    b.js(
        "for (const s of document.styleSheets) s.disabled = false",
        vec![],
    )
    .await;

    b.click("#forget").await;
    let gone = b
        .js(
            "return [sessionStorage.length, document.getElementById('login').hidden]",
            vec![],
        )
        .await;
    assert_eq!(gone, json!([0, false]), "forgetting removes the token");
    b.close().await;
}

/// The text of the `.preview` and `.meta` of event `arguments[0]`'s row, the preview's number
/// of child elements, and whether it is laid out on one line (`[preview|null, meta, children,
/// one_line]`).
const ROW_PARTS: &str = "const li = document.querySelector('li[data-event-id=\"' + arguments[0] + '\"]'); \
     if (!li) return null; \
     const p = li.querySelector('.preview'); \
     const one = p ? p.getClientRects().length === 1 && p.clientHeight <= 1.8 * parseFloat(getComputedStyle(p).lineHeight) : null; \
     return [p ? p.textContent : null, li.querySelector('.meta').textContent, p ? p.children.length : 0, one]";

/// A JSON body that is no envelope, compact, longer than a preview (120 characters).
fn json_body() -> String {
    format!(r#"{{"build":7,"ok":true,"log":"{}"}}"#, "x".repeat(200))
}

/// A text body, a JSON body, an event without a source, a state write and a mail, each
/// delivered to `a`; returns the ids of the text, JSON and sourceless events.
async fn varied_feed(d: &Deployment<'_>, a: &Address) -> (String, String, String) {
    let c = d.client;
    let r = c
        .send(
            "POST",
            &a.inbox_url,
            None,
            &[("content-type", "text/plain; charset=utf-8")],
            Some(b"Build 7 passed.\nAll 312 tests green <b>ok</b>\r\n\tdone".to_vec()),
        )
        .await;
    r.expect_status(202, "a text delivery");
    let text = r.json["event"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // Sent as bytes: the server keeps the body's key order, and so does the preview.
    let r = c
        .send(
            "POST",
            &a.inbox_url,
            None,
            &[("content-type", "application/json")],
            Some(json_body().into_bytes()),
        )
        .await;
    r.expect_status(202, "a JSON delivery");
    let json = r.json["event"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let bare = deliver(c, a, &json!({"type": "ci.finished", "data": {"build": 7}})).await;
    c.json(
        "PUT",
        &format!("{}/progress", a.state_url),
        Some(&a.token),
        &json!({"value": {"step": 1}}),
    )
    .await
    .expect_status(200, "write state");
    let to = email_of(a);
    let mail = format!(
        "From: Ada Lovelace <ada@example.com>\r\nTo: {to}\r\nSubject: Deploy v2 approved\r\n\
         Message-ID: <{}@example.com>\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n\
         Go ahead.\r\n",
        unique("rows")
    );
    ingest(c, d.ingest_secret, &[to.as_str()], mail.as_bytes())
        .await
        .expect_status(200, "ingest a mail");
    (text, json, bare)
}

/// A row shows a one-line preview of its data without opening Details: a text body's text on
/// one line, a JSON body's compact JSON cut to 120 characters, a state write `key = value`
/// (its row says "state", not "from state · state"); an event without a source says no
/// "from"; a mail shows its subject in its own box instead. Screenshots on a desktop and a
/// phone.
pub async fn rows_preview_their_data(d: &Deployment<'_>) {
    let c = d.client;
    let a = c.new_address().await;
    let (text, json, bare) = varied_feed(d, &a).await;
    for (viewport, name) in [(DESKTOP, "rows"), (PHONE, "rows-phone")] {
        let b = Browser::start(viewport).await;
        log_in(&b, c, &a).await;
        b.until(
            SOON,
            "the five rows",
            "return document.querySelectorAll('#events li').length === 5",
            &[],
        )
        .await;
        let row = b.js(ROW_PARTS, vec![json!(text)]).await;
        assert_eq!(
            row[0], "Build 7 passed. All 312 tests green <b>ok</b> done",
            "a text body's preview: {row}"
        );
        assert_eq!(row[2], 0, "the preview is text only: {row}");
        assert_eq!(row[3], true, "on one line: {row}");
        let meta = row[1].as_str().unwrap_or_default();
        assert!(
            meta.starts_with("http · ") && !meta.contains("from"),
            "{meta}"
        );

        let row = b.js(ROW_PARTS, vec![json!(json)]).await;
        let cut: String = json_body().chars().take(119).chain(['…']).collect();
        assert_eq!(row[0], json!(cut), "a JSON body's preview, cut: {row}");
        assert_eq!(row[3], true, "on one line: {row}");

        let row = b.js(ROW_PARTS, vec![json!(bare)]).await;
        assert_eq!(row[0], r#"{"build":7}"#, "{row}");
        let meta = row[1].as_str().unwrap_or_default();
        assert!(
            meta.starts_with("http · ") && !meta.contains("from"),
            "no dangling \"from ·\" without a source: {meta}"
        );

        let state = b
            .js(
                "const li = document.querySelector('li[data-type=\"state.updated\"]'); \
                 return [li.querySelector('.preview').textContent, li.querySelector('.meta').textContent]",
                vec![],
            )
            .await;
        assert_eq!(state[0], r#"progress = {"step":1}"#, "{state}");
        let meta = state[1].as_str().unwrap_or_default();
        assert!(
            meta.starts_with("state · ") && !meta.contains("from"),
            "a state row says \"state\", not \"from state · state\": {meta}"
        );

        let mail = b
            .js(
                "const li = document.querySelector('li[data-type=\"email.received\"]'); \
                 return [!!li.querySelector('.preview'), li.querySelector('.meta').textContent, \
                         li.querySelector('.mail dl').textContent]",
                vec![],
            )
            .await;
        assert_eq!(
            mail[0], false,
            "a mail shows its subject, not a preview: {mail}"
        );
        assert!(
            mail[1]
                .as_str()
                .is_some_and(|m| m.starts_with("from ada@example.com · email · ")),
            "{mail}"
        );
        assert!(
            mail[2]
                .as_str()
                .is_some_and(|m| m.contains("SubjectDeploy v2 approved")),
            "{mail}"
        );
        let fits = b
            .js(
                "return document.documentElement.scrollWidth <= window.innerWidth",
                vec![],
            )
            .await;
        assert_eq!(fits, true, "nothing is wider than the screen ({name})");
        b.screenshot(&format!("{}-inbox-{name}", d.label)).await;
        // And the rows below: the state write and the mail.
        b.js(
            "document.querySelector('li[data-type=\"state.updated\"]').scrollIntoView()",
            vec![],
        )
        .await;
        b.screenshot(&format!("{}-inbox-{name}-below", d.label))
            .await;
        b.assert_no_csp_violation("the rows").await;
        b.close().await;
    }
}

/// A wrong token is the 401 message (and forgotten); a deleted address is the 410 message.
pub async fn wrong_token_and_gone_address(d: &Deployment<'_>) {
    let c = d.client;
    let a = c.new_address().await;
    let b = Browser::start(DESKTOP).await;
    open_inbox(&b, c).await;
    b.type_into("#address-id", &a.id).await;
    b.type_into("#read-token", "aat_not-the-token").await;
    b.click("#open").await;
    b.until(
        SOON,
        "the 401 message",
        "const m = document.getElementById('message'); \
         return !m.hidden && m.textContent.includes('401') && m.textContent.includes('Wrong')",
        &[],
    )
    .await;
    let state = b
        .js(
            "return [sessionStorage.length, document.getElementById('viewer').hidden]",
            vec![],
        )
        .await;
    assert_eq!(state, json!([0, true]), "a refused token is not kept");
    b.screenshot(&format!("{}-inbox-401", d.label)).await;

    let gone = c.new_address().await;
    c.send("DELETE", &gone.root, Some(&gone.token), &[], None)
        .await
        .expect_status(204, "delete");
    open_inbox(&b, c).await;
    b.type_into("#address-id", &gone.id).await;
    b.type_into("#read-token", &gone.token).await;
    b.click("#open").await;
    b.until(
        SOON,
        "the 410 message",
        "const m = document.getElementById('message'); \
         return !m.hidden && m.textContent.includes('410') && m.textContent.includes('gone')",
        &[],
    )
    .await;
    b.screenshot(&format!("{}-inbox-410", d.label)).await;
    b.assert_no_csp_violation("the error messages").await;
    b.close().await;
}

/// On a deployment that allows few polls per minute, a 429 is explained and waited out.
pub async fn rate_limit_is_explained(d: &Deployment<'_>) {
    let c = d.client;
    let a = c.new_address().await;
    let b = Browser::start(DESKTOP).await;
    log_in(&b, c, &a).await;
    // Each delivery ends a waiting poll, and the next poll is over the limit.
    for i in 0..3 {
        deliver(c, &a, &json!({"type": "tick", "data": {"i": i}})).await;
    }
    let message = b
        .until(
            Duration::from_secs(30),
            "the 429 message",
            "const m = document.getElementById('message'); \
             return !m.hidden && m.textContent.includes('429') && m.textContent",
            &[],
        )
        .await;
    assert!(
        message.as_str().is_some_and(|m| m.contains(" s.")),
        "it says how long it waits: {message}"
    );
    b.screenshot(&format!("{}-inbox-429", d.label)).await;
    b.close().await;
}

/// A hostile `subject`, `from`, text and HTML part, as one email.
fn hostile_mail(to: &str) -> Vec<u8> {
    format!(
        "From: \"<img src=x onerror=window.__pwned=1>\" <evil@example.com>\r\n\
         To: {to}\r\n\
         Subject: <script>window.__pwned=1</script>\r\n\
         Message-ID: <{}@example.com>\r\n\
         MIME-Version: 1.0\r\n\
         Content-Type: multipart/mixed; boundary=\"m\"\r\n\
         \r\n\
         --m\r\n\
         Content-Type: multipart/alternative; boundary=\"a\"\r\n\
         \r\n\
         --a\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\
         \r\n\
         Click javascript:window.__pwned=1 now\r\n\
         --a\r\n\
         Content-Type: text/html; charset=utf-8\r\n\
         \r\n\
         <html><body><img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=1</script>\
         <a href=\"javascript:window.__pwned=1\">win</a><iframe src=\"javascript:window.__pwned=1\"></iframe>\
         <style>body{{display:none}}</style></body></html>\r\n\
         --a--\r\n\
         --m\r\n\
         Content-Type: text/plain; name=\"report.txt\"\r\n\
         Content-Disposition: attachment; filename=\"report.txt\"\r\n\
         \r\n\
         the report\r\n\
         --m--\r\n",
        unique("hostile")
    )
    .into_bytes()
}

/// Markup in an event's type, source and data, and in every part of an email, is shown as text
/// and sets nothing off: no element is made of it, the sentinel stays unset, and the browser
/// reports no CSP violation. The attachment downloads with the token.
pub async fn hostile_content_is_text(d: &Deployment<'_>) {
    let c = d.client;
    let a = c.new_address().await;
    let script = "<script>window.__pwned=1</script>";
    let img = "<img src=x onerror=\"window.__pwned=1\">";
    let link = "<a href=\"javascript:window.__pwned=1\">click</a>";
    let hook = deliver(
        c,
        &a,
        &json!({"type": img, "source": script, "data": {
            "script": script, "img": img, "link": link, "url": "javascript:window.__pwned=1",
            "svg": "<svg onload=\"window.__pwned=1\"></svg>", "style": "<style>*{display:none}</style>",
            "nested": {"html": format!("{script}{img}{link}")}
        }}),
    )
    .await;
    // A webhook may call itself email.received: it is not shown as mail (no download buttons).
    let fake = deliver(
        c,
        &a,
        &json!({"type": "email.received", "source": "webhook", "data": {
            "from": img, "subject": script, "html": img,
            "attachments": [{"id": "att_1", "filename": "invoice.exe", "size": 1}]
        }}),
    )
    .await;
    let to = email_of(&a);
    let r = ingest(c, d.ingest_secret, &[to.as_str()], &hostile_mail(&to)).await;
    r.expect_status(200, "ingest the hostile mail");
    assert_eq!(
        r.json["accepted"].as_array().map(Vec::len),
        Some(1),
        "{}",
        r.text
    );

    let b = Browser::start(DESKTOP).await;
    log_in(&b, c, &a).await;
    b.until(SOON, "the webhook's row", ROW, &[json!(hook)])
        .await;
    b.until(
        SOON,
        "the mail's row",
        "return !!document.querySelector('li[data-type=\"email.received\"] .mail')",
        &[],
    )
    .await;
    b.until(SOON, "the fake mail's row", ROW, &[json!(fake)])
        .await;
    let fake_row = b
        .js(
            "return document.querySelectorAll('li[data-event-id=\"' + arguments[0] + '\"] .mail, \
             li[data-event-id=\"' + arguments[0] + '\"] button.attachment').length",
            vec![json!(fake)],
        )
        .await;
    assert_eq!(fake_row, 0, "a webhook is never shown as mail");
    b.js(
        "document.querySelectorAll('details').forEach((d) => { d.open = true; })",
        vec![],
    )
    .await;
    let made = b
        .js(
            "return document.querySelectorAll('#events img, #events script, #events a, \
             #events iframe, #events svg, #events style, #events [onerror], #events [onload]').length",
            vec![],
        )
        .await;
    assert_eq!(made, 0, "no element was made from event data");
    let text = text_of(&b, "#events").await;
    for shown in [
        "<script>window.__pwned=1</script>",
        "<img src=x onerror=",
        "javascript:window.__pwned=1",
        "<iframe src=",
        "onerror=window.__pwned=1",
    ] {
        assert!(text.contains(shown), "{shown:?} is shown as text");
    }
    let subject = text_of(&b, "li[data-type=\"email.received\"] .mail dl").await;
    assert!(
        subject.contains("Subject<script>window.__pwned=1</script>"),
        "{subject}"
    );

    b.click("li[data-type=\"email.received\"] button.attachment")
        .await;
    b.until(
        SOON,
        "the attachment is saved",
        "const m = document.getElementById('message'); \
         return !m.hidden && m.textContent.startsWith('Saved report.txt')",
        &[],
    )
    .await;
    b.screenshot(&format!("{}-inbox-hostile", d.label)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        b.js("return typeof window.__pwned", vec![]).await,
        "undefined",
        "nothing in the events ran"
    );
    b.assert_no_csp_violation("hostile events").await;
    b.close().await;
}

/// A reply with quoted history, as Gmail writes it: markup in the reply and in the quoted part.
fn reply_mail(to: &str) -> Vec<u8> {
    format!(
        "From: Ada Lovelace <ada@example.com>\r\n\
         To: {to}\r\n\
         Subject: Re: Deploy v2?\r\n\
         Message-ID: <{}@example.com>\r\n\
         In-Reply-To: <deploy-1@example.com>\r\n\
         MIME-Version: 1.0\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\
         \r\n\
         Yes, deploy it <b>tonight</b>.\r\n\
         \r\n\
         On Tue, Dec 1, 2026 at 10:00 AM Agent <{to}> wrote:\r\n\
         \r\n\
         > Shall I deploy v2? <img src=x onerror=\"window.__pwned=1\">\r\n\
         > It passed every check.\r\n",
        unique("reply")
    )
    .into_bytes()
}

/// The mail's box: its shown text, what a person sees of it (`innerText`: nothing of a closed
/// `<details>`), whether "Show the whole message" is open, whether the whole text is visible
/// (`checkVisibility`: a closed `<details>` lays its content out but hides it),
/// the whole text, and the summary's words.
const MAIL_PARTS: &str =
    "const m = document.querySelector('li[data-type=\"email.received\"] .mail'); \
    const w = m.querySelector('details.mail-whole'); \
    const full = w ? w.querySelector('pre.mail-full') : null; \
    return [m.querySelector('pre.mail-text').textContent, m.innerText, w ? w.open : null, \
            full ? full.checkVisibility() : null, full ? full.textContent : null, \
            w ? w.querySelector('summary').textContent : null]";

/// An email that answers with quoted history shows its `reply_text` (docs/API.md §10): the
/// quoted part is not on the screen until "Show the whole message" is clicked, and then the
/// whole `text` is, as text (its markup makes no element and runs nothing).
pub async fn mail_shows_its_reply_first(d: &Deployment<'_>) {
    let c = d.client;
    let a = c.new_address().await;
    let to = email_of(&a);
    let r = ingest(c, d.ingest_secret, &[to.as_str()], &reply_mail(&to)).await;
    r.expect_status(200, "ingest the reply");
    let b = Browser::start(DESKTOP).await;
    log_in(&b, c, &a).await;
    b.until(
        SOON,
        "the mail's row",
        "return !!document.querySelector('li[data-type=\"email.received\"] .mail')",
        &[],
    )
    .await;
    let before = b.js(MAIL_PARTS, vec![]).await;
    assert_eq!(before[0], "Yes, deploy it <b>tonight</b>.", "{before}");
    let seen = before[1].as_str().unwrap_or_default();
    assert!(seen.contains("Yes, deploy it <b>tonight</b>."), "{seen}");
    for hidden in ["Shall I deploy v2?", "It passed every check.", "wrote:"] {
        assert!(
            !seen.contains(hidden),
            "{hidden:?} is shown before the click: {seen}"
        );
    }
    assert_eq!(before[2], false, "closed at first: {before}");
    assert_eq!(before[3], false, "the whole text is not rendered: {before}");
    assert_eq!(before[5], "Show the whole message", "{before}");
    b.screenshot(&format!("{}-inbox-reply", d.label)).await;

    b.click("li[data-type=\"email.received\"] details.mail-whole summary")
        .await;
    b.until(
        SOON,
        "the whole message is shown",
        "const w = document.querySelector('details.mail-whole'); \
         return w.open && w.querySelector('pre.mail-full').checkVisibility()",
        &[],
    )
    .await;
    let after = b.js(MAIL_PARTS, vec![]).await;
    let seen = after[1].as_str().unwrap_or_default();
    for shown in [
        "Yes, deploy it <b>tonight</b>.",
        "On Tue, Dec 1, 2026 at 10:00 AM Agent",
        "> Shall I deploy v2? <img src=x onerror=\"window.__pwned=1\">",
        "> It passed every check.",
    ] {
        assert!(
            seen.contains(shown),
            "{shown:?} is shown after the click: {seen}"
        );
    }
    let full = after[4].as_str().unwrap_or_default();
    assert!(
        full.starts_with("Yes, deploy it <b>tonight</b>.")
            && full.contains("> It passed every check."),
        "the whole text: {full:?}"
    );
    let made = b
        .js(
            "return document.querySelectorAll('#events img, #events b, #events [onerror]').length",
            vec![],
        )
        .await;
    assert_eq!(made, 0, "no element was made from the mail");
    b.screenshot(&format!("{}-inbox-reply-open", d.label)).await;
    assert_eq!(
        b.js("return typeof window.__pwned", vec![]).await,
        "undefined",
        "nothing in the mail ran"
    );
    b.assert_no_csp_violation("a reply's whole message").await;
    b.close().await;
}

/// The page saves an email's attachment as a file of exactly its bytes, under the name the
/// event gives: through a Blob URL where the deployment answers the bytes itself, and through
/// the short-lived link it names (`redirect=false`, docs/API.md §11) where it does not (on AWS,
/// over 4 MiB) — `through_link` says which the deployment must take. `a`'s feed must hold one
/// `email.received` event whose one attachment is `expected`.
pub async fn attachment_is_saved(
    c: &Client, a: &Address, label: &str, expected: &[u8], through_link: bool,
) {
    let events = c.read_all(a).await;
    let mail = events
        .iter()
        .find(|e| e["type"] == "email.received")
        .unwrap_or_else(|| panic!("no email.received event: {events:?}"));
    let name = mail["data"]["attachments"][0]["filename"]
        .as_str()
        .unwrap_or_else(|| panic!("the mail has no attachment: {mail}"))
        .to_owned();
    let b = Browser::start(DESKTOP).await;
    log_in(&b, c, a).await;
    b.until(SOON, "the mail's row", ROW, &[mail["id"].clone()])
        .await;
    b.click("li[data-type=\"email.received\"] button.attachment")
        .await;
    let saved = b
        .downloaded(Duration::from_secs(60), &name, expected.len())
        .await;
    assert!(saved == expected, "{name}: the saved bytes differ");
    let said = text_of(&b, "#message").await;
    let prefix = if through_link {
        format!("Downloading {name} from a link valid until ")
    } else {
        format!("Saved {name} (")
    };
    assert!(
        said.starts_with(&prefix),
        "the page says what it did ({prefix:?}): {said:?}"
    );
    b.screenshot(&format!("{label}-inbox-download")).await;
    b.assert_no_csp_violation("the download").await;
    b.close().await;
}

/// On a phone-sized screen, with the keyboard only: the id field has the focus, Tab reaches the
/// token, Enter opens the feed, Tab reaches an ack button with a visible focus ring, Enter
/// acknowledges; nothing is wider than the screen.
pub async fn phone_and_keyboard(d: &Deployment<'_>) {
    let c = d.client;
    let a = c.new_address().await;
    let id = deliver(
        c,
        &a,
        &json!({"type": "approval.requested", "source": "deploy-bot",
                "data": {"title": "Ship release 1.4 to production?", "options": ["yes", "no"]}}),
    )
    .await;
    let b = Browser::start(PHONE).await;
    open_inbox(&b, c).await;
    assert_eq!(
        b.js("return window.innerWidth", vec![]).await,
        PHONE.width,
        "the page is laid out for the phone's width"
    );
    let focused = "return document.activeElement && document.activeElement.id";
    assert_eq!(
        b.js(focused, vec![]).await,
        "address-id",
        "the id field has the focus"
    );
    b.keys(&a.id).await;
    b.keys(TAB).await;
    assert_eq!(
        b.js(focused, vec![]).await,
        "read-token",
        "Tab reaches the token"
    );
    b.keys(&a.token).await;
    b.keys(ENTER).await;
    viewer_is_live(&b).await;
    b.until(SOON, "the event's row", ROW, &[json!(id)]).await;
    let mut on_ack = false;
    for _ in 0..20 {
        b.keys(TAB).await;
        if b.js(
            "return document.activeElement.classList.contains('ack')",
            vec![],
        )
        .await
            == true
        {
            on_ack = true;
            break;
        }
    }
    assert!(on_ack, "Tab reaches the ack button");
    let ring = b
        .js(
            "return getComputedStyle(document.activeElement).outlineStyle",
            vec![],
        )
        .await;
    assert_ne!(ring, "none", "the focus is visible");
    b.screenshot(&format!("{}-inbox-phone", d.label)).await;
    b.keys(ENTER).await;
    b.until(
        SOON,
        "Enter acknowledges",
        "return !!document.querySelector('.acked')",
        &[],
    )
    .await;
    let fits = b
        .js(
            "return document.documentElement.scrollWidth <= window.innerWidth",
            vec![],
        )
        .await;
    assert_eq!(fits, true, "nothing is wider than the phone's screen");
    let r = c
        .get(&format!("{}/events/{id}", a.root), Some(&a.token))
        .await;
    assert!(r.json["event"]["acknowledged_at"].is_string(), "{}", r.text);
    b.screenshot(&format!("{}-inbox-phone-acked", d.label))
        .await;
    b.assert_no_csp_violation("the phone").await;
    b.close().await;
}

/// The pages' security headers, the page weight (returned: HTML + JS + CSS bytes), no inline
/// script or style, revalidation, and the discovery documents: `/llms-full.txt` names every
/// operation of `/openapi.json`, `/.well-known/agentaddress.json` where everything is.
pub async fn headers_and_discovery(c: &Client) -> usize {
    let mut weight = 0;
    for (path, ct) in [
        ("/inbox", "text/html"),
        ("/assets/inbox.js", "text/javascript"),
        ("/assets/inbox.css", "text/css"),
        ("/llms-full.txt", "text/markdown"),
        ("/.well-known/agentaddress.json", "application/json"),
    ] {
        let r = c.get(path, None).await;
        r.expect_status(200, path);
        let h = |name: &str| {
            r.headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        assert!(
            h("content-type").starts_with(ct),
            "{path}: {}",
            h("content-type")
        );
        let csp = h("content-security-policy");
        assert!(
            csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"),
            "{path}: CSP {csp:?}"
        );
        assert!(!csp.contains("unsafe"), "{path}: CSP {csp:?}");
        assert_eq!(h("referrer-policy"), "no-referrer", "{path}");
        assert_eq!(h("x-content-type-options"), "nosniff", "{path}");
        assert!(!h("cache-control").is_empty(), "{path}: Cache-Control");
        if path == "/inbox" || path.starts_with("/assets/") {
            weight += r.bytes.len();
            let etag = h("etag");
            let again = c
                .send("GET", path, None, &[("if-none-match", etag.as_str())], None)
                .await;
            again.expect_status(304, &format!("{path} revalidated"));
        }
        if path == "/inbox" {
            let html = r.text.to_ascii_lowercase();
            assert_eq!(
                html.matches("<script").count(),
                html.matches("<script src=").count(),
                "no inline script"
            );
            assert!(
                !html.contains("<style") && !html.contains(" style="),
                "no inline style"
            );
            assert!(!has_inline_handler(&html), "no inline event handler");
        }
    }
    assert!(
        weight <= 50 * 1024,
        "the inbox page weighs {weight} bytes (≤ 50 KB)"
    );

    let openapi = c.get("/openapi.json", None).await;
    openapi.expect_status(200, "openapi");
    let llms = c.get("/llms-full.txt", None).await.text;
    assert!(llms.starts_with("# agentaddress"), "skill.md comes first");
    assert!(!llms.contains("{base}"), "no unreplaced placeholder");
    let mut operations = 0;
    for (path, item) in openapi.json["paths"].as_object().into_iter().flatten() {
        for method in item.as_object().into_iter().flatten().map(|(m, _)| m) {
            let heading = format!("\n## {} {path}\n", method.to_uppercase());
            assert!(llms.contains(&heading), "llms-full.txt lacks {heading:?}");
            operations += 1;
        }
    }
    assert!(operations >= 20, "{operations} operations");

    let w = c.get("/.well-known/agentaddress.json", None).await;
    let w = &w.json;
    assert_eq!(w["api_base"], c.url("/api/v1"), "{w}");
    assert_eq!(w["openapi"], c.url("/openapi.json"));
    assert_eq!(w["skill"], c.url("/skill.md"));
    assert_eq!(w["mcp"], c.url("/api/mcp"));
    assert!(
        w["version"].is_string() && w["email_domain"].is_string(),
        "{w}"
    );
    assert!(w["limits"]["max_inbox_bytes"].is_u64(), "{w}");
    let features = w["features"].as_array().cloned().unwrap_or_default();
    assert!(features.contains(&json!("inbox_viewer")), "{w}");
    c.get(w["skill"].as_str().unwrap_or(""), None)
        .await
        .expect_status(200, "the skill link works");
    weight
}

/// Whether `html` has an attribute `on…=` (an inline event handler).
fn has_inline_handler(html: &str) -> bool {
    html.match_indices(" on").any(|(i, _)| {
        let rest = &html[i + 3..];
        let name = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        name > 0 && rest[name..].trim_start().starts_with('=')
    })
}

/// The figures of docs/PERFORMANCE.md, "Pages".
#[derive(Debug)]
pub struct Figures {
    /// HTML + JS + CSS bytes of `/inbox`.
    pub weight: usize,
    /// Milliseconds from navigation start to the first contentful paint, one per load that
    /// reported one.
    pub first_paint_ms: Vec<f64>,
    /// Milliseconds from navigation start to `DOMContentLoaded`'s end, one per load.
    pub dom_ready_ms: Vec<f64>,
    /// Milliseconds from a webhook delivery's request to its row on the open page.
    pub delivery_ms: Vec<f64>,
}

fn epoch_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or_default()
}

/// Measures the page: `loads` fresh loads of `/inbox` (navigation timing), then `deliveries`
/// webhooks one after the other, each timed from just before its request to the moment its row
/// is added (a MutationObserver in the page; same machine, same wall clock: `Date.now()`, not
/// `performance.timeOrigin + performance.now()`, a monotonic clock that drifts from the wall
/// clock by tens of milliseconds over a page's life and made some delays negative). The deployment must
/// allow that many polls per minute.
pub async fn measure(c: &Client, loads: usize, deliveries: usize) -> Figures {
    let weight = headers_and_discovery(c).await;
    let b = Browser::start(DESKTOP).await;
    let (mut first_paint_ms, mut dom_ready_ms) = (Vec::new(), Vec::new());
    for _ in 0..loads {
        b.open(&c.url("/inbox")).await;
        let t = b
            .until(
                SOON,
                "navigation timing",
                "const n = performance.getEntriesByType('navigation')[0]; \
                 const p = performance.getEntriesByName('first-contentful-paint')[0]; \
                 return n && n.loadEventEnd > 0 && (p || performance.now() > n.loadEventEnd + 2000) \
                   && [p ? p.startTime : -1, n.domContentLoadedEventEnd]",
                &[],
            )
            .await;
        if let Some(paint) = t[0].as_f64().filter(|p| *p >= 0.0) {
            first_paint_ms.push(paint);
        }
        dom_ready_ms.push(t[1].as_f64().unwrap_or_default());
    }
    let a = c.new_address().await;
    log_in(&b, c, &a).await;
    b.js(
        "window.__shown = {}; new MutationObserver((changes) => { \
           const at = Date.now(); \
           for (const c of changes) for (const n of c.addedNodes) \
             if (n.dataset && n.dataset.eventId) window.__shown[n.dataset.eventId] = at; \
         }).observe(document.getElementById('events'), {childList: true})",
        vec![],
    )
    .await;
    let mut delivery_ms = Vec::new();
    for i in 0..deliveries {
        // Let the page's next long poll start waiting.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let sent = epoch_ms();
        let id = deliver(c, &a, &json!({"type": "bench.tick", "data": {"i": i}})).await;
        let shown = b
            .until(
                SOON,
                "the row",
                "return window.__shown[arguments[0]]",
                &[json!(id)],
            )
            .await;
        delivery_ms.push(shown.as_f64().unwrap_or_default() - sent);
    }
    b.close().await;
    Figures {
        weight,
        first_paint_ms,
        dom_ready_ms,
        delivery_ms,
    }
}

/// The `q` quantile (0–1) of `values`, nearest rank.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// A one-time sign-in link of the viewer (docs/API.md §13, "Sign-in links"), asked for with the
/// API as `agentaddress inbox` does: `{base}/inbox#code=avc_…`.
pub async fn viewer_link(c: &Client, a: &Address) -> String {
    let r = c
        .send(
            "POST",
            &format!("{}/viewer-codes", a.root),
            Some(&a.token),
            &[],
            None,
        )
        .await;
    r.expect_status(201, "POST {root}/viewer-codes");
    r.json["viewer_url"]
        .as_str()
        .unwrap_or_else(|| panic!("no viewer_url: {}", r.text))
        .to_owned()
}

/// `link` (as `agentaddress inbox --print` printed it) opened in Chromium: the viewer is signed
/// in and shows the feed, the address bar no longer holds `#code`, and the token is in the
/// tab's session storage. The same link opened again, in a new browser, says it was used and
/// signs no one in. Screenshots `{label}-inbox-link-signed-in`, `{label}-inbox-link-used`.
pub async fn sign_in_link(d: &Deployment<'_>, a: &Address, link: &str) {
    let c = d.client;
    assert!(link.starts_with(&c.url("/inbox#code=avc_")), "{link}");
    assert!(!link.contains(&a.token), "the link holds no token: {link}");
    let id = deliver(
        c,
        a,
        &json!({"type": "deploy.finished", "source": "ci", "data": {"build": 42}}),
    )
    .await;

    let b = Browser::start(DESKTOP).await;
    b.open(link).await;
    viewer_is_live(&b).await;
    b.until(SOON, "the feed's event appears", ROW, &[json!(id)])
        .await;
    assert_eq!(
        text_of(&b, "#current-id").await,
        a.id,
        "signed in to the link's address"
    );
    assert_eq!(
        b.wd.current_url().await.map(|u| u.to_string()).ok(),
        Some(c.url("/inbox")),
        "the code left the address bar"
    );
    let kept = b
        .js(
            "return [location.hash, sessionStorage.getItem('agentaddress.inbox'), \
             document.cookie, localStorage.length]",
            vec![],
        )
        .await;
    assert_eq!(kept[0], "", "no fragment: {kept}");
    let saved: Value = serde_json::from_str(kept[1].as_str().unwrap_or("null"))
        .unwrap_or_else(|e| panic!("session storage is not JSON ({e}): {kept}"));
    assert_eq!(
        saved,
        json!({"id": a.id, "token": a.token}),
        "the token is kept per tab"
    );
    assert_eq!(
        (&kept[2], &kept[3]),
        (&json!(""), &json!(0)),
        "nothing elsewhere"
    );
    // A reload stays signed in (from session storage), and redeems nothing again.
    b.wd.refresh().await.expect("reload");
    viewer_is_live(&b).await;
    b.until(SOON, "the event again after a reload", ROW, &[json!(id)])
        .await;
    b.screenshot(&format!("{}-inbox-link-signed-in", d.label))
        .await;
    b.assert_no_csp_violation("a sign-in link").await;
    b.close().await;

    // Opened again, in a browser of its own: used.
    let b = Browser::start(DESKTOP).await;
    b.open(link).await;
    let used = "const m = document.getElementById('message'); \
                return !m.hidden && m.textContent.includes('already used') ? m.textContent : null";
    // Through the Lambda stack, the page's script comes through cargo-lambda's gateway
    // emulator, which now and then answers a 500 of its own under load (see
    // `Client::behind_gateway`): the page then stays static. It is opened once more, from a
    // blank page (the same URL again, fragment and all, would be a same-document navigation
    // that loads nothing); a used link must say so either time.
    let message = match b.try_until(SOON, used, &[]).await {
        Some(m) => m,
        None => {
            eprintln!(
                "the used link's page said nothing within {SOON:?} ({}; fetched {}); \
                 opening it once more",
                b.page_text().await.replace('\n', " "),
                b.resources_fetched().await,
            );
            b.open("about:blank").await;
            b.open(link).await;
            b.until(SOON, "the page says the link was used", used, &[])
                .await
        }
    };
    assert_eq!(
        message,
        "This link was already used or has expired — run the command again."
    );
    let state = b
        .js(
            "return [location.href, sessionStorage.getItem('agentaddress.inbox'), \
             document.getElementById('viewer').hidden, document.getElementById('login').hidden]",
            vec![],
        )
        .await;
    assert_eq!(
        state,
        json!([c.url("/inbox"), null, true, false]),
        "no fragment, no token, the form shown"
    );
    b.screenshot(&format!("{}-inbox-link-used", d.label)).await;
    b.assert_no_csp_violation("a used sign-in link").await;
    b.close().await;
}
