//! The real `saltpeter-wrapper` binary against an in-test protocol peer.

use std::time::{Duration, Instant};

use super::peer::*;
use saltpeter::wire::wrapper::{ExitReason, KillReason, RejectCode, ServerMsg, Stream, WrapperMsg};

fn exited_fields(m: &WrapperMsg) -> (u64, Option<i32>, Option<i32>, ExitReason, i64) {
    match m {
        WrapperMsg::Exited {
            end_seq,
            code,
            signal,
            reason,
            at,
        } => (*end_seq, *code, *signal, *reason, *at),
        other => panic!("expected exited, got {other:?}"),
    }
}

fn started_at(m: &WrapperMsg) -> (u32, i64) {
    match m {
        WrapperMsg::Started { pid, at, .. } => (*pid, *at),
        other => panic!("expected started, got {other:?}"),
    }
}

/// Sends done and checks that the wrapper then exits 0.
fn finish_ok(conn: &mut Conn, child: &mut std::process::Child) {
    conn.send(&ServerMsg::Done {});
    assert_eq!(wait_exit(child, Duration::from_secs(10)), 0);
}

#[test]
fn normal_run_streams_output_and_reports_exit_code() {
    let peer = Peer::new();
    let mut child = start_wrapper(&peer.url(), 11);
    let mut conn = peer.accept();
    let mut out = Output::default();
    let hello = conn.next_msg(&mut out);
    match &hello {
        WrapperMsg::Hello {
            v,
            run,
            machine,
            token,
            resume_key,
            pid,
            resume_from,
            wrapper_sha256,
            wrapper_path,
            ..
        } => {
            assert_eq!((*v, *run, machine.as_str()), (1, 11, "m1"));
            assert_eq!(token.as_deref(), Some(TOKEN));
            assert!(resume_key.is_none() && resume_from.is_none());
            assert_eq!(*pid, child.id());
            // The build: the hash of the very binary, and the path it was started as.
            let binary = std::fs::File::open(BIN).unwrap();
            let hash = saltpeter::wrapper::sha256_hex(binary).unwrap();
            assert_eq!(wrapper_sha256.as_deref(), Some(hash.as_str()));
            assert_eq!(wrapper_path.as_deref(), Some(BIN));
        }
        other => panic!("expected hello, got {other:?}"),
    }
    conn.welcome(&job("echo hello; echo oops >&2; exit 3"), "k", 0, false);
    started_at(&conn.next_msg(&mut out));
    let exited = conn.collect_until_exited(&mut out);
    let (end_seq, code, signal, reason, _) = exited_fields(&exited);
    assert_eq!((code, signal, reason), (Some(3), None, ExitReason::Exit));
    assert_eq!(end_seq, out.contiguous());
    assert_eq!(out.text(Stream::Stdout), "hello\n");
    assert_eq!(out.text(Stream::Stderr), "oops\n");
    finish_ok(&mut conn, &mut child);
}

#[test]
fn stdout_and_stderr_interleave_with_one_seq() {
    let peer = Peer::new();
    let mut child = start_wrapper(&peer.url(), 12);
    let mut conn = peer.accept();
    handshake(
        &mut conn,
        &job("for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.2; done"),
        false,
    );
    let mut out = Output::default();
    let exited = conn.collect_until_exited(&mut out);
    assert_eq!(exited_fields(&exited).1, Some(0));
    let got: Vec<(u64, Stream, String)> = out
        .frames
        .values()
        .map(|f| {
            (
                f.seq,
                f.stream,
                String::from_utf8_lossy(&f.data).into_owned(),
            )
        })
        .collect();
    let mut want = Vec::new();
    for i in 1..=3u64 {
        want.push((2 * i - 1, Stream::Stdout, format!("out{i}\n")));
        want.push((2 * i, Stream::Stderr, format!("err{i}\n")));
    }
    assert_eq!(got, want);
    finish_ok(&mut conn, &mut child);
}

