//! The OCI distribution registry client.
