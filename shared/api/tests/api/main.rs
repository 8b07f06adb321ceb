//! In-process tests of the HTTP API (docs/API.md): the axum router is driven with
//! `tower::ServiceExt::oneshot` (no server, no sockets) over an in-memory SQLite store and a
//! manual clock, so expiry, retention and rate-limit windows are reached without waiting.
//!
//! One test binary; one module per part of the contract, the shared helpers in `common`.

mod auth;
mod common;
mod create;
mod edges;
mod email_policy;
mod feed;
mod filtered;
mod home;
mod hooks;
mod inbox;
mod lifecycle;
mod pages;
mod requests;
mod secrets;
mod senders;
mod service;
mod state;
mod stream;
mod timers;
mod verification;
mod viewer;
mod waiting;
