//! Pure rules of main that belong to no one part: when jobs fire (`scheduler`), launch
//! tokens and session keys (`tokens`). No state, no sockets, no clock. (A run's and a
//! target's rules are in `run/`.)

pub(crate) mod scheduler;
pub mod tokens;
