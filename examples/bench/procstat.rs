//! What the kernel says about a process: CPU time to the nanosecond (`schedstat`, summed
//! over threads, so a short idle window is not lost in 10 ms clock ticks), resident memory
//! now and at its peak, and a description of this machine for the report.

/// Nanoseconds on a CPU from the text of `/proc/PID/task/TID/schedstat`.
pub fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// A `Vm…:` value in KiB from the text of `/proc/PID/status`.
pub fn parse_status_kib(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with(key) && l[key.len()..].starts_with(':'))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// CPU time of every thread of `pid`, in nanoseconds (0 once it is gone).
pub fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| parse_schedstat(&s))
        .sum()
}

pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| parse_status_kib(&s, "VmRSS"))
        .unwrap_or(0)
}

/// The highest resident size since the process started (`VmHWM`).
pub fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| parse_status_kib(&s, "VmHWM"))
        .unwrap_or(0)
}

/// Pids of processes whose command line contains `needle` (not this one).
pub fn pids_with(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline"))
            && String::from_utf8_lossy(&cmd).contains(needle)
        {
            out.push(pid);
        }
    }
    out
}

/// The environment process `pid` was started with, one `NAME=value` per item (empty
/// when it cannot be read).
pub fn environ(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|env| {
            env.split(|b| *b == 0)
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// CPU seconds of a process and of its reaped children, from the text of `/proc/PID/stat`
/// (utime, stime, cutime, cstime; in clock ticks of `ticks_per_s`).
pub fn parse_stat_cpu_with_children(text: &str, ticks_per_s: f64) -> Option<f64> {
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = text.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14.
    let ticks: u64 = (11..15)
        .map(|i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum::<Option<u64>>()?;
    Some(ticks as f64 / ticks_per_s)
}

/// CPU seconds of `pid` and its reaped children (a process that runs short-lived `salt`
/// commands accounts for them this way); 0 once it is gone.
pub fn cpu_with_children_secs(pid: u32) -> f64 {
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| parse_stat_cpu_with_children(&s, ticks))
        .unwrap_or(0.0)
}

fn first_line_with(path: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    Some(line.split_once(':')?.1.trim().to_string())
}

/// The parent pid from the text of `/proc/PID/stat`.
pub fn parse_ppid(text: &str) -> Option<u32> {
    text.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// `pid` and every process below it.
pub fn tree(pid: u32) -> Vec<u32> {
    forest(&[pid])
}

/// `roots` and every process below them, from one pass over `/proc`.
pub fn forest(roots: &[u32]) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(p) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            if let Some(pp) = std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| parse_ppid(&s))
            {
                parents.push((p, pp));
            }
        }
    }
    let mut out = roots.to_vec();
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        out.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    out
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` gives them.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}

/// `PRETTY_NAME` of `/etc/os-release`.
fn os_name() -> Option<String> {
    let text = std::fs::read_to_string("/etc/os-release").ok()?;
    let value = text.lines().find_map(|l| l.strip_prefix("PRETTY_NAME="))?;
    Some(value.trim_matches('"').to_string())
}

fn command_line(cmd: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// This machine and the software measured, one `(what, value)` per line of the report.
pub fn machine() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut add = |k: &str, v: Option<String>| {
        out.push((k.to_string(), v.unwrap_or_else(|| "unknown".into())));
    };
    add("CPU", first_line_with("/proc/cpuinfo", "model name"));
    add(
        "cores",
        std::thread::available_parallelism()
            .ok()
            .map(|n| n.to_string()),
    );
    add("memory", first_line_with("/proc/meminfo", "MemTotal"));
    add("kernel", command_line("uname", &["-sr"]));
    add("OS", os_name());
    add("rustc", command_line("rustc", &["--version"]));
    add(
        "saltpeter",
        Some(format!(
            "{} ({})",
            env!("CARGO_PKG_VERSION"),
            command_line("git", &["describe", "--always", "--dirty"]).unwrap_or_default()
        )),
    );
    add("load average at the start", Some(load_average()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_first_field_is_cpu_nanoseconds() {
        assert_eq!(parse_schedstat("1386106 128872 1\n"), Some(1_386_106));
        assert_eq!(parse_schedstat(""), None);
        assert_eq!(parse_schedstat("x 1 2"), None);
    }

    #[test]
    fn status_values_are_found_by_exact_key() {
        let text = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        assert_eq!(parse_status_kib(text, "VmRSS"), Some(1024));
        assert_eq!(parse_status_kib(text, "VmHWM"), Some(2048));
        assert_eq!(parse_status_kib(text, "VmRS"), None);
        assert_eq!(parse_status_kib(text, "VmSwap"), None);
    }

    #[test]
    fn stat_cpu_adds_own_and_children_ticks() {
        let text = "42 (a (b) c) S 1 42 42 0 -1 4194304 10 0 0 0 150 50 30 20 20 0 1 0 5";
        assert_eq!(parse_stat_cpu_with_children(text, 100.0), Some(2.5));
        assert_eq!(parse_stat_cpu_with_children("42 (x) S 1", 100.0), None);
    }

    #[test]
    fn the_parent_pid_follows_the_command_name() {
        assert_eq!(parse_ppid("42 (a (b) c) S 7 42 42"), Some(7));
        assert_eq!(parse_ppid("42 (x)"), None);
    }

    #[test]
    fn this_process_tree_holds_its_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep");
        let t = tree(std::process::id());
        let _ = child.kill();
        let _ = child.wait();
        assert!(t.contains(&child.id()), "{t:?}");
    }

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let me = std::process::id();
        assert!(cpu_ns(me) > 0);
        assert!(rss_kib(me) > 0);
        assert!(peak_rss_kib(me) >= rss_kib(me));
    }
}
