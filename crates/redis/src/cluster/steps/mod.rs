//! The cluster controller's steps, one file each, in the order of [`super::pipeline`].

pub mod check_reachability;
pub mod ensure_global_resources;
pub mod ensure_pods;
pub mod ensure_pvcs;
pub mod ensure_secrets;
pub mod ensure_sentinels;
pub mod ensure_services;
pub mod finish_replica_promotion;
pub mod handle_primary;
pub mod poll_instances;
pub mod update_status;
