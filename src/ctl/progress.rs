//! `run JOB [--wait] [--targets a,b]`: start a run and, with `--wait`, show it live.
//!
//! The daemon streams a snapshot of the run, then every target's change of state. On a
//! terminal (stderr) that is a progress bar redrawn in place with a line per target
//! that starts, finishes or fails; elsewhere plain lines (none with `--json`). The end
//! is the per-target table (or the run as JSON); exit 0 only if every target succeeded.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use super::client::Client;
use super::exit::{CtlResult, EXIT_FAILED, EXIT_OK};
use super::render;
use super::table::{Color, Style, target_outcome};
use super::verbs::unexpected;
use crate::wire::admin::{AdminRequest, AdminResponse};
use crate::wire::records::{RunState, TargetRecord, TargetState};

const BAR_WIDTH: usize = 30;

struct Progress {
    bar: bool,
    lines: bool,
    style: Style,
    targets: BTreeMap<String, TargetRecord>,
    drawn: bool,
}

impl Progress {
    fn counts(&self) -> (usize, usize, usize, usize) {
        let (mut running, mut ok, mut failed) = (0, 0, 0);
        for t in self.targets.values() {
            match (t.state, t.exit_code) {
                (TargetState::Finished, Some(0)) => ok += 1,
                (TargetState::Finished, _) => failed += 1,
                (TargetState::Running, _) if !t.suspended => running += 1,
                _ => {}
            }
        }
        let skipped = self
            .targets
            .values()
            .filter(|t| t.state == TargetState::SkippedMaintenance)
            .count();
        (running, ok, failed, skipped)
    }

    fn draw(&mut self) {
        if !self.bar {
            return;
        }
        let (running, ok, failed, skipped) = self.counts();
        let suspended = self.targets.values().filter(|t| t.suspended).count();
        let suspended = if suspended > 0 {
            format!(
                "  {}",
                self.style
                    .paint(&format!("suspended {suspended}"), Some(Color::Yellow))
            )
        } else {
            String::new()
        };
        let total = self.targets.len().max(1);
        let done = ok + failed + skipped;
        let filled = done * BAR_WIDTH / total;
        let bar = format!("{}{}", "#".repeat(filled), "-".repeat(BAR_WIDTH - filled));
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[2K[{bar}] {done}/{}  running {running}{suspended}  {}  {}",
            self.targets.len(),
            self.style.paint(&format!("ok {ok}"), Some(Color::Green)),
            self.style.paint(
                &format!("failed {failed}"),
                (failed > 0).then_some(Color::Red)
            ),
        );
        let _ = err.flush();
        self.drawn = true;
    }

    fn clear(&mut self) {
        if self.drawn {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
            self.drawn = false;
        }
    }

    fn event(&mut self, t: TargetRecord) {
        let line = match t.state {
            TargetState::Running => Some(("started".to_string(), Some(Color::Blue))),
            TargetState::Finished | TargetState::SkippedMaintenance => {
                let (what, color) = target_outcome(&t);
                let code = t
                    .exit_code
                    .map(|c| format!(" (exit {c})"))
                    .unwrap_or_default();
                Some((format!("{what}{code}"), color))
            }
            _ => None,
        };
        let old = self.targets.get(&t.machine);
        let old_state = old.map(|old| old.state);
        let mut changed = old_state != Some(t.state);
        // Suspended or resumed by an operator: said while it runs.
        let line = match (old.map(|o| o.suspended), t.suspended) {
            (Some(false), true) if !changed => {
                changed = true;
                Some(("suspended".to_string(), Some(Color::Yellow)))
            }
            (Some(true), false) if !changed && t.state == TargetState::Running => {
                changed = true;
                Some(("resumed".to_string(), Some(Color::Blue)))
            }
            _ => line,
        };
        // A target that started and ended between two looks (or before the watch began)
        // is still reported as started first.
        let unseen_start = t.state == TargetState::Finished
            && t.started.is_some()
            && old_state != Some(TargetState::Running);
        let machine = t.machine.clone();
        self.targets.insert(machine.clone(), t);
        if let (Some((what, color)), true) = (line, changed)
            && (self.bar || self.lines)
        {
            self.clear();
            if unseen_start {
                let started = self.style.paint("started", Some(Color::Blue));
                eprintln!("  {machine}: {started}");
            }
            eprintln!("  {machine}: {}", self.style.paint(&what, color));
        }
        self.draw();
    }
}

pub(super) fn run_job(
    socket: Option<PathBuf>,
    job: String,
    wait: bool,
    targets: Option<Vec<String>>,
    json: bool,
) -> CtlResult {
    let mut client = Client::connect(socket)?;
    let run = match client.request(&AdminRequest::RunNow { job, targets })? {
        AdminResponse::Started { run } => run,
        other => return render::response(other, json),
    };
    if !wait {
        return render::started(run, json);
    }
    let tty = std::io::stderr().is_terminal();
    let mut p = Progress {
        bar: tty,
        lines: !tty && !json,
        style: Style::stderr(),
        targets: BTreeMap::new(),
        drawn: false,
    };
    if p.bar || p.lines {
        eprintln!("run {run} started");
    }
    let end = client.call(&AdminRequest::WatchRun { run }, |resp| {
        match resp {
            AdminResponse::RunProgress(snapshot) => {
                // What already happened before the watch began is reported like the rest.
                for t in snapshot.targets {
                    p.event(t);
                }
                p.draw();
            }
            AdminResponse::TargetProgress { target, .. } => p.event(target),
            AdminResponse::Progress(line) => {
                p.clear();
                eprintln!("{line}");
                p.draw();
            }
            _ => {}
        }
        Ok(())
    });
    p.clear();
    match end? {
        AdminResponse::Run(record) => {
            render::run(&record, json);
            Ok(if record.state == RunState::Succeeded {
                EXIT_OK
            } else {
                EXIT_FAILED
            })
        }
        other => unexpected(other, json),
    }
}
