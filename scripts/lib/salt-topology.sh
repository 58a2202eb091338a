# shellcheck shell=bash
# The topologies of scripts/salt-testbed (--syndic, --masters, --multi-master): which
# masters there are, their ports and configuration, the syndics, and how a minion is
# attached. Sourced by scripts/salt-testbed, whose variables ($dir, $run, $log,
# $topology, $k, the ports) and helpers (say, die, spawn, alive, stop_daemon,
# write_if_changed, ping_all) it uses.

# master_names: the salt-master daemons of the topology, in start order.
master_names() {
    local j
    case "$topology" in
        single) echo master ;;
        syndic)
            echo master
            for ((j = 1; j <= k; j++)); do echo "syndic-$j"; done
            ;;
        *) for ((j = 1; j <= k; j++)); do echo "master-$j"; done ;;
    esac
}

# set_ports NAME: $m_pub and $m_ret of master NAME.
set_ports() {
    local j=0
    case "$1" in
        syndic-*) j="${1#syndic-}" ;;
        master-*) j=$((${1#master-} - 1)) ;;
    esac
    m_pub=$((publish_port + 10 * j))
    m_ret=$((ret_port + 10 * j))
}

# cli_fast_dir NAME: the cli-fast copy of master NAME's configuration.
cli_fast_dir() {
    if [[ "$1" == master ]]; then echo "$dir/cli-fast"; else echo "$dir/cli-fast-$1"; fi
}

# home_master INDEX: the master minion INDEX is attached to (multi: the first of all).
home_master() {
    case "$topology" in
        single) echo master ;;
        syndic) echo "syndic-$((($1 - 1) % k + 1))" ;;
        *) echo "master-$((($1 - 1) % k + 1))" ;;
    esac
}

# minion_masters INDEX: the `master:` lines of minion INDEX's configuration.
minion_masters() {
    local home m_pub m_ret name
    if [[ "$topology" == multi ]]; then
        # Salt 3008 takes the publish port each master reports only when the minion's
        # own publish_port is 4506 (the value it compares with); any other value would
        # be used for every master.
        printf 'master:\n'
        while read -r name; do
            set_ports "$name"
            printf '  - 127.0.0.1:%s\n' "$m_ret"
        done < <(master_names)
        printf 'publish_port: 4506\n'
        return
    fi
    home="$(home_master "$1")"
    set_ports "$home"
    printf 'master: 127.0.0.1\nmaster_port: %s\npublish_port: %s\n' "$m_ret" "$m_pub"
}

