//! What the daemon's answers carry of a configuration's errors, bounded and computed once
//! per load ([`ErrorDigest`]), so that a directory with 200,000 errors (one generated
//! file gone wrong) neither makes an answer outgrow the 16 MiB link frame nor costs each
//! request a pass over every error.
//!
//! 1. The errors shown (`status`, `/api/v1/config/errors`, the dashboard's `config`
//!    message): at most [`SHOWN_PER_FILE`] of each file, so a broken file does not hide
//!    the others', and [`SHOWN_MAX`] in all, each cut to [`SHOWN_CHARS`] characters,
//!    then one line counting the rest.
//! 2. The invalid jobs the listings carry (the job list, the dashboard's crons): the same
//!    bounds, in name order; the others are counted. A job's detail still answers for
//!    every job, with at most [`SHOWN_MAX`] of its own errors ([`InvalidJob::shown_errors`]).
//! 3. What main logs of a load: the same bounds ([`bounded`]).
//!
//! `saltpeterctl config check` reads the files itself and lists every problem.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Display;
use std::path::{Path, PathBuf};

use super::diagnostic::{Diagnostic, Severity};
use super::entries::{InvalidJob, JobEntry};

/// Errors (or invalid jobs) of one file an answer carries.
pub(crate) const SHOWN_PER_FILE: usize = 20;
/// Errors (or invalid jobs) an answer carries in all.
pub(crate) const SHOWN_MAX: usize = 100;
/// Characters of one error an answer carries.
pub(crate) const SHOWN_CHARS: usize = 1024;
/// Errors of an invalid job its entry in a list carries.
const LINE_ERRORS: usize = 3;

/// The first of `items` by the bounds: at most `per_file` of each file and `max` in all,
/// in the order given; and how many were left out.
pub(crate) fn bounded<T>(
    items: impl Iterator<Item = T>,
    file_of: impl Fn(&T) -> &Path,
    per_file: usize,
    max: usize,
) -> (Vec<T>, usize) {
    let mut kept = Vec::new();
    let mut left_out = 0usize;
    // Only files with an item kept are counted: at most `max` entries.
    let mut of_file: HashMap<PathBuf, usize> = HashMap::new();
    for item in items {
        let n = of_file.get(file_of(&item)).copied().unwrap_or(0);
        if kept.len() < max && n < per_file {
            of_file.insert(file_of(&item).to_path_buf(), n + 1);
            kept.push(item);
        } else {
            left_out += 1;
        }
    }
    (kept, left_out)
}

/// `items` shown one per line, each cut to [`SHOWN_CHARS`], and `left_out` counted.
fn lines<T: Display>(items: &[T], left_out: usize, of: &str) -> Vec<String> {
    let mut out: Vec<String> = items
        .iter()
        .map(|e| crate::logsafe::cut(&e.to_string(), SHOWN_CHARS))
        .collect();
    if left_out > 0 {
        out.push(format!(
            "… and {left_out} more configuration error(s){of} \
             (saltpeterctl config check lists them all)"
        ));
    }
    out
}

/// The bounded view of a configuration's errors, made once per load.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorDigest {
    /// Errors in the configuration.
    errors: usize,
    /// The errors shown, then a line counting the rest (and the invalid jobs not listed).
    shown: Vec<String>,
    /// The invalid jobs the listings carry.
    listed_invalid: BTreeSet<String>,
    /// Invalid jobs the listings leave out.
    invalid_omitted: usize,
}

impl ErrorDigest {
    /// The digest of `diagnostics` (sorted by file, as a load leaves them) and `jobs`.
    pub(crate) fn of<'a>(
        diagnostics: &[Diagnostic],
        jobs: impl Iterator<Item = &'a JobEntry>,
    ) -> ErrorDigest {
        let errors = diagnostics.iter().filter(|d| d.severity == Severity::Error);
        let total = errors.clone().count();
        let (kept, left_out) = bounded(errors, |d| d.file.as_path(), SHOWN_PER_FILE, SHOWN_MAX);
        let mut shown = lines(&kept, left_out, "");
        let invalid = jobs.filter_map(|e| match e {
            JobEntry::Invalid(bad) => Some(bad.as_ref()),
            JobEntry::Valid(_) => None,
        });
        let (listed, invalid_omitted) =
            bounded(invalid, |j| j.file.as_path(), SHOWN_PER_FILE, SHOWN_MAX);
        if invalid_omitted > 0 {
            shown.push(format!(
                "{invalid_omitted} more invalid job(s) are not listed \
                 (saltpeterctl config check lists them all)"
            ));
        }
        ErrorDigest {
            errors: total,
            shown,
            listed_invalid: listed.into_iter().map(|j| j.name.clone()).collect(),
            invalid_omitted,
        }
    }

    /// How many errors the configuration has.
    pub fn errors(&self) -> usize {
        self.errors
    }

    /// The errors an answer shows: at most [`SHOWN_MAX`], then a line counting the rest.
    pub fn shown(&self) -> &[String] {
        &self.shown
    }

    /// Whether a listing carries `entry` (every valid job; invalid ones within the bounds).
    pub fn listed(&self, entry: &JobEntry) -> bool {
        match entry {
            JobEntry::Valid(_) => true,
            JobEntry::Invalid(bad) => self.listed_invalid.contains(&bad.name),
        }
    }

    /// How many invalid jobs the listings leave out.
    pub fn invalid_omitted(&self) -> usize {
        self.invalid_omitted
    }
}

