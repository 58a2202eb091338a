//! `saltpeterctl`'s exit codes and the result every verb returns.

/// Success.
pub(crate) const EXIT_OK: i32 = 0;
/// The request failed (or, for `run --wait`, a target did).
pub(crate) const EXIT_FAILED: i32 = 1;
/// Bad arguments, or the daemon refused the request as invalid.
pub(crate) const EXIT_USAGE: i32 = 2;

/// An exit code, or one with the message to print.
pub(super) type CtlResult = Result<i32, (i32, String)>;
