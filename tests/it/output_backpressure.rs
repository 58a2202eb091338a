//! Output the database cannot store is back-pressure, not a closed link: with SQLite's
//! state directory on a small tmpfs that fills for about 10 s while a job writes a
//! numbered line every few milliseconds, every line ends up stored once and in order,
//! the wrapper stays on its one connection (`output_held`, docs/protocols.md), main logs
//! the trouble per episode rather than per frame, and the run succeeds.
//!
//! Mounting needs root: without it the test fails, unless `SALTPETER_TEST_SKIP` names
//! `root` (tests/support/components.rs).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::util::*;

const LINES: usize = 600;

/// A tmpfs mounted on a directory, unmounted (lazily: the daemon may still hold files
/// on it when a test fails) when dropped.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).expect("mount point");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size},mode=0700"))
            .arg("tmpfs")
            .arg(dir)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "could not mount a tmpfs on {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(dir.to_path_buf())
    }

    /// Writes a file until the filesystem has no room left; returns its path.
    pub fn fill(&self) -> PathBuf {
        let path = self.0.join("filler");
        let mut file = std::fs::File::create(&path).expect("filler");
        let chunk = vec![0u8; 64 * 1024];
        loop {
            match file.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(nix::libc::ENOSPC) => break,
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
        // The last bytes of a partial page: nothing may be left.
        let _ = file.write(&[0u8; 512]);
        path
    }

    /// The state directory of `d` (not started yet) on a tmpfs of `size`, the wrapper's
    /// logs kept off it so they can be read; `None` when the component root is skipped.
    pub fn state_of(d: &Daemon, size: &str) -> Option<Tmpfs> {
        if !crate::components::present_or_skipped(
            "root",
            || nix::unistd::getuid().is_root(),
            "this test mounts a tmpfs for the state directory, which needs root",
        ) {
            return None;
        }
        let disk = Tmpfs::mount(&d.state_dir(), size);
        let wrapper_logs = d.root.path().join("wrapper-logs");
        std::fs::create_dir_all(&wrapper_logs).expect("wrapper log dir");
        std::os::unix::fs::symlink(&wrapper_logs, d.state_dir().join("wrapper-logs"))
            .expect("wrapper log link");
        Some(disk)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("--lazy").arg(&self.0).status();
    }
}

#[test]
fn output_refused_while_the_disk_is_full_is_held_and_stored_once_in_order() {
    let command = format!("for i in $(seq 1 {LINES}); do echo line-$i; sleep 0.02; done");
    let jobs = format!("talker:\n  schedule: '@yearly'\n  targets: [t1]\n  command: '{command}'\n");
    let mut d = Daemon::prepare(&[("01-fast.yaml", FAST), ("jobs.yaml", &jobs)]);
    let Some(disk) = Tmpfs::state_of(&d, "24m") else {
        return;
    };
    d.spawn();
    d.wait_ready();

    let id = d.run_now("talker");
    wait_until("some output stored", HANG, || {
        d.output(id, "t1").contains("line-20\n").then_some(())
    });
    let filler = disk.fill();
    let full_since = Instant::now();
    wait_until("output refused by the full disk", HANG, || {
        d.log_text()
            .contains("output of t1 not stored")
            .then_some(())
    });
    std::thread::sleep(Duration::from_secs(10).saturating_sub(full_since.elapsed()));
    std::fs::remove_file(&filler).expect("free the disk");

    let run = wait_until("the run to finish", Duration::from_secs(120), || {
        let r = d.run_record(id);
        is_final(&r).then_some(r)
    });
    let t = target(&run, "t1");
    let log = d.log_text();
    assert_eq!(run["state"], "succeeded", "{run}\n{}", d.log_tail(80));
    assert_eq!(t["exit_code"], 0, "{run}");
    let expected: String = (1..=LINES).map(|i| format!("line-{i}\n")).collect();
    assert_eq!(d.output(id, "t1"), expected, "{}", d.log_tail(80));

    // One connection all along: refused output did not close the link.
    let wrapper_log: String = std::fs::read_dir(d.root.path().join("wrapper-logs"))
        .expect("wrapper logs")
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    let connections = wrapper_log.matches("connected to ws://").count();
    assert_eq!(connections, 1, "{wrapper_log}");
    assert!(
        wrapper_log.contains("the server could not store output"),
        "{wrapper_log}"
    );
    // Main logs an episode, not each refused frame.
    let refused = log.matches("output of t1 not stored").count();
    let stored_again = log.matches("output of t1 is stored again").count();
    eprintln!(
        "{refused} episodes of refused output logged by main, {} holds by the wrapper",
        wrapper_log.matches("could not store output").count()
    );
    assert!(stored_again >= 1, "{}", d.log_tail(80));
    assert!(
        refused <= stored_again,
        "{refused} lines for {stored_again} episodes"
    );
    drop(d);
    drop(disk);
}
