//! The crontab conversion round-trips: the YAML it writes loads as valid jobs that fire
//! when cron would and run the same commands with the same environment.

use super::*;
use crate::config::JobEntry;
use crate::schedule::Schedule;

const SAMPLE: &str = r#"# m h dom mon dow command
SHELL=/bin/sh
MAILTO=ops@example.com
PATH=/usr/local/bin:/usr/bin:/bin
BACKUP_DIR = "/srv/backup"

# nightly backup
30 2 * * * /usr/local/bin/backup --to $BACKUP_DIR
*/15 9-17 * * mon-fri curl -fsS https://example.com/ping >/dev/null
0 0 1,15 * * echo "it's payday" | logger -t pay

CRON_TZ=Europe/Paris
@daily find /tmp -mtime +7 -delete
@reboot /usr/local/bin/warm-cache
0 12 * * 7 mail -s "weekly \% report" ops%line one%line two
not a cron line at all
"#;

fn opts() -> Options {
    Options {
        targets: "web1,web2".into(),
        executor: Some("local".into()),
        system: false,
        prefix: String::new(),
    }
}

fn load(yaml: &str) -> crate::config::LoadedConfig {
    crate::config::check_yaml(yaml, chrono::Utc::now())
}

fn job<'a>(loaded: &'a crate::config::LoadedConfig, name: &str) -> &'a crate::config::Job {
    match loaded.jobs.get(name) {
        Some(JobEntry::Valid(j)) => j,
        other => panic!("{name}: {other:?}\n{:?}", loaded.diagnostics),
    }
}

#[test]
fn sample_crontab_round_trips_through_the_config_loader() {
    let c = convert(SAMPLE, "crontab", &opts());
    assert_eq!(c.jobs, 5, "{}", c.yaml);
    let loaded = load(&c.yaml);
    let errors: Vec<_> = loaded
        .diagnostics
        .iter()
        .filter(|d| d.severity == crate::config::Severity::Error)
        .collect();
    assert!(errors.is_empty(), "{errors:?}\n{}", c.yaml);
    let names: Vec<&String> = loaded.jobs.keys().collect();
    assert_eq!(names, ["backup", "curl", "echo", "find", "mail"]);

    let now = chrono::Utc::now();
    let cron = |expr: &str, tz: chrono_tz::Tz| Schedule::from_expr(expr, tz).unwrap();
    let same_firings = |name: &str, expected: Schedule| {
        assert_eq!(
            job(&loaded, name).schedule.upcoming(now, 8),
            expected.upcoming(now, 8),
            "{name}"
        );
    };
    same_firings("backup", cron("30 2 * * *", chrono_tz::UTC));
    same_firings("curl", cron("*/15 9-17 * * mon-fri", chrono_tz::UTC));
    same_firings("echo", cron("0 0 1,15 * *", chrono_tz::UTC));
    same_firings("find", cron("@daily", chrono_tz::Europe::Paris));
    same_firings("mail", cron("0 12 * * 7", chrono_tz::Europe::Paris));

    let backup = job(&loaded, "backup");
    assert_eq!(backup.command, "/usr/local/bin/backup --to $BACKUP_DIR");
    assert_eq!(backup.targets, ["web1", "web2"]);
    assert_eq!(
        backup.env.get("BACKUP_DIR").map(String::as_str),
        Some("/srv/backup")
    );
    assert_eq!(
        backup.env.get("PATH").map(String::as_str),
        Some("/usr/local/bin:/usr/bin:/bin")
    );
    assert!(!backup.env.contains_key("SHELL") && !backup.env.contains_key("MAILTO"));
    assert_eq!(
        job(&loaded, "echo").command,
        r#"echo "it's payday" | logger -t pay"#
    );
    assert_eq!(job(&loaded, "find").timezone, chrono_tz::Europe::Paris);
    assert_eq!(
        job(&loaded, "mail").command,
        r#"printf '%s\n' 'line one' 'line two' | (mail -s "weekly % report" ops)"#
    );
    // What could not be carried over is said, with the line.
    let w = c.warnings.join("\n");
    assert!(w.contains("crontab:3: MAILTO"), "{w}");
    assert!(w.contains("crontab:14: @reboot"), "{w}");
    assert!(
        w.contains("crontab:16: `not a cron line at` are not valid"),
        "{w}"
    );
    assert!(
        c.yaml.contains("# nightly backup\n# crontab:8: 30 2"),
        "{}",
        c.yaml
    );
}

#[test]
fn the_stdin_conversion_runs_like_cron() {
    let (command, input) = command_of(r"cat -n%first%second \% 100");
    assert!(input);
    let out = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(&command)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("1\tfirst") && text.contains("2\tsecond % 100"),
        "{text}"
    );
}

#[test]
fn system_crontabs_carry_the_user_and_names_stay_unique() {
    let text = "17 * * * * root cd / && run-parts --report /etc/cron.hourly\n\
                25 6 * * * root run-parts /etc/cron.daily\n\
                0 4 * * * www-data /usr/bin/php /srv/app/cron.php\n";
    let c = convert(
        text,
        "/etc/crontab",
        &Options {
            system: true,
            prefix: "sys_".into(),
            ..opts()
        },
    );
    let loaded = load(&c.yaml);
    assert_eq!(job(&loaded, "sys_cd").user.as_deref(), Some("root"));
    assert_eq!(
        job(&loaded, "sys_cd").command,
        "cd / && run-parts --report /etc/cron.hourly"
    );
    assert!(loaded.jobs.contains_key("sys_run-parts"));
    assert_eq!(job(&loaded, "sys_php").user.as_deref(), Some("www-data"));
}
