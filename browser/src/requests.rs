//! The person's page of a request for a person (docs/API.md §12) in a real browser, for any
//! deployment: answering it while the agent waits, who asks and the times in the reader's
//! locale, two people answering at once, hostile text in the request, and a phone with the
//! keyboard only. Screenshots go to
//! `target/screenshots/{label}-request-….png`.

use std::time::Duration;

use agentaddress_blackbox::requests::ask;
use agentaddress_blackbox::{Address, Client};
use serde_json::{json, Value};

use crate::scenarios::Deployment;
use crate::{Browser, DESKTOP, PHONE};

const SOON: Duration = Duration::from_secs(15);
const TAB: &str = "\u{E004}";
const ENTER: &str = "\u{E007}";

/// Whether the page shows the recorded decision `arguments[0]` and no form.
const DECIDED: &str = "const d = document.querySelector('.decision'); \
     return !!d && d.textContent.includes(arguments[0]) && !document.querySelector('form')";

async fn request(c: &Client, a: &Address, body: &Value) -> (String, String) {
    let r = ask(c, a, body).await;
    let url = r["url"]
        .as_str()
        .unwrap_or_else(|| panic!("no url: {r}"))
        .to_owned();
    let id = r["id"].as_str().unwrap_or_default().to_owned();
    (id, url)
}

/// The answers (`request.answered` events) in the address's feed.
async fn answers(c: &Client, a: &Address) -> Vec<Value> {
    c.read_all(a)
        .await
        .into_iter()
        .filter(|e| e["type"] == "request.answered")
        .collect()
}

/// The agent waits on its feed; a person opens the page, writes a comment and clicks an
/// option; the wait returns `request.answered` with them; the page, reopened, shows the
/// decision and no form.
pub async fn a_person_answers_while_the_agent_waits(d: &Deployment<'_>) {
    let c = d.client;
    let a = c.new_address().await;
    let (id, url) = request(
        c,
        &a,
        &json!({"title": "Ship release 1.4 to production?",
                "body": "Changes:\n\n- **faster** long polls\n- [release notes](https://example.com/notes)",
                "options": ["Ship", "Hold"]}),
    )
    .await;
    let poll = {
        let (c, a) = (c.clone(), a.clone());
        tokio::spawn(async move { c.events(&a, "after=0&wait=25").await })
    };
    // The request's own wait (docs/API.md §21) returns the answer given in the browser.
    let wait = {
        let (c, path) = (c.clone(), format!("{}/requests/{id}?wait=25", a.root));
        let token = a.token.clone();
        tokio::spawn(async move { c.get(&path, Some(&token)).await })
    };
    let b = Browser::start(DESKTOP).await;
    b.open(&url).await;
    let title = b
        .js("return document.querySelector('h1').textContent", vec![])
        .await;
    assert_eq!(title, "Ship release 1.4 to production?");
    let link = b
        .js(
            "const l = document.querySelector('.body a'); return l && [l.href, l.rel]",
            vec![],
        )
        .await;
    assert_eq!(
        link,
        json!(["https://example.com/notes", "noopener noreferrer nofollow"])
    );
    b.screenshot(&format!("{}-request-open", d.label)).await;
    b.type_into("#comment", "Go ahead <b>now</b>").await;
    b.click("button[name=choice][value=Ship]").await;
    b.until(SOON, "the decision", DECIDED, &[json!("Ship")])
        .await;
    b.screenshot(&format!("{}-request-answered", d.label)).await;

    let r = poll.await.expect("poll task");
    r.expect_status(200, "the waiting poll");
    let e = &r.json["events"][0];
    assert_eq!(e["type"], "request.answered", "{}", r.text);
    assert_eq!(e["data"]["request_id"], id.as_str());
    assert_eq!(e["data"]["choice"], "Ship");
    assert_eq!(e["data"]["comment"], "Go ahead <b>now</b>");
    let w = wait.await.expect("wait task");
    w.expect_status(200, "the request's wait");
    assert_eq!(w.json["request"]["status"], "answered", "{}", w.text);
    assert_eq!(w.json["request"]["answer"]["choice"], "Ship");
    assert_eq!(
        w.json["request"]["answer"]["comment"],
        "Go ahead <b>now</b>"
    );

    b.open(&url).await;
    b.until(SOON, "the decision, reopened", DECIDED, &[json!("Ship")])
        .await;
    let comment = b
        .js(
            "return document.querySelector('blockquote').textContent",
            vec![],
        )
        .await;
    assert_eq!(comment, "Go ahead <b>now</b>", "the comment is text");
    b.assert_no_csp_violation("the request page").await;
    b.close().await;
}

