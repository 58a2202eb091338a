//! One launch command, several runs: `SP_RUN` may list every run due on a minion in the
//! same round (`SP_RUN=41,42,43`), so the daemon reaches the minion with one Salt publish
//! instead of one per run. The launcher validates the environment and hashes its build
//! once, then starts one background wrapper per run (`daemon::launch_in_background`).
//!
//! Pure: the list and the rules about it are tested without a process.

use super::error::WrapperError;
use crate::wire::wrapper::ENV_RUN;

/// Most runs one launch command may start.
pub(crate) const MAX_RUNS: usize = 1000;

/// The runs of `SP_RUN`: one run id, or several separated by commas, each a positive
/// decimal number. Duplicates are started once (first position kept). An empty item, a
/// non-number, 0 or more than [`MAX_RUNS`] runs refuse the whole list, naming the value.
pub(crate) fn parse_runs(text: &str) -> Result<Vec<u64>, WrapperError> {
    let bad = |reason: String| WrapperError::InvalidEnv {
        var: ENV_RUN,
        reason,
    };
    let mut runs: Vec<u64> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, item) in text.split(',').enumerate() {
        let item = item.trim();
        if item.is_empty() {
            return Err(bad(format!("{text:?}: item {} is empty", i + 1)));
        }
        let run = item
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| item.parse::<u64>().ok())
            .flatten()
            .ok_or_else(|| bad(format!("{item:?} is not a run id (an unsigned integer)")))?;
        if run == 0 {
            return Err(bad(format!("{item:?}: run ids start at 1")));
        }
        if seen.insert(run) {
            if runs.len() == MAX_RUNS {
                return Err(bad(format!(
                    "more than {MAX_RUNS} runs in one launch (from run {run} on)"
                )));
            }
            runs.push(run);
        }
    }
    Ok(runs)
}

/// Whether this launch may start `runs` the way it was asked: several runs only in the
/// background (`--daemonize`, one process per run) and proven with the minion key (a
/// launch token proves a single run).
pub(super) fn check_runs(
    runs: &[u64],
    daemonize: bool,
    by_token: bool,
) -> Result<(), WrapperError> {
    if runs.len() <= 1 {
        return Ok(());
    }
    if !daemonize {
        return Err(WrapperError::Usage(format!(
            "SP_RUN lists {} runs; several runs need --daemonize (one background wrapper \
             per run)",
            runs.len()
        )));
    }
    if by_token {
        return Err(WrapperError::Usage(format!(
            "SP_RUN lists {} runs; a launch token proves a single run, several need \
             --minion-id and --minion-key",
            runs.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse_runs(text).unwrap_err().to_string()
    }

    #[test]
    fn one_run_or_a_list_with_duplicates_started_once() {
        assert_eq!(parse_runs("42").unwrap(), [42]);
        assert_eq!(parse_runs(" 42 ").unwrap(), [42]);
        assert_eq!(parse_runs("41,42,43").unwrap(), [41, 42, 43]);
        assert_eq!(parse_runs("43, 41 ,43,42,41").unwrap(), [43, 41, 42]);
    }

    #[test]
    fn bad_items_refuse_the_whole_list_naming_the_value() {
        let e = err("41,,43");
        assert!(e.contains("SP_RUN") && e.contains("item 2 is empty"), "{e}");
        assert!(err("41,").contains("item 2 is empty"));
        assert!(err("").contains("item 1 is empty"));
        let e = err("41,x7,43");
        assert!(e.contains("\"x7\"") && e.contains("not a run id"), "{e}");
        for bad in ["-3", "+3", "4 2", "1e3", "99999999999999999999"] {
            assert!(err(bad).contains("not a run id"), "{bad}");
        }
        let e = err("41,0");
        assert!(e.contains("\"0\"") && e.contains("start at 1"), "{e}");
    }

    #[test]
    fn at_most_a_thousand_runs() {
        let list = |n: u64| (1..=n).map(|r| r.to_string()).collect::<Vec<_>>().join(",");
        assert_eq!(parse_runs(&list(1000)).unwrap().len(), 1000);
        let e = err(&list(1001));
        assert!(e.contains("more than 1000") && e.contains("1001"), "{e}");
        // Duplicates do not count.
        let doubled = format!("{},{}", list(1000), list(1000));
        assert_eq!(parse_runs(&doubled).unwrap().len(), 1000);
    }

    #[test]
    fn several_runs_need_daemonize_and_the_minion_key() {
        assert!(check_runs(&[1], false, true).is_ok());
        assert!(check_runs(&[1, 2], true, false).is_ok());
        let e = check_runs(&[1, 2], false, false).unwrap_err();
        assert!(e.to_string().contains("--daemonize"), "{e}");
        assert_eq!(e.exit_code(), 1);
        let e = check_runs(&[1, 2], true, true).unwrap_err();
        assert!(e.to_string().contains("--minion-key"), "{e}");
    }
}
