//! The pure rules of main: no state, no sockets, no clock. One target's life
//! (`target/`), the run-level rules (`run_rules`), when jobs fire (`scheduler`), launch
//! tokens and session keys (`tokens`). Everything else in main stands on these.

pub(crate) mod run_rules;
#[cfg(test)]
mod run_rules_tests;
pub(crate) mod scheduler;
pub(crate) mod target;
pub mod tokens;
