//! The email routes (docs/API.md §10–§11): the raw-MIME webhook door, and reading a stored
//! message's attachments and raw bytes, and replaying it. Re-exported by `handlers`, so the
//! route table names them like every other handler.

use crate::error::ApiResult;
use axum::body::Body;
use axum::extract::State;
use axum::response::IntoResponse;
use http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::ids;
use crate::domain::time::format_rfc3339;
use crate::dto::{ErrorBody, EventRefView};
use crate::extract::*;
use crate::inputs::ReplayEmailRequest;
use crate::store::Download;
use crate::{json_response, ApiError, AppState};

/// `POST /api/v1/email/inbound`: what happened to each recipient.
#[derive(Debug, Serialize, ToSchema)]
pub struct InboundResult {
    /// The recipients whose address's feed has the message (also when it was already there: a
    /// resent message is one event).
    pub accepted: Vec<String>,
    pub rejected: Vec<RejectedRecipient>,
}

/// A recipient that did not get the message.
#[derive(Debug, Serialize, ToSchema)]
pub struct RejectedRecipient {
    pub rcpt: String,
    /// An error code of docs/API.md §9: `not_found` (no such address), `address_gone`,
    /// `quota_exceeded` (its feed or its stored email is full: retry later),
    /// `payload_too_large` / `invalid_request` (the message is refused), `unavailable`
    /// (retry), `internal`.
    pub code: String,
    /// The SMTP reply a mail server would give, for relays that bounce (`550 5.1.1 …`).
    pub smtp: String,
    /// Whether sending the same message again later may succeed (a 4xx SMTP reply).
    pub temporary: bool,
}

/// A download's answer with `?redirect=false` when the deployment does not answer the bytes
/// itself (docs/API.md §11): where to fetch them without a token, and until when.
#[derive(Debug, Serialize, ToSchema)]
pub struct DownloadLinkView {
    /// Serves the bytes with the same `Content-Type` and `Content-Disposition`; no token.
    pub url: String,
    /// RFC 3339; the link answers 403 after it.
    pub expires_at: String,
}

/// The response header that marks a [`DownloadLinkView`] answer, so a client never takes a
/// downloaded file's own bytes (which may well be JSON) for a link.
pub const DOWNLOAD_HEADER: &str = "agentaddress-download";

/// The downloads' `redirect` query parameter: `true` (the default) answers a link as a `303`,
/// `false` as a [`DownloadLinkView`] — for a script that must not follow a redirect to another
/// origin (the inbox page). Other parameters are ignored, as on every route.
fn redirect_param(uri: &Uri) -> Result<bool, ApiError> {
    let mut redirect = true;
    for (name, value) in form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()) {
        if name == "redirect" {
            redirect = match value.as_ref() {
                "true" => true,
                "false" => false,
                _ => return Err(ApiError::invalid("redirect must be true or false.")),
            };
        }
    }
    Ok(redirect)
}

/// `POST {root}/email/replay`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReplayResult {
    pub duplicate: bool,
    pub event: EventRefView,
}

/// The recipients (`rcpt`, repeatable) and envelope sender (`mail_from`, optional) of the
/// webhook door's query string.
fn inbound_query(uri: &Uri, max_recipients: u64) -> Result<(Vec<String>, String), ApiError> {
    let mut rcpts = Vec::new();
    let mut mail_from = None;
    for (name, value) in form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()) {
        match name.as_ref() {
            "rcpt" => {
                if value.is_empty() || value.len() > 320 {
                    return Err(ApiError::invalid(
                        "Each `rcpt` must be an email address of 1 to 320 characters.",
                    ));
                }
                if rcpts.len() as u64 >= max_recipients {
                    return Err(ApiError::invalid(format!(
                        "A message may name at most {max_recipients} recipients (`rcpt`)."
                    )));
                }
                rcpts.push(value.into_owned());
            }
            "mail_from" => {
                if mail_from.is_some() || value.len() > 320 || value.chars().any(char::is_control) {
                    return Err(ApiError::invalid(
                        "`mail_from` must be given once, at most 320 characters without control characters.",
                    ));
                }
                mail_from = Some(value.into_owned());
            }
            _ => {}
        }
    }
    if rcpts.is_empty() {
        return Err(ApiError::invalid(
            "Name the recipients with `rcpt` (e.g. ?rcpt=addr_…@inbox.example).",
        ));
    }
    Ok((rcpts, mail_from.unwrap_or_default()))
}

