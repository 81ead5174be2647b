//! Support shared by this crate's test binaries.
#![allow(dead_code)]

pub mod logs;
