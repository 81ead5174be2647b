//! Flotilla's Redis operator: a CloudNativePG-style drop-in replacement for
//! howl-cloud/redis-operator (`redis.io/v1`).
//!
//! One binary, `redis-operator`, with subcommands ([`cli`]): `controller` (the operator) and
//! `copy-binary` (the data pods' init container).
//!
//! - [`crd`]: the API (RedisCluster, RedisBackup, RedisScheduledBackup).
//! - [`names`]: the label/annotation/port/path contract.
//! - [`instance_api`]: the typed HTTP API between the operator and the instance managers.
//! - [`run`]: the `controller` process.
//! - [`backup`], [`scheduled_backup`]: the RedisBackup and RedisScheduledBackup controllers.
//! - [`instance_client`]: the controllers' one client of [`instance_api`].
//! - [`admission`]: the defaulting and validating webhooks and their PKI.
//! - [`quantity`], [`schedule`]: Kubernetes quantities and backup schedules, pure.
//! - [`copy_binary`]: installs the running binary into the data pods' shared volume.

pub mod admission;
pub mod backup;
pub mod cli;
pub mod cluster;
pub mod context;
pub mod copy_binary;
pub mod crd;
pub mod https;
pub mod instance;
pub mod instance_api;
pub mod instance_client;
pub mod metrics;
pub mod names;
pub mod plugin;
pub mod quantity;
pub mod run;
pub mod schedule;
pub mod scheduled_backup;
pub mod sentinel;
