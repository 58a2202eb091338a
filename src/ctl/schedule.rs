//! `saltpeterctl schedule next`: the next fire times of a cron expression (computed here,
//! no daemon needed) or of a configured job (asked of the running daemon).
//!
//! The raw arguments are validated first (`NextArgs::validate`), each with a message naming
//! the argument and what it accepts; then the times are computed or fetched and printed as
//! RFC 3339 UTC, one a line, or with `--json` as a JSON array of strings.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use clap::{Args, Subcommand};

use super::arg_error::ArgError;
use super::exit::{CtlResult, EXIT_FAILED, EXIT_OK, EXIT_USAGE};
use super::{client, render};
use crate::schedule::{MAX_UPCOMING, Schedule};
use crate::wire::admin::{AdminRequest, AdminResponse};

#[derive(Debug, Subcommand)]
pub(crate) enum ScheduleAction {
    /// The next fire times, as RFC 3339 UTC.
    Next(NextArgs),
}

#[derive(Debug, Args)]
pub(crate) struct NextArgs {
    /// A cron expression: 5 fields (min hour dom mon dow), 6 (seconds first), 7 (year last),
    /// or @yearly @monthly @weekly @daily @hourly.
    #[arg(long, required_unless_present = "job", conflicts_with = "job")]
    pub expr: Option<String>,
    /// A job of the running daemon (read in its own time zone).
    #[arg(long)]
    pub job: Option<String>,
    /// IANA time zone the expression is read in (default UTC).
    #[arg(long, conflicts_with = "job")]
    pub tz: Option<String>,
    /// List the fire times after this instant (RFC 3339; default now).
    #[arg(long)]
    pub from: Option<String>,
    /// How many fire times to list.
    #[arg(long, default_value_t = 5)]
    pub count: u32,
}

/// What to list, validated.
enum Source {
    Expr(Box<Schedule>),
    Job(String),
}

struct Validated {
    source: Source,
    from: Option<DateTime<Utc>>,
    count: u32,
}

impl NextArgs {
    fn validate(self) -> Result<Validated, ArgError> {
        if !(1..=MAX_UPCOMING).contains(&self.count) {
            return Err(ArgError::Count { count: self.count });
        }
        let from = match self.from {
            None => None,
            Some(text) => match DateTime::parse_from_rfc3339(&text) {
                Ok(t) => Some(t.with_timezone(&Utc)),
                Err(source) => return Err(ArgError::From { text, source }),
            },
        };
        let source = match (self.expr, self.job) {
            (_, Some(job)) => Source::Job(job),
            (Some(expr), None) => {
                let tz = match self.tz {
                    None => Tz::UTC,
                    Some(name) => match name.parse::<Tz>() {
                        Ok(tz) => tz,
                        Err(_) => return Err(ArgError::Tz { name }),
                    },
                };
                let schedule = match Schedule::from_expr(&expr, tz) {
                    Ok(schedule) => schedule,
                    Err(source) => return Err(ArgError::Schedule { expr, source }),
                };
                Source::Expr(Box::new(schedule))
            }
            (None, None) => return Err(ArgError::NoSource),
        };
        Ok(Validated {
            source,
            from,
            count: self.count,
        })
    }
}

pub(super) fn next(socket: Option<PathBuf>, args: NextArgs, json: bool) -> CtlResult {
    let args = args.validate().map_err(|e| (EXIT_USAGE, e.to_string()))?;
    let after = args.from.unwrap_or_else(Utc::now);
    let times: Vec<DateTime<Utc>> = match args.source {
        Source::Expr(schedule) => schedule.upcoming(after, args.count as usize),
        Source::Job(job) => {
            let mut client = client::Client::connect(socket)?;
            let request = AdminRequest::NextFirings {
                job,
                from: args.from.map(|t| t.timestamp_millis()),
                count: args.count,
            };
            match client.request(&request)? {
                AdminResponse::NextFirings(ms) => ms
                    .into_iter()
                    .filter_map(DateTime::from_timestamp_millis)
                    .collect(),
                other => return render::response(other, json),
            }
        }
    };
    print(&times, json);
    if times.is_empty() {
        return Err((
            EXIT_FAILED,
            format!(
                "the schedule never fires after {}",
                after.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
        ));
    }
    Ok(EXIT_OK)
}

fn print(times: &[DateTime<Utc>], json: bool) {
    let texts: Vec<String> = times.iter().map(|t| rfc3339(*t)).collect();
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&texts).unwrap_or_else(|_| "[]".to_string())
        );
    } else {
        for t in texts {
            outln!("{t}");
        }
    }
}

/// In Saltpeter's one JSON time format (`crate::wire::records::rfc3339`), the text list
/// too, so both show the same instants.
fn rfc3339(t: DateTime<Utc>) -> String {
    crate::wire::records::rfc3339(t.timestamp_millis()).unwrap_or_default()
}
