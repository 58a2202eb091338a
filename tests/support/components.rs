//! The test components a run may be told to skip (scripts/lib/components.sh lists them:
//! salt, postgres, browser, root, ...). `SALTPETER_TEST_SKIP` is a comma-separated list
//! of their names. A test whose component is missing fails, saying how to install it,
//! unless the component is named there: then it returns early with a message, and
//! scripts/run-tests names the component in its summary.

#![allow(dead_code)]

/// True when `SALTPETER_TEST_SKIP` names `component`.
pub fn skipped(component: &str) -> bool {
    std::env::var("SALTPETER_TEST_SKIP")
        .unwrap_or_default()
        .split(',')
        .any(|name| name.trim() == component)
}

/// Whether a test of `component` runs: `false` (with a message) when the component is
/// skipped by name, `true` when it is present; when it is missing and not skipped the
/// test fails with `missing` (what is missing and how to install it).
pub fn present_or_skipped(component: &str, present: impl FnOnce() -> bool, missing: &str) -> bool {
    if skipped(component) {
        eprintln!("SKIPPED: SALTPETER_TEST_SKIP names {component}");
        return false;
    }
    assert!(
        present(),
        "{missing} (scripts/run-tests installs what is missing and starts the Salt testbed; \
         SALTPETER_TEST_SKIP={component} skips these tests)"
    );
    true
}
