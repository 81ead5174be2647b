//! Flotilla's FoundationDB operator: a drop-in replacement for
//! FoundationDB/fdb-kubernetes-operator v2 (`apps.foundationdb.org/v1beta2`).

pub mod admin;
pub mod backup;
pub mod cluster;
pub mod crd;
pub mod plugin;
pub mod restore;
pub mod run;
pub mod sim;
