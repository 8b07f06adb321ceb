//! agentaddress's core: the pure [`domain`] rules (ids, secrets, time, limits, validation, the
//! inbox envelope rule) and the [`store`] trait that every backend implements — one crate per
//! backend (`agentaddress-sqlite`, `agentaddress-aws`), and one conformance suite
//! (`store::conformance`, feature `conformance`) that each of them runs.
#![forbid(unsafe_code)]

pub mod domain;
pub mod metrics;
pub mod relay;
pub mod store;
