//! Every route of the HTTP API, declared once: the table at the end of this file names, for each
//! route group (one Lambda function each), the handlers it serves. A handler's method and path
//! are those of its `#[utoipa::path]` annotation, so the router ([`crate::router_for`]), the
//! OpenAPI document's paths ([`RestPaths`]), [`RouteGroup::endpoints`] and the deployment's
//! copies (`template.yaml`'s API events and the `cargo lambda watch` router, written from
//! `endpoints` by `cargo xtask routes` and tested against it) all read the same declaration.
//!
//! Each group's table is a `static` of its own ([`groups`]): a Lambda function names only its
//! own group, so it links only that group's handlers. The `service` function, which answers
//! every request no other function is given (docs/API.md §0: 404 for an unknown path, 405 with
//! `Allow` for another method of a known one), needs every route's method and path but none of
//! the other groups' handlers: [`Shape`] is that half of a route.

use axum::routing::{MethodFilter, MethodRouter};
use axum::Router;
use utoipa::openapi::path::HttpMethod;

use crate::{ApiError, AppState, McpRoute, MCP_PATH};

/// The route groups, one per Lambda function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteGroup {
    /// `POST /api/v1/addresses`
    CreateAddress,
    /// `GET`, `DELETE {root}`, `PUT`, `DELETE {root}/verification`, `PUT`, `DELETE
    /// {root}/email/policy` (docs/API.md §10), and the inbox viewer's sign-in links: `POST {root}/viewer-codes`, `POST /api/v1/viewer-codes/redeem`
    /// (docs/API.md §13)
    Address,
    /// `POST {inbox_url}`, and `GET {inbox_url}` for Meta's subscription handshake
    /// (docs/API.md §22)
    Inbox,
    /// `GET {root}/events`, `GET {root}/events/stream` (501 on Lambda), `GET {root}/events/{event_id}`,
    /// `POST .../ack`
    Events,
    /// `GET {state_url}`, `GET`, `PUT`, `DELETE {state_url}/{key}`
    State,
    /// `/`, `/favicon.ico`, `/healthz`, `/openapi.json`, `/skill.md`, the pages and discovery
    /// documents (`/inbox`, its assets, `/llms-full.txt`, `/.well-known/agentaddress.json`), the
    /// `/inbox/` redirect (no operation: not in the table), and every request no other group
    /// serves
    Service,
    /// `POST /api/mcp`: the API as MCP tools (answered by the REST routes in process)
    Mcp,
    /// `POST /api/v1/email/inbound`, `GET {root}/events/{event_id}/attachments/{id}`,
    /// `GET {root}/events/{event_id}/raw`, `POST {root}/email/replay` (docs/API.md §10–§11).
    /// Its own function (`email-api`), so that only it links the MIME parser.
    Email,
    /// `POST {root}/requests`, `GET {root}/requests/{request_id}`, the person's page
    /// `GET`/`POST /r/{request_id}/{secret}`, its stylesheet and its script (docs/API.md §12);
    /// and timers, `POST`/`GET {root}/timers`, `DELETE {root}/timers/{timer_id}` (§20): what an
    /// agent waits on besides its feed.
    Requests,
    /// What calls out: `GET`, `POST {root}/email/contacts`, `POST {root}/email/send`
    /// (docs/API.md §16), and the wake hooks, `POST`/`GET {root}/hooks`, `PUT`/`DELETE
    /// {root}/hooks/{id}`, `POST {root}/hooks/{id}/test` (§19).
    Outbound,
}

impl RouteGroup {
    pub const ALL: [RouteGroup; 10] = [
        RouteGroup::CreateAddress,
        RouteGroup::Address,
        RouteGroup::Inbox,
        RouteGroup::Events,
        RouteGroup::State,
        RouteGroup::Service,
        RouteGroup::Mcp,
        RouteGroup::Email,
        RouteGroup::Requests,
        RouteGroup::Outbound,
    ];

    /// The groups of the HTTP API, which `/openapi.json` describes: all but MCP.
    pub const REST: [RouteGroup; 9] = [
        RouteGroup::CreateAddress,
        RouteGroup::Address,
        RouteGroup::Inbox,
        RouteGroup::Events,
        RouteGroup::State,
        RouteGroup::Service,
        RouteGroup::Email,
        RouteGroup::Requests,
        RouteGroup::Outbound,
    ];

