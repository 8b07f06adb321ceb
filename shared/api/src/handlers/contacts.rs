//! Outbound email to confirmed contacts (docs/API.md §16): `GET`/`POST {root}/email/contacts`
//! (a code mailed to the contact; the code given back confirms it) and `POST {root}/email/send`
//! (recorded with its `email.sent` event, then delivered by [`crate::send_delivery::attempt_send`]).
//! Re-exported by `handlers`, so the route table names them like the others.

use std::sync::Arc;

use crate::error::ApiResult;
use axum::extract::{FromRequestParts, State};
use axum::response::Response;
use http::request::Parts;
use http::StatusCode;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::domain::mail_out::{self, code_hash, CODE_VALID_MS};
use crate::domain::time::format_rfc3339;
use crate::domain::{ids, Ingress, Millis};
use crate::dto::{ErrorBody, EventRefView};
use crate::extract::*;
use crate::inputs::{ContactBody, SendBody};
use crate::relay::{Mail, RelayError};
use crate::send_delivery::{clean_error, Outbound};
use crate::store::{
    CodeCheck, CodeIssued, CodeMailCap, ContactRecord, IdempotencyClaim, NewCode, NewEvent,
    NewSend, OutboundMessage, StoreError,
};
use crate::{json_response, ApiError, AppState};

/// A contact (docs/API.md §16).
#[derive(Debug, Serialize, ToSchema)]
pub struct ContactView {
    pub email: String,
    /// `pending` or `confirmed`.
    pub status: String,
    /// RFC 3339.
    pub created_at: String,
    pub confirmed_at: Option<String>,
}

impl ContactView {
    fn of(c: &ContactRecord) -> Self {
        Self {
            email: c.email.clone(),
            status: c.status.as_str().into(),
            created_at: format_rfc3339(c.created_at),
            confirmed_at: c.confirmed_at.map(format_rfc3339),
        }
    }
}

/// `GET {root}/email/contacts`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ContactsEnvelope {
    pub contacts: Vec<ContactView>,
    /// Whether this deployment can send email (a sender and a relay are configured).
    pub outbound_configured: bool,
}

/// `POST {root}/email/contacts`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ContactEnvelope {
    pub contact: ContactView,
    /// When the code just mailed stops being valid (only when one was mailed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code_expires_at: Option<String>,
}

impl JsonRequest for ContactBody {
    /// The largest body of `POST {root}/email/contacts`.
    fn limit(_: &AppState) -> u64 {
        4 * 1024
    }
}

impl JsonRequest for SendBody {
    /// The largest body of `POST {root}/email/send`: a 10,000-byte text of escaped characters,
    /// with room for the rest.
    fn limit(_: &AppState) -> u64 {
        64 * 1024
    }
}

/// `POST {root}/email/send`'s answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct SendAccepted {
    /// Always `accepted`: the send is recorded, its `email.sent` event appended, and delivery
    /// follows (a failure is reported as `email.send_failed`).
    pub status: String,
    /// The `email.sent` event.
    pub event: EventRefView,
    /// `true` when an earlier send with this Idempotency-Key recorded it: nothing is sent twice.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
}

/// This deployment's sender and relay: 503 `outbound_not_configured` without them (docs/API.md
/// §16), after authentication and before the body.
pub struct Sender(pub Arc<Outbound>);

impl FromRequestParts<AppState> for Sender {
    type Rejection = ApiError;

    async fn from_request_parts(_: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        state
            .outbound
            .clone()
            .map(Sender)
            .ok_or(ApiError::OutboundNotConfigured)
    }
}

/// The `Idempotency-Key` of `POST {root}/email/send`, which requires one (docs/API.md §16).
pub struct SendKey(pub Vec<u8>);

impl<S: Send + Sync> FromRequestParts<S> for SendKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let key = idempotency_key(&parts.headers)?.ok_or_else(|| {
            ApiError::invalid(
                "POST …/email/send needs an Idempotency-Key header (1 to 255 printable ASCII \
                 characters): a retry with the same key is never sent twice.",
            )
        })?;
        Ok(SendKey(key))
    }
}

fn contact_not_found(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound => ApiError::not_found(
            "No such contact: POST its email alone first, to have a code mailed to it.",
        ),
        StoreError::QuotaExceeded => ApiError::ContactsFull,
        StoreError::DailyLimit {
            retry_after_seconds,
        } => ApiError::DailyLimit {
            retry_after: retry_after_seconds,
            message: "This contact was mailed its 3 codes of the day; ask again after 00:00 UTC.",
        },
        StoreError::CodeMailCap {
            cap: CodeMailCap::Recipient,
            retry_after_seconds,
        } => ApiError::DailyLimit {
            retry_after: retry_after_seconds,
            message: "This mailbox was mailed its most codes of the day, by all addresses of \
                      this service together; ask again after 00:00 UTC.",
        },
        StoreError::CodeMailCap {
            cap: CodeMailCap::Client,
            retry_after_seconds,
        } => ApiError::DailyLimit {
            retry_after: retry_after_seconds,
            message: "This client (IP address) asked for its most code mails of the day, for \
                      all its addresses together; ask again after 00:00 UTC.",
        },
        other => other.into(),
    }
}

