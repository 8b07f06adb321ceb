//! The person's page of a request (docs/API.md §12–§13): server-rendered HTML from `maud`
//! (every interpolated value is escaped), the body's Markdown through `pulldown-cmark` with raw
//! HTML turned into text, images into their text, and links kept only for `http`, `https` and
//! `mailto` (with `rel="noopener noreferrer nofollow"`). No script at all; one stylesheet from
//! this service (`/r/page.css`), so the page works under `default-src 'self'` and reads fine
//! without it.

use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use maud::{html, Markup, PreEscaped, DOCTYPE};
use pulldown_cmark::{CowStr, Event, Options, Parser, Tag, TagEnd};
use serde_json::{Map, Value};

use super::request_routes::page_headers;
use super::ApiError;
use crate::domain::request::{CommentMode, RequestStatus, COMMENT_MAX_CHARS};
use crate::domain::time::format_rfc3339;
use crate::domain::Millis;
use crate::store::RequestRecord;

/// Compared against when there is no request, so both paths hash and compare.
pub const DUMMY_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The page's stylesheet (`GET /r/page.css`).
pub const PAGE_CSS: &str = include_str!("request_page.css");

fn layout(title: &str, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="no-referrer";
                title { (title) }
                link rel="stylesheet" href="/r/page.css";
            }
            body {
                main { (content) }
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

/// The page of request `r` at `now`: its question and form while it is open (with `error`, the
/// reason the last answer was refused), else the recorded decision or its expiry.
pub fn page(r: &RequestRecord, now: Millis, error: Option<&str>) -> Response {
    let status = r.status_at(now);
    let content = html! {
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
                p class="note" { "Open until " (format_rfc3339(r.expires_at)) "." }
            }
            RequestStatus::Answered => {
                @if let Some(a) = &r.answer {
                    p class="decision" {
                        "Answered: " strong { (a.choice) }
                    }
                    @if let Some(comment) = &a.comment {
                        blockquote { (comment) }
                    }
                    p class="note" { "Recorded " (format_rfc3339(a.answered_at)) ". The answer cannot be changed." }
                }
            }
            RequestStatus::Expired => {
                p class="decision" { "This request expired unanswered." }
            }
        }
    };
    html_response(StatusCode::OK, layout(&r.title, content))
}

/// The fields of a form-encoded body, for [`super::request::parse_fields`] (a repeated field
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

    #[test]
    fn form_fields_keep_the_first_of_a_repeated_field() {
        let fields =
            form_fields(b"choice=Approve&comment=a+b%26c&choice=Reject").unwrap_or_default();
        assert_eq!(fields["choice"], "Approve");
        assert_eq!(fields["comment"], "a b&c");
    }
}
