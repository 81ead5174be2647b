//! Pods as the cocoon contract shapes them (pure; no client): reading vk-cocoon's state,
//! classifying a set's pods, building them, detecting drift, sub-agent rebuild history and
//! the CocoonSet status computed from them.

pub mod build;
pub mod classify;
pub mod drift;
pub mod rebuild;
pub mod state;
pub mod status;
