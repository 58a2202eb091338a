//! What the figures led to: the profiles behind each gap and what was changed, for the
//! report. The text names no number that the tables do not show next to it, except the
//! profile shares, which come from the `perf` and `valgrind --tool=massif` runs described.

pub const FINDINGS: &str = "\
## What the figures led to

The `before` columns are the build this work started from (the same scenarios, run by this \
driver with `--label before --bin-dir`); `current` is this build.

- **Ingest** (scenario 2). `perf record -a` during a 400 MiB flood: a quarter of all samples \
were `serde::Serializer::collect_seq` in the hub and main, and another 14 % `Vec<u8>`'s \
`visit_seq` in main: bincode wrote and read every output byte with a call of its own, on \
both internal hops. Output payloads now cross the links as one block \
(`src/wire/bytes.rs`, `serialize_bytes`; the bytes on the wire are the same). CPU per \
100 MB: see `hub`, `main` and `db CPU per 100 MB` in the ingest table. What is left is \
SQLite's WAL writes (db, mostly in the kernel) and reading the pipe and framing (wrapper).
- **Fan-in** (scenario 1). `perf` on the hub with 10,000 heartbeating wrappers: half of its \
CPU was `hub::arm_timers`, which scanned every wrapper connection for a hello deadline after \
every event; it now scans only after a connection entered a phase that has a deadline. Its \
memory was tungstenite's read buffer, which is zero-filled to its full size before every \
read, so all 16 KiB of it were resident for each idle connection; it is 4 KiB now (larger \
frames still grow it; the ingest figures did not move).
- **Idle CPU** (scenario 4). With `schedstat` (nanoseconds, not 10 ms ticks), nearly all of \
the idle daemon's CPU was main's one-second scan of the configuration directory (a `stat` \
per file). The directory is watched with inotify now (a scan every 60 s stays as a safety \
net; without inotify, the old 1 s scan). The hub's HTTP sweep and db's commit-latency \
report no longer tick while idle (armed by a connection or a commit); main still wakes once \
a second for the notification outbox and every 30 s for the stall report.
- **Main's memory with 10,000 distinct schedules** (scenario 4). croner keeps a byte per \
possible year (1 to 5000) per schedule, 5.3 KB each: about 55 MB. A schedule now keeps its \
canonical text and builds croner's matcher when asked (the last one is kept per thread, \
so walking one schedule slot by slot parses once); main also hands freed heap back to the \
kernel after a load. What stands between the figure and the 30 MB goal, from \
`valgrind --tool=massif` of loading the same 10,000 jobs (23 MB of heap in all): the jobs \
themselves, 4.8 MB (a 464-byte `Job` each, plus its strings: 2.9 MB more); the parsed YAML \
trees kept so an unchanged file is not parsed again on reload, 3.8 MB and more; target \
lists, 1 MB; malloc's own overhead, 3.4 MB; on top of main's 8 MB with no jobs. Shrinking \
those means a more compact job and tree representation; not done.
- **Fan-out** (scenario 3). `perf record -a` during the run: 36 % of the samples were in \
the 1,000 `saltpeter-wrapper` processes, nearly all of it process start-up (the dynamic \
loader's CPU feature detection, which traps to the hypervisor on this machine, the crypto \
crates' own, fork and exec in the kernel: each was started as `saltpeter-wrapper \
--daemonize`, three processes per target), 12 % in `sh` running `true`, 9 % in the \
daemon's five processes; and `strace` of blocking showed the 1,000 launches in a row, \
each waiting in `vfork` until its child had been scheduled and exec'd. Without systemd \
the local executor now starts each wrapper as its own child, `saltpeter-wrapper \
--detach` (a session of its own, the launch pipes closed once started, no fork), forked \
without waiting for the exec, and reaps it: one process per target and no wait per \
launch. The run's CPU (a cpuacct cgroup around the daemon) moved within the noise: the \
two forks saved per wrapper are partly spent again on forking blocking (its page tables \
and copy-on-write faults), but the launches no longer wait for one another, and the \
slot to the last result fell by about a fifth in back-to-back runs. What is left per \
target: the dynamic loader's start-up of the wrapper and of `sh` (about half of it the \
loader's cache detection), and on this machine's file system each new file (a token \
file, a wrapper log) scans past recently deleted inodes (`recently_deleted` in ext4).
- **Not met, not yet profiled.** Ingest with 100 wrappers at once (scenario 2): the aggregate is below one job's throughput and \
the hub and main peak at a few hundred MiB (`peak_rss_hub`, `peak_rss_main`): each \
wrapper may keep up to 16 MiB unacknowledged, and that output waits in the hub's and \
main's queues on its way to db; bounding those queues below the wrappers' windows is the \
next step.
- **The original Saltpeter** (scenario 6). Idle, its process tree uses a large share of a \
core as soon as it has jobs: its main loop re-reads and re-parses every YAML file of the \
directory on each tick (about every 50 ms) and compares the result with the previous one; \
this daemon sleeps until the next slot or a changed file.
- db read the whole configuration at start only for `database_max_size`; it reads only the \
files with `saltpeter_config` now (its memory with 10,000 jobs: the scheduler table's \
`peak_rss_db`).
";