#[test]
fn kill_terms_then_kills_the_whole_group() {
    let peer = Peer::new();
    let mut child = start_wrapper(&peer.url(), 13);
    let mut conn = peer.accept();
    // Both the shell and a background child ignore TERM, so only KILL ends them.
    let cmd = "trap '' TERM; sleep 300 & echo \"$$ $!\"; sleep 300";
    handshake(&mut conn, &job(cmd), false);
    let mut out = Output::default();
    started_at(&conn.next_msg(&mut out));
    while out.text(Stream::Stdout).is_empty() {
        match conn.recv().unwrap() {
            In::Frame(f) => out.store(f),
            In::Msg(_) => {}
        }
    }
    let pids: Vec<i32> = out
        .text(Stream::Stdout)
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let t0 = Instant::now();
    conn.send(&ServerMsg::Kill {
        reason: KillReason::User,
        grace_s: 1,
    });
    let exited = conn.collect_until_exited(&mut out);
    let elapsed = t0.elapsed();
    let (_, code, signal, reason, _) = exited_fields(&exited);
    assert_eq!((code, signal, reason), (None, Some(9), ExitReason::Killed));
    assert!(
        elapsed >= Duration::from_millis(900),
        "KILL before grace: {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_secs(5),
        "kill too slow: {elapsed:?}"
    );
    assert!(out.text(Stream::Stderr).contains("TERM"));
    std::thread::sleep(Duration::from_millis(200));
    for pid in pids {
        assert!(process_gone(pid), "process {pid} survived the kill");
    }
    finish_ok(&mut conn, &mut child);
}

#[test]
fn timeout_kills_with_reason_timeout() {
    let peer = Peer::new();
    let mut child = start_wrapper(&peer.url(), 14);
    let mut conn = peer.accept();
    let mut j = job("echo begin; sleep 30");
    j.timeout_s = 1;
    j.kill_grace_s = 5;
    handshake(&mut conn, &j, false);
    let t0 = Instant::now();
    let mut out = Output::default();
    let exited = conn.collect_until_exited(&mut out);
    let (_, code, signal, reason, _) = exited_fields(&exited);
    assert_eq!(reason, ExitReason::Timeout);
    assert!(
        signal == Some(15) || code == Some(143),
        "{code:?} {signal:?}"
    );
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    assert!(out.text(Stream::Stderr).contains("timeout of 1 s"));
    finish_ok(&mut conn, &mut child);
}

#[test]
fn timeout_zero_means_no_limit() {
    let peer = Peer::new();
    let mut child = start_wrapper(&peer.url(), 15);
    let mut conn = peer.accept();
    let mut j = job("sleep 2; echo survived");
    j.timeout_s = 0;
    handshake(&mut conn, &j, false);
    let mut out = Output::default();
    let exited = conn.collect_until_exited(&mut out);
    let (_, code, _, reason, _) = exited_fields(&exited);
    assert_eq!((code, reason), (Some(0), ExitReason::Exit));
    assert_eq!(out.text(Stream::Stdout), "survived\n");
    finish_ok(&mut conn, &mut child);
}

#[test]
fn command_never_sees_token_or_url_but_gets_run_facts() {
    let peer = Peer::new();
    let mut child = start_wrapper(&peer.url(), 16);
    let mut conn = peer.accept();
    handshake(&mut conn, &job("env"), false);
    let mut out = Output::default();
    conn.collect_until_exited(&mut out);
    let env = out.text(Stream::Stdout);
    assert!(!env.contains("SP_TOKEN="), "{env}");
    assert!(!env.contains(TOKEN), "{env}");
    assert!(!env.contains("SP_URL="), "{env}");
    for line in [
        "SP_JOB_NAME=test-job",
        "SP_RUN=16",
        "SP_JOB_INSTANCE=16",
        "SP_MACHINE=m1",
        "FOO=bar",
    ] {
        assert!(env.lines().any(|l| l == line), "{line} missing in {env}");
    }
    finish_ok(&mut conn, &mut child);
}

