//! The four child processes of the daemon, one folder each.
//!
//! - `hub` (level 3): wrapper WebSockets, HTTP API, admin socket; no business logic
//! - `main` (level 2): configuration, schedules, run state, Workflows
//! - `db` (level 1): the database (SQLite, or PostgreSQL shared by several servers), the
//!   only process that touches it
//! - `blocking` (level 3): slow commands (salt CLI, wrapper launches) as child processes
//!
//! Each role is a library function taking already-connected descriptors, so a role can
//! also run in a test over socketpairs. What they share (the inherited descriptors, the
//! control link to the supervisor, a typed link helper) is `common`, which names no role:
//! roles share messages and that glue, never each other's code.

pub(crate) mod blocking;
pub(crate) mod common;
pub(crate) mod db;
pub(crate) mod hub;
pub(crate) mod main;

use crate::ipc::Role;
use common::{RoleArgs, RoleError, ignore_terminal_signals};

/// Run one role to completion; returns the process exit code.
pub(crate) fn run(args: RoleArgs) -> i32 {
    ignore_terminal_signals();
    let role = args.role;
    let result = match role {
        Role::Hub => hub::run(args),
        Role::Main => main::run(args),
        Role::Db => db::run(args),
        Role::Blocking => blocking::run(args),
        Role::Supervisor | Role::Ctl => {
            Err(RoleError::Start(format!("{role} is not a child role")))
        }
    };
    match result {
        Ok(code) => code,
        Err(e @ RoleError::BadStart(_)) => {
            log::error!("{e}");
            // Passed on by the supervisor, so systemd does not restart in a loop.
            crate::supervisor::EXIT_BAD_CONFIG
        }
        Err(e) => {
            log::error!("{e}");
            1
        }
    }
}
