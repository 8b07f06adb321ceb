//! The person's page of a request (docs/API.md §12–§13): server-rendered HTML from `maud`
//! (every interpolated value is escaped), the body's Markdown through `pulldown-cmark` with raw
//! HTML turned into text, images into their text, and links kept only for `http`, `https` and
//! `mailto` (with `rel="noopener noreferrer nofollow"`). One stylesheet from this service
//! (`/r/page.css`: the inbox viewer's rules, then the page's own, so both pages look alike) and
//! one tiny script (`/r/page.js`) that only rewrites each `<time datetime>` in the reader's
//! locale and time zone, which the server cannot know; its text without the script is UTC. So
//! the page works under `default-src 'self'` and reads fine without either.

use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use maud::{html, Markup, PreEscaped, DOCTYPE};
use pulldown_cmark::{CowStr, Event, Options, Parser, Tag, TagEnd};
use serde_json::{Map, Value};

use super::page_headers;
use crate::domain::request::{CommentMode, RequestStatus, COMMENT_MAX_CHARS};
use crate::domain::time::{format_rfc3339, format_utc_for_people};
use crate::domain::Millis;
use crate::store::RequestRecord;
use crate::ApiError;

/// Compared against when there is no request, so both paths hash and compare.
pub const DUMMY_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The page's stylesheet (`GET /r/page.css`): the inbox viewer's (docs/API.md §13), then the
/// page's own rules.
pub const PAGE_CSS: &str = concat!(
    include_str!("assets/inbox.css"),
    include_str!("assets/request.css")
);

/// The page's script (`GET /r/page.js`): times in the reader's locale.
pub const PAGE_JS: &str = include_str!("assets/request.js");

/// A moment as `<time datetime="…Z">`, its text UTC to the minute until the page's script puts
/// it in the reader's locale and time zone.
fn time(ms: Millis) -> Markup {
    html! { time datetime=(format_rfc3339(ms)) { (format_utc_for_people(ms)) } }
}

/// The page around `content`; `question` adds what only a request's page needs: the script
/// that localizes its times, and the footer that says what the page is.
fn layout(title: &str, question: bool, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="no-referrer";
                title { (title) }
                link rel="stylesheet" href="/r/page.css";
                @if question {
                    script src="/r/page.js" defer {}
                }
            }
            body {
                main { (content) }
                @if question {
                    footer {
                        p { "Asked through agentaddress. Anyone holding this page's link can answer; the first answer counts." }
                    }
                }
            }
        }
    }
}