#[utoipa::path(
    post, path = "/api/v1/email/inbound", tag = "email",
    params(
        ("rcpt" = Vec<String>, Query, description = "A recipient (repeat for each)"),
        ("mail_from" = String, Query, description = "The envelope sender (empty or absent: the null sender)"),
    ),
    request_body(content = Vec<u8>, description = "The raw RFC 822 message (any content type is accepted; `message/rfc822` is usual)", content_type = "application/octet-stream"),
    security(("ingest" = [])),
    responses(
        (status = 200, description = "Each recipient's outcome", body = InboundResult),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, description = "Inbound email over HTTP is not enabled", body = ErrorBody),
        (status = 413, body = ErrorBody),
    )
)]
pub async fn inbound_email(
    State(state): State<AppState>, Now(now): Now, uri: Uri, headers: HeaderMap, body: Body,
) -> ApiResult {
    let Some(secret_hash) = state.config.email_ingest_secret_hash.as_deref() else {
        return Err(ApiError::not_found(
            "Inbound email over HTTP is not enabled on this server (it needs an ingest secret).",
        ));
    };
    let presented = bearer_token(&headers).unwrap_or_default();
    if !ids::verify_secret(presented, secret_hash) {
        return Err(ApiError::Unauthorized);
    }
    let limits = &state.config.limits;
    let (rcpts, mail_from) = inbound_query(&uri, limits.max_email_recipients)?;
    let raw = read_body(&headers, body, limits.max_email_bytes, "email message").await?;
    let delivery = agentaddress_email::deliver_email(
        state.store.as_ref(),
        &agentaddress_email::Inbound {
            raw: &raw,
            mail_from: &mail_from,
            rcpt_to: &rcpts,
            provider: agentaddress_email::Provider::Webhook,
            auth: agentaddress_email::AuthResults::default(),
            email_id_hint: None,
        },
        &state.config.email_domain,
        limits,
        now,
    )
    .await;
    Ok(json_response(
        StatusCode::OK,
        &InboundResult {
            accepted: delivery.accepted.into_iter().map(|a| a.rcpt).collect(),
            rejected: delivery
                .rejected
                .into_iter()
                .map(|r| RejectedRecipient {
                    code: r.rejection.code().to_owned(),
                    smtp: r.rejection.smtp_reply().to_string(),
                    temporary: r.rejection.is_temporary(),
                    rcpt: r.rcpt,
                })
                .collect(),
        },
    ))
}

/// A download of untrusted bytes: never rendered, never sniffed, never cached. When the store
/// says the deployment cannot answer that many bytes itself (on AWS: over 4 MiB), a `303 See
/// Other` to the short-lived link it gives, which answers the same content type and disposition
/// (or, without `redirect`, a [`DownloadLinkView`] naming it).
async fn download(
    state: &AppState, redirect: bool, address_id: &str, email_id: &str, content_type: &str,
    filename: &str, bytes: Vec<u8>,
) -> ApiResult {
    let content_type = HeaderValue::from_str(content_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    let disposition = HeaderValue::from_str(&format!(
        "attachment; filename*=UTF-8''{}",
        percent_encode_filename(filename)
    ))
    .unwrap_or(HeaderValue::from_static("attachment"));
    let link = state
        .store
        .download_link(
            address_id,
            email_id,
            &Download {
                content_type: content_type.to_str().unwrap_or("application/octet-stream"),
                disposition: disposition.to_str().unwrap_or("attachment"),
                bytes: &bytes,
            },
        )
        .await?;
    let no_store = (
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-store"),
    );
    let referrer = (
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    match link {
        Some(link) if !redirect => {
            let valid_ms = i64::try_from(link.valid_for.as_millis()).unwrap_or(i64::MAX);
            let view = DownloadLinkView {
                url: link.url,
                expires_at: format_rfc3339(state.clock.now().saturating_add(valid_ms)),
            };
            let mut response = json_response(StatusCode::OK, &view);
            let headers = response.headers_mut();
            headers.insert(DOWNLOAD_HEADER, HeaderValue::from_static("link"));
            headers.insert(no_store.0, no_store.1);
            headers.insert(referrer.0, referrer.1);
            return Ok(response);
        }
        Some(link) => {
            let location = HeaderValue::from_str(&link.url).map_err(|e| {
                ApiError::Internal(format!("download link is no header value: {e}"))
            })?;
            return Ok((
                StatusCode::SEE_OTHER,
                [
                    (header::LOCATION, location),
                    no_store,
                    // The link is a bearer of the bytes: never sent on as a referrer.
                    referrer,
                ],
            )
                .into_response());
        }
        None => {}
    }
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_DISPOSITION, disposition),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("sandbox"),
            ),
            no_store,
        ],
        bytes,
    )
        .into_response())
}

