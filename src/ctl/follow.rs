//! Following output live: `output RUN MACHINE -f` and `logs JOB [-f]`.
//!
//! The daemon pushes output as soon as it is committed (no polling): a `FollowStart`
//! naming the run and its targets, `OutputChunk`s in order, and a final `Followed` when
//! the run has ended (at once for a run that is over, or without `-f`). With one target
//! the bytes are written as they come, like `tail -f`; with several, each complete line is
//! prefixed with its machine (partial lines wait for their end). With `--json` every chunk
//! is one JSON line, and the run record ends the stream.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};

use serde_json::json;

use super::client::{Client, CtlError};
use super::exit::{CtlResult, EXIT_OK};
use super::render::run_json;
use super::table::{Color, Style};
use super::verbs::{unexpected, write_output};
use crate::wire::admin::{AdminRequest, AdminResponse};

struct Printer {
    json: bool,
    prefix: bool,
    width: usize,
    style: Style,
    partial: BTreeMap<String, Vec<u8>>,
}

fn io_err(e: std::io::Error) -> CtlError {
    super::out::write_failed(e)
}

impl Printer {
    fn chunk(
        &mut self,
        machine: &str,
        data: &[u8],
        omitted_bytes: u64,
        omitted_at: Option<usize>,
    ) -> Result<(), CtlError> {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        if self.json {
            let line = json!({
                "machine": machine,
                "output": String::from_utf8_lossy(data),
                "omitted_bytes": if omitted_at.is_some() { omitted_bytes } else { 0 },
            });
            writeln!(out, "{line}").map_err(io_err)?;
            return out.flush().map_err(io_err);
        }
        if !self.prefix {
            write_output(&mut out, data, omitted_bytes, omitted_at).map_err(io_err)?;
            return out.flush().map_err(io_err);
        }
        let mut bytes = Vec::new();
        write_output(&mut bytes, data, omitted_bytes, omitted_at).map_err(io_err)?;
        let buf = self.partial.entry(machine.to_string()).or_default();
        buf.extend_from_slice(&bytes);
        let Some(last_nl) = buf.iter().rposition(|b| *b == b'\n') else {
            return Ok(());
        };
        let rest = buf.split_off(last_nl + 1);
        let complete = std::mem::replace(buf, rest);
        for line in complete.split_inclusive(|b| *b == b'\n') {
            self.line(&mut out, machine, line)?;
        }
        out.flush().map_err(io_err)
    }

    fn line(&self, out: &mut impl Write, machine: &str, line: &[u8]) -> Result<(), CtlError> {
        let label = format!("{machine:<w$} |", w = self.width);
        write!(out, "{} ", self.style.paint(&label, Some(Color::Blue))).map_err(io_err)?;
        out.write_all(line).map_err(io_err)?;
        if !line.ends_with(b"\n") {
            out.write_all(b"\n").map_err(io_err)?;
        }
        Ok(())
    }

    /// Lines left without their end when the run is over.
    fn finish(&mut self) -> Result<(), CtlError> {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        for (machine, rest) in std::mem::take(&mut self.partial) {
            if !rest.is_empty() {
                self.line(&mut out, &machine, &rest)?;
            }
        }
        out.flush().map_err(io_err)
    }
}

/// Run a `Follow` request to its end, printing as it goes.
pub(super) fn follow(client: &mut Client, req: AdminRequest, json: bool) -> CtlResult {
    let mut printer = Printer {
        json,
        prefix: false,
        width: 0,
        style: Style::stdout(),
        partial: BTreeMap::new(),
    };
    let note = std::io::stderr().is_terminal() && !json;
    let end = client.call(&req, |resp| {
        match resp {
            AdminResponse::FollowStart {
                run,
                job,
                machines,
                live,
            } => {
                printer.prefix = machines.len() > 1;
                printer.width = machines
                    .iter()
                    .map(|m| m.chars().count())
                    .max()
                    .unwrap_or(0);
                if note {
                    let what = if live { "following" } else { "output of" };
                    eprintln!("-- {what} run {run} of {job} ({})", machines.join(", "));
                }
            }
            AdminResponse::OutputChunk {
                machine,
                data,
                omitted_bytes,
                omitted_at,
            } => printer.chunk(&machine, &data, omitted_bytes, omitted_at)?,
            AdminResponse::Progress(line) => eprintln!("{line}"),
            _ => {}
        }
        Ok(())
    })?;
    printer.finish()?;
    match end {
        AdminResponse::Followed(record) => {
            if json {
                outln!("{}", json!({ "run": run_json(&record) }));
            } else if note {
                eprintln!("-- run {} {}", record.id, record.state);
            }
            Ok(EXIT_OK)
        }
        other => unexpected(other, json),
    }
}
