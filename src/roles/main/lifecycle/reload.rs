//! Configuration reloads, without a stall of main's loop.
//!
//! Reading and parsing the files is the slow part of a load (a large file, a big `<<`
//! merge); it runs in a helper process of `blocking` (`BlockingRequest::LoadConfig`, see
//! `roles/blocking/helpers.rs`), which reads only the files whose fingerprint changed.
//! Main then merges the settings and validates the jobs of the changed files
//! (`config::load_parsed`, which reads nothing and reuses every unchanged job) and applies
//! the result: schedule, maintenance, retention, the dashboard.
//!
//! Outline:
//! 1. A request (the 1 s scan saw a change, SIGHUP, `saltpeterctl reload`) starts a load,
//!    or, while one is in flight, asks for another after it: the files may have changed
//!    after the first one's scan. Requests meanwhile coalesce into that one.
//! 2. The reply comes back as `Message::ConfigRead` ([`Reloads::read`]); the loop puts
//!    the configuration in effect (`shell/dispatch/lifecycle.rs`) and [`Reloads::applied`]
//!    answers who asked.
//! 3. A failure (blocking gone, helper killed at its deadline, answer too large) keeps
//!    the previous configuration, says why, and the next change or request tries again.
//! 4. Main keeps no job's parsed mapping between loads (`config/content.rs`): when jobs of
//!    unchanged files must be validated again (their inherited defaults changed), the load
//!    answers which files to read again, and another round reads them too.
//!
//! Start-up loads synchronously (`config::load_dir`): nothing is running yet.
//!
//! [`Reloads`] keeps the load in flight and who waits for it; the configuration itself is
//! the loop's, handed in.

use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;
use std::time::Instant;

use chrono::{DateTime, Utc};

use crate::config::{self, LoadedConfig};
use crate::ipc::CallId;
use crate::roles::main::messages::{BlockingResult, Message, Out};
use crate::wire::admin::AdminResponse;
use crate::wire::link::{BlockingReply, BlockingRequest};

/// Reloads in flight and asked for.
#[derive(Debug, Default)]
pub(crate) struct Reloads {
    /// When the load in flight was asked for (its reply: `Message::ConfigRead`).
    in_flight: Option<Instant>,
    /// Another load is due when the one in flight is done.
    again: bool,
    /// Admin calls answered when the load in flight is applied.
    waiting: Vec<CallId>,
    /// Admin calls that came during it: answered by the next one.
    waiting_next: Vec<CallId>,
    /// Unchanged files the load in flight reads again all the same.
    reread: BTreeSet<PathBuf>,
    /// A loaded configuration waiting for its executor plugins' `check_config`.
    checking: Option<Checking>,
}

/// A loaded configuration whose plugins are asked to check it.
#[derive(Debug)]
struct Checking {
    loaded: Box<LoadedConfig>,
    started: Instant,
    /// The plugins that have not answered yet.
    waiting: BTreeSet<String>,
}

/// What a load read by blocking comes to.
pub(crate) enum Read {
    /// Put this configuration in effect, then tell [`Reloads::applied`].
    Apply(Box<LoadedConfig>),
    /// Nothing to put in effect: do this (the failure answered, or the files to read
    /// again asked for).
    Done(Out),
}

impl Reloads {
    /// A load is in flight.
    pub(crate) fn in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Ask for a reload of `config` at `now`; `admin` is the hub call to answer with its
    /// summary.
    pub(crate) fn request(
        &mut self,
        config: &LoadedConfig,
        admin: Option<CallId>,
        now: Instant,
    ) -> Out {
        if self.in_flight.is_some() {
            self.again = true;
            self.waiting_next.extend(admin);
            return Out::new();
        }
        self.waiting.extend(admin);
        self.reread.clear();
        self.start(config, now)
    }

    /// Ask blocking for the files; `started` is when the reload was asked for.
    fn start(&mut self, config: &LoadedConfig, started: Instant) -> Out {
        let reread = &self.reread;
        let known = config
            .reusable_fingerprints()
            .into_iter()
            .filter(|(path, _)| !reread.contains(path))
            .collect::<Vec<_>>();
        let dir = config.dir.clone();
        let mut out = Out::new();
        out.blocking(BlockingRequest::LoadConfig { dir, known }, move |result| {
            Message::ConfigRead { started, result }
        });
        self.in_flight = Some(started);
        out
    }

    /// blocking answered the load asked for at `started`: merge what it read into
    /// `config` (at `now`, for the schedules), or say why not, or read more.
    pub(crate) fn read(
        &mut self,
        config: &LoadedConfig,
        started: Instant,
        result: BlockingResult,
        now: DateTime<Utc>,
        at: Instant,
    ) -> Read {
        self.in_flight = None;
        let summary = match result {
            Ok(BlockingReply::ConfigParsed(parsed)) => {
                match config::load_parsed(&config.dir, parsed, Some(config), now) {
                    config::Load::Loaded(loaded) => return Read::Apply(loaded),
                    config::Load::Reread(files) => {
                        // Only unchanged files are listed, and each round reads them: this ends.
                        log::debug!("reload: {} unchanged files read again", files.len());
                        self.reread.extend(files);
                        return Read::Done(self.start(config, started));
                    }
                }
            }
            Ok(other) => failed(format!("blocking answered {other:?}")),
            Err(e) => failed(e.to_string()),
        };
        Read::Done(self.answer(config, summary, at))
    }

