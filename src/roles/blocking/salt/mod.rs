//! The salt executor's side of blocking: what a salt call is and how its answers read
//! (`calls`), running it through the long-lived salt bridge (`bridge`, `bridge.py`) or as a
//! `salt` command line (`cli`), a glob or list matched against the master's accepted keys
//! without either (`keymatch`), and the requests main sends — resolve, launch, deploy —
//! made of them (`exec`). `exec` names the others; `bridge` falls back to `cli`; `calls`,
//! `cli` and `keymatch` name none of them.

pub(crate) mod bridge;
pub(crate) mod calls;
pub(crate) mod cli;
pub(crate) mod exec;
pub(crate) mod keymatch;
