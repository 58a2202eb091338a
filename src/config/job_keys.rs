//! The keys a job may have, and the limits their values are held to.

/// Largest `env` (as JSON) a job may have: the wrapper accepts messages up to 1 MiB, and
/// the command and the rest of the job spec need room too.
pub(crate) const MAX_ENV_JSON: usize = 768 * 1024;

/// The value of `allow_overlap` that made the original allow overlapping runs.
pub(super) const ALLOW_OVERLAP_PHRASE: &str = "i know what i am doing!";

/// Keys a job may have (current and accepted-from-the-original).
pub(crate) const JOB_KEYS: &[&str] = &[
    "sec",
    "min",
    "hour",
    "dom",
    "mon",
    "dow",
    "year",
    "schedule",
    "timezone",
    "command",
    "targets",
    "target_type",
    "executor",
    "user",
    "cwd",
    "env",
    "timeout",
    "kill_grace",
    "number_of_targets",
    "batch_size",
    "overlap",
    "allow_overlap",
    "missed",
    "missed_deadline",
    "splay",
    "enabled",
    "output_limit",
    "wrapper_path",
    "saltpeter_server_host",
    "notify",
    "retries",
    "retry_delay",
    "retry_unreachable",
    "timeout_counts_suspended",
    "hard_timeout",
    "soft_timeout",
    "utc",
    "use_wrapper",
    "lockfile",
    "wrapper_loglevel",
    "wrapper_logdir",
    "group",
    "after",
    "active_from",
    "active_until",
    "nice",
    "ionice",
    "memory_max",
    "cpu_quota",
    "tasks_max",
];

pub(super) const CRON_KEYS: [&str; 7] = ["sec", "min", "hour", "dom", "mon", "dow", "year"];
