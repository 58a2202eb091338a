//! `saltpeterctl crontab import FILE`: a crontab turned into Saltpeter job YAML (the
//! original Saltpeter shipped a script for this).
//!
//! What a crontab line may be, and what it becomes:
//! - `# text`: a comment, kept above the next job;
//! - `NAME=value` (spaces around `=` and quotes allowed): an environment variable of the
//!   jobs below it; `CRON_TZ`/`TZ` set their `timezone`, `MAILTO` and `SHELL` have no
//!   equivalent and are reported;
//! - `m h dom mon dow [user] command` (the user field with `--system`, as in
//!   `/etc/crontab` and `/etc/cron.d`): a job with those five fields;
//! - `@yearly` ... `@hourly` (and `@annually`, `@midnight`) `command`: a job with that
//!   `schedule`; `@reboot` has no equivalent and is reported.
//!
//! In a command, `\%` is a `%` and an unescaped `%` starts the command's standard input
//! (further `%` are newlines), as cron does; that input is fed through `printf`. The
//! conversion is a pure function; the verb reads the file and prints the YAML.

use std::path::Path;

use super::exit::{CtlResult, EXIT_FAILED, EXIT_OK, EXIT_USAGE};

/// Settings of a conversion.
#[derive(Debug, Clone, Default)]
pub(super) struct Options {
    /// `targets` of every job.
    pub targets: String,
    /// `executor` of every job, when given.
    pub executor: Option<String>,
    /// System crontab: a user field after the five time fields.
    pub system: bool,
    /// Prefix of the generated job names.
    pub prefix: String,
}

/// The YAML and what could not be carried over.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Conversion {
    pub yaml: String,
    pub jobs: usize,
    pub warnings: Vec<String>,
}

/// A YAML single-quoted scalar.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A shell single-quoted word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// An environment assignment, `NAME = value` with optional quotes.
fn assignment(line: &str) -> Option<(String, String)> {
    let (name, value) = line.split_once('=')?;
    let name = name.trim();
    let mut chars = name.chars();
    let first = chars.next()?;
    if !(first.is_ascii_alphabetic() || first == '_')
        || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return None;
    }
    let value = value.trim();
    let unquoted = ['"', '\'']
        .iter()
        .find_map(|q| {
            value
                .strip_prefix(*q)
                .and_then(|v| v.strip_suffix(*q))
                .map(str::to_string)
        })
        .unwrap_or_else(|| value.to_string());
    Some((name.to_string(), unquoted))
}

/// Split off `n` whitespace-separated fields; the rest of the line stays as written.
fn fields(line: &str, n: usize) -> Option<(Vec<&str>, &str)> {
    let mut out = Vec::with_capacity(n);
    let mut rest = line.trim_start();
    for _ in 0..n {
        let end = rest.find(char::is_whitespace)?;
        out.push(&rest[..end]);
        rest = rest[end..].trim_start();
    }
    Some((out, rest))
}

/// The command as `/bin/sh -c` should run it: cron's `%` rules applied.
fn command_of(raw: &str) -> (String, bool) {
    let mut command = String::new();
    let mut input: Option<String> = None;
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        let piece = match c {
            '\\' if chars.peek() == Some(&'%') => {
                chars.next();
                '%'
            }
            '%' if input.is_none() => {
                input = Some(String::new());
                continue;
            }
            '%' => '\n',
            c => c,
        };
        input.as_mut().unwrap_or(&mut command).push(piece);
    }
    match input {
        None => (command.trim().to_string(), false),
        Some(text) => {
            let lines: Vec<String> = text.split('\n').map(shell_quote).collect();
            (
                format!("printf '%s\\n' {} | ({})", lines.join(" "), command.trim()),
                true,
            )
        }
    }
}

/// A job name from the command: its program's base name, made unique.
fn job_name(command: &str, prefix: &str, taken: &mut Vec<String>) -> String {
    let program = command
        .split_whitespace()
        .find(|w| !w.contains('='))
        .unwrap_or("job");
    let base: String = program
        .rsplit('/')
        .next()
        .unwrap_or(program)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let base = format!(
        "{prefix}{}",
        if base.trim_matches('_').is_empty() {
            "job"
        } else {
            base.trim_matches('_')
        }
    );
    let mut name = base.clone();
    let mut n = 2;
    while taken.contains(&name) {
        name = format!("{base}_{n}");
        n += 1;
    }
    taken.push(name.clone());
    name
}

const SHORTCUTS: &[(&str, &str)] = &[
    ("@yearly", "@yearly"),
    ("@annually", "@yearly"),
    ("@monthly", "@monthly"),
    ("@weekly", "@weekly"),
    ("@daily", "@daily"),
    ("@midnight", "@daily"),
    ("@hourly", "@hourly"),
];