/// RFC 8187 `attr-char`s stay, every other byte is `%XX`.
fn percent_encode_filename(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A declared content type that is a plain `type/subtype` (parameters dropped), else
/// `application/octet-stream`.
fn safe_content_type(declared: &str) -> String {
    let essence = declared.split(';').next().unwrap_or_default().trim();
    let ok = essence.len() <= 127
        && essence.split_once('/').is_some_and(|(t, s)| {
            !t.is_empty()
                && !s.is_empty()
                && essence
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+/".contains(&b))
        });
    if ok {
        essence.to_ascii_lowercase()
    } else {
        "application/octet-stream".into()
    }
}

#[utoipa::path(
    get, path = "/api/v1/addresses/{address_id}/events/{event_id}/attachments/{attachment_id}",
    tag = "email",
    params(("address_id" = String, Path), ("event_id" = String, Path),
           ("attachment_id" = String, Path),
           ("redirect" = Option<bool>, Query, description = "`false`: where the answer would be a `303`, answer 200 `{url, expires_at}` (with the header `AgentAddress-Download: link`) instead")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The attachment's decoded bytes, with its declared content type", content_type = "application/octet-stream"),
        (status = 303, description = "Too large for this deployment to answer itself (on AWS, over 4 MiB): `Location` is a link that serves it for 5 minutes without a token"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 410, body = ErrorBody),
    )
)]
pub async fn get_attachment(
    State(state): State<AppState>, Authenticated {
        address_id, now, ..
    }: Authenticated,
    EventId(event_id): EventId, AttachmentId(attachment_id): AttachmentId, uri: Uri,
) -> ApiResult {
    let redirect = redirect_param(&uri)?;
    let stored = state
        .store
        .email_of_event(&address_id, &event_id, now)
        .await?;
    let limits = agentaddress_email::email_limits(&state.config.limits);
    let email_id = stored.email_id.clone();
    // Parsing a stored message is CPU work of up to the raw limit: off the async threads.
    let found = tokio::task::spawn_blocking(move || {
        agentaddress_email::attachment(&stored.raw, &attachment_id, &limits)
    })
    .await
    .map_err(|e| ApiError::Internal(format!("attachment extraction failed: {e}")))?;
    let attachment = found.ok_or_else(|| ApiError::not_found("No such attachment."))?;
    download(
        &state,
        redirect,
        &address_id,
        &email_id,
        &safe_content_type(&attachment.content_type),
        &attachment.filename,
        attachment.bytes,
    )
    .await
}

#[utoipa::path(
    get, path = "/api/v1/addresses/{address_id}/events/{event_id}/raw", tag = "email",
    params(("address_id" = String, Path), ("event_id" = String, Path),
           ("redirect" = Option<bool>, Query, description = "`false`: where the answer would be a `303`, answer 200 `{url, expires_at}` (with the header `AgentAddress-Download: link`) instead")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The message as received", content_type = "message/rfc822"),
        (status = 303, description = "Too large for this deployment to answer itself (on AWS, over 4 MiB): `Location` is a link that serves it for 5 minutes without a token"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 410, body = ErrorBody),
    )
)]
pub async fn get_raw_email(
    State(state): State<AppState>, Authenticated {
        address_id, now, ..
    }: Authenticated,
    EventId(event_id): EventId, uri: Uri,
) -> ApiResult {
    let redirect = redirect_param(&uri)?;
    let stored = state
        .store
        .email_of_event(&address_id, &event_id, now)
        .await?;
    download(
        &state,
        redirect,
        &address_id,
        &stored.email_id,
        "message/rfc822",
        &format!("{}.eml", stored.email_id),
        stored.raw,
    )
    .await
}

impl JsonRequest for ReplayEmailRequest {
    /// The largest body of `POST {root}/email/replay`.
    fn limit(_: &AppState) -> u64 {
        4096
    }

    const CONTENT_TYPE_FIRST: bool = true;
}

