//! The stand-in salt bridge: the protocol of `roles/blocking/salt/bridge.py` (JSON lines
//! on stdin and stdout), answered from the simulated minion list instead of a master.
//!
//! Outline: say ready (and that this is simulated); then per request line, `respond`
//! (pure: the answer lines, and the wrapper sessions a launch starts) and hand the
//! sessions to the generator's loop (`sessions.rs`), which runs in its own thread. A
//! launch is answered at once, as a minion's `cmd.run_all` of `--daemonize` returns as
//! soon as its wrappers are in the background. EOF on stdin ends the process.

use std::io::{BufRead, Write};

use serde_json::{Value, json};

use super::Fleet;
use super::sessions::{self, Launch};

/// What the daemon's bridge sends, one line each.
#[derive(Debug, Default, serde::Deserialize)]
pub struct Request {
    pub id: Option<u64>,
    #[serde(default)]
    pub op: Option<String>,
    #[serde(default)]
    pub tgt: String,
    #[serde(default)]
    pub tgt_type: Option<String>,
    #[serde(default)]
    pub fun: String,
    #[serde(default)]
    pub kwarg: serde_json::Map<String, Value>,
}

/// A request's answer: its lines (without the final `done`), and the launches to start.
#[derive(Debug, Default)]
pub struct Response {
    pub lines: Vec<Value>,
    pub launches: Vec<Launch>,
    /// For the log: what was asked.
    pub summary: String,
}

const NO_RETURN: &str = "Minion did not return. [No response]";

/// The minions a target names: those of the fleet, and those named in a list that the
/// fleet does not have (they "do not return", as Salt says of a minion without a key).
fn matched<'f>(fleet: &'f Fleet, req: &Request) -> (Vec<&'f String>, Vec<String>) {
    match req.tgt_type.as_deref().unwrap_or("glob") {
        "list" => {
            let mut found = Vec::new();
            let mut missing = Vec::new();
            for name in req.tgt.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                match fleet.minions.iter().find(|m| *m == name) {
                    Some(m) => found.push(m),
                    None => missing.push(name.to_string()),
                }
            }
            (found, missing)
        }
        "glob" => (
            fleet.minions.iter().filter(|m| glob(&req.tgt, m)).collect(),
            Vec::new(),
        ),
        // Grains, pillars, compound: a simulated minion has none; all of them match.
        _ => (fleet.minions.iter().collect(), Vec::new()),
    }
}

