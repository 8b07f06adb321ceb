//! agentaddress: durable return addresses for AI agents.
//!
//! Everything that is not a `main()` lives here: the pure [`domain`], the [`store`] trait with its
//! backends and conformance suite, the HTTP [`api`] (one axum router for every deployment), and
//! the [`config`] read once at start-up.
#![forbid(unsafe_code)]

pub mod api;
pub mod config;
pub mod domain;
pub mod store;
