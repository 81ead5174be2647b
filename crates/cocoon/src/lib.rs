//! Flotilla's cocoon operator: a drop-in replacement for cocoonstack/cocoon-operator.
//!
//! - [`crd`]: the `cocoonset.cocoonstack.io/v1` API (CocoonSet, CocoonHibernation).
//! - [`names`]: the label/annotation contract with vk-cocoon.
//! - [`registry`]: the snapshot registry port (OCI distribution and epoch).
//! - [`pods`]: pure pod builders and drift detection.
//! - [`cocoonset`] and [`hibernation`]: the two controllers; [`cache`]: the watch caches they
//!   read.
//! - [`run`]: flags and the operator process.

pub mod cache;
pub mod cocoonset;
pub mod context;
pub mod crd;
pub mod hibernation;
pub mod metrics;
pub mod names;
pub mod pods;
pub mod registry;
pub mod run;