# syndic_minion_config NAME: the minion half of syndic NAME's configuration.
syndic_minion_config() {
    cat <<EOF
# Written by scripts/salt-testbed; rewritten on every \`up\`.
id: $1
root_dir: $dir
user: $(id -un)
publish_port: $publish_port
pki_dir: $dir/pki/syndicd-${1#syndic-}
acceptance_wait_time: 1
acceptance_wait_time_max: 2
random_reauth_delay: 0
EOF
}

# node_minion_config NAME: the salt-minion on syndic NAME's host, with the syndic's own
# id and key, attached to the top master: the usual layout, where the top master's
# accepted keys are those of the syndic hosts and '*' through the top master includes
# them as minions (daemon node-j).
node_minion_config() {
    local name="$1"
    cat <<EOF
# Written by scripts/salt-testbed; rewritten on every \`up\`.
id: $name
master: 127.0.0.1
master_port: $ret_port
publish_port: $publish_port
root_dir: $dir
user: $(id -un)
pki_dir: $dir/pki/syndicd-${name#syndic-}
cachedir: $dir/cache/node-${name#syndic-}
sock_dir: $dir/sock/node-${name#syndic-}
pidfile: $run/salt/node-${name#syndic-}.pid
log_file: $log/node-${name#syndic-}.log
log_level_logfile: info
minion_id_caching: False
acceptance_wait_time: 1
acceptance_wait_time_max: 2
random_reauth_delay: 0
recon_default: 200
recon_max: 2000
enable_fqdns_grains: False
enable_gpu_grains: False
mine_enabled: False
grains:
  role: syndic
  testbed: salt-testbed
  testbed_dir: $dir/var/$name
EOF
}

# write_syndic_fix: DIR/pylib/sitecustomize.py, loaded by the salt-syndics only. Salt
# 3008.4's syndic forwards returns with a synchronous request from inside its event loop,
# which blocks the loop until it times out (so nothing reaches the top master), and then
# calls .done() on the string it got back, failing every later forward. The fix sends
# the request asynchronously and hands back the task, as _return_pub_syndic expects.
write_syndic_fix() {
    mkdir -p "$dir/pylib"
    write_if_changed "$dir/pylib/sitecustomize.py" <<'PYEOF'
# Written by scripts/salt-testbed for salt-syndic (see write_syndic_fix there).
try:
    import asyncio

    import salt.minion

    def _send_req_sync(self, load, timeout):
        return asyncio.ensure_future(self._send_req_async(load, timeout))

    salt.minion.Syndic._send_req_sync = _send_req_sync
except Exception:  # not Salt's python, or Salt changed: leave it alone
    pass
PYEOF
}

# share_master_key NAME: multi-master minions keep one master public key, so every
# master of --multi-master uses master-1's key pair (as Salt's multi-master guide says).
share_master_key() {
    [[ "$topology" == multi && "$1" != master-1 ]] || return 0
    local f
    for f in master.pem master.pub; do
        [[ -s "$dir/pki/master-1/$f" ]] || die "master-1 has no $f to share"
        cmp -s "$dir/pki/master-1/$f" "$dir/pki/$1/$f" || cp -p "$dir/pki/master-1/$f" "$dir/pki/$1/$f"
    done
}

# start_syndic NAME: salt-syndic of syndic master NAME (syndic-j), as daemon syndicd-j,
# once its master runs.
start_syndic() {
    local name="$1" daemon="syndicd-${1#syndic-}"
    alive "$daemon" && return 0
    stop_daemon "$daemon" 0
    say "starting salt-syndic of $name"
    spawn "$daemon" env PYTHONPATH="$dir/pylib" "$SALT_VENV/bin/salt-syndic" -c "$dir/$name" -l quiet
    # The syndic host's minion (node-j) shares the syndic's key: it starts only once the
    # syndic has made it, or each would make its own and one would fail to authenticate.
    local key="$dir/pki/$daemon/minion.pub" deadline=$((SECONDS + 60))
    until [[ -s "$key" && -s "${key%.pub}.pem" ]]; do
        alive "$daemon" || die "salt-syndic of $name exited during start-up; see $log/$daemon.log and $log/$daemon.stdout"
        [[ $SECONDS -lt $deadline ]] || die "salt-syndic of $name made no key in 60 s; see $log/$daemon.log"
        sleep 0.2
    done
}

# syndic_ids: the ids of the syndic hosts' own minions (syndic-1,...,syndic-K).
syndic_ids() {
    local j ids=()
    for ((j = 1; j <= k; j++)); do ids+=("syndic-$j"); done
    (IFS=,; echo "${ids[*]}")
}

# minions_of N MASTER: the comma-separated minions of minion-01..NN that MASTER reaches
# (syndic: the minions behind it; multi: all).
minions_of() {
    local n="$1" i ids=()
    for ((i = 1; i <= n; i++)); do
        if [[ "$topology" == multi || "$(home_master "$i")" == "$2" ]]; then
            ids+=("$(minion_id "$i")")
        fi
    done
    (IFS=,; echo "${ids[*]}")
}

# check_topology: the topology of this `up` is the one DIR runs (recorded at the first
# `up`, forgotten at `down`).
check_topology() {
    local want="$topology $k" have=""
    [[ -f "$run/topology" ]] && have="$(<"$run/topology")"
    if [[ -n "$have" && "$have" != "$want" ]]; then
        local name any=""
        for name in "$run"/*.pid; do
            [[ -e "$name" ]] && alive "$(basename "$name" .pid)" && any=1
        done
        [[ -z "$any" ]] || die "DIR $dir runs the topology '$have', not '$want': \`down\` it first"
    fi
    printf '%s\n' "$want" >"$run/topology"
}

# parse_topology [--syndic K | --masters K | --multi-master K]
parse_topology() {
    [[ $# -eq 0 ]] && return 0
    [[ $# -eq 2 ]] || usage
    case "$1" in
        --syndic) topology=syndic ;;
        --masters) topology=masters ;;
        --multi-master) topology=multi ;;
        *) usage ;;
    esac
    [[ "$2" =~ ^[0-9]+$ && "$2" -ge 1 && "$2" -le 9 ]] || die "K must be a number from 1 to 9, got '$2'"
    k="$2"
}

# ping_topology N LIST: every minion answers, asked as the topology is used: the single
# master or the top master (through the syndics) for all, each of --masters for its own,
# each of --multi-master for all of them.
ping_topology() {
    local n="$1" list="$2" name status=0 sub
    case "$topology" in
        single) ping_all "$list" master || return ;;
        syndic) ping_all "$list,$(syndic_ids)" master || return ;;
        *)
            while read -r name; do
                sub="$(minions_of "$n" "$name")"
                [[ -n "$sub" ]] || continue
                ping_all "$sub" "$name" || status=$?
                [[ $status -eq 0 ]] || return $status
            done < <(master_names)
            ;;
    esac
}

# stop-master DIR NAME: SIGKILL master NAME (master, master-k or syndic-k; a syndic
# master's salt-syndic with it). `up` again starts it.
cmd_stop_master() {
    set_dir "${1:-}"
    local name="${2:-}"
    [[ "$name" =~ ^(master|master-[0-9]+|syndic-[0-9]+)$ ]] || die "expected a master like master-2 or syndic-1, got '$name'"
    mkdir -p "$run"
    exec 9>"$run/lock"
    flock 9
    [[ "$name" == syndic-* ]] && stop_daemon "syndicd-${name#syndic-}" 0
    stop_daemon "$name" 0
    exec 9>&-
}