/// The page says who asks (the address's name) and shows its times in the reader's locale and
/// time zone: read as a person in Kolkata (UTC+05:30) with a German browser would, "Open until"
/// is that person's time, not the server's UTC text (which stays as the `<time>`'s title).
/// Screenshots on a desktop and a phone.
pub async fn the_asker_and_the_readers_time(d: &Deployment<'_>) {
    let c = d.client;
    let a = c
        .create_address(&json!({"name": "deploy watcher", "task_id": "asker"}))
        .await;
    let (_, url) = request(
        c,
        &a,
        &json!({"title": "Ship release 1.4 to production?",
                "body": "Changes:\n\n- **faster** long polls\n- [release notes](https://example.com/notes)",
                "options": ["Ship", "Hold"], "expires_in_seconds": 3 * 86_400}),
    )
    .await;
    for (viewport, name) in [(DESKTOP, "asker"), (PHONE, "asker-phone")] {
        let b = Browser::start(viewport).await;
        b.cdp(
            "Emulation.setTimezoneOverride",
            json!({"timezoneId": "Asia/Kolkata"}),
        )
        .await;
        b.cdp("Emulation.setLocaleOverride", json!({"locale": "de-DE"}))
            .await;
        b.open(&url).await;
        b.until(
            SOON,
            "the page's script ran",
            "return document.documentElement.dataset.ready === 'true'",
            &[],
        )
        .await;
        let asker = b
            .js(
                "return document.querySelector('.asker').textContent",
                vec![],
            )
            .await;
        assert_eq!(asker, "deploy watcher asks:");
        let time = b
            .js(
                "const t = document.querySelector('.note time'); \
                 const d = new Date(t.getAttribute('datetime')); \
                 const o = {timeZone: 'Asia/Kolkata', weekday: 'short', day: 'numeric', \
                   month: 'short', hour: 'numeric', minute: '2-digit'}; \
                 if (d.getFullYear() !== new Date().getFullYear()) o.year = 'numeric'; \
                 return [t.textContent, t.title, t.getAttribute('datetime'), \
                   d.toLocaleString('de-DE', o), \
                   d.toLocaleTimeString('de-DE', {timeZone: 'Asia/Kolkata', hour: 'numeric', minute: '2-digit'}), \
                   d.toISOString().slice(11, 16)]",
                vec![],
            )
            .await;
        let shown = time[0].as_str().unwrap_or_default();
        let fallback = time[1].as_str().unwrap_or_default();
        assert!(
            fallback.ends_with(" UTC") && fallback.contains(time[5].as_str().unwrap_or("?")),
            "the server's text is UTC, kept as the title: {time}"
        );
        assert_ne!(shown, fallback, "the script rewrote the time: {time}");
        assert!(!shown.contains("UTC"), "{time}");
        assert_eq!(
            shown, time[3],
            "the reader's locale (de-DE) and time zone (Asia/Kolkata): {time}"
        );
        assert!(
            shown.contains(time[4].as_str().unwrap_or("?"))
                && !shown.contains(time[5].as_str().unwrap_or("?")),
            "Kolkata's hour and minute, not UTC's: {time}"
        );
        let note = b
            .js("return document.querySelector('.note').textContent", vec![])
            .await;
        assert_eq!(note, json!(format!("Open until {shown}.")));
        let fits = b
            .js(
                "return document.documentElement.scrollWidth <= window.innerWidth",
                vec![],
            )
            .await;
        assert_eq!(fits, true, "nothing is wider than the screen ({name})");
        b.screenshot(&format!("{}-request-{name}", d.label)).await;
        b.assert_no_csp_violation("the request page's script").await;
        b.close().await;
    }
}

/// Two people answer at the same moment from two browsers: one answer is recorded, both pages
/// then show that one, and the feed holds one `request.answered`.
pub async fn two_browsers_answer_at_once(d: &Deployment<'_>) {
    let c = d.client;
    let a = c.new_address().await;
    let (_, url) = request(
        c,
        &a,
        &json!({"title": "Who decides?", "options": ["Left", "Right"]}),
    )
    .await;
    let (left, right) = tokio::join!(Browser::start(DESKTOP), Browser::start(DESKTOP));
    tokio::join!(left.open(&url), right.open(&url));
    tokio::join!(
        left.type_into("#comment", "from the left"),
        right.type_into("#comment", "from the right")
    );
    tokio::join!(
        left.click("button[name=choice][value=Left]"),
        right.click("button[name=choice][value=Right]")
    );
    let recorded = answers(c, &a).await;
    assert_eq!(recorded.len(), 1, "one answer in the feed: {recorded:?}");
    let winner = recorded[0]["data"]["choice"].clone();
    assert!(winner == "Left" || winner == "Right", "{winner}");
    for (name, b) in [("left", &left), ("right", &right)] {
        b.until(
            SOON,
            "the winner's decision",
            DECIDED,
            std::slice::from_ref(&winner),
        )
        .await;
        b.screenshot(&format!("{}-request-race-{name}", d.label))
            .await;
    }
    let expected = if winner == "Left" {
        "from the left"
    } else {
        "from the right"
    };
    assert_eq!(recorded[0]["data"]["comment"], expected);
    left.close().await;
    right.close().await;
}