    /// `loaded` (asked for at `started`) goes to each executor plugin its jobs use for
    /// its `check_config` (`Ok`: wait for [`Reloads::plugin_checked`]), or, using none,
    /// comes back to be put in effect now (`Err`).
    pub(crate) fn check_plugins(
        &mut self,
        loaded: Box<LoadedConfig>,
        started: Instant,
    ) -> Result<Out, Box<LoadedConfig>> {
        let orders = loaded.plugin_check_orders();
        if orders.is_empty() {
            return Err(loaded);
        }
        let mut out = Out::new();
        let mut waiting = BTreeSet::new();
        for order in orders {
            let plugin = order.spec.name.clone();
            waiting.insert(plugin.clone());
            let call = crate::wire::link::PluginCall::Check {
                request: order.request,
            };
            let spec = Box::new(order.spec);
            out.blocking(BlockingRequest::Plugin { spec, call }, move |result| {
                Message::PluginChecked { plugin, result }
            });
        }
        // Still in flight: reloads asked for meanwhile come after it.
        self.in_flight = Some(started);
        self.checking = Some(Checking {
            loaded,
            started,
            waiting,
        });
        Ok(out)
    }

    /// `plugin` answered its `check_config`: applied to the configuration waiting for
    /// it, which comes back (with when its load was asked for) once every plugin has.
    pub(crate) fn plugin_checked(
        &mut self,
        plugin: &str,
        result: BlockingResult,
    ) -> Option<(Box<LoadedConfig>, Instant)> {
        let checking = self.checking.as_mut()?;
        if !checking.waiting.remove(plugin) {
            return None;
        }
        let answer = match result {
            Ok(BlockingReply::Checked(answer)) => answer,
            Ok(other) => Err(format!("blocking answered {other:?}")),
            Err(e) => Err(e.to_string()),
        };
        checking.loaded.apply_plugin_check(plugin, answer);
        if !checking.waiting.is_empty() {
            return None;
        }
        let done = self.checking.take()?;
        self.in_flight = None;
        Some((done.loaded, done.started))
    }

    /// The load asked for at `started` is in effect (`config`) at `now`: answer who asked.
    pub(crate) fn applied(&mut self, config: &LoadedConfig, started: Instant, now: Instant) -> Out {
        self.answer(config, summary(config, started, now), now)
    }

    /// Say how the load went, to the log and to who asked; start the next one if asked.
    fn answer(&mut self, config: &LoadedConfig, summary: String, now: Instant) -> Out {
        log::info!("{summary}");
        let mut out = Out::new();
        for call in std::mem::take(&mut self.waiting) {
            out.answer(call, AdminResponse::Done(summary.clone()));
        }
        if std::mem::take(&mut self.again) {
            self.waiting = std::mem::take(&mut self.waiting_next);
            self.reread.clear();
            out.extend(self.start(config, now));
        }
        out
    }
}

fn failed(why: String) -> String {
    log::error!("reload failed: {why}; the previous configuration stays in effect");
    format!("reload failed: {why}")
}

fn summary(config: &LoadedConfig, started: Instant, now: Instant) -> String {
    let errors = config
        .diagnostics
        .iter()
        .filter(|d| d.severity == config::Severity::Error)
        .count();
    format!(
        "configuration reloaded: {} jobs, {errors} errors, in {} ms",
        config.jobs.len(),
        now.saturating_duration_since(started).as_millis()
    )
}

/// Log `diagnostics` (of a load, in file order) within the bounds answers keep
/// (`config::ErrorDigest`: 20 of a file, 100 in all), then how many were not: a directory
/// with 200,000 errors writes 100 lines, not 200,000, at each start.
pub(crate) fn log_diagnostics<'a>(diagnostics: impl Iterator<Item = &'a config::Diagnostic>) {
    let (logged, left_out) = config::bounded_by_file(
        diagnostics,
        |d| d.file.as_path(),
        config::SHOWN_PER_FILE,
        config::SHOWN_MAX,
    );
    for d in logged {
        log::warn!("{d}");
    }
    if left_out > 0 {
        log::warn!(
            "… and {left_out} more configuration problem(s) not logged \
             (saltpeterctl config check lists them all)"
        );
    }
}

/// What a reload changes beyond the jobs, for the loop to follow up.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Changes {
    /// `saltpeter_maintenance` changed: its events are recorded.
    pub maintenance: bool,
    /// The retention changed: it applies to the existing history too.
    pub retention: bool,
}