    /// This group's routes (links every group's handlers: a Lambda function names its own
    /// `static` in [`groups`] instead).
    pub fn routes(self) -> &'static Routes {
        match self {
            RouteGroup::CreateAddress => &groups::CREATE_ADDRESS,
            RouteGroup::Address => &groups::ADDRESS,
            RouteGroup::Inbox => &groups::INBOX,
            RouteGroup::Events => &groups::EVENTS,
            RouteGroup::State => &groups::STATE,
            RouteGroup::Service => &groups::SERVICE,
            RouteGroup::Mcp => &groups::MCP,
            RouteGroup::Email => &groups::EMAIL,
            RouteGroup::Requests => &groups::REQUESTS,
            RouteGroup::Outbound => &groups::OUTBOUND,
        }
    }

    /// The name of the Lambda function (and binary) that serves this group.
    pub fn function_name(self) -> &'static str {
        self.routes().function
    }

    /// The (method, path) pairs this group serves, in the router's path syntax (`{param}`),
    /// methods in capitals. Deployment descriptions (`template.yaml`, the `cargo lambda watch`
    /// router) are checked against it.
    pub fn endpoints(self) -> Vec<(&'static str, String)> {
        self.routes().endpoints()
    }
}

/// The half of a route every function may link: its method and path.
#[derive(Clone, Copy)]
pub struct Shape {
    /// The handler's name, which is also its OpenAPI `operationId`.
    pub operation: &'static str,
    /// The group whose function serves the route.
    pub group: RouteGroup,
    /// The method of the handler's `#[utoipa::path]` annotation (one per handler).
    method: fn() -> Vec<HttpMethod>,
    /// The path of the handler's `#[utoipa::path]` annotation.
    path: fn() -> String,
}

impl Shape {
    /// The method, in capitals (`GET`…).
    pub fn method(&self) -> &'static str {
        match (self.method)().first() {
            Some(HttpMethod::Get) => "GET",
            Some(HttpMethod::Post) => "POST",
            Some(HttpMethod::Put) => "PUT",
            Some(HttpMethod::Delete) => "DELETE",
            Some(HttpMethod::Patch) => "PATCH",
            Some(HttpMethod::Head) => "HEAD",
            Some(HttpMethod::Options) => "OPTIONS",
            Some(HttpMethod::Trace) => "TRACE",
            None => "",
        }
    }

    pub fn path(&self) -> String {
        (self.path)()
    }

    fn filter(&self) -> MethodFilter {
        match (self.method)().first() {
            Some(HttpMethod::Post) => MethodFilter::POST,
            Some(HttpMethod::Put) => MethodFilter::PUT,
            Some(HttpMethod::Delete) => MethodFilter::DELETE,
            Some(HttpMethod::Patch) => MethodFilter::PATCH,
            Some(HttpMethod::Head) => MethodFilter::HEAD,
            Some(HttpMethod::Options) => MethodFilter::OPTIONS,
            Some(HttpMethod::Trace) => MethodFilter::TRACE,
            // GET also answers HEAD (axum).
            Some(HttpMethod::Get) | None => MethodFilter::GET,
        }
    }
}

/// One route: its shape, and the handler that serves it.
pub struct Route {
    pub shape: Shape,
    serve: fn(MethodFilter) -> MethodRouter<AppState>,
}

/// The routes of one group.
pub struct Routes {
    pub group: RouteGroup,
    /// The Lambda function (and binary) that serves the group.
    pub function: &'static str,
    pub routes: &'static [Route],
}

impl Routes {
    pub fn endpoints(&self) -> Vec<(&'static str, String)> {
        if self.group == RouteGroup::Mcp {
            return vec![("POST", MCP_PATH.to_owned())];
        }
        self.routes
            .iter()
            .map(|r| (r.shape.method(), r.shape.path()))
            .collect()
    }

    /// Adds this group's routes to `router` (the MCP group's one route is `mcp`'s, if given).
    pub(crate) fn add_to(
        &self, mut router: Router<AppState>, state: &AppState, mcp: Option<McpRoute>,
    ) -> Router<AppState> {
        if self.group == RouteGroup::Mcp {
            return match mcp {
                Some(route) => router.route(MCP_PATH, route(state)),
                None => router,
            };
        }
        for route in self.routes {
            router = router.route(&route.shape.path(), (route.serve)(route.shape.filter()));
        }
        if self.group == RouteGroup::Service {
            // A convenience, not an operation of the API (docs/API.md §13).
            router = router.route(INBOX_SLASH, axum::routing::get(crate::pages::inbox_slash));
        }
        router
    }
}

/// The inbox viewer's path with a slash at the end: the `Service` group redirects it to
/// `/inbox` (docs/API.md §13).
pub const INBOX_SLASH: &str = "/inbox/";

