//! The ssh executor's pure parts: host specs, globs, configuration, command lines. The
//! parts that need an sshd are tested in tests/it/executor_ssh.rs.

use serde_json::json;

use super::command::{Install, kill_remote, launch_remote, shell_quote, ssh_argv};
use super::config::SshConfig;
use super::hosts::{HostSpec, check_glob, glob_match, parse_spec, resolve};
use super::*;

fn spec(user: Option<&str>, host: &str, port: Option<u16>) -> HostSpec {
    HostSpec {
        user: user.map(str::to_string),
        host: host.to_string(),
        port,
    }
}

#[test]
fn host_specs_are_read_in_every_form() {
    let cases = [
        ("web1", spec(None, "web1", None)),
        (
            " root@web1.example.org ",
            spec(Some("root"), "web1.example.org", None),
        ),
        ("web1:2222", spec(None, "web1", Some(2222))),
        (
            "deploy@10.0.0.5:22",
            spec(Some("deploy"), "10.0.0.5", Some(22)),
        ),
        ("[::1]:2200", spec(None, "::1", Some(2200))),
        ("me@[fe80::1%eth0]", spec(Some("me"), "fe80::1%eth0", None)),
        ("2001:db8::7", spec(None, "2001:db8::7", None)),
    ];
    for (text, expected) in cases {
        assert_eq!(parse_spec(text), Ok(expected), "{text}");
    }
}

#[test]
fn bad_host_specs_say_why() {
    let cases = [
        ("", "an empty host"),
        ("-oProxyCommand=x", "may not start with -"),
        ("-l@host", "may not start with -"),
        ("host:0", "not a number from 1 to 65535"),
        ("host:65536", "not a number from 1 to 65535"),
        ("host:+22", "not a number from 1 to 65535"),
        ("a b", "holds ' '"),
        ("a\u{1b}b", "holds '\\u{1b}'"),
        ("a;rm", "';' cannot be part of a host name"),
        ("us$er@host", "'$' cannot be part of a user name"),
        ("a@b@c", "'@' cannot be part of a host name"),
        ("[::1", "without its closing ]"),
        ("[::1]22", "is not :PORT"),
        ("[zz::1]:22", "not an IPv6 address"),
        ("host:", "not a number"),
    ];
    for (text, expected) in cases {
        let error = parse_spec(text).expect_err(text);
        assert!(
            error.contains(expected),
            "{text:?}: {error:?} lacks {expected:?}"
        );
    }
    let long = "a".repeat(256);
    assert!(parse_spec(&long).expect_err("long").contains("over 255"));
}

#[test]
fn globs_match_like_a_shell() {
    let cases = [
        ("web*", "web12", true),
        ("web*", "db1", false),
        ("*", "", true),
        ("w?b", "web", true),
        ("w?b", "wb", false),
        ("web[0-9]", "web7", true),
        ("web[!0-9]", "web7", false),
        ("web[^0-9]", "webx", true),
        ("web[]]", "web]", true),
        ("*.example.org", "a.b.example.org", true),
        ("a*b*c", "aXXbYYc", true),
        ("a*b*c", "aXXbYY", false),
        (r"a\*", "a*", true),
        (r"a\*", "ab", false),
        ("a[b", "a[b", true),
    ];
    for (pattern, text, expected) in cases {
        assert_eq!(glob_match(pattern, text), expected, "{pattern} ~ {text}");
    }
    assert!(check_glob("web[0-9").is_err());
    assert!(check_glob("a\\").is_err());
    assert!(check_glob("web[0-9]*").is_ok());
}

