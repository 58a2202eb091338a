//! Sections of the report measured outside `scripts/bench`'s scenarios (a test marked
//! ignored, run by hand), kept here so that regenerating the report keeps them.

pub const APPENDIX: &str = r#"## 11. Salt topologies: slot to command through syndics

`slot_to_command_through_syndics_and_one_master` (tests/it/salt_topology.rs, ignored:
`cargo nextest run --run-ignored only -E 'test(/slot_to_command_through/)'`): a testbed
with a top master, 2 syndic masters (salt-syndic), minion-01 behind syndic-1 and
minion-02 behind syndic-2, plus the syndic hosts' own minions, all on this machine's 2
cores; a job every 10 s printing the time its command started, from the slot to that
time on each minion, over the slots after the first two. The same daemon set-up driving
the top master (both minions, through the syndics) and then driving syndic-1's master
directly (minion-01: one master, no syndic).

- 2026-11-28, AMD EPYC, 2 cores shared with other builds

| Figure | through 2 syndics | one master |
|---|---|---|
| slot → command, p50 | 7 ms | 3 ms |
| slot → command, max | 22 ms (12 samples) | 17 ms (6 samples) |
| the same through syndics before the lead counted the resolution | p50 3,689 ms, max 3,867 ms | |

Behind syndics a run's targets are resolved by a ping round, which the top master ends
only after `syndic_wait` (5 s): about 5.5 s before the launch even starts. The
pre-staging lead measured only the launch (publish to the wrappers' hellos, about 1 s),
so every slot started 3.5–3.9 s late; the lead now adds the measured resolution time
(`launcher.rs`), and slots through syndics start within the figures of one master.

## 12. Several masters, one database: slot to command through two masters

`slot_to_command_through_two_masters_and_one` (tests/it/salt_masters.rs, ignored:
`cargo test --release --test it slot_to_command_through_two -- --ignored --nocapture`):
a `--masters 2` testbed (minion-01 and minion-03 on master-1, minion-02 and minion-04
on master-2), PostgreSQL 15 on a Unix socket, all on this machine's 2 cores; a job
every 10 s (`date +%s%3N`, pre-staged), from the slot to the command's start on each
minion, over the slots after the first two. Two servers, each driving its own master,
the job on `*` (the leader resolves on both masters and launches master-2's minions
through the other server, over `salt_calls`); then one server alone on master-1 with
the job on its 2 minions.

- 2026-11-29, 2 cores shared with other builds

| Figure | 2 masters, 2 servers, 4 minions | 1 master, 1 server, 2 minions |
|---|---|---|
| slot → command, p50 | 5 ms | 3 ms |
| slot → command, max | 8 ms (24 samples) | 8 ms (12 samples) |

The exchange through the database (two 200 ms polls, the other master's resolution and
publish) happens before the slot: the pre-staging lead follows the measured resolution
and launch times, so slots through two masters start within the figures of one. A run
started by hand (not pre-staged, `run --wait` of `echo` on `*`) took 1.3–1.8 s end to
end through both masters.
"#;
