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
kernel after a load. That left 38.6 MB. `heaptrack` on main (its allocations still live \
after loading the 10,000 jobs: 23.5 MB) showed the parsed YAML trees, kept between loads \
so that an unchanged file need not be read again, as the largest part (7.5 MB); then the \
jobs (a 488-byte `Job` each, 4.9 MB, each with its own copy of its file's path and group), \
the reload cache (a table keyed by a copy of the path and the name, 3.9 MB), and a table \
of 10,000 answered start-up calls to db that kept its size (1.5 MB). Now a file keeps only \
its `saltpeter_config` and `saltpeter_maintenance` sections and its top-level keys; when \
a load must validate jobs of an unchanged file again (an inherited default changed), it \
asks for that file to be read again (`src/config/content.rs`). A job's file and group are \
shared by the jobs of the file, an invalid entry is boxed, the cache is keyed by name, and \
the table of pending calls shrinks after a burst: 14.7 MB live, and main's resident size \
is the figure in the table (about 8 MB of it is code mapped from the binary and the C \
library, shared with the other processes).
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
and copy-on-write faults), but the launches no longer wait for one another (at most 64 \
run at once, see the next point), and the slot to the last result fell by about a fifth \
in back-to-back runs. What is left per \
target: the dynamic loader's start-up of the wrapper and of `sh` (about half of it the \
loader's cache detection), and on this machine's file system each new file (a token \
file, a wrapper log) scans past recently deleted inodes (`recently_deleted` in ext4).
- **Ingest with 100 wrappers at once** (scenario 2). `perf record -a` of the 100 × 4 MiB \
run: the daemon's processes were a third of the samples (db half of that, hub and main a \
quarter each), the wrappers an eighth; per byte, hub and main spent about twice what they \
spend on one flooding job. Each wrapper sent its whole output at once (up to 16 MiB \
unacknowledged), so hundreds of MiB waited in the hub's and main's link queues (page \
faults and memory charging in the profile; `peak_rss_hub`, `peak_rss_main`), main scanned \
every pending db call for the earliest deadline after each event, and db committed a few \
frames at a time. Now the hub reads a wrapper only while the daemon holds less than a \
32 MiB budget of its output (8 MiB per wrapper) and main credits each frame back once db \
is done with it; acks go once per wrapper per loop turn; output writes alone wait up to \
4 ms to share a commit; and a frame whose tail bytes later frames of the same batch push \
out is counted as omitted without being written (docs/architecture.md, \"Output and flow \
control\"). That is also why one job's flood and its db CPU per 100 MB improved, and why \
the hub and main now stay at a few tens of MiB. That left 141 MB/s. `perf record -a` of \
that build, counted by process per 100 ms: for the first second the 100 wrappers, `yes` \
and `head` (300 runnable processes, all started at once, on two cores) took nearly every \
sample while the hub, main and db got 1 to 4 samples in 200, the share the kernel's fair \
scheduler gives 3 processes among 300, so the wrappers read their commands' output into \
their windows instead of handing it over; then, the commands done, the daemon took the \
400 MiB in 1.7 s (about 240 MB/s, one job's rate) with a core partly idle. Two changes \
let the two overlap: the local executor runs at most 64 launch commands at once (the \
others wait their turn; 10,000 at once would also have needed 30,000 descriptors in \
blocking), and db holds output back for a shared commit only while output is flowing, \
so the first frames of a wrapper are stored and acknowledged at once (this also brought \
the fan-in probe's output → ack latency back under a millisecond). The hub still reads \
wrapper frames through tungstenite's 4 KiB read buffer (16 reads per 64 KiB frame), kept \
small for 10,000 idle connections.
- **The original Saltpeter** (scenario 6). Idle, its process tree uses a large share of a \
core as soon as it has jobs: its main loop re-reads and re-parses every YAML file of the \
directory on each tick (about every 50 ms) and compares the result with the previous one; \
this daemon sleeps until the next slot or a changed file. On the Salt testbed, each of its \
firings forks a job process that creates a Salt client, runs `test.ping` and only then \
launches the wrappers with `cmd.run_all`, so its commands start over a second after the \
slot; this daemon's wrappers are staged on the minions ahead of the slot and only wait for \
it. Its wrapper reads at most 8 KiB of output per 50 ms pass of its loop and sends it \
stop-and-wait, which is the `seq` throughput in the table (about 130 KiB/s). Its fan-out \
adds the same launch path to the `sleep 1`.
- db read the whole configuration at start only for `database_max_size`; it reads only the \
files with `saltpeter_config` now (its memory with 10,000 jobs: the scheduler table's \
`peak_rss_db`).
- **Fleet** (scenario 9). First measured (before the changes below): 0.81 ms of daemon CPU \
per target at 1,000 and 3.05 ms at 10,000, main's share seven times larger at 10,000 \
than at 1,000; at 10,000 slot → started p99 16.7 s and 4,396 of 10,000 targets wrongly \
`lost` (253); 1,612 and 14,928 database commits per firing. `perf record` of hub, main \
and db during a 10,000-target firing: 93 % of the samples were main's, 40 % of main's in \
`run::batches::collect_batch` and 26 % in `memcmp`: the run Workflow's `collect_batch` \
ran again on every target change of the run, each time cloning the batch's machine list \
and looking each up in the run's targets, N² string comparisons per firing; main worked \
through the exits at 250 to 400 a second and the wrappers it had not heard from meanwhile \
were judged silent after 15 s. Changed: (1) main wakes a Workflow once per loop turn \
however many of its keys fired, and a one-batch run checks pick-up over its targets \
directly (no copy, no lookup); (2) hub, main and db post their link messages during a \
turn and write them at its end (one write and one wake-up of the peer per turn); (3) db \
holds any batch, not only output, up to 10 ms while requests keep coming (commits per \
firing 1,612 → about 90 at 1,000; 14,928 → 860 at 10,000: they now follow the firing's \
duration, at most about 100 a second, not the number of targets); (4) `go` at a slot is \
one link message per 4,096 wrappers, encoded once in the hub; (5) accepted minion keys \
are parsed once per file version; (6) TLS prefers AES-128-GCM with SHA-256 (the \
handshake's SHA-384 had no CPU instructions: 6 % of the hub). After: 0.5–0.7 ms per \
target at 1,000 and 2,000, 0.92–1.14 ms at 10,000 over two runs of one firing (hub \
0.54–0.68, main 0.24–0.32, db 0.13), 10,000 of 10,000 targets ok, slot → started p99 \
1.27–1.39 s, RSS hub 143 MiB, main 33 MiB, db 19–25 MiB. What is left, from `perf` of the hub at \
2,000: the TLS handshakes (x25519 about 14 %, the certificate's ECDSA signature 3 %), the \
kernel's TCP and wake-ups (about 40 %), the allocator; main's and db's shares stay flat. \
The goal of 0.5 ms is not met at 10,000: the hub's share grows from 1,000 to 10,000 \
(more connections alive at once: heartbeats, pings, larger epoll sets). The generator \
beside the daemon spends 1.0–1.3 ms per target on the same two cores. A deployment's log \
line names five minions and how many more (it named all 10,000: 90 KB). The hub raises \
its open-file limit to the hard limit (20,000 here; the systemd unit sets 65,536).
- **Fleet, second pass** (issue 27). Measured back to back with the same driver on this \
2-core machine (load 1.9–2.5, the benchmark's own): before (70930a5) 0.303 ms per target \
at 1,000 (hub 0.185, main 0.076, db 0.040) and 0.487 ms at 10,000 (hub 0.272, main 0.147, \
db 0.063), 79 and 639 commits per firing; the figure of 0.87 ms above was taken under other \
builds and with the 10,000 firing's wrappers staged for up to 150 s, which the figure \
depended on: the first slot of the 10,000 size fell anywhere in a 3-minute period. \
`perf record` of a 10,000 firing: hub 59 % of the samples (x25519 15 % of the hub's, \
ECDSA signatures 3 %, the kernel's TCP and wake-ups most of the rest), main 31 % \
(`collect_batch` with its hash lookups 13 %, RSA verification of the proofs 10 %, \
wake-ups 20 %), db 11 %; staged wrappers heartbeating every 5 s were a cost that grew \
with the time they waited. Changed: (1) a staged wrapper beats every 6 heartbeat periods \
until `go` (`welcome.job.staged_heartbeat_s`; main allows a pre-staged target 3 staged \
periods of silence until its command starts); (2) db's gather window doubles at each \
commit while requests keep flowing, 10 ms up to 1.28 s (back to 10 ms after a quiet \
spell); (3) the throttle checks of a one-batch run walk its targets without a lookup per \
machine; (4) the 10,000 size's first slot is a minute after the start, so its wrappers \
are staged as long in every measurement (a minute is what `prestage_cap` gives a first \
slot by default). After (two runs): 0.349 and 0.348 ms at 1,000, 0.415 and 0.384 ms at \
10,000 (hub 0.216–0.227, main 0.108–0.117, db 0.055–0.065), commits 16–26 and 47–52; \
slot → started p99 at 10,000 296 ms (load 2.3) and 871 ms (load 3.5, others' builds), \
peak RSS hub 142–144 MiB (142 before), main 35–38 (34), db 23–28 (20: it holds larger \
batches). Commits are not strictly \
independent of N: about log2(T / 10 ms) for a stream of T seconds up to 1.28 s, then one \
per 1.28 s, so a firing whose streams last longer (10,000 wrappers connect over about \
20 s on this machine) costs two or three times the commits of a 1,000 one; a longer cap \
would delay every answer during a stream (a non-staged welcome waits for its commit) by \
as much. What is left: the hub's TLS handshakes (a fresh wrapper per firing cannot \
resume a session, so x25519 and the certificate's signature stay), the kernel's TCP and \
wake-ups of three processes on two cores, RSA verification of each proof in main.
- **Salt testbed, 30 minions** (herd with `SP_BENCH_HERD_JOBS=1 SP_BENCH_HERD_MINIONS=30 \
SP_BENCH_HERD_SLOTS=4`, one job on 30 minions every 20 s, two runs at load 4–14 from other \
builds): per slot after the first, the daemon 43–53 CPU-ms (last run: hub 17–20, main 10, \
db 13, blocking 10–13, all of that the salt bridge's publish; /proc counts in 10 ms ticks \
over 3 slots), the salt-master 197–260, the 30 salt-minions 4,360–5,340 (30 Python \
processes on this host); over the daemon's whole life per slot (its start included) \
80–170 CPU-ms. An idle daemon without jobs uses under 10 ms in 20 s. The goal of 15 ms \
per firing is not met: 1.5–1.8 ms per target, against 0.35–0.4 in the simulated fleet. \
What a firing costs regardless of its size weighs here: the bridge's publish through \
Salt's Python client (about 10 ms), db's commits of a firing's few short bursts (each \
restarting the gather window at 10 ms), the run's creation and end; and the machine was \
two to seven times oversubscribed, which inflates every CPU figure.
- **Salt testbed, 30 minions, third pass** (issue 27; the same herd command, load 11–14 \
from other builds in both runs). Before (c2cd850): per slot after the first, the daemon \
73.3 CPU-ms (hub 26.7, main 13.3–16.7, db 16.7–20.0, blocking 13.3, all of it the salt \
bridge), the salt-master 310–327, the 30 minions 6,137–6,323. Where it goes, measured \
apart: the simulated fleet (no Salt, same daemon) costs 9.7–10.8 ms per firing at **3** \
targets (hub 2.3–3.1, main 2.6–4.1, db 2.7–3.6, blocking 0.3–0.6; 9–10 commits), 25 ms \
at 30 (hub 10.6, main 8.8, db 5.1, blocking 0.5) and 0.44 ms per target at 300, so about \
9 ms a firing whatever its size plus 0.4–0.5 ms a target; Salt's `LocalClient` measured \
alone in the testbed's virtualenv (30 calls, warm, `os.times`): `run_job(listen=False)` \
4.0 ms of CPU per publish and `CkMinions.check_minions('*')` 1.7 ms. `perf record` of \
hub, main and db over 8 simulated firings of 30: no hot spot (main's largest symbol is \
the kernel's `finish_task_switch`, 14 %: wake-ups of four processes passing a firing's \
messages; the hub's x25519 about 5 %, RSA verification in main under 2 %). Changed: a \
glob or list target is matched by blocking against the master's accepted keys \
(`roles/blocking/salt/keymatch.rs`, as Salt's `CkMinions` does) instead of by the bridge's \
Python: blocking 13.3 → 6.7 CPU-ms per slot; the daemon 60–70 per slot after it (hub \
23.3–33.3, main 16.7, db 13.3, blocking 6.7). **The goal of 15 ms per firing is not met \
and not reachable by trimming**: without Salt at all the daemon spends about 25 ms on a \
30-target firing (the fixed 9 ms: the run's creation, db's commits, the messages of four \
processes; 0.4–0.5 ms a target: a TLS handshake, a minion-key proof, a welcome committed \
before it is sent, five or six messages through hub, main and db), and Salt's own \
publish is 4 ms more. Reaching 15 ms would take a quarter of each: no TLS or no proof \
per wrapper (both are the security model), or fewer processes per message (the design's \
four). What the testbed adds on top (hub 23–33 here against 10.6 simulated) is the \
oversubscribed machine: 30 Python minions and the builds of others on two cores.
- **Fleet, commits** (issue 27). What a firing commits, from db's debug log (`commit of N \
requests: ...`; the fleet scenario keeps the daemon's log in `target/bench/`): at 1,000 a \
steady firing was 16–26 commits, at 10,000 47–52. Two streams made them grow with the \
targets: the connections of the pre-staged wrappers before the slot (a commit per window \
while they came in, for writes nobody waits for) and the exits after it, where a window \
that ran out while db was busy committing did not grow (only the timer's path doubled \
it): 18 commits of 1,000–2,000 requests in 0.65 s at 10,000. Changed: a call says when \
its answer is due (`ipc::rpc::Due`); a pre-staged run's writes before `go` are due a \
second before its slot and are committed together then (19,064 target updates in one \
commit at 10,000), fleet state within a minute; any call due now takes what is held \
along, in order; and a window grows whichever way it ran out. After, back to back with \
the build before (119d05d) at 1,000: 10–11 commits per steady firing against 16–23, \
daemon CPU per target 0.46–0.50 ms against 0.42–0.47 (the same within this machine's \
noise today; it measured 0.35 last week); at 10,000 (one firing, its first, which \
deploys to every minion): 27 commits against 47–52, 0.49–0.62 ms per target, slot → \
started p99 302–402 ms, peak RSS hub 144 MiB, main 37–41, db 25–27. Commits are not \
strictly independent of N: the exits of 10,000 wrappers still stream over about a \
second, a commit per doubling window (10 ms up to 1.28 s), about log2 of the stream's \
length; holding exits longer would delay every result (a run ends when its last exit \
is stored).
- **Fleet, commits, independent of N** (issue 27, the next stop). The exit stream was \
the rest: 11 commits in 1.1 s after `go` at 10,000 (a window restarted at 10 ms after \
each quiet spell), 3 at 1,000. Changed (`ActiveRun::write_due`): a run of 100 targets \
or more lets db hold its stream's writes (commands started, output, exits) up to a \
second; an exit that waited for its output's commit up to 100 ms more (its burst: \
10,000 exits released by one commit went out as 5 windowed commits); a staged \
wrapper's write in the last second before the slot waits for `go`, whose own write \
takes it along. A held write is answered as soon as any write due now comes, and a \
wrapper resends what was not acknowledged, so a crash loses nothing; the cost is that \
such a run ends (and its wrappers are told `done`) up to a second later: at 10,000, \
`go` to the run's end 1.7 s against 1.1 s. Smaller runs keep every write due at once \
(the live views' latency). After, same machine and build otherwise: a steady firing \
commits 9 times at 1,000 and 10 at 10,000 (create the run, the launch barrier, the \
staged wrappers, `go`, the stream, the exits, the run's end, retention, the \
benchmark's own read; 10,000 splits the launch barrier in two), against 9–10 and 19; \
daemon CPU per target 0.33–0.35 ms at 1,000 and 0.35 at 10,000 (steady firings) \
against 0.38–0.39 and 0.42. Smaller fleets the same day (`SP_BENCH_FLEET_SIZES=30,300`, \
steady firings): 30 targets 0.53–0.56 ms per target, so 16–17 ms of daemon CPU per \
firing without Salt (25 ms in the third pass; hub 7.0–7.4, main 4.8–5.5, db 3.0–3.5, \
blocking 0.5), 9 commits; 300 targets 0.36–0.42 ms. What a real 30-minion firing adds \
is Salt's publish through the bridge (about 4 ms of CPU) and, on the one-host testbed, \
the 30 Python minions on the same two cores. Measured so the same day (the herd \
command of the third pass, load 5.6 when it ended): per slot after the first, the \
daemon 40 CPU-ms, fresh and after a restart (hub 16.7–20, main 6.7–10, db 10–13.3, \
blocking 0–3.3 with the salt bridge; 10 ms ticks over 3 slots), against 60–70 in the \
third pass and 670 when issue 27 was filed; the salt-master 220–223, the 30 minions \
4,620–4,807; command lateness p99 31 ms. The goal of 15 ms per firing is still not met: \
the daemon alone (simulated) spends 16–20 ms on a 30-target firing, and the testbed \
doubles its hub's share (17–20 against 7–7.4 simulated) with 30 Python minions \
spending 4.6–4.8 CPU-s per slot beside it, most of it around the firing.
";
