//! `saltpeter_config` (daemon settings); `saltpeter_maintenance` is in `maintenance.rs`.
//!
//! Either section may appear in several files. `saltpeter_config` is merged key by key in file
//! order, the later file winning, with a warning when two files disagree (the original merged
//! with `dict.update` and said nothing). An invalid value is an error and the key keeps its last
//! good value from the previous load (else its default), so a typo in a running daemon's
//! configuration never silently resets, say, every job's time zone.

use std::path::PathBuf;

use chrono_tz::Tz;

use super::types::{Executor, MIB};
pub use super::types::{Retention, Secret};
use super::values;
use super::yaml::Node;

pub use super::maintenance::Maintenance;
pub(crate) use super::maintenance::merge_maintenance;
use super::saltpeter_values::{
    read_database_ca_file, read_database_url, read_retention, read_servers,
};

/// The wrapper path used when neither the job nor `saltpeter_config` names one.
pub const DEFAULT_WRAPPER_PATH: &str = "/usr/local/bin/saltpeter-wrapper";

/// The daemon's settings (`saltpeter_config`). See docs/configuration.md.
#[derive(Debug, Clone, PartialEq)]
pub struct SaltpeterConfig {
    pub debug: bool,
    pub api_ws: bool,
    pub api_ws_port: u16,
    pub api_ws_bind_addr: String,
    pub machines_ws_port: u16,
    pub machines_ws_bind_addr: String,
    pub default_saltpeter_server_host: Option<String>,
    pub default_wrapper_path: Option<String>,
    pub executor: Executor,
    /// `executors`: the executor plugins named explicitly (docs/executors.md).
    pub executors: std::collections::BTreeMap<String, super::executors::PluginEntry>,
    /// `executor_path`: where `saltpeter-executor-NAME` is looked for.
    pub executor_path: Vec<PathBuf>,
    pub timezone: Tz,
    pub state_dir: Option<PathBuf>,
    pub runtime_dir: Option<PathBuf>,
    pub salt_config_dir: PathBuf,
    pub salt_bin: Option<PathBuf>,
    /// The master's pki directory (accepted minion keys under `minions/`); default: the
    /// master configuration's `pki_dir`, else `/etc/salt/pki/master`.
    pub salt_pki_dir: Option<PathBuf>,
    /// More pki directories whose accepted keys prove minions too: the syndic masters'
    /// below this master, or other masters' (docs/security.md).
    pub salt_pki_dirs: Vec<PathBuf>,
    /// Publish through one long-lived Python process using Salt's LocalClient (the salt
    /// bridge) instead of one `salt` process per call.
    pub salt_bridge: bool,
    pub api_token: Option<Secret>,
    /// `api_tokens`: named identities with roles (config/identities.rs).
    pub api_tokens: Vec<super::identities::ApiIdentity>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// TLS on the wrapper port and the API (default on; `false` only on loopback ports).
    pub tls: bool,
    pub wrapper_source: Option<String>,
    /// The daemon puts its wrapper on the minions (default). `false`: the operator
    /// installs it (the package `saltpeter-wrapper`, e.g. through the Salt formula), and
    /// runs never wait for a deployment.
    pub wrapper_deploy: bool,
    pub retention: Retention,
    pub heartbeat_s: u64,
    pub pickup_timeout_s: u64,
    pub hello_timeout_s: u64,
    pub ping_timeout_s: u64,
    pub max_message_bytes: u64,
    /// Compress large output on the wrapper link and in the database when it pays
    /// (default on; docs/protocols.md).
    pub output_compression: bool,
    pub max_connections_per_addr: u32,
    pub launch_concurrency: u32,
    /// Longest lead time of pre-staged salt launches ahead of their slot.
    pub prestage_cap_s: u64,
    /// After a restart, how long wrappers of runs in flight have to reconnect.
    pub recovery_grace_s: u64,
    /// Seconds a role may leave the supervisor's ping unanswered before the daemon stops
    /// and exits 1 for systemd to restart it (0: no liveness check; start-only).
    pub watchdog_s: u64,
    /// Cap of the database file in bytes (0: none).
    pub database_max_size: u64,
    /// `postgres://…`: the database is PostgreSQL, shared by every server of a highly
    /// available setup (docs/ha.md); `None`: SQLite in the state directory. The URL may
    /// carry a password, hence a `Secret`.
    pub database_url: Option<Secret>,
    /// The CA bundle (PEM) the database server's certificate must chain to
    /// (`sslmode=verify-ca`/`verify-full`; config/database.rs).
    pub database_ca_file: Option<PathBuf>,
    /// Plain text to a database host that is not local is allowed (default: refused).
    pub database_plaintext_ok: bool,
    /// This server's name among the servers sharing the database (status, `/metrics`,
    /// the leader's record); `None`: the host name.
    pub server_name: Option<String>,
    /// The wrapper URL of every server sharing the database (`ws://host:8889`, ...):
    /// wrappers get them all in `SP_URL` and reconnect to whichever answers. Empty: only
    /// this server's own URL.
    pub servers: Vec<String>,
    pub admin_group: Option<String>,
    /// `token` (the default): the API wants `api_token`; `none`: no authentication, only
    /// while the API is bound to a loopback address (behind an authenticating proxy).
    pub api_auth: ApiAuth,
    /// `/metrics` wants the token too (when `api_auth` is `token`).
    pub metrics_auth: bool,
    /// Seconds a client has to send a whole HTTP request once it started (or connected).
    pub api_request_timeout_s: u64,
    /// Seconds an idle keep-alive HTTP connection is kept open.
    pub api_idle_timeout_s: u64,
    /// Concurrent HTTP and `/ws` connections at most.
    pub api_max_connections: u32,
    /// Most missed slots recorded per job after a downtime (the newest ones).
    pub missed_record_limit: u32,
    /// Most Saltpeter commands at once on one machine, across all jobs (a default and
    /// caps for some machines); none set: no limit.
    pub max_running_per_machine: super::saltpeter_values::MachineCaps,
    /// Most runs in flight at once on this server; `None`: no limit.
    pub max_runs_in_flight: Option<u32>,
    /// Most runs of one job waiting to start at once (for a place under
    /// `max_runs_in_flight` or on their machines); a slot beyond it is skipped.
    pub max_queued_runs_per_job: u32,
    /// Notification rules of jobs without their own `notify`.
    pub notify: Vec<super::notify::NotifyRule>,
    /// SMTP server for `email` rules (host, port if given); `None`: the host's `sendmail`.
    pub smtp: Option<(String, Option<u16>)>,
    /// TLS with the SMTP server (`smtp_tls`).
    pub smtp_tls: super::notify::SmtpTls,
    /// SMTP login (`smtp_user`, `smtp_password`): AUTH PLAIN or LOGIN, only over TLS.
    pub smtp_user: Option<String>,
    pub smtp_password: Option<Secret>,
    /// CA certificates trusted besides the system's for HTTPS webhooks, SMTP and exports.
    pub notify_ca_file: Option<PathBuf>,
    /// Sender of notification mail; `None`: `saltpeter@<hostname>`.
    pub mail_from: Option<String>,
    /// The `sendmail` program used without `smtp`.
    pub sendmail: String,
    /// Notifications per job and hour at most (`0`: no limit); the rest are recorded as
    /// suppressed events.
    pub notify_rate_limit: u32,
    /// `logdir` and the Elasticsearch/OpenSearch exports.
    pub logs: super::export::LogSettings,
}