/// Convert a crontab's text.
pub(super) fn convert(text: &str, source: &str, opts: &Options) -> Conversion {
    let mut yaml = format!("# Converted from {source} by saltpeterctl crontab import.\n");
    let mut warnings = Vec::new();
    let mut env: Vec<(String, String)> = Vec::new();
    let mut timezone: Option<String> = None;
    let mut comments: Vec<String> = Vec::new();
    let mut taken = Vec::new();
    let mut jobs = 0;
    for (i, raw) in text.lines().enumerate() {
        let at = format!("{source}:{}", i + 1);
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            comments.push(comment.trim().to_string());
            continue;
        }
        if !line.starts_with('@')
            && !line.starts_with(|c: char| c.is_ascii_digit() || c == '*')
            && let Some((name, value)) = assignment(line)
        {
            match name.as_str() {
                "CRON_TZ" | "TZ" => {
                    timezone = Some(value.clone());
                    if name == "TZ" {
                        env.retain(|(n, _)| *n != name);
                        env.push((name, value));
                    }
                }
                "MAILTO" | "MAILFROM" => warnings.push(format!(
                    "{at}: {name} has no effect: Saltpeter keeps every run's output instead of mailing it"
                )),
                "SHELL" if value != "/bin/sh" => warnings.push(format!(
                    "{at}: SHELL={value} is not carried over: commands run under /bin/sh -c"
                )),
                "SHELL" => {}
                _ => {
                    env.retain(|(n, _)| *n != name);
                    env.push((name, value));
                }
            }
            continue;
        }
        let schedule = if line.starts_with('@') {
            let (word, rest) = fields(line, 1).unwrap_or((vec![line], ""));
            let word = word
                .first()
                .copied()
                .unwrap_or_default()
                .to_ascii_lowercase();
            if word == "@reboot" {
                warnings.push(format!(
                    "{at}: @reboot has no equivalent in Saltpeter; line skipped"
                ));
                comments.clear();
                continue;
            }
            match SHORTCUTS.iter().find(|(w, _)| *w == word) {
                Some((_, canonical)) => Some((Schedule::Shortcut(canonical), rest)),
                None => {
                    warnings.push(format!("{at}: unknown shortcut {word}; line skipped"));
                    None
                }
            }
        } else {
            match fields(line, 5) {
                Some((f, rest)) if valid_fields(&f) => Some((Schedule::Fields(f), rest)),
                Some((f, _)) => {
                    warnings.push(format!(
                        "{at}: `{}` are not valid cron time fields; skipped",
                        f.join(" ")
                    ));
                    None
                }
                None => {
                    warnings.push(format!(
                        "{at}: not a crontab line (five time fields and a command); skipped"
                    ));
                    None
                }
            }
        };
        let Some((schedule, mut rest)) = schedule else {
            comments.clear();
            continue;
        };
        let mut user = None;
        if opts.system {
            match fields(rest, 1) {
                Some((u, r)) => {
                    user = u.first().map(|u| u.to_string());
                    rest = r;
                }
                None => {
                    warnings.push(format!(
                        "{at}: no user and command after the schedule; skipped"
                    ));
                    comments.clear();
                    continue;
                }
            }
        }
        if rest.trim().is_empty() {
            warnings.push(format!("{at}: no command; skipped"));
            comments.clear();
            continue;
        }
        let (command, has_input) = command_of(rest);
        if has_input {
            warnings.push(format!(
                "{at}: the text after % (the command's input) is fed through printf; check it"
            ));
        }
        let name = job_name(rest, &opts.prefix, &mut taken);
        yaml.push('\n');
        for c in comments.drain(..) {
            match c.is_empty() {
                true => yaml.push_str("#\n"),
                false => yaml.push_str(&format!("# {c}\n")),
            }
        }
        yaml.push_str(&format!("# {at}: {line}\n"));
        yaml.push_str(&format!("{name}:\n"));
        match schedule {
            Schedule::Shortcut(s) => yaml.push_str(&format!("  schedule: {}\n", quote(s))),
            Schedule::Fields(f) => {
                for (key, value) in ["min", "hour", "dom", "mon", "dow"].iter().zip(f) {
                    yaml.push_str(&format!("  {key}: {}\n", quote(value)));
                }
            }
        }
        yaml.push_str(&format!("  command: {}\n", quote(&command)));
        yaml.push_str(&format!("  targets: {}\n", quote(&opts.targets)));
        if let Some(executor) = &opts.executor {
            yaml.push_str(&format!("  executor: {executor}\n"));
        }
        if let Some(user) = user {
            yaml.push_str(&format!("  user: {}\n", quote(&user)));
        }
        if let Some(tz) = &timezone {
            yaml.push_str(&format!("  timezone: {}\n", quote(tz)));
        }
        if !env.is_empty() {
            yaml.push_str("  env:\n");
            for (k, v) in &env {
                yaml.push_str(&format!("    {k}: {}\n", quote(v)));
            }
        }
        jobs += 1;
    }
    Conversion {
        yaml,
        jobs,
        warnings,
    }
}

/// Whether five fields make a schedule Saltpeter accepts.
fn valid_fields(f: &[&str]) -> bool {
    let [min, hour, dom, mon, dow] = f else {
        return false;
    };
    let fields = crate::schedule::CronFields::new(min, hour, dom, mon, dow);
    crate::schedule::Schedule::from_fields(&fields, chrono_tz::UTC).is_ok()
}

enum Schedule<'a> {
    Shortcut(&'a str),
    Fields(Vec<&'a str>),
}

/// The verb: read FILE (`-` for standard input), print the YAML, report what was lost.
pub(super) fn import(file: &Path, opts: &Options) -> CtlResult {
    let (text, source) = if file == Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| (EXIT_USAGE, format!("cannot read standard input: {e}")))?;
        (text, "standard input".to_string())
    } else {
        let text = std::fs::read_to_string(file)
            .map_err(|e| (EXIT_USAGE, format!("cannot read {}: {e}", file.display())))?;
        (text, file.display().to_string())
    };
    let conversion = convert(&text, &source, opts);
    out!("{}", conversion.yaml);
    for w in &conversion.warnings {
        eprintln!("saltpeterctl: warning: {w}");
    }
    eprintln!(
        "saltpeterctl: {} job(s) converted, {} warning(s)",
        conversion.jobs,
        conversion.warnings.len()
    );
    Ok(if conversion.jobs == 0 && !conversion.warnings.is_empty() {
        EXIT_FAILED
    } else {
        EXIT_OK
    })
}

#[cfg(test)]
#[path = "crontab_tests.rs"]
mod tests;