/// Shell-style `*` and `?` (Salt's glob targets), nothing more.
pub fn glob(pattern: &str, name: &str) -> bool {
    fn go(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], n) || (!n.is_empty() && go(p, &n[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &n[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

/// The answer to one request; `pid` is what the launch lines name as the wrappers' pid.
pub fn respond(fleet: &Fleet, req: &Request, pid: u32) -> Response {
    let (found, missing) = matched(fleet, req);
    let mut out = Response::default();
    let op = req.op.as_deref().unwrap_or("publish");
    out.summary = format!(
        "{op} fun={} tgt_type={} minions={}",
        req.fun,
        req.tgt_type.as_deref().unwrap_or("glob"),
        found.len()
    );
    if found.is_empty() && missing.is_empty() {
        out.lines
            .push(Value::String("No minions matched the target.".into()));
        return out;
    }
    let value = if op == "match" || req.fun == "test.ping" {
        Value::Bool(true)
    } else if req.fun == "file.manage_file" {
        json!({"result": true, "comment": "simulated: the file is in place", "changes": {}})
    } else if req.fun == "cmd.run_all" {
        match launch_of(req) {
            Ok((url, runs, wrapper)) => {
                for minion in &found {
                    for &run in &runs {
                        out.launches.push(Launch {
                            run,
                            minion: (*minion).clone(),
                            url: url.clone(),
                            wrapper: wrapper.clone(),
                        });
                    }
                }
                let stdout: Vec<String> = runs
                    .iter()
                    .map(|r| {
                        format!(
                            "saltpeter-wrapper: run {r} continues in the background (pid {pid})"
                        )
                    })
                    .collect();
                json!({"pid": pid, "retcode": 0, "stdout": stdout.join("\n"), "stderr": ""})
            }
            Err(why) => json!({"pid": pid, "retcode": 1, "stdout": "", "stderr": why}),
        }
    } else {
        Value::String(format!(
            "'{}' is not available on a simulated minion.",
            req.fun
        ))
    };
    for minion in found {
        out.lines.push(json!({ minion.as_str(): value.clone() }));
    }
    for minion in missing {
        out.lines.push(json!({ minion: NO_RETURN }));
    }
    out
}

/// The launch's server URL, runs and wrapper path, from its `cmd` and `env` kwargs.
fn launch_of(req: &Request) -> Result<(String, Vec<u64>, String), String> {
    let cmd = req.kwarg.get("cmd").and_then(Value::as_str).unwrap_or("");
    let wrapper = cmd
        .split_whitespace()
        .next()
        .map(|w| w.trim_matches('\'').to_string())
        .ok_or("saltpeter-wrapper: no command")?;
    let env = req.kwarg.get("env").cloned().unwrap_or(Value::Null);
    let url = env["SP_URL"]
        .as_str()
        .ok_or("saltpeter-wrapper: SP_URL is not set")?;
    // Several servers: the first is enough for a benchmark.
    let url = url.split(',').next().unwrap_or(url).trim().to_string();
    let runs = env["SP_RUN"]
        .as_str()
        .ok_or("saltpeter-wrapper: SP_RUN is not set")?
        .split(',')
        .map(|r| r.trim().parse::<u64>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("saltpeter-wrapper: SP_RUN: {e}"))?;
    Ok((url, runs, wrapper))
}

/// Serve requests from stdin until it ends.
pub fn serve(fleet: Fleet, mut answers: Box<dyn Write + Send>) -> Result<(), String> {
    let generator = sessions::spawn(fleet.clone())?;
    let mut emit = |v: Value| -> Result<(), String> {
        let mut line = v.to_string();
        line.push('\n');
        answers
            .write_all(line.as_bytes())
            .and_then(|()| answers.flush())
            .map_err(|e| format!("could not answer the daemon: {e}"))
    };
    emit(json!({"ready": true, "salt": "simulated", "simulated": true}))?;
    eprintln!(
        "simfleet: simulated salt bridge ready, {} minions (fd limit {})",
        fleet.minions.len(),
        super::raise_fd_limit()
    );
    let pid = std::process::id();
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| format!("reading requests: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let req: Request = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                emit(json!({"id": null, "error": format!("bad request: {e}")}))?;
                continue;
            }
        };
        let response = respond(&fleet, &req, pid);
        eprintln!("simfleet: {}", response.summary);
        if !response.launches.is_empty() {
            generator.launch(response.launches)?;
        }
        for value in response.lines {
            emit(json!({"id": req.id, "line": value}))?;
        }
        emit(json!({"id": req.id, "done": true}))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet() -> Fleet {
        Fleet {
            minions: vec!["sim0".into(), "sim1".into(), "web1".into()],
            keys: "/k".into(),
            output_bytes: 8,
        }
    }

    #[test]
    fn globs_and_lists_match_like_salt() {
        assert!(glob("sim*", "sim12") && glob("*", "x") && glob("s?m1", "sim1"));
        assert!(!glob("sim?", "sim12") && !glob("web*", "sim1"));
        let req = Request {
            op: Some("match".into()),
            tgt: "sim*".into(),
            ..Request::default()
        };
        assert_eq!(respond(&fleet(), &req, 1).lines.len(), 2);
        let none = Request {
            tgt: "db*".into(),
            fun: "test.ping".into(),
            ..Request::default()
        };
        assert_eq!(
            respond(&fleet(), &none, 1).lines,
            vec![Value::String("No minions matched the target.".into())]
        );
    }

    #[test]
    fn a_launch_starts_one_session_per_minion_and_run_and_says_so() {
        let req: Request = serde_json::from_value(json!({
            "id": 4, "op": "publish", "tgt": "sim0,sim1,gone", "tgt_type": "list",
            "fun": "cmd.run_all",
            "kwarg": {"cmd": "/opt/saltpeter-wrapper --daemonize --minion-id x",
                      "env": {"SP_URL": "wss://h:1/#sha256=ab", "SP_RUN": "7,9"}}
        }))
        .unwrap();
        let r = respond(&fleet(), &req, 42);
        assert_eq!(r.launches.len(), 4);
        assert_eq!(r.launches[0].wrapper, "/opt/saltpeter-wrapper");
        assert_eq!(r.launches[0].url, "wss://h:1/#sha256=ab");
        let stdout = r.lines[0]["sim0"]["stdout"].as_str().unwrap();
        assert!(stdout.contains("run 9 continues in the background (pid 42)"));
        assert_eq!(r.lines[2]["gone"], NO_RETURN);
    }
}
