//! The handlers, one module per route group: parse, call one store operation, map the result.
//! The route table (`crate::routes`) names them through this module.

mod addresses;
mod contacts;
mod email;
pub(crate) mod events;
pub(crate) mod hooks;
mod inbox;
#[cfg(test)]
mod order_tests;
pub(crate) mod person_requests;
mod service;
mod state;
pub(crate) mod timers;
mod viewer;

pub use addresses::*;
pub use contacts::*;
pub use events::*;
pub use hooks::*;
pub use inbox::*;
pub use service::*;
pub use state::*;
pub use timers::*;

pub use crate::pages::{
    __path_favicon, __path_home, __path_inbox_css, __path_inbox_js, __path_inbox_page,
    __path_llms_full_txt, __path_well_known, favicon, home, inbox_css, inbox_js, inbox_page,
    llms_full_txt, well_known,
};
pub use crate::stream::{__path_stream_events, stream_events};
pub use email::*;
pub use person_requests::*;
pub use viewer::*;