#[test]
fn targets_resolve_by_type() {
    let dir = tempfile::tempdir().expect("tempdir");
    let inventory = dir.path().join("inventory");
    std::fs::write(
        &inventory,
        "# the fleet\nweb1\nroot@web2:2222  # the second\n\ndb1\nweb1\n",
    )
    .expect("inventory");
    let inventory = inventory.to_str().expect("utf-8");
    let machines = resolve(" a, b:22 ,,a", "list", None).expect("list");
    assert_eq!(machines, vec!["a", "b:22"]);
    let machines = resolve("web*", "glob", Some(inventory)).expect("glob");
    assert_eq!(machines, vec!["web1", "root@web2:2222"]);
    let machines = resolve("db*,web1", "glob", Some(inventory)).expect("globs");
    assert_eq!(machines, vec!["web1", "db1"]);
    let machines = resolve(inventory, "file", None).expect("file");
    assert_eq!(machines, vec!["web1", "root@web2:2222", "db1"]);

    let error = resolve("web*", "glob", None).expect_err("no inventory");
    assert_eq!(error.key, "target_type");
    let error = resolve("a,b c", "list", None).expect_err("bad item");
    assert_eq!(error.key, "target");
    assert!(error.message.starts_with("item 2:"), "{}", error.message);
    let error = resolve("x", "grain", None).expect_err("type");
    assert_eq!(error.key, "target_type");
    let bad = dir.path().join("bad");
    std::fs::write(&bad, "ok\n-oops\n").expect("bad file");
    let error = resolve(bad.to_str().expect("utf-8"), "file", None).expect_err("bad line");
    assert!(error.message.contains("bad:2:"), "{}", error.message);
    let error = resolve("relative/file", "file", None).expect_err("relative");
    assert!(error.message.contains("not an absolute path"));
}

#[test]
fn the_configuration_names_each_bad_key() {
    let (config, errors) = SshConfig::parse(&json!({
        "user": "deploy", "port": 2222, "connect_timeout": 3, "parallel": 4,
        "ssh_options": ["StrictHostKeyChecking=yes", "ServerAliveInterval=5"],
        "identity_file": "/k/id", "known_hosts_file": "/k/known", "inventory": "/k/inv",
        "ssh_bin": "/usr/bin/ssh", "op_timeout": 30,
    }));
    assert_eq!(errors, vec![]);
    assert_eq!(config.port, Some(2222));
    assert_eq!(config.parallel, 4);
    assert_eq!(
        SshConfig::parse(&Value::Null),
        (SshConfig::default(), vec![])
    );

    let (_, errors) = SshConfig::parse(&json!({
        "port": 0, "user": "-x", "colour": "blue", "parallel": "8",
        "ssh_options": ["Good=yes", "BatchMode=no"], "identity_file": "id_rsa",
        "known_hosts_file": "/a b", "connect_timeout": 0, "ssh_bin": "bin/ssh",
    }));
    let keys: Vec<&str> = errors.iter().filter_map(|e| e.key.as_deref()).collect();
    for key in [
        "config.port",
        "config.user",
        "config.colour",
        "config.parallel",
        "config.ssh_options",
        "config.identity_file",
        "config.known_hosts_file",
        "config.connect_timeout",
        "config.ssh_bin",
    ] {
        assert!(keys.contains(&key), "{key} not in {errors:?}");
    }
    let unknown = errors
        .iter()
        .find(|e| e.key.as_deref() == Some("config.colour"));
    assert!(unknown.is_some_and(|e| e.message.contains("unknown key")));

    for bad in [
        json!([""]),
        json!(["-oX=y"]),
        json!(["A=b\nC=d"]),
        json!(["NoValue"]),
        json!("A=b"),
    ] {
        let (_, errors) = SshConfig::parse(&json!({"ssh_options": bad}));
        assert_eq!(errors.len(), 1, "{bad}: {errors:?}");
        assert_eq!(errors[0].key.as_deref(), Some("config.ssh_options"));
    }
    let (_, errors) = SshConfig::parse(&json!([1]));
    assert_eq!(errors[0].key, None);
}

