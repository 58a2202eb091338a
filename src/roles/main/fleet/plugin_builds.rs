//! Which machines of an executor plugin have this build's wrapper (docs/executors.md,
//! "deploy"): a machine is sent `deploy: true` until a launch with it worked, and again
//! after a launch failed (the wrapper may have gone). In memory: after a start each
//! machine is asked once more, and the plugin copies the wrapper only when the
//! machine's file differs, so the copy still happens once per machine per build.

use std::collections::HashSet;

/// (executor, machine, wrapper path) known to hold this build.
#[derive(Debug, Default)]
pub(crate) struct PluginBuilds {
    known: HashSet<(String, String, String)>,
}

impl PluginBuilds {
    /// The machines of `machines` not known to have this build at `path`.
    pub(crate) fn to_deploy(&self, executor: &str, machines: &[String], path: &str) -> Vec<String> {
        machines
            .iter()
            .filter(|m| {
                !self
                    .known
                    .contains(&(executor.to_string(), (*m).clone(), path.to_string()))
            })
            .cloned()
            .collect()
    }

    /// A launch on `machine` worked: it has this build.
    pub(crate) fn launched(&mut self, executor: &str, machine: &str, path: &str) {
        self.known
            .insert((executor.to_string(), machine.to_string(), path.to_string()));
    }

    /// A launch on `machine` failed: check its wrapper again next time.
    pub(crate) fn failed(&mut self, executor: &str, machine: &str, path: &str) {
        self.known
            .remove(&(executor.to_string(), machine.to_string(), path.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_machine_is_deployed_until_a_launch_worked_and_again_after_a_failure() {
        let mut b = PluginBuilds::default();
        let ms = vec!["a".to_string(), "b".to_string()];
        assert_eq!(b.to_deploy("ssh", &ms, "/w"), ms);
        b.launched("ssh", "a", "/w");
        assert_eq!(b.to_deploy("ssh", &ms, "/w"), vec!["b".to_string()]);
        assert_eq!(
            b.to_deploy("ssh", &ms, "/other"),
            ms,
            "another path is another file"
        );
        assert_eq!(
            b.to_deploy("py", &ms, "/w"),
            ms,
            "another executor is another estate"
        );
        b.failed("ssh", "a", "/w");
        assert_eq!(b.to_deploy("ssh", &ms, "/w"), ms);
    }
}