impl Changes {
    /// What `loaded` changes from `current`; settings that take effect only at the next
    /// start, and new diagnostics, are logged.
    pub(crate) fn between(current: &LoadedConfig, loaded: &LoadedConfig) -> Changes {
        for change in current.saltpeter.startup_only_changes(&loaded.saltpeter) {
            log::warn!("saltpeter_config.{change} changed: it takes effect at the next start");
        }
        let known: HashSet<&config::Diagnostic> = current.diagnostics.iter().collect();
        log_diagnostics(loaded.diagnostics.iter().filter(|d| !known.contains(d)));
        Changes {
            maintenance: current.maintenance != loaded.maintenance,
            retention: current.saltpeter.retention != loaded.saltpeter.retention,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::ParsedFiles;
    use crate::ipc::Role;
    use crate::ipc::rpc::CallError;
    use crate::roles::main::messages::Cmd;

    /// The configuration of an empty directory.
    fn empty(dir: &std::path::Path) -> LoadedConfig {
        config::load_dir(dir, None, Utc::now()).expect("an empty directory loads")
    }

    fn loads(out: &Out) -> usize {
        out.cmds()
            .iter()
            .filter(|c| {
                matches!(
                    c,
                    Cmd::Blocking {
                        req: BlockingRequest::LoadConfig { .. },
                        local: false,
                        ..
                    }
                )
            })
            .count()
    }

    fn answers(out: &Out) -> Vec<(CallId, String)> {
        out.cmds()
            .iter()
            .filter_map(|c| match c {
                Cmd::Answer(call, AdminResponse::Done(text)) => Some((*call, text.clone())),
                _ => None,
            })
            .collect()
    }

    fn gone() -> BlockingResult {
        Err(CallError::PeerGone(Role::Blocking))
    }

    #[test]
    fn requests_during_a_load_coalesce_into_one_more_and_are_answered_by_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = empty(dir.path());
        let t0 = Instant::now();
        let mut reloads = Reloads::default();
        let out = reloads.request(&config, Some(1), t0);
        assert_eq!(loads(&out), 1);
        assert!(reloads.in_flight());
        assert!(reloads.request(&config, Some(2), t0).is_empty());
        assert!(reloads.request(&config, None, t0).is_empty());

        let Read::Done(out) = reloads.read(&config, t0, gone(), Utc::now(), t0) else {
            panic!("a failed load has nothing to apply");
        };
        assert_eq!(
            answers(&out),
            [(
                1,
                "reload failed: the blocking process went away before answering".into()
            )]
        );
        assert_eq!(loads(&out), 1, "the load asked for meanwhile starts");
        assert!(reloads.in_flight());

        let Read::Done(out) = reloads.read(&config, t0, gone(), Utc::now(), t0) else {
            panic!("a failed load has nothing to apply");
        };
        assert_eq!(answers(&out).len(), 1);
        assert_eq!(answers(&out)[0].0, 2, "the call made during the first load");
        assert_eq!(loads(&out), 0, "nothing more was asked");
        assert!(!reloads.in_flight());
    }

    #[test]
    fn a_load_read_is_applied_then_answered_with_its_summary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = empty(dir.path());
        let t0 = Instant::now();
        let mut reloads = Reloads::default();
        let _ = reloads.request(&config, Some(9), t0);
        let read = Ok(BlockingReply::ConfigParsed(ParsedFiles::default()));
        let Read::Apply(loaded) = reloads.read(&config, t0, read, Utc::now(), t0) else {
            panic!("the files read are to be applied");
        };
        assert!(!reloads.in_flight());
        let out = reloads.applied(&loaded, t0, t0 + Duration::from_millis(42));
        assert_eq!(
            answers(&out),
            [(
                9,
                "configuration reloaded: 0 jobs, 0 errors, in 42 ms".into()
            )]
        );
    }

    #[test]
    fn an_unexpected_reply_keeps_the_configuration_and_says_so() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = empty(dir.path());
        let t0 = Instant::now();
        let mut reloads = Reloads::default();
        let _ = reloads.request(&config, Some(3), t0);
        let odd = Ok(BlockingReply::Delivered(Ok(String::new())));
        let Read::Done(out) = reloads.read(&config, t0, odd, Utc::now(), t0) else {
            panic!("nothing to apply");
        };
        let said = answers(&out);
        assert!(
            said[0].1.starts_with("reload failed: blocking answered"),
            "{said:?}"
        );
    }

    #[test]
    fn the_changes_that_need_a_follow_up_are_told_apart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = empty(dir.path());
        assert_eq!(
            Changes::between(&config, &config.clone()),
            Changes::default()
        );
        let mut next = config.clone();
        next.maintenance.global = true;
        next.saltpeter.retention.days += 1;
        assert_eq!(
            Changes::between(&config, &next),
            Changes {
                maintenance: true,
                retention: true
            }
        );
    }
}