#[test]
fn the_ssh_command_line_is_built_in_order() {
    let config = SshConfig {
        identity_file: Some("/k/id".to_string()),
        known_hosts_file: Some("/k/known".to_string()),
        user: Some("deploy".to_string()),
        port: Some(2222),
        ssh_options: vec!["StrictHostKeyChecking=yes".to_string()],
        ..SshConfig::default()
    };
    let argv = ssh_argv(&config, &spec(None, "web1", None), 7, false, "true");
    let expected = "ssh -o BatchMode=yes -o ConnectTimeout=7 -o UserKnownHostsFile=/k/known \
                    -o IdentitiesOnly=yes -i /k/id -p 2222 -l deploy \
                    -o StrictHostKeyChecking=yes -o LogLevel=ERROR -T -n -- web1 true";
    assert_eq!(argv.join(" "), expected);
    // The host spec's own user and port win; stdin kept open.
    let argv = ssh_argv(
        &SshConfig::default(),
        &spec(Some("root"), "::1", Some(22)),
        10,
        true,
        "x",
    );
    assert_eq!(
        argv.join(" "),
        "ssh -o BatchMode=yes -o ConnectTimeout=10 -p 22 -l root -o LogLevel=ERROR -T -- ::1 x"
    );
}

#[test]
fn remote_commands_are_quoted_and_hold_no_token() {
    assert_eq!(shell_quote("it's"), r"'it'\''s'");
    let command = vec![
        "env".to_string(),
        "SP_RUN=7".to_string(),
        "/opt/w p".to_string(),
    ];
    let remote = launch_remote(None, &command);
    assert!(remote.starts_with("'sh' '-c' '"), "{remote}");
    assert!(
        remote.ends_with("'saltpeter-launch' '0' '-' '-' '0' '--' 'env' 'SP_RUN=7' '/opt/w p'")
    );
    let install = Install {
        path: "/usr/local/bin/saltpeter-wrapper",
        sha256: "ab",
        size: 12,
    };
    let remote = launch_remote(Some(&install), &command);
    assert!(remote.contains("'1' '/usr/local/bin/saltpeter-wrapper' 'ab' '12' '--'"));
    // One line, nothing a csh would stumble on.
    assert!(!remote.contains('\n') && !remote.contains('!'));
    assert!(kill_remote(42).ends_with("'saltpeter-kill' '42'"));
}

#[test]
fn the_launch_script_runs_in_a_real_shell() {
    // Through a local `sh -c` (no ssh): deploy into a directory, then exec the command
    // with the token on its stdin.
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("source");
    std::fs::write(&source, b"#!/bin/sh\ncat > \"$1\"\n").expect("source");
    let (sha256, size) =
        super::launch::sha256_and_size(source.to_str().expect("utf-8")).expect("hash");
    let target = dir.path().join("sub/dir/wrapper");
    let got = dir.path().join("got");
    let install = Install {
        path: target.to_str().expect("utf-8"),
        sha256: &sha256,
        size,
    };
    let command = vec![
        install.path.to_string(),
        got.to_str().expect("utf-8").to_string(),
    ];
    let remote = launch_remote(Some(&install), &command);
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(&remote)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sh");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        // The script reads exactly `size` bytes; the token follows on the same stdin.
        stdin
            .write_all(&std::fs::read(&source).expect("read"))
            .expect("bytes");
        stdin.write_all(b"the-token\n").expect("token");
    }
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout,
        "saltpeter-launch: need\nsaltpeter-launch: deployed\nsaltpeter-launch: ready\n"
    );
    assert_eq!(
        std::fs::read(&target).expect("installed"),
        std::fs::read(&source).expect("source")
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&target)
        .expect("meta")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o755);
    assert_eq!(std::fs::read_to_string(&got).expect("got"), "the-token\n");
}

#[test]
fn reasons_are_one_clipped_line_without_the_token() {
    let stderr = "Warning: x\n\nssh: connect to host a: refused \u{1b}[31m tok-123\n";
    assert_eq!(
        super::session::reason(stderr, "tok-123"),
        "Warning: x | ssh: connect to host a: refused \\u{1b}[31m [the token]"
    );
    let long = "x".repeat(1000);
    assert_eq!(
        super::session::reason(&long, "").chars().count(),
        super::session::REASON_MAX + 1
    );
}