/// A request whose title, body and options hold markup and scripts: the page shows them as
/// text, makes no element from them, keeps only safe links, and runs nothing.
pub async fn hostile_request_is_text(d: &Deployment<'_>) {
    let c = d.client;
    let script = "<script>window.__pwned=1</script>";
    let img = "<img src=x onerror=\"window.__pwned=1\">";
    // The address's name is the asker's, shown on the page: text too.
    let a = c
        .create_address(&json!({"name": format!("{img} bot")}))
        .await;
    let (_, url) = request(
        c,
        &a,
        &json!({
            "title": format!("Approve {script}?"),
            "body": format!("{script}\n\n{img}\n\n<iframe src=\"javascript:window.__pwned=1\"></iframe>\n\n\
                     [click me](javascript:window.__pwned=1) and [data](data:text/html,<script>1</script>) \
                     and ![pixel](https://tracker.example/p.png)\n\n<a href=\"javascript:window.__pwned=1\">raw link</a>"),
            "options": ["<b>Yes</b>", "No\" onclick=\"window.__pwned=1"]
        }),
    )
    .await;
    let b = Browser::start(DESKTOP).await;
    b.open(&url).await;
    let made = b
        .js(
            "return document.querySelectorAll('main script, main img, main iframe, main svg, \
             main [onerror], main [onclick], main [onload], main b').length",
            vec![],
        )
        .await;
    assert_eq!(made, 0, "no element was made from the request's text");
    let hrefs = b
        .js(
            "return Array.from(document.querySelectorAll('main a')).map((l) => l.getAttribute('href'))",
            vec![],
        )
        .await;
    assert_eq!(hrefs, json!([]), "no unsafe link survived");
    let text = b
        .js("return document.querySelector('main').textContent", vec![])
        .await;
    let text = text.as_str().unwrap_or_default();
    for shown in [
        script,
        "<img src=x onerror=",
        "click me",
        "pixel",
        "<b>Yes</b>",
    ] {
        assert!(text.contains(shown), "{shown:?} is shown as text: {text}");
    }
    let asker = b
        .js(
            "return document.querySelector('.asker').textContent",
            vec![],
        )
        .await;
    assert_eq!(asker, json!(format!("{img} bot asks:")), "the name is text");
    assert!(
        !text.contains("tracker.example"),
        "an image's address is never used"
    );
    b.screenshot(&format!("{}-request-hostile", d.label)).await;
    // Clicking the option named like an attribute answers with exactly that text.
    b.click("button[name=choice]:last-of-type").await;
    b.until(
        SOON,
        "the decision",
        DECIDED,
        &[json!("No\" onclick=\"window.__pwned=1")],
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        b.js("return typeof window.__pwned", vec![]).await,
        "undefined",
        "nothing in the request ran"
    );
    b.assert_no_csp_violation("a hostile request").await;
    let recorded = answers(c, &a).await;
    assert_eq!(recorded.len(), 1);
    assert_eq!(
        recorded[0]["data"]["choice"],
        "No\" onclick=\"window.__pwned=1"
    );
    b.close().await;
}

/// On a phone, with the keyboard only: Tab reaches the comment box, then the options, each
/// with a visible focus ring; Enter answers; nothing is wider than the screen.
pub async fn phone_and_keyboard(d: &Deployment<'_>) {
    let c = d.client;
    let a = c.new_address().await;
    let (_, url) = request(
        c,
        &a,
        &json!({"title": "Restart the database now? It is a long question on a small screen.",
                "body": "The replica is **12 minutes** behind.",
                "options": ["Restart", "Wait an hour"], "comment": "required"}),
    )
    .await;
    let b = Browser::start(PHONE).await;
    b.open_styled(&url).await;
    let focused = "return document.activeElement && \
                   (document.activeElement.id || document.activeElement.value)";
    let mut on_comment = false;
    for _ in 0..5 {
        b.keys(TAB).await;
        if b.js(focused, vec![]).await == "comment" {
            on_comment = true;
            break;
        }
    }
    assert!(on_comment, "Tab reaches the comment box");
    b.keys("replica first").await;
    b.keys(TAB).await;
    assert_eq!(
        b.js(focused, vec![]).await,
        "Restart",
        "then the first option"
    );
    let ring = b
        .js(
            "return getComputedStyle(document.activeElement).outlineStyle",
            vec![],
        )
        .await;
    assert_ne!(ring, "none", "the focus is visible");
    b.keys(TAB).await;
    assert_eq!(b.js(focused, vec![]).await, "Wait an hour");
    let fits = b
        .js(
            "return document.documentElement.scrollWidth <= window.innerWidth",
            vec![],
        )
        .await;
    assert_eq!(fits, true, "nothing is wider than the phone's screen");
    b.screenshot(&format!("{}-request-phone", d.label)).await;
    b.keys(ENTER).await;
    b.until(SOON, "Enter answers", DECIDED, &[json!("Wait an hour")])
        .await;
    b.screenshot(&format!("{}-request-phone-answered", d.label))
        .await;
    let recorded = answers(c, &a).await;
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0]["data"]["comment"], "replica first");
    b.assert_no_csp_violation("the phone").await;
    b.close().await;
}
