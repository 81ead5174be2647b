//! Faults for reliability tests: a fault-injecting proxy in front of the API server
//! ([`proxy`]), the seeded plan that decides each request's fault ([`plan`]), and the harness
//! that SIGKILLs and restarts the operator under test ([`harness`]). docs/testing.md explains
//! how scenarios use them and how to replay a failing seed.

pub mod harness;
pub mod plan;
pub mod proxy;

pub use harness::{KillSchedule, Operator};
pub use plan::{Class, Fault, Plan, Rates};
pub use proxy::{FaultProxy, FaultRecord};
