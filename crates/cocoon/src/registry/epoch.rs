//! The epoch registry client.