#[test]
fn reconnect_resumes_without_loss_or_duplicates() {
    let peer = Peer::new();
    let mut child = start_wrapper(&peer.url(), 17);
    let mut conn = peer.accept();
    let cmd = "for i in $(seq 1 40); do echo line$i; sleep 0.02; done; seq 1 30000";
    handshake(&mut conn, &job(cmd), false);
    let mut out = Output::default();
    // First connection: take a few frames, ack only the first, then drop the link.
    while out.frames.len() < 6 {
        match conn.recv().unwrap() {
            In::Frame(f) => {
                out.store(f);
                if out.frames.len() == 1 {
                    conn.send(&ServerMsg::Ack { seq: 1 });
                }
            }
            In::Msg(_) => {}
        }
    }
    drop(conn);
    let mut conn = peer.accept();
    let hello = conn.next_msg(&mut out);
    match hello {
        WrapperMsg::Hello {
            token,
            resume_key,
            resume_from,
            ..
        } => {
            assert_eq!(token, None, "the token is single-use");
            assert_eq!(resume_key.as_deref(), Some("resume-key-1"));
            assert!(resume_from.is_some_and(|s| s >= 1), "{resume_from:?}");
        }
        other => panic!("expected hello, got {other:?}"),
    }
    // The hub holds more than it acked: the wrapper must resend only what is missing.
    let held = out.contiguous();
    conn.welcome(&job(cmd), "resume-key-2", held, false);
    let exited = conn.collect_until_exited(&mut out);
    let (end_seq, code, ..) = exited_fields(&exited);
    assert_eq!(code, Some(0));
    assert_eq!(out.contiguous(), end_seq);
    assert_eq!(out.duplicates, 0, "frames the hub held were resent");
    let mut want = String::new();
    for i in 1..=40 {
        want.push_str(&format!("line{i}\n"));
    }
    for i in 1..=30000 {
        want.push_str(&format!("{i}\n"));
    }
    assert!(
        out.text(Stream::Stdout) == want,
        "output differs after resume"
    );
    finish_ok(&mut conn, &mut child);
}

#[test]
fn output_is_read_while_the_hub_is_away() {
    let peer = Peer::new();
    let mut child = start_wrapper(&peer.url(), 18);
    let mut conn = peer.accept();
    // 3 MB is far beyond a pipe buffer: the command blocks unless the wrapper reads.
    let cmd = "sleep 0.3; head -c 3000000 /dev/zero | tr '\\0' a; echo; echo end";
    handshake(&mut conn, &job(cmd), false);
    let mut out = Output::default();
    let (_, started) = started_at(&conn.next_msg(&mut out));
    drop(conn);
    std::thread::sleep(Duration::from_secs(3));
    let mut conn = peer.accept();
    let _hello = conn.next_msg(&mut out);
    conn.welcome(&job(cmd), "k2", 0, false);
    let exited = conn.collect_until_exited(&mut out);
    let (_, code, _, _, ended) = exited_fields(&exited);
    assert_eq!(code, Some(0));
    assert!(
        ended - started < 2500,
        "command blocked while away: {} ms",
        ended - started
    );
    assert_eq!(out.text(Stream::Stdout).len(), 3_000_000 + 5);
    finish_ok(&mut conn, &mut child);
}

