//! Scenario 6, original: the original Python Saltpeter beside this daemon on the same Salt
//! testbed. Not measured yet: what it takes is written in `about` (and so in the report),
//! and the scenario says so instead of printing made-up figures.

use super::{Env, Scenario};
use crate::BenchError;
use crate::results::ScenarioResult;

pub const SCENARIO: Scenario = Scenario {
    name: "original",
    title: "6. Beside the original Saltpeter",
    about: "Planned: the original `saltpeter` 0.9.32 from PyPI in its own virtualenv, and \
            this daemon, one after the other on the same Salt testbed and job directory: \
            idle CPU with 0, 100 and 1,000 jobs, RSS, slot → command on 3 minions, output \
            throughput of `seq 1 3000000`, a 10-minion `sleep 1` fan-out, and the ratios. \
            **Not measured yet.** What stands in the way, found while preparing it: the \
            0.9.32 wheel (`pip download --no-deps saltpeter==0.9.32`) ships `main.py`, \
            `machines_endpoint.py`, `ui_endpoint.py` and `timeline.py` but no `wrapper.py`, \
            so the minion side has to come from the 0.9.31 sources (with the one-line fix \
            0.9.31 needed in its wrapper); its dependencies (`websocket`, `crontab`, \
            `pyyaml`, `elasticsearch`, `opensearch-py`, and Salt itself importable) need a \
            virtualenv that sees the testbed's Salt; and `main.py` reads the master \
            configuration from the fixed path `/etc/salt/master` (`salt.config.master_config` \
            at line 759, `LocalClient()` with its default path at line 904), so on a shared \
            machine it must run in its own mount namespace with the testbed's `master` \
            configuration bound there.",
    run,
};

fn run(_env: &Env) -> Result<ScenarioResult, BenchError> {
    Err(BenchError::Setup(
        "the original Saltpeter is not set up by the driver yet (see this scenario's notes)".into(),
    ))
}
