//! stellar's pure decisions: no Kubernetes client, no IO, no clock. Everything here is a
//! function of its arguments, tested by tables beside it.

pub mod agent;
pub mod combined;
pub mod matching;
pub mod resolve;
pub mod selector;
pub mod status;
pub mod transport;
pub mod wrap;
