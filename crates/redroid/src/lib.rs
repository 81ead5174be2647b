//! Flotilla's redroid operator: a drop-in replacement for isning/redroid-operator.
//!
//! Two controllers share one [`Context`]: [`instance`] (RedroidInstance → Pod + Service) and
//! [`task`] (RedroidTask → Jobs or CronJobs, with temporary suspend/wake of instances).

pub mod args;
pub mod context;
pub mod crd;
pub mod data;
pub mod instance;
pub mod names;
pub mod plugin;
pub mod run;
pub mod task;

pub use run::{Flags, run, run_with_client};
