//! The Rust SDK for executor plugins (filled in by the SDK work).
