//! The RedisCluster controller.

pub mod build;
pub mod facts;
pub mod handoff;
pub mod model;
pub mod plan;
pub mod status;