/// The shape of the MCP endpoint (`POST /api/mcp`), which has no `#[utoipa::path]` annotation.
pub const MCP_SHAPE: Shape = Shape {
    operation: "mcp",
    group: RouteGroup::Mcp,
    method: || vec![HttpMethod::Post],
    path: || MCP_PATH.to_owned(),
};

/// Adds every route of `shapes` that `router` does not serve yet, answered by
/// [`not_served_here`]: a request for it that reaches this router was sent to the wrong Lambda
/// function. Other methods of these paths then get the same 405 (with the same `Allow`) as from
/// the function that serves the path.
pub(crate) fn add_shapes(
    mut router: Router<AppState>, served: &[&Routes], shapes: &[Shape],
) -> Router<AppState> {
    let served: Vec<(&str, String)> = served.iter().flat_map(|g| g.endpoints()).collect();
    for shape in shapes {
        let (method, path) = (shape.method(), shape.path());
        if !served.iter().any(|(m, p)| *m == method && *p == path) {
            router = router.route(&path, axum::routing::on(shape.filter(), not_served_here));
        }
    }
    router
}

async fn not_served_here() -> ApiError {
    ApiError::Internal("a route reached a Lambda function that does not serve it".into())
}

/// Declares the groups: for each, its `static` in [`groups`], its function's name and its
/// handlers (functions of `crate::handlers` with a `#[utoipa::path]` annotation). Also derives
/// [`SHAPES`] (every route's shape) and [`RestPaths`] (the OpenAPI paths of the REST routes).
macro_rules! route_table {
    ($( $group:ident $name:ident $function:literal [ $( $handler:ident ),* $(,)? ] )*) => {
        route_table!(@shapes $( $group [ $( $handler ),* ] )*);
        pastey::paste! {
            /// Each group's routes, one `static` per group.
            pub mod groups {
                use super::*;
                use crate::handlers::*;
                $(
                    pub static $name: Routes = Routes {
                        group: RouteGroup::$group,
                        function: $function,
                        routes: &[$(
                            Route {
                                shape: Shape {
                                    operation: stringify!($handler),
                                    group: RouteGroup::$group,
                                    method: <[<__path_ $handler>] as utoipa::Path>::methods,
                                    path: <[<__path_ $handler>] as utoipa::Path>::path,
                                },
                                serve: |filter| axum::routing::on(filter, $handler),
                            },
                        )*],
                    };
                )*
            }


            /// The OpenAPI paths of every REST route (nested into the document by
            /// [`crate::openapi`]).
            #[derive(utoipa::OpenApi)]
            #[openapi(paths($($(crate::handlers::$handler),*),*))]
            pub struct RestPaths;
        }
    };
    (@shapes $( $group:ident [ $( $handler:ident ),* ] )*) => {
        pastey::paste! {
            /// The shape of every route: every REST route's, then the MCP endpoint's
            /// ([`MCP_SHAPE`]), so that the `service` function answers another method of
            /// `/api/mcp` with the same 405 and `Allow: POST` as `serve` (docs/API.md §8).
            pub static SHAPES: &[Shape] = &[$($(
                Shape {
                    operation: stringify!($handler),
                    group: RouteGroup::$group,
                    method: <crate::handlers::[<__path_ $handler>] as utoipa::Path>::methods,
                    path: <crate::handlers::[<__path_ $handler>] as utoipa::Path>::path,
                },
            )*)*
                MCP_SHAPE,
            ];
        }
    };
}

route_table! {
    CreateAddress CREATE_ADDRESS "create-address" [create_address]
    Address ADDRESS "address" [inspect_address, delete_address, set_verification, delete_verification, set_email_policy, delete_email_policy, create_viewer_code, redeem_viewer_code]
    Inbox INBOX "inbox" [deliver, subscribe_inbox]
    Events EVENTS "events" [list_events, stream_events, get_event, ack_event]
    State STATE "state" [list_state, get_state, put_state, delete_state]
    Service SERVICE "service" [home, favicon, healthz, openapi_json, skill_md, inbox_page, inbox_js, inbox_css, llms_full_txt, well_known]
    Email EMAIL "email-api" [inbound_email, get_attachment, get_raw_email, replay_email]
    Requests REQUESTS "requests" [create_request, get_request, request_page, answer_request, request_page_css, request_page_js, create_timer, list_timers, cancel_timer]
    Outbound OUTBOUND "outbound" [list_contacts, add_contact, send_email, add_hook, list_hooks, set_hook_status, delete_hook, test_hook]
    // Last: its list is empty (the macro's OpenAPI path list cannot have an empty group inside).
    Mcp MCP "mcp" []
}
