# shellcheck shell=bash
# The test components a run may be told to skip, sourced by scripts/run-tests,
# scripts/install-test-deps and the package and monitoring checks.
#
# SALTPETER_TEST_SKIP is a comma-separated list of component names. A component that is
# missing makes its tests fail, unless its name is in that list: then they are skipped
# and scripts/run-tests names them in its summary. The same list is read by the Rust
# tests (tests/support/components.rs).
#
#   salt      the real Salt master and minions (scripts/salt-testbed), the Salt formula's test
#   postgres  PostgreSQL server binaries for the throwaway test cluster
#   browser   headless Chromium and chromedriver for the dashboard tests
#   root      tests that need root: package installs (and the Salt formula's), acting as another user
#   lintian   lintian on the Debian packages
#   rpm       rpmbuild and rpm: building and installing the RPM packages
#   rpmlint   rpmlint on the RPM packages
#   promtool  promtool (Debian's prometheus package) for the alert rules
#   cgroups   control groups root may write (cgroup v1 or v2), for the resource limit tests
#   ssh       OpenSSH's sshd, ssh and ssh-keygen: a throwaway loopback sshd for the ssh executor

SALTPETER_COMPONENTS=(salt postgres browser root lintian rpm rpmlint promtool cgroups ssh)

# component_skipped NAME: true when SALTPETER_TEST_SKIP names NAME.
component_skipped() {
    local name="$1" item
    local -a items
    IFS=',' read -r -a items <<<"${SALTPETER_TEST_SKIP:-}"
    for item in "${items[@]}"; do
        item="${item// /}"
        [[ "$item" == "$name" ]] && return 0
    done
    return 1
}

# check_skip_list: fail on a name in SALTPETER_TEST_SKIP that is no component (a typo
# would otherwise make the tests of the intended component fail, or worse, run nothing).
check_skip_list() {
    local item known
    local -a items
    IFS=',' read -r -a items <<<"${SALTPETER_TEST_SKIP:-}"
    for item in "${items[@]}"; do
        item="${item// /}"
        [[ -n "$item" ]] || continue
        known=0
        for name in "${SALTPETER_COMPONENTS[@]}"; do
            [[ "$item" == "$name" ]] && known=1
        done
        if [[ $known -eq 0 ]]; then
            echo "SALTPETER_TEST_SKIP names '$item', which is no test component" \
                "(known: ${SALTPETER_COMPONENTS[*]})" >&2
            return 1
        fi
    done
}

# skipped_components: the skipped names, comma-separated, in the order of the list above.
skipped_components() {
    local name out=()
    for name in "${SALTPETER_COMPONENTS[@]}"; do
        component_skipped "$name" && out+=("$name")
    done
    local IFS=,
    echo "${out[*]}"
}
