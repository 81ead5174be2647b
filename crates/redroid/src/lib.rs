//! Flotilla's redroid operator: a drop-in replacement for isning/redroid-operator.

pub mod context;
pub mod crd;
pub mod names;