/// The answer to a replay of a message this address already has: its event, as a duplicate.
async fn delivered(
    state: &AppState, address_id: &str, email_id: &str, now: crate::domain::Millis,
) -> Result<Option<axum::response::Response>, ApiError> {
    match state.store.email_by_id(address_id, email_id, now).await {
        Ok(stored) => Ok(Some(json_response(
            StatusCode::OK,
            &ReplayResult {
                duplicate: true,
                event: stored.event.into(),
            },
        ))),
        Err(crate::store::StoreError::NotFound) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[utoipa::path(
    post, path = "/api/v1/addresses/{address_id}/email/replay", tag = "email",
    params(("address_id" = String, Path)),
    request_body = ReplayEmailRequest,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "The stored message's event was appended", body = ReplayResult),
        (status = 200, description = "Its event is in the feed already", body = ReplayResult),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 410, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
    )
)]
pub async fn replay_email(
    State(state): State<AppState>, Authenticated {
        address_id, now, ..
    }: Authenticated,
    JsonBody { value: request, .. }: JsonBody<ReplayEmailRequest>,
) -> ApiResult {
    // A stored message always has its event (they commit together): replaying answers it.
    if let Some(found) = delivered(&state, &address_id, &request.email_id, now).await? {
        return Ok(found);
    }
    // A message the provider holds undelivered (on AWS: what SES wrote, e.g. a notification
    // that went to the dead-letter queue) is delivered now, to this address only.
    let not_found =
        || ApiError::not_found("No stored message with this email_id for this address.");
    let Some(raw) = state.store.pending_email(&request.email_id).await? else {
        // The provider removes its copy only after the event is committed: one delivered
        // between the look above and this one has its event now.
        return match delivered(&state, &address_id, &request.email_id, now).await? {
            Some(found) => Ok(found),
            None => Err(not_found()),
        };
    };
    let address = state
        .store
        .get_address(&address_id, now)
        .await?
        .ok_or_else(not_found)?;
    let limits = &state.config.limits;
    match agentaddress_email::deliver_ses(
        state.store.as_ref(),
        &raw,
        &request.email_id,
        &state.config.email_domain,
        limits,
        now,
        Some(&address.email),
    )
    .await
    {
        agentaddress_email::ProviderOutcome::Settled(delivery)
        | agentaddress_email::ProviderOutcome::Retry(delivery, _)
            if !delivery.accepted.is_empty() =>
        {
            let accepted = &delivery.accepted[0];
            Ok(json_response(
                if accepted.duplicate {
                    StatusCode::OK
                } else {
                    StatusCode::CREATED
                },
                &ReplayResult {
                    duplicate: accepted.duplicate,
                    event: accepted.event.clone().into(),
                },
            ))
        }
        agentaddress_email::ProviderOutcome::Settled(delivery) => {
            // Refused for good by this address's sender rules (set after the message came):
            // a replay is one more refused arrival (counted in `email.refused_count`), and
            // the answer says why, as for any other refusal of the stored message.
            match delivery.rejected.first().map(|r| &r.rejection) {
                Some(refusal @ agentaddress_email::Rejection::SenderRefused(_)) => {
                    Err(ApiError::invalid(format!(
                        "The stored message is refused: {}. Change or remove the sender \
                         rules (PUT or DELETE {{root}}/email/policy) to let it in, then replay \
                         it.",
                        refusal.smtp_reply().text
                    )))
                }
                _ => Err(not_found()),
            }
        }
        agentaddress_email::ProviderOutcome::Retry(delivery, _) => {
            match delivery.rejected.first().map(|r| &r.rejection) {
                Some(r) => Err(rejection_error(r)),
                None => Err(not_found()),
            }
        }
        agentaddress_email::ProviderOutcome::NoRecipient => Err(not_found()),
        agentaddress_email::ProviderOutcome::Refused(why) => Err(ApiError::invalid(format!(
            "The stored message is refused: {why}"
        ))),
    }
}

/// The API error of a temporary rejection at replay.
fn rejection_error(r: &agentaddress_email::Rejection) -> ApiError {
    use agentaddress_email::Rejection;
    match r {
        Rejection::FeedFull => ApiError::QuotaExceeded,
        Rejection::StorageFull => ApiError::EmailStorageFull,
        Rejection::AddressGone => ApiError::AddressGone,
        Rejection::Unavailable => ApiError::Unavailable("the store is unavailable".into()),
        other => ApiError::Internal(format!("replay: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filenames_are_percent_encoded() {
        assert_eq!(percent_encode_filename("a b.pdf"), "a%20b.pdf");
        assert_eq!(
            percent_encode_filename("r\u{e9}sum\u{e9}\";.txt"),
            "r%C3%A9sum%C3%A9%22%3B.txt"
        );
    }

    #[test]
    fn content_types_are_plain_or_octet_stream() {
        assert_eq!(
            safe_content_type("Application/PDF; name=x"),
            "application/pdf"
        );
        assert_eq!(safe_content_type("text/html"), "text/html");
        assert_eq!(
            safe_content_type("text/html\r\nX-Evil: 1"),
            "application/octet-stream"
        );
        assert_eq!(safe_content_type(""), "application/octet-stream");
        assert_eq!(safe_content_type("nonsense"), "application/octet-stream");
    }

    #[test]
    fn inbound_queries() {
        let uri: Uri = "/x?rcpt=a%40b&mail_from=s%40t&rcpt=c%40d"
            .parse()
            .expect("uri");
        assert_eq!(
            inbound_query(&uri, 10).expect("parses"),
            (vec!["a@b".to_owned(), "c@d".to_owned()], "s@t".to_owned())
        );
        let uri: Uri = "/x?mail_from=s".parse().expect("uri");
        assert!(inbound_query(&uri, 10).is_err(), "a recipient is required");
        let uri: Uri = "/x?rcpt=a&rcpt=b&rcpt=c".parse().expect("uri");
        assert!(inbound_query(&uri, 2).is_err(), "too many recipients");
    }
}