#[test]
fn busy_overlap_lock_means_not_run() {
    use nix::fcntl::{Flock, FlockArg};
    let name = format!("lock-test-{}", std::process::id());
    let dir = saltpeter::wrapper::lock_dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    // The wrapper locks per job and machine (the test machine is "m1").
    let path = dir.join(saltpeter::wrapper::lock_file_name(&format!("{name}@m1")));
    let file = std::fs::File::create(&path).unwrap();
    let held = Flock::lock(file, FlockArg::LockExclusiveNonblock).unwrap();

    let peer = Peer::new();
    let marker = tempfile::NamedTempFile::new().unwrap().into_temp_path();
    let mut j = job(&format!("rm {}", marker.display()));
    j.name = name;
    j.overlap_lock = true;
    let mut child = start_wrapper(&peer.url(), 19);
    let mut conn = peer.accept();
    handshake(&mut conn, &j, false);
    let mut out = Output::default();
    let exited = conn.collect_until_exited(&mut out);
    let (_, code, _, reason, _) = exited_fields(&exited);
    assert_eq!((code, reason), (None, ExitReason::LockBusy));
    assert!(out.text(Stream::Stderr).contains("already running"));
    assert!(marker.exists(), "the command ran despite the lock");
    finish_ok(&mut conn, &mut child);

    drop(held);
    let mut child = start_wrapper(&peer.url(), 20);
    let mut conn = peer.accept();
    handshake(&mut conn, &j, false);
    let exited = conn.collect_until_exited(&mut Output::default());
    assert_eq!(exited_fields(&exited).3, ExitReason::Exit);
    assert!(
        !marker.exists(),
        "the command did not run with the lock free"
    );
    finish_ok(&mut conn, &mut child);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn prestaged_wrapper_waits_for_go_or_cancel() {
    let peer = Peer::new();
    let marker = tempfile::NamedTempFile::new().unwrap().into_temp_path();
    let cmd = format!("rm {}", marker.display());

    let mut child = start_wrapper(&peer.url(), 21);
    let mut conn = peer.accept();
    handshake(&mut conn, &job(&cmd), true);
    std::thread::sleep(Duration::from_millis(500));
    assert!(marker.exists(), "started before go");
    conn.send(&ServerMsg::Cancel {
        reason: "overlap".into(),
    });
    let exited = conn.collect_until_exited(&mut Output::default());
    assert_eq!(exited_fields(&exited).3, ExitReason::Canceled);
    assert!(marker.exists(), "ran despite cancel");
    finish_ok(&mut conn, &mut child);

    let mut child = start_wrapper(&peer.url(), 22);
    let mut conn = peer.accept();
    handshake(&mut conn, &job(&cmd), true);
    conn.send(&ServerMsg::Go {});
    let exited = conn.collect_until_exited(&mut Output::default());
    assert_eq!(exited_fields(&exited).1, Some(0));
    assert!(!marker.exists(), "did not run after go");
    finish_ok(&mut conn, &mut child);
}

#[test]
fn spawn_failure_is_reported_with_its_text() {
    let peer = Peer::new();
    let mut child = start_wrapper(&peer.url(), 23);
    let mut conn = peer.accept();
    let mut j = job("true");
    j.cwd = Some("/nonexistent/sp-dir".into());
    handshake(&mut conn, &j, false);
    let mut out = Output::default();
    let exited = conn.collect_until_exited(&mut out);
    let (_, code, signal, reason, _) = exited_fields(&exited);
    assert_eq!(
        (code, signal, reason),
        (None, None, ExitReason::SpawnFailed)
    );
    assert!(out.text(Stream::Stderr).contains("/nonexistent/sp-dir"));
    finish_ok(&mut conn, &mut child);
}

#[test]
fn background_child_holding_the_pipe_does_not_hang_the_wrapper() {
    let peer = Peer::new();
    let mut child = start_wrapper(&peer.url(), 24);
    let mut conn = peer.accept();
    handshake(&mut conn, &job("sleep 30 & echo shell-done"), false);
    let t0 = Instant::now();
    let mut out = Output::default();
    let exited = conn.collect_until_exited(&mut out);
    assert_eq!(exited_fields(&exited).1, Some(0));
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(out.text(Stream::Stdout), "shell-done\n");
    finish_ok(&mut conn, &mut child);
}

#[test]
fn final_reject_ends_the_wrapper() {
    let peer = Peer::new();
    let mut child = start_wrapper(&peer.url(), 25);
    let mut conn = peer.accept();
    let _hello = conn.next_msg(&mut Output::default());
    conn.send(&ServerMsg::Reject {
        code: RejectCode::BadToken,
        message: "no".into(),
    });
    assert_eq!(wait_exit(&mut child, Duration::from_secs(5)), 2);
}

#[test]
fn retry_later_reconnects() {
    let peer = Peer::new();
    let mut child = start_wrapper(&peer.url(), 26);
    let mut conn = peer.accept();
    let _hello = conn.next_msg(&mut Output::default());
    conn.send(&ServerMsg::Reject {
        code: RejectCode::RetryLater,
        message: "recovering".into(),
    });
    let mut conn = peer.accept();
    let hello = conn.next_msg(&mut Output::default());
    assert!(matches!(hello, WrapperMsg::Hello { token: Some(_), .. }));
    conn.welcome(&job("exit 0"), "k", 0, false);
    conn.collect_until_exited(&mut Output::default());
    finish_ok(&mut conn, &mut child);
}

#[test]
fn bad_environment_is_one_line_and_exit_1() {
    let out = std::process::Command::new(BIN)
        .env_remove("SP_TOKEN")
        .env("SP_URL", "ws://127.0.0.1:1")
        .env("SP_RUN", "1")
        .env("SP_MACHINE", "m")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("SP_TOKEN"), "{err}");

    let out = wrapper_cmd("wss://h:1#sha256=00", 1).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("64 hex"));
}