/// How the HTTP API authenticates (`saltpeter_config.api_auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApiAuth {
    #[default]
    Token,
    None,
}

impl Default for SaltpeterConfig {
    fn default() -> Self {
        SaltpeterConfig {
            debug: false,
            api_ws: false,
            api_ws_port: 8888,
            api_ws_bind_addr: "127.0.0.1".to_string(),
            machines_ws_port: 8889,
            machines_ws_bind_addr: "0.0.0.0".to_string(),
            default_saltpeter_server_host: None,
            default_wrapper_path: None,
            executor: Executor::Salt,
            executors: Default::default(),
            executor_path: super::executors::default_executor_path(),
            timezone: Tz::UTC,
            state_dir: None,
            runtime_dir: None,
            salt_config_dir: PathBuf::from("/etc/salt"),
            salt_bin: None,
            salt_pki_dir: None,
            salt_pki_dirs: Vec::new(),
            salt_bridge: true,
            api_token: None,
            api_tokens: Vec::new(),
            tls_cert: None,
            tls_key: None,
            tls: true,
            wrapper_source: None,
            wrapper_deploy: true,
            retention: Retention::default(),
            heartbeat_s: 5,
            pickup_timeout_s: 30,
            hello_timeout_s: 10,
            ping_timeout_s: 20,
            max_message_bytes: MIB,
            output_compression: true,
            max_connections_per_addr: 256,
            launch_concurrency: 64,
            prestage_cap_s: 60,
            recovery_grace_s: 60,
            watchdog_s: 120,
            database_max_size: 0,
            database_url: None,
            database_ca_file: None,
            database_plaintext_ok: false,
            server_name: None,
            servers: Vec::new(),
            admin_group: None,
            api_auth: ApiAuth::Token,
            metrics_auth: true,
            api_request_timeout_s: 10,
            api_idle_timeout_s: 60,
            api_max_connections: 4096,
            missed_record_limit: 100,
            max_running_per_machine: Default::default(),
            max_runs_in_flight: None,
            max_queued_runs_per_job: 5,
            notify: Vec::new(),
            smtp: None,
            smtp_tls: super::notify::SmtpTls::Auto,
            smtp_user: None,
            smtp_password: None,
            notify_ca_file: None,
            mail_from: None,
            sendmail: "/usr/sbin/sendmail".to_string(),
            notify_rate_limit: 20,
            logs: Default::default(),
        }
    }
}

