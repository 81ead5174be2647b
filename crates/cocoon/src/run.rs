//! The operator process.
