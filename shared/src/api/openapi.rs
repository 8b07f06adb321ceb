//! `/openapi.json` (OpenAPI 3.1, generated from the handlers' annotations with `utoipa`) and
//! `/skill.md`.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::server::Server;
use utoipa::{Modify, OpenApi};

use super::dto::*;
use super::handlers::*;
use crate::domain::Limits;

/// Instructions for an agent; `{base}` is replaced by the public base URL.
pub const SKILL_MD: &str = include_str!("skill.md");

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("The address's read token (`credentials.read_token`)."))
                    .build(),
            ),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "agentaddress",
        description = "Durable return addresses for AI agents: an inbox URL for webhooks, an ordered event feed with long polling, and small JSON state with compare-and-set.",
    ),
    paths(
        create_address, inspect_address, delete_address, deliver, list_events, get_event,
        ack_event, list_state, get_state, put_state, delete_state, healthz, openapi_json, skill_md
    ),
    components(schemas(
        AddressView, Credentials, Endpoints, CreatedAddress, CreateAddressRequest, UsageView,
        AddressDetails, Limits, EventRefView, DeliveryResult, EventView, EventPageView,
        SingleEvent, AckedEventView, AckResult, StateKeyView, StateLimitsView, StateList,
        StateValue, PutStateRequest, StateWriteResult, StateDeleteResult, Health, ErrorDetail,
        ErrorBody
    )),
    modifiers(&BearerAuth),
    tags(
        (name = "addresses"), (name = "inbox"), (name = "events"), (name = "state"), (name = "service")
    )
)]
struct ApiDoc;

/// The OpenAPI document, with `base` as its server.
pub fn document(base: &str) -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").into();
    doc.servers = Some(vec![Server::new(base)]);
    doc
}
