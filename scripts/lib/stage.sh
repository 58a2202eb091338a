# shellcheck shell=bash
# The file trees of the packages saltpeter and saltpeter-wrapper (the server's with the
# ssh executor plugin in /usr/lib/saltpeter/executors), shared by
# scripts/build-deb and scripts/build-rpm so both formats ship the same files. Sourced
# from the repository's root; the caller adds its format's own files (Debian's
# changelog and control data, the RPM spec).
#
#   stage_wrapper ROOT BIN_DIR
#   stage_server ROOT BIN_DIR ZSH_DIR SCRATCH
#
# ZSH_DIR is where zsh completions go (Debian: /usr/share/zsh/vendor-completions; the
# RPM distributions: /usr/share/zsh/site-functions). SCRATCH is an empty directory for
# the generated man pages.

stage_bin() {
    local bin="$1" root="$2" bin_dir="$3"
    install -d "$root/usr/bin"
    install -m 0755 "$bin_dir/$bin" "$root/usr/bin/$bin"
    strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/$bin"
}

stage_man_page() {
    local page="$1" root="$2"
    install -d "$root/usr/share/man/man1"
    gzip -9n <"$page" >"$root/usr/share/man/man1/$(basename "$page").gz"
}

stage_wrapper() {
    local root="$1" bin_dir="$2"
    stage_bin saltpeter-wrapper "$root" "$bin_dir"
    stage_man_page packaging/man/saltpeter-wrapper.1 "$root"
    install -d "$root/usr/share/doc/saltpeter-wrapper"
    install -m 0644 packaging/copyright "$root/usr/share/doc/saltpeter-wrapper/copyright"
}

stage_server() {
    local root="$1" bin_dir="$2" zsh_dir="$3" scratch="$4"
    local bin page doc
    for bin in saltpeter-daemon saltpeterctl saltpeter-cleanup; do
        stage_bin "$bin" "$root" "$bin_dir"
    done
    # Executor plugins, where the daemon looks by default (executor_path).
    install -d "$root/usr/lib/saltpeter/executors"
    install -m 0755 "$bin_dir/saltpeter-executor-ssh" "$root/usr/lib/saltpeter/executors/saltpeter-executor-ssh"
    strip --strip-unneeded --remove-section=.comment --remove-section=.note \
        "$root/usr/lib/saltpeter/executors/saltpeter-executor-ssh"
    install -d "$root/usr/lib/systemd/system" "$root/usr/lib/tmpfiles.d" "$root/usr/lib/sysusers.d"
    install -m 0644 systemd/saltpeter.service "$root/usr/lib/systemd/system/saltpeter.service"
    install -m 0644 packaging/saltpeter/tmpfiles.conf "$root/usr/lib/tmpfiles.d/saltpeter.conf"
    install -m 0644 packaging/saltpeter/sysusers.conf "$root/usr/lib/sysusers.d/saltpeter.conf"
    install -d -m 0755 "$root/etc/saltpeter"
    install -m 0644 packaging/etc/saltpeter.yaml packaging/etc/example.yaml "$root/etc/saltpeter/"
    # Man pages: saltpeterctl(1) and one per verb, generated from the CLI definition.
    "$root/usr/bin/saltpeterctl" manpage --dir "$scratch" >/dev/null
    for page in "$scratch"/*.1 packaging/man/saltpeter-daemon.1 packaging/man/saltpeter-cleanup.1; do
        stage_man_page "$page" "$root"
    done
    install -d "$root/usr/share/bash-completion/completions" "$root$zsh_dir" \
        "$root/usr/share/fish/vendor_completions.d"
    "$root/usr/bin/saltpeterctl" completions bash >"$root/usr/share/bash-completion/completions/saltpeterctl"
    "$root/usr/bin/saltpeterctl" completions zsh >"$root$zsh_dir/_saltpeterctl"
    "$root/usr/bin/saltpeterctl" completions fish >"$root/usr/share/fish/vendor_completions.d/saltpeterctl.fish"
    # Watching it: Prometheus alert rules and a Grafana dashboard for /metrics.
    install -d "$root/usr/share/saltpeter/prometheus" "$root/usr/share/saltpeter/grafana"
    install -m 0644 packaging/prometheus/saltpeter.rules.yml "$root/usr/share/saltpeter/prometheus/"
    install -m 0644 packaging/grafana/saltpeter.json "$root/usr/share/saltpeter/grafana/"
    # The Salt formula, to copy into a file root (docs/install.md).
    install -d "$root/usr/share/saltpeter/salt/saltpeter"
    install -m 0644 packaging/salt/saltpeter/* "$root/usr/share/saltpeter/salt/saltpeter/"
    install -d "$root/usr/share/doc/saltpeter"
    install -m 0644 packaging/copyright "$root/usr/share/doc/saltpeter/copyright"
    for doc in README.md docs/install.md docs/configuration.md docs/api.md docs/salt.md; do
        [[ -f "$doc" ]] || continue
        gzip -9n <"$doc" >"$root/usr/share/doc/saltpeter/$(basename "$doc").gz"
    done
}
