//! Wrapper traffic from the hub: hellos vetted (`welcome`), then the sessions' output,
//! acks, exits and liveness (`sessions`).

pub(crate) mod sessions;
pub(crate) mod welcome;