/// Keys accepted from the original that do nothing yet, with the reason given in the warning.
const NO_EFFECT_KEYS: &[(&str, &str)] = &[
    (
        "default_wrapper_loglevel",
        "the wrapper sends its output to the hub",
    ),
    (
        "default_wrapper_logdir",
        "the wrapper sends its output to the hub",
    ),
];

/// Keys that take effect only when the daemon starts.
pub const STARTUP_ONLY_KEYS: &[&str] = &[
    "api_ws",
    "api_ws_port",
    "api_ws_bind_addr",
    "machines_ws_port",
    "machines_ws_bind_addr",
    "state_dir",
    "runtime_dir",
    "tls_cert",
    "tls_key",
    "tls",
    "max_connections_per_addr",
    "admin_group",
    "api_token",
    "api_tokens",
    "api_auth",
    "metrics_auth",
    "api_request_timeout",
    "api_idle_timeout",
    "api_max_connections",
    "hello_timeout",
    "max_message_bytes",
    "output_compression",
    "database_max_size",
    "database_url",
    "database_ca_file",
    "database_plaintext_ok",
    "server_name",
];

pub(crate) const SALTPETER_KEYS: &[&str] = &[
    "debug",
    "api_ws",
    "api_ws_port",
    "api_ws_bind_addr",
    "machines_ws_port",
    "machines_ws_bind_addr",
    "default_saltpeter_server_host",
    "default_wrapper_path",
    "executor",
    "executors",
    "executor_path",
    "timezone",
    "state_dir",
    "runtime_dir",
    "salt_config_dir",
    "salt_bin",
    "salt_pki_dir",
    "salt_pki_dirs",
    "salt_bridge",
    "api_token",
    "api_tokens",
    "tls_cert",
    "tls_key",
    "tls",
    "wrapper_source",
    "wrapper_deploy",
    "retention",
    "heartbeat",
    "pickup_timeout",
    "hello_timeout",
    "ping_timeout",
    "max_message_bytes",
    "output_compression",
    "max_connections_per_addr",
    "launch_concurrency",
    "prestage_cap",
    "recovery_grace",
    "watchdog",
    "database_max_size",
    "database_url",
    "database_ca_file",
    "database_plaintext_ok",
    "server_name",
    "servers",
    "admin_group",
    "missed_record_limit",
    "max_running_per_machine",
    "max_runs_in_flight",
    "max_queued_runs_per_job",
    "default_wrapper_loglevel",
    "default_wrapper_logdir",
    "api_auth",
    "metrics_auth",
    "api_request_timeout",
    "api_idle_timeout",
    "api_max_connections",
    "notify",
    "smtp",
    "smtp_tls",
    "smtp_user",
    "smtp_password",
    "notify_ca_file",
    "mail_from",
    "sendmail",
    "notify_rate_limit",
];