#[utoipa::path(
    get, path = "/api/v1/addresses/{address_id}/email/contacts", tag = "outbound",
    params(("address_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The address's contacts, and whether this deployment sends email", body = ContactsEnvelope),
        (status = 401, body = ErrorBody), (status = 410, body = ErrorBody),
    )
)]
pub async fn list_contacts(
    State(state): State<AppState>, Authenticated {
        address_id, now, ..
    }: Authenticated,
) -> ApiResult {
    let contacts = state.store.list_contacts(&address_id, now).await?;
    Ok(json_response(
        StatusCode::OK,
        &ContactsEnvelope {
            contacts: contacts.iter().map(ContactView::of).collect(),
            outbound_configured: state.outbound.is_some(),
        },
    ))
}

#[utoipa::path(
    post, path = "/api/v1/addresses/{address_id}/email/contacts", tag = "outbound",
    params(("address_id" = String, Path)),
    request_body = ContactBody,
    security(("bearer" = [])),
    responses(
        (status = 202, description = "A code was mailed to the contact (pending until it is given back)", body = ContactEnvelope),
        (status = 200, description = "Confirmed (now, or before)", body = ContactEnvelope),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 410, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, body = ErrorBody), (status = 503, body = ErrorBody),
    )
)]
pub async fn add_contact(
    State(state): State<AppState>,
    Authenticated {
        address_id,
        address,
        now,
    }: Authenticated,
    Client(client): Client, Sender(outbound): Sender,
    JsonBody {
        value: ContactBody { email, code },
        ..
    }: JsonBody<ContactBody>,
) -> ApiResult {
    if let Some(code) = code {
        let hash = code_hash(&address_id, &email, &code);
        let checked = state
            .store
            .check_contact_code(&address_id, &email, &hash, now)
            .await
            .map_err(contact_not_found)?;
        return match checked {
            CodeCheck::Confirmed(c) => {
                tracing::info!(%address_id, "contact confirmed");
                Ok(contact_answer(StatusCode::OK, &c, None))
            }
            CodeCheck::AlreadyConfirmed(c) => Ok(contact_answer(StatusCode::OK, &c, None)),
            CodeCheck::Wrong { tries_left } => Err(ApiError::InvalidCode { tries_left }),
            CodeCheck::Spent => Err(ApiError::InvalidCode { tries_left: 0 }),
            CodeCheck::Expired => Err(ApiError::CodeExpired),
        };
    }
    let code = mail_out::new_code();
    let expires_at = now + CODE_VALID_MS;
    let issued = state
        .store
        .issue_contact_code(
            &address_id,
            NewCode {
                email: email.clone(),
                code_hash: code_hash(&address_id, &email, &code),
                expires_at,
                // Code mails count against the client asking, whatever its addresses
                // (docs/API.md §16): many addresses created from one IP mail few codes.
                client,
            },
            &state.config.limits,
            now,
        )
        .await
        .map_err(contact_not_found)?;
    let contact = match issued {
        CodeIssued::AlreadyConfirmed(c) => return Ok(contact_answer(StatusCode::OK, &c, None)),
        CodeIssued::Issued(c) => c,
    };
    let per_day = state.config.limits.code_mails_per_recipient_per_day;
    let mail = code_mail(&outbound, &address.email, &email, &code, per_day, now);
    match outbound.relay.send(&mail).await {
        Ok(()) => {
            tracing::info!(%address_id, "contact code mailed");
            Ok(contact_answer(
                StatusCode::ACCEPTED,
                &contact,
                Some(expires_at),
            ))
        }
        Err(RelayError::Temporary(e)) => {
            tracing::warn!(%address_id, error = %e, "the relay did not take a code mail");
            Err(ApiError::Unavailable(
                "the mail relay did not take the code mail".into(),
            ))
        }
        Err(RelayError::Permanent(e)) => Err(ApiError::invalid(format!(
            "The mail relay refused to deliver to {email}: {}",
            clean_error(&e)
        ))),
    }
}

fn contact_answer(
    status: StatusCode, c: &ContactRecord, code_expires_at: Option<Millis>,
) -> Response {
    json_response(
        status,
        &ContactEnvelope {
            contact: ContactView::of(c),
            code_expires_at: code_expires_at.map(format_rfc3339),
        },
    )
}

/// The code mail: nothing in it is the agent's own text (the address is a random id), so it
/// cannot be used to send anything else.
fn code_mail(
    outbound: &Outbound, address_email: &str, to: &str, code: &str, per_day: u64, now: Millis,
) -> Mail {
    let id = mail_out::new_send_id().replacen(mail_out::SEND_PREFIX, "code_", 1);
    let minutes = CODE_VALID_MS / 60_000;
    Mail {
        from: outbound.from.clone(),
        to: to.to_owned(),
        reply_to: Some(address_email.to_owned()),
        subject: format!("Your code to receive email from {address_email}"),
        text: format!(
            "{address_email} is the address of an AI agent. It asks to send you email.\r\n\
             \r\n\
             If you agree, give it this code: {code}\r\n\
             \r\n\
             The code is valid for {minutes} minutes (until {}). If you do not know what this \
             is about, ignore this message: nothing is sent to you unless the code is given \
             back, and at most {per_day} codes are mailed to you a day, whoever asks.\r\n",
            format_rfc3339(now + CODE_VALID_MS)
        ),
        message_id: mail_out::message_id(&id, &outbound.from),
        in_reply_to: None,
        references: Vec::new(),
    }
}

