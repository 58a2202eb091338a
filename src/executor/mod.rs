//! Executor plugins (docs/executors.md): an executable `saltpeter-executor-NAME` that starts
//! the wrapper on machines the daemon cannot reach through Salt, spoken to over protocol v1.
//!
//! An executor only *starts the wrapper*: the command, its environment, its output and
//! its exit travel over the wrapper's own authenticated link, never through a plugin.
//!
//! Outline:
//! 1. `protocol`: the lines of protocol v1 (the request, the plugin's hello, progress and
//!    result lines) and the pure reading of a finished operation's output into an
//!    [`protocol::Answer`] or a named [`protocol::Breach`]. No process, no clock.
//! 2. `spec`: where a plugin is ([`PluginSpec`], built from `saltpeter_config.executors`
//!    and `executor_path`) and the command that runs it (a clean environment, its own
//!    process group, the sha256 pin checked on the very file that is executed).
//! 3. `runner`: one operation as a child process waited for synchronously, with its
//!    deadline (the configuration helper's `check_config`, `saltpeterctl executor test`).
//!    The daemon's `blocking` loop runs the same command with its pipes in the loop
//!    (`roles/blocking/plugin.rs`) and reads the output with the same `protocol` code.
//! 4. `sdk`: a Rust plugin is a [`sdk::Executor`] implementation and one [`sdk::main`].
//! 5. `conformance`: `saltpeterctl executor test PATH`, every breach by name.

pub mod conformance;
pub mod protocol;
pub mod runner;
pub mod sdk;
pub mod spec;
pub mod ssh;

/// The protocol version this build speaks.
pub const PROTOCOL: u32 = 1;

/// Set (to the versions the daemon speaks, comma-separated) in every plugin's
/// environment; a plugin started without it was run by hand and says what it is.
pub const ENV_PROTOCOL: &str = "SALTPETER_EXECUTOR_PROTOCOL";

/// The tag every protocol line carries, with the protocol version as its value.
pub const TAG: &str = "saltpeter_executor";

/// An executor plugin's file name is this prefix and the executor's name.
pub const FILE_PREFIX: &str = "saltpeter-executor-";

/// The packaged plugin directory, searched when `executor_path` is not set.
pub const DEFAULT_EXECUTOR_PATH: &str = "/usr/lib/saltpeter/executors";

/// The longest protocol line read (a longer one is a breach).
pub const MAX_LINE: usize = 1024 * 1024;

/// The most a plugin may write on stdout in one operation (more is a breach; what is
/// beyond it is counted and dropped, never kept).
pub const MAX_STDOUT: usize = 8 * 1024 * 1024;

/// The most of a plugin's stderr kept for the log.
pub const MAX_STDERR_LOGGED: usize = 64 * 1024;

/// The names `executor:` may not take for a plugin: the built-in executors.
pub fn is_builtin(name: &str) -> bool {
    matches!(name, "salt" | "local")
}

/// A plugin executor's name: 1 to 64 of `[a-z0-9_-]`, starting with a letter (it is
/// part of a file name and of log lines).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}