impl InvalidJob {
    /// The job's errors as its detail shows them: at most [`SHOWN_MAX`], each cut to
    /// [`SHOWN_CHARS`], then a line counting the rest (only those shown are formatted).
    pub fn shown_errors(&self) -> Vec<String> {
        let kept = &self.errors[..self.errors.len().min(SHOWN_MAX)];
        lines(
            kept,
            self.errors.len() - kept.len(),
            &format!(" of job {}", self.name),
        )
    }

    /// The job's errors on one line, as a list entry carries them: the first few, each
    /// cut, and how many more.
    pub fn error_line(&self) -> String {
        let kept = &self.errors[..self.errors.len().min(LINE_ERRORS)];
        let mut line = kept
            .iter()
            .map(|e| crate::logsafe::cut(&e.to_string(), SHOWN_CHARS))
            .collect::<Vec<_>>()
            .join("; ");
        let more = self.errors.len() - kept.len();
        if more > 0 {
            line.push_str(&format!("; … and {more} more"));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(file: &str, line: usize) -> Diagnostic {
        Diagnostic {
            file: PathBuf::from(file),
            line,
            column: 1,
            severity: Severity::Error,
            job: None,
            message: format!("bad {line}"),
        }
    }

    fn invalid(name: &str, file: &str, errors: usize) -> JobEntry {
        JobEntry::Invalid(Box::new(InvalidJob {
            name: name.to_string(),
            group: "g".to_string(),
            file: PathBuf::from(file),
            line: 1,
            errors: (0..errors).map(|n| error(file, n + 1)).collect(),
        }))
    }

    #[test]
    fn each_file_and_the_whole_are_bounded() {
        let items: Vec<(&str, u32)> = (0..50)
            .map(|n| ("a.yaml", n))
            .chain((0..5).map(|n| ("b.yaml", n)))
            .collect();
        let (kept, left_out) = bounded(items.iter(), |i| Path::new(i.0), 20, 100);
        assert_eq!(kept.len(), 25, "20 of a, all 5 of b");
        assert_eq!(left_out, 30);
        assert_eq!(kept.iter().filter(|i| i.0 == "b.yaml").count(), 5);
        let (kept, left_out) = bounded(items.iter(), |i| Path::new(i.0), 20, 22);
        assert_eq!((kept.len(), left_out), (22, 33));
        let (kept, left_out) = bounded(std::iter::empty::<&str>(), |_| Path::new(""), 20, 100);
        assert_eq!((kept.len(), left_out), (0, 0));
    }

    #[test]
    fn a_digest_of_200_000_errors_is_small_and_counts_them() {
        let mut diagnostics: Vec<Diagnostic> = (0..199_990).map(|n| error("big.yaml", n)).collect();
        diagnostics.extend((0..10).map(|n| error("small.yaml", n)));
        let mut warning = error("small.yaml", 99);
        warning.severity = Severity::Warning;
        diagnostics.push(warning);
        let jobs: Vec<JobEntry> = (0..100_000)
            .map(|n| invalid(&format!("j{n:06}"), "big.yaml", 1))
            .chain(std::iter::once(invalid("other", "small.yaml", 3)))
            .collect();
        let digest = ErrorDigest::of(&diagnostics, jobs.iter());
        assert_eq!(digest.errors(), 200_000);
        // 20 of big.yaml, all 10 of small.yaml, the count, the jobs not listed.
        assert_eq!(digest.shown().len(), 32, "{:?}", digest.shown());
        assert!(digest.shown()[30].contains("199970 more configuration error(s)"));
        assert!(digest.shown()[31].contains("99980 more invalid job(s)"));
        assert!(
            digest
                .shown()
                .iter()
                .any(|s| s.ends_with("small.yaml:9:1: bad 9"))
        );
        assert_eq!(digest.invalid_omitted(), 99_980);
        assert!(digest.listed(&jobs[0]) && digest.listed(&jobs[19]));
        assert!(!digest.listed(&jobs[20]));
        assert!(
            digest.listed(&jobs[100_000]),
            "another file's job is listed"
        );
        let clean = ErrorDigest::of(&[], std::iter::empty());
        assert_eq!((clean.errors(), clean.shown().len()), (0, 0));
    }

    #[test]
    fn a_job_with_many_errors_shows_a_bounded_number() {
        let JobEntry::Invalid(bad) = invalid("many", "a.yaml", 200_000) else {
            unreachable!("built invalid");
        };
        let shown = bad.shown_errors();
        assert_eq!(shown.len(), SHOWN_MAX + 1);
        assert_eq!(shown[0], "a.yaml:1:1: bad 1");
        assert!(
            shown[SHOWN_MAX].contains("199900 more configuration error(s) of job many"),
            "{shown:?}"
        );
        assert_eq!(
            bad.error_line(),
            "a.yaml:1:1: bad 1; a.yaml:2:1: bad 2; a.yaml:3:1: bad 3; … and 199997 more"
        );
        let mut long = bad.clone();
        long.errors.truncate(1);
        long.errors[0].message = "x".repeat(100_000);
        assert!(long.shown_errors()[0].chars().count() <= SHOWN_CHARS + 1);
        assert!(long.error_line().chars().count() <= SHOWN_CHARS + 1);
    }
}