#[test]
fn daemonize_returns_at_once_and_runs_in_background() {
    let peer = Peer::new();
    let log = tempfile::NamedTempFile::new().unwrap();
    let t0 = Instant::now();
    let out = wrapper_cmd(&peer.url(), 27)
        .arg("--daemonize")
        .arg("--log")
        .arg(log.path())
        .output()
        .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    let mut conn = peer.accept();
    handshake(&mut conn, &job("echo bg"), false);
    let mut o = Output::default();
    conn.collect_until_exited(&mut o);
    assert_eq!(o.text(Stream::Stdout), "bg\n");
    conn.send(&ServerMsg::Done {});
    assert!(conn.recv().is_none(), "wrapper should close after done");
    let text = std::fs::read_to_string(log.path()).unwrap();
    assert!(text.contains("done"), "{text}");
    assert!(!text.contains(TOKEN), "token leaked into the log");
}

#[test]
fn gives_up_without_any_hub() {
    let peer = Peer::new();
    let url = peer.url();
    drop(peer);
    let mut child = Wrapper(
        wrapper_cmd(&url, 28)
            .arg("--give-up")
            .arg("2")
            .spawn()
            .unwrap(),
    );
    assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), 3);
}

#[test]
fn giving_up_leaves_the_unsent_output_on_the_host() {
    let run = 4_000_000 + u64::from(std::process::id());
    let peer = Peer::new();
    let mut child = Wrapper(
        wrapper_cmd(&peer.url(), run)
            .arg("--give-up")
            .arg("3")
            .spawn()
            .unwrap(),
    );
    let mut conn = peer.accept();
    handshake(&mut conn, &job("echo never-acked-output; sleep 60"), false);
    // The hub goes away for good without acknowledging anything.
    drop(conn);
    drop(peer);
    assert_eq!(wait_exit(&mut child, Duration::from_secs(30)), 3);
    let path = saltpeter::wrapper::spool_dir().join(format!(
        "run-{run}-{}.unsent",
        saltpeter::wrapper::lock_file_name("m1").trim_end_matches(".lock")
    ));
    let saved = std::fs::read_to_string(&path).unwrap_or_default();
    let _ = std::fs::remove_file(&path);
    assert!(
        saved.starts_with("never-acked-output\n"),
        "{}: {saved}",
        path.display()
    );
    assert!(saved.contains("gave up"), "{saved}");
}