#[utoipa::path(
    post, path = "/api/v1/addresses/{address_id}/email/send", tag = "outbound",
    params(("address_id" = String, Path), ("Idempotency-Key" = String, Header, description = "Required: the same key again answers the first send, and nothing is sent twice")),
    request_body = SendBody,
    security(("bearer" = [])),
    responses(
        (status = 202, description = "Recorded with its `email.sent` event; delivery follows", body = SendAccepted),
        (status = 200, description = "An earlier send with this Idempotency-Key (nothing is sent again)", body = SendAccepted),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 410, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
pub async fn send_email(
    State(state): State<AppState>,
    Current(Authenticated {
        address_id,
        address,
        now,
    }): Current,
    Sender(outbound): Sender, SendKey(key): SendKey, JsonBody { value, bytes }: JsonBody<SendBody>,
) -> ApiResult {
    let SendBody {
        to,
        subject,
        text,
        reply_to_event_id,
    } = value;
    let (subject, in_reply_to, references) = match reply_to_event_id {
        None => (subject, None, Vec::new()),
        Some(event_id) => {
            let (parent, refs) = replied_email(&state, &address_id, &event_id, now).await?;
            (mail_out::reply_subject(&subject), parent, refs)
        }
    };
    let send_id = mail_out::new_send_id();
    let message_id = mail_out::message_id(&send_id, &outbound.from);
    let send = NewSend {
        claim: IdempotencyClaim {
            key_hash: ids::sha256_hex(&key),
            body_hash: ids::sha256_hex(&bytes),
        },
        event: NewEvent {
            event_type: "email.sent".into(),
            source: None,
            ingress: Ingress::Outbound,
            data: mail_out::email_sent_data(
                &to,
                &subject,
                &text,
                &message_id,
                in_reply_to.as_deref(),
            ),
            http: None,
        },
        message: OutboundMessage {
            to,
            reply_to: address.email.clone(),
            subject,
            text,
            message_id,
            in_reply_to,
            references,
        },
        id: send_id,
    };
    let recorded = state
        .store
        .record_send(&address_id, send, &state.config.limits, now)
        .await
        .map_err(|e| match e {
            StoreError::DailyLimit {
                retry_after_seconds,
            } => ApiError::DailyLimit {
                retry_after: retry_after_seconds,
                message: "This address sent its most emails of the day; sending resumes at \
                          00:00 UTC.",
            },
            other => other.into(),
        })?;
    if recorded.status == crate::domain::mail_out::SendStatus::Pending {
        if let Err(e) = outbound
            .dispatch
            .dispatch(&address_id, &recorded.send_id)
            .await
        {
            // Recorded, but nothing will deliver it until it is handed on: the client retries
            // with the same key (a duplicate, handed on again).
            tracing::warn!(%address_id, send_id = %recorded.send_id, error = %e,
                "a recorded send could not be handed on; it stays pending");
            return Err(ApiError::Unavailable(
                "the send is recorded but could not be queued; retry with the same \
                 Idempotency-Key"
                    .into(),
            ));
        }
    }
    if !recorded.duplicate {
        tracing::info!(%address_id, send_id = %recorded.send_id, "email send recorded");
    }
    Ok(json_response(
        if recorded.duplicate {
            StatusCode::OK
        } else {
            StatusCode::ACCEPTED
        },
        &SendAccepted {
            status: "accepted".into(),
            event: recorded.event.into(),
            duplicate: recorded.duplicate,
        },
    ))
}

/// The threading of a reply to event `event_id`: it must be an `email.received` event of this
/// address (404 when there is no such event, 400 when it is another kind).
async fn replied_email(
    state: &AppState, address_id: &str, event_id: &str, now: Millis,
) -> Result<(Option<String>, Vec<String>), ApiError> {
    let not_found = || {
        ApiError::not_found(format!(
            "`reply_to_event_id`: no event {event_id:?} in this address's feed."
        ))
    };
    if ids::event_sequence(event_id).is_none() {
        return Err(not_found());
    }
    let event = match state.store.get_event(address_id, event_id, now).await {
        Ok(e) => e,
        Err(StoreError::NotFound) => return Err(not_found()),
        Err(e) => return Err(e.into()),
    };
    if event.event_type != "email.received" {
        return Err(ApiError::invalid(format!(
            "`reply_to_event_id`: event {event_id} is a {} event, not an email.received one.",
            event.event_type
        )));
    }
    let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
    let references: Vec<String> = data["references"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Ok(mail_out::threading(
        data["message_id"].as_str(),
        &references,
    ))
}
