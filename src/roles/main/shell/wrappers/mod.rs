//! Wrapper traffic from the hub: hellos vetted (`welcome`), then the sessions' output,
//! acks, exits and liveness (`sessions`). This is the glue between the hub, the sessions
//! (`sessions/`: which connection serves which target, refused hellos, the pure verdicts)
//! and the runs' targets (changed through `shell/run/effects.rs`).

pub(crate) mod sessions;
pub(crate) mod welcome;