fn html_response(status: StatusCode, markup: Markup) -> Response {
    let mut response = (status, markup.into_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    for (name, value) in page_headers() {
        headers.insert(name, value);
    }
    response
}

/// The page of an unknown request or a wrong secret: the same plain 404 for both.
pub fn not_found() -> Response {
    html_response(
        StatusCode::NOT_FOUND,
        layout(
            "Not found",
            false,
            html! {
                h1 { "Not found" }
                p { "There is nothing at this address." }
            },
        ),
    )
}

/// `303 See Other` to the page itself (after a form was sent: a reload does not send it again).
pub fn see_page(request_id: &str, secret: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    if let Ok(location) = HeaderValue::from_str(&format!("/r/{request_id}/{secret}")) {
        headers.insert(header::LOCATION, location);
    }
    for (name, value) in page_headers() {
        headers.insert(name, value);
    }
    response
}

/// The page of request `r` at `now`: who asks (`asker`, the address's name, if it has one), its
/// question and form while it is open (with `error`, the reason the last answer was refused),
/// else the recorded decision or its expiry.
pub fn page(r: &RequestRecord, asker: Option<&str>, now: Millis, error: Option<&str>) -> Response {
    html_response(StatusCode::OK, page_markup(r, asker, now, error))
}

fn page_markup(r: &RequestRecord, asker: Option<&str>, now: Millis, error: Option<&str>) -> Markup {
    let status = r.status_at(now);
    let content = html! {
        @if let Some(asker) = asker {
            p class="asker" { (asker) " asks:" }
        }
        h1 { (r.title) }
        @if let Some(body) = &r.body {
            div class="body" { (PreEscaped(markdown(body))) }
        }
        @match status {
            RequestStatus::Open => {
                @if let Some(error) = error {
                    p class="error" role="alert" { (error) }
                }
                form method="post" {
                    fieldset {
                        legend { "Your answer" }
                        @if r.comment != CommentMode::None {
                            label for="comment" {
                                "Comment"
                                @if r.comment == CommentMode::Required { " (required)" }
                                @else { " (optional)" }
                            }
                            textarea id="comment" name="comment" rows="4"
                                maxlength=(COMMENT_MAX_CHARS)
                                required[r.comment == CommentMode::Required] {}
                        }
                        div class="options" {
                            @for option in &r.options {
                                button type="submit" name="choice" value=(option) { (option) }
                            }
                        }
                    }
                }
                p class="note" { "Open until " (time(r.expires_at)) "." }
            }
            RequestStatus::Answered => {
                @if let Some(a) = &r.answer {
                    p class="decision" {
                        "Answered: " strong { (a.choice) }
                    }
                    @if let Some(comment) = &a.comment {
                        blockquote { (comment) }
                    }
                    p class="note" { "Recorded " (time(a.answered_at)) ". The answer cannot be changed." }
                }
            }
            RequestStatus::Expired => {
                p class="decision" { "This request expired unanswered." }
                p class="note" { "It was open until " (time(r.expires_at)) "." }
            }
        }
    };
    layout(&r.title, true, content)
}

/// The fields of a form-encoded body, for [`super::inputs::parse_fields`] (a repeated field
/// keeps its first value).
pub fn form_fields(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let mut fields = Map::new();
    for (name, value) in form_urlencoded::parse(bytes) {
        fields
            .entry(name.into_owned())
            .or_insert_with(|| Value::String(value.into_owned()));
    }
    Ok(fields)
}

/// Schemes a link in a request's body may use.
fn safe_link(url: &str) -> bool {
    let lower = url.trim().to_ascii_lowercase();
    ["http://", "https://", "mailto:"]
        .iter()
        .any(|scheme| lower.starts_with(scheme))
}

/// The request body's Markdown as HTML that carries nothing from the author but text, safe
/// links and structure: raw HTML becomes text, an image its alternative text, a link with
/// another scheme (`javascript:`, `data:` …) its text alone.
pub fn markdown(source: &str) -> String {
    let mut events: Vec<Event<'_>> = Vec::new();
    // Inside a dropped link or an image: their end tags are dropped too.
    let mut dropped: Vec<bool> = Vec::new();
    for event in Parser::new_ext(
        source,
        Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES,
    ) {
        match event {
            Event::Html(raw) | Event::InlineHtml(raw) => events.push(Event::Text(raw)),
            Event::Start(Tag::Image { .. }) => dropped.push(true),
            Event::End(TagEnd::Image) => {
                dropped.pop();
            }
            Event::Start(Tag::Link { dest_url, .. }) => {
                if safe_link(&dest_url) {
                    // escape_href leaves nothing an attribute value could break out of
                    // (`&` becomes `&amp;`, quotes and angle brackets percent-escapes).
                    let mut tag = String::from("<a href=\"");
                    let _ = pulldown_cmark_escape::escape_href(&mut tag, &dest_url);
                    tag.push_str("\" rel=\"noopener noreferrer nofollow\">");
                    events.push(Event::Html(CowStr::from(tag)));
                    dropped.push(false);
                } else {
                    dropped.push(true);
                }
            }
            Event::End(TagEnd::Link) => {
                if dropped.pop() == Some(false) {
                    events.push(Event::Html(CowStr::Borrowed("</a>")));
                }
            }
            other => events.push(other),
        }
    }
    let mut out = String::new();
    pulldown_cmark::html::push_html(&mut out, events.into_iter());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Answer;

    #[test]
    fn raw_html_is_text() {
        let out = markdown("Hi <script>alert(1)</script>\n\n<img src=x onerror=alert(1)>");
        assert!(!out.contains("<script"), "{out}");
        assert!(!out.contains("<img"), "{out}");
        assert!(out.contains("&lt;script&gt;"), "{out}");
        assert!(out.contains("&lt;img src=x onerror=alert(1)&gt;"), "{out}");
    }

    #[test]
    fn only_safe_links_survive_and_they_carry_rel() {
        let out = markdown(
            "[ok](https://example.com/a?b=1&c=\"2\") [bad](javascript:alert(1)) \
             [data](data:text/html,x) [mail](mailto:a@example.com) [Rel](HTTP://x.example)",
        );
        assert!(out.contains(
            "<a href=\"https://example.com/a?b=1&amp;c=%222%22\" rel=\"noopener noreferrer nofollow\">ok</a>"
        ), "{out}");
        assert!(!out.to_ascii_lowercase().contains("javascript:"), "{out}");
        assert!(!out.contains("data:"), "{out}");
        assert!(
            out.contains("bad") && out.contains("data"),
            "the text stays: {out}"
        );
        assert!(out.contains("href=\"mailto:a@example.com\""), "{out}");
        assert!(out.contains("href=\"HTTP://x.example\""), "{out}");
    }

    #[test]
    fn images_become_their_text_and_markdown_still_works() {
        let out = markdown(
            "![a tracking pixel](https://evil.example/p.png)\n\n**bold** _it_\n\n- one\n- two",
        );
        assert!(!out.contains("<img"), "{out}");
        assert!(!out.contains("evil.example"), "{out}");
        assert!(out.contains("a tracking pixel"), "{out}");
        assert!(out.contains("<strong>bold</strong>"), "{out}");
        assert!(out.contains("<li>one</li>"), "{out}");
    }

    #[test]
    fn autolinks_and_reference_links_are_checked_too() {
        let out = markdown("<javascript:alert(1)> [x][r]\n\n[r]: javascript:alert(2)");
        assert!(
            !out.to_ascii_lowercase().contains("href=\"javascript"),
            "{out}"
        );
    }

    fn record(status: RequestStatus) -> RequestRecord {
        RequestRecord {
            id: "req_1".into(),
            address_id: "addr_1".into(),
            title: "Ship <b>it</b>?".into(),
            body: None,
            options: vec!["Ship".into(), "Hold".into()],
            comment: CommentMode::Optional,
            created_at: 1_796_000_000_000,
            expires_at: 1_796_036_650_123,
            secret_hash: DUMMY_HASH.into(),
            status,
            answer: None,
        }
    }

    #[test]
    fn the_page_names_the_asker_escaped_and_marks_times_for_the_script() {
        let r = record(RequestStatus::Open);
        let out = page_markup(&r, Some("deploy <script>x</script> watcher"), 0, None).into_string();
        assert!(
            out.contains(
                "<p class=\"asker\">deploy &lt;script&gt;x&lt;/script&gt; watcher asks:</p>"
            ),
            "{out}"
        );
        assert!(!out.contains("<script>x"), "{out}");
        assert!(
            out.contains(
                "Open until <time datetime=\"2026-11-30T11:04:10.123Z\">Mon 30 Nov 2026, 11:04 UTC</time>."
            ),
            "{out}"
        );
        // One script, ours, from this origin; no inline script or style.
        assert_eq!(out.matches("<script").count(), 1, "{out}");
        assert!(out.contains("<script src=\"/r/page.js\" defer></script>"));
        assert!(!out.contains("<style") && !out.contains(" style="), "{out}");
        let nameless = page_markup(&r, None, 0, None).into_string();
        assert!(!nameless.contains("asks:"), "{nameless}");
    }

    #[test]
    fn an_answer_and_an_expiry_show_their_times() {
        let mut r = record(RequestStatus::Answered);
        r.answer = Some(Answer {
            choice: "Ship".into(),
            comment: None,
            answered_at: 0,
        });
        let out = page_markup(&r, None, 0, None).into_string();
        assert!(
            out.contains("Recorded <time datetime=\"1970-01-01T00:00:00.000Z\">Thu 1 Jan 1970, 00:00 UTC</time>."),
            "{out}"
        );
        let out = page_markup(&record(RequestStatus::Open), None, r.expires_at, None).into_string();
        assert!(out.contains("expired unanswered"), "{out}");
        assert!(
            out.contains("<time datetime=\"2026-11-30T11:04:10.123Z\">"),
            "{out}"
        );
    }

    #[test]
    fn the_script_only_rewrites_times_as_text() {
        for forbidden in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(!PAGE_JS.contains(forbidden), "page.js uses {forbidden}");
        }
        assert!(PAGE_JS.contains("textContent") && PAGE_JS.contains("toLocaleString"));
        // The viewer's rules come first, then the page's own.
        assert!(PAGE_CSS.starts_with(include_str!("assets/inbox.css")));
    }

    #[test]
    fn form_fields_keep_the_first_of_a_repeated_field() {
        let fields =
            form_fields(b"choice=Approve&comment=a+b%26c&choice=Reject").unwrap_or_default();
        assert_eq!(fields["choice"], "Approve");
        assert_eq!(fields["comment"], "a b&c");
    }
}
