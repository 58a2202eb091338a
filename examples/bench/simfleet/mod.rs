//! A simulated Salt fleet: everything of the daemon's salt path except Salt itself.
//!
//! What it stands in for, and how the daemon reaches it:
//! 1. **Minions and their keys** (`keys.rs`): N minions, each with its own RSA-2048 key
//!    made once by `openssl genrsa` and cached, and its public key accepted in a master
//!    pki directory (`<pki>/minions/<id>`, PEM as Salt writes it), so the daemon checks
//!    every proof with `minion_key` exactly as on a real master.
//! 2. **The master** (`keys::write_master`): a Salt configuration directory whose `salt`
//!    is a script with `#!<dir>/python3-simfleet`, a link to the generator's executable.
//!    The daemon's blocking process starts its salt bridge with that interpreter, so the
//!    generator is started as `python3-simfleet salt-bridge.py MASTER WORKERS`.
//! 3. **The salt bridge** (`bridge.rs`): the generator answers the bridge's JSON lines
//!    (`op: match` from the minion list, `test.ping`, `file.manage_file`, and the launch's
//!    `cmd.run_all` of the wrapper with `SP_URL` and `SP_RUN=a,b,c`). Its ready line says
//!    `"simulated": true`: the daemon refuses it unless `SALTPETER_SIMULATED_FLEET=1`.
//! 4. **The wrappers** (`sessions.rs`): every (minion, run) a launch names becomes a
//!    wrapper session in this one process (one mio loop, thousands of connections):
//!    TLS pinned to the certificate in `SP_URL`, `hello` with `minion_key: true` and the
//!    hash and path of the real wrapper (so nothing is deployed), the signed proof, the
//!    wait for `go`, `started`, one output frame, heartbeats when due, `exited` with 0.
//!
//! The library's own types (`saltpeter::wire::wrapper`, `minion_key::sign_proof`, the
//! TLS stream and pinning of `saltpeter::tls`) are used, not copied. The bench driver
//! runs this as its own executable re-entered under the `python3-simfleet` name; the
//! integration tests include this module with `#[path]` and re-enter their test binary.

#![allow(dead_code)]

pub mod bridge;
pub mod keys;
pub mod sessions;
mod socket;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The name of the link to the generator: `interpreter_of` takes a `python*` file name.
pub const INTERPRETER_NAME: &str = "python3-simfleet";
/// The fleet's description, next to the master's configuration.
pub const FLEET_FILE: &str = "simfleet.json";

/// What the stand-in bridge knows of its fleet (`<salt config dir>/simfleet.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Fleet {
    /// The minion ids, in order.
    pub minions: Vec<String>,
    /// Where each minion's private key is: `<keys>/<id>.pem`.
    pub keys: PathBuf,
    /// Bytes of output each simulated command prints (one frame).
    #[serde(default = "default_output")]
    pub output_bytes: usize,
}

fn default_output() -> usize {
    64
}

impl Fleet {
    pub fn key_file(&self, minion: &str) -> PathBuf {
        self.keys.join(format!("{minion}.pem"))
    }

    pub fn load(master_config: &Path) -> Result<Fleet, String> {
        let dir = master_config.parent().unwrap_or(Path::new("."));
        let path = dir.join(FLEET_FILE);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("could not read {}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// `true` when this process was started as the stand-in bridge (its `argv[0]` is the
/// `python3-simfleet` link).
pub fn started_as_bridge() -> bool {
    std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
        .is_some_and(|f| f.starts_with(INTERPRETER_NAME))
}

/// The stand-in bridge's main: `argv` after the interpreter is `SCRIPT MASTER WORKERS`.
/// Answers go to `answers`; the log (one line per request, per launch and a summary
/// every second) to stderr. Returns when stdin ends (the daemon stopped it).
pub fn bridge_main(args: &[String], answers: Box<dyn std::io::Write + Send>) -> i32 {
    let [script, master, ..] = args else {
        eprintln!("simfleet: usage: {INTERPRETER_NAME} salt-bridge.py MASTER_CONFIG WORKERS");
        return 2;
    };
    if !script.ends_with("salt-bridge.py") {
        // Run as `salt` itself (the daemon's command-line fallback): nothing is simulated
        // on that path.
        eprintln!(
            "simfleet: the simulated fleet answers only as a salt bridge, not as the salt \
             command line ({script})"
        );
        return 2;
    }
    let fleet = match Fleet::load(Path::new(master)) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("simfleet: {e}");
            return 2;
        }
    };
    match bridge::serve(fleet, answers) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("simfleet: {e}");
            1
        }
    }
}

/// Raise this process's soft limit on open files to its hard limit (a session is a
/// descriptor); returns the limit now in force.
pub fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(_) => soft,
        },
        Ok((soft, _)) => soft,
        Err(_) => 0,
    }
}
