//! Wrapper traffic from the hub: hellos vetted (`welcome`), then the sessions' output,
//! acks, exits and liveness (`sessions`).

pub mod sessions;
pub mod welcome;
