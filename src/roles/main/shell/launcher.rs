//! The launch settings as the other parts ask for them: the launcher
//! (`fleet::Launcher`) and its rules take the configuration and what other parts know;
//! these gather them from `Main`.

use crate::config;
use crate::roles::main::fleet::launcher;
use crate::roles::main::rules::scheduler;
use crate::roles::main::shell::Main;
use crate::wire::link::{MinionProof, SaltSettings};
use crate::wire::records::RunId;

impl Main {
    /// URL the wrappers of `job` connect to (`Launcher::wrapper_url`).
    pub(crate) fn wrapper_url(&self, job: &config::Job) -> String {
        self.launcher
            .wrapper_url(&self.config.saltpeter, self.daemon.wrapper_port(), job)
    }

    /// How far ahead of its slot a run of `job` is launched (`Launcher::leads`).
    pub(crate) fn prestage_lead(&self, job: &config::Job) -> chrono::Duration {
        self.leads().of(job)
    }

    /// The leads of every job, for the scheduler.
    pub(crate) fn leads(&self) -> scheduler::Leads {
        self.launcher.leads(&self.config.saltpeter)
    }

    /// How blocking calls salt, from the current `saltpeter_config`.
    pub(crate) fn salt_settings(&self) -> SaltSettings {
        launcher::salt_settings(&self.config.saltpeter)
    }

    /// The wrapper binary for `job` on its targets.
    pub(crate) fn wrapper_path(&self, job: &config::Job) -> String {
        launcher::wrapper_path(&self.config.saltpeter, job)
    }

    /// Check a wrapper's minion-key proof (`Launcher::check_minion_proof`), with the keys
    /// other servers' masters published for `machine` (`delegation`).
    pub(crate) fn check_minion_proof(
        &mut self,
        run: RunId,
        machine: &str,
        proof: &MinionProof,
    ) -> Result<(), String> {
        let published = self.delegation.published_keys(machine);
        self.launcher
            .check_minion_proof(&self.config.saltpeter, published, run, machine, proof)
    }
}
