//! Faults for reliability tests: a fault-injecting proxy in front of the API server
//! ([`proxy`]), the seeded plan that decides each request's fault ([`plan`]), the harness
//! that SIGKILLs and restarts the operator under test ([`harness`]), what a scenario is run
//! with ([`scenario`]: seeds, the operator behind the proxy, violations, request rates, the
//! run's report), the steps every run shares ([`drive`]: the user's flow under chaos,
//! convergence, deletion, the hot-loop checks), what every run's world starts with
//! ([`world`]: CRDs, namespace, RBAC, the shared bounds), continuous invariant checks over watch caches ([`observe`]) and the soak
//! table ([`report`]). docs/testing.md explains how scenarios use them and how to replay a
//! failing seed.

pub mod drive;
pub mod harness;
pub mod observe;
pub mod plan;
pub mod proxy;
pub mod report;
pub mod scenario;
pub mod world;

pub use drive::{Bounds, Driven, Flow, drive};
pub use harness::{KillSchedule, Operator, Supervised};
pub use observe::Observer;
pub use plan::{Class, Fault, Plan, Rates};
pub use proxy::{FaultProxy, FaultRecord, Traffic, Upstream};
pub use scenario::{
    Endpoint, Launch, OperatorUnderTest, Process, RateMeter, RunReport, Violation, Violations,
};
pub use world::{Base, Setup};