impl SaltpeterConfig {
    /// Names of start-only keys whose value differs in `newer` (changed at run time, they need
    /// a restart to take effect).
    pub fn startup_only_changes(&self, newer: &SaltpeterConfig) -> Vec<&'static str> {
        let changed = |key: &str| match key {
            "api_ws" => self.api_ws != newer.api_ws,
            "api_ws_port" => self.api_ws_port != newer.api_ws_port,
            "api_ws_bind_addr" => self.api_ws_bind_addr != newer.api_ws_bind_addr,
            "machines_ws_port" => self.machines_ws_port != newer.machines_ws_port,
            "machines_ws_bind_addr" => self.machines_ws_bind_addr != newer.machines_ws_bind_addr,
            "state_dir" => self.state_dir != newer.state_dir,
            "runtime_dir" => self.runtime_dir != newer.runtime_dir,
            "tls_cert" => self.tls_cert != newer.tls_cert,
            "tls_key" => self.tls_key != newer.tls_key,
            "tls" => self.tls != newer.tls,
            "max_connections_per_addr" => {
                self.max_connections_per_addr != newer.max_connections_per_addr
            }
            "admin_group" => self.admin_group != newer.admin_group,
            "api_token" => self.api_token != newer.api_token,
            "api_tokens" => self.api_tokens != newer.api_tokens,
            "api_auth" => self.api_auth != newer.api_auth,
            "metrics_auth" => self.metrics_auth != newer.metrics_auth,
            "api_request_timeout" => self.api_request_timeout_s != newer.api_request_timeout_s,
            "api_idle_timeout" => self.api_idle_timeout_s != newer.api_idle_timeout_s,
            "api_max_connections" => self.api_max_connections != newer.api_max_connections,
            // Read by the hub (wrapper limits) and db (the file cap) when they start.
            "hello_timeout" => self.hello_timeout_s != newer.hello_timeout_s,
            "max_message_bytes" => self.max_message_bytes != newer.max_message_bytes,
            "output_compression" => self.output_compression != newer.output_compression,
            "database_max_size" => self.database_max_size != newer.database_max_size,
            "database_url" => self.database_url != newer.database_url,
            "database_ca_file" => self.database_ca_file != newer.database_ca_file,
            "database_plaintext_ok" => self.database_plaintext_ok != newer.database_plaintext_ok,
            "server_name" => self.server_name != newer.server_name,
            _ => false,
        };
        STARTUP_ONLY_KEYS
            .iter()
            .copied()
            .filter(|k| changed(k))
            .collect()
    }

    /// Applies one key. `Ok(Some(warning))` for accepted keys that have no effect.
    pub(super) fn apply(&mut self, key: &str, node: &Node) -> Result<Option<String>, String> {
        let path = |n: &Node| values::optional_string(n).map(|s| s.map(PathBuf::from));
        let positive = |n: &Node| match values::unsigned(n)? {
            0 => Err("must be at least 1".to_string()),
            v => Ok(v),
        };
        let small = |n: &Node| {
            positive(n).and_then(|v| u32::try_from(v).map_err(|_| format!("{v} is too large")))
        };
        match key {
            "debug" => self.debug = values::boolean(node)?,
            "api_ws" => self.api_ws = values::boolean(node)?,
            "api_ws_port" => self.api_ws_port = values::port(node)?,
            "api_ws_bind_addr" => self.api_ws_bind_addr = values::non_empty_string(node)?,
            "machines_ws_port" => self.machines_ws_port = values::port(node)?,
            "machines_ws_bind_addr" => self.machines_ws_bind_addr = values::non_empty_string(node)?,
            "default_saltpeter_server_host" => {
                self.default_saltpeter_server_host = values::optional_string(node)?;
            }
            "default_wrapper_path" => self.default_wrapper_path = values::optional_string(node)?,
            "executor" => {
                self.executor = Executor::parse(values::string(node)?.trim())?;
            }
            "executors" => self.executors = super::executors::read_executors(node)?,
            "executor_path" => self.executor_path = super::executors::read_executor_path(node)?,
            "timezone" => self.timezone = values::timezone(node)?,
            "state_dir" => self.state_dir = path(node)?,
            "runtime_dir" => self.runtime_dir = path(node)?,
            "salt_config_dir" => {
                self.salt_config_dir = PathBuf::from(values::non_empty_string(node)?);
            }
            "salt_bin" => self.salt_bin = path(node)?,
            "salt_pki_dir" => self.salt_pki_dir = path(node)?,
            "salt_pki_dirs" => {
                self.salt_pki_dirs = values::string_list(node)?
                    .into_iter()
                    .map(PathBuf::from)
                    .collect();
            }
            "salt_bridge" => self.salt_bridge = values::boolean(node)?,
            "api_token" => self.api_token = values::optional_string(node)?.map(Secret::new),
            "api_tokens" => self.api_tokens = super::identities::read_api_tokens(node)?,
            "tls_cert" => self.tls_cert = path(node)?,
            "tls_key" => self.tls_key = path(node)?,
            "tls" => self.tls = values::boolean(node)?,
            "wrapper_source" => self.wrapper_source = values::optional_string(node)?,
            "wrapper_deploy" => self.wrapper_deploy = values::boolean(node)?,
            "retention" => self.retention = read_retention(node)?,
            "heartbeat" => self.heartbeat_s = positive(node)?,
            "pickup_timeout" => self.pickup_timeout_s = positive(node)?,
            "hello_timeout" => self.hello_timeout_s = positive(node)?,
            "ping_timeout" => self.ping_timeout_s = positive(node)?,
            "max_message_bytes" => self.max_message_bytes = positive(node)?,
            "output_compression" => self.output_compression = values::boolean(node)?,
            "max_connections_per_addr" => self.max_connections_per_addr = small(node)?,
            "launch_concurrency" => self.launch_concurrency = small(node)?,
            "prestage_cap" => self.prestage_cap_s = values::seconds(node)?,
            "recovery_grace" => self.recovery_grace_s = values::seconds(node)?,
            "watchdog" => self.watchdog_s = values::seconds(node)?,
            "database_max_size" => self.database_max_size = values::unsigned(node)?,
            "database_url" => self.database_url = read_database_url(node)?,
            "database_ca_file" => self.database_ca_file = read_database_ca_file(node)?,
            "database_plaintext_ok" => self.database_plaintext_ok = values::boolean(node)?,
            "server_name" => self.server_name = values::optional_string(node)?,
            "servers" => self.servers = read_servers(node)?,
            "admin_group" => self.admin_group = values::optional_string(node)?,
            "api_auth" => {
                self.api_auth = match values::string(node)?.trim() {
                    "token" => ApiAuth::Token,
                    "none" => ApiAuth::None,
                    other => return Err(format!("`{other}` is not one of: token, none")),
                }
            }
            "metrics_auth" => self.metrics_auth = values::boolean(node)?,
            "api_request_timeout" => self.api_request_timeout_s = positive(node)?,
            "api_idle_timeout" => self.api_idle_timeout_s = positive(node)?,
            "api_max_connections" => self.api_max_connections = small(node)?,
            "missed_record_limit" => self.missed_record_limit = small(node)?,
            "max_running_per_machine" => {
                self.max_running_per_machine = super::saltpeter_values::read_machine_caps(node)?;
            }
            "max_runs_in_flight" => {
                self.max_runs_in_flight = super::saltpeter_values::read_limit(node)?;
            }
            "max_queued_runs_per_job" => self.max_queued_runs_per_job = small(node)?,
            "notify" => {
                let mut errors = Vec::new();
                self.notify = super::notify::read_rules(node, &mut errors);
                if !errors.is_empty() {
                    let all: Vec<String> = errors
                        .into_iter()
                        .map(|(pos, m)| format!("line {}: {m}", pos.line))
                        .collect();
                    return Err(all.join("; "));
                }
            }
            "smtp" => self.smtp = super::notify::read_smtp(node)?,
            "smtp_tls" => self.smtp_tls = super::notify::read_smtp_tls(node)?,
            "smtp_user" => self.smtp_user = values::optional_string(node)?,
            "smtp_password" => self.smtp_password = values::optional_string(node)?.map(Secret::new),
            "notify_ca_file" => self.notify_ca_file = super::notify::read_ca_file(node)?,
            "mail_from" => {
                self.mail_from = values::optional_string(node)?;
                if let Some(from) = &self.mail_from {
                    super::notify::check_address(from)?;
                }
            }
            "sendmail" => self.sendmail = values::non_empty_string(node)?,
            _ if super::export::EXPORT_KEYS.contains(&key) => self.logs.apply(key, node)?,
            "notify_rate_limit" => {
                let v = values::unsigned(node)?;
                self.notify_rate_limit =
                    u32::try_from(v).map_err(|_| format!("{v} is too large"))?;
            }
            _ => {
                if let Some((_, why)) = NO_EFFECT_KEYS.iter().find(|(k, _)| *k == key) {
                    let set = !node.is_null() && node.scalar().is_none_or(|s| !s.is_empty());
                    return Ok(set.then(|| format!("`{key}` has no effect yet: {why}")));
                }
            }
        }
        Ok(None)
    }
}
