# Saltpeter's salt bridge: one long-lived Python process that publishes Salt jobs with
# Salt's own LocalClient, so a firing costs a publish (milliseconds of CPU) instead of a
# `salt` command line process (half a second of CPU to start Python and import Salt).
#
# Started by the daemon's blocking process with the interpreter of `salt_bin`:
#     python3 bridge.py MASTER_CONFIG_FILE WORKERS
# Requests on stdin, one JSON object a line:
#     {"id": N, "tgt": "...", "tgt_type": "list", "fun": "test.ping",
#      "arg": [...], "kwarg": {...}, "timeout": T, "returns": true}
# With "returns": false the job is only published (nobody listens for its returns) and
# each minion it went to is answered {"MINION": "published"} at once.
# Answers on stdout, one JSON object a line, in any order across requests:
#     {"id": N, "line": {"MINION": VALUE}}   one per minion, as `salt --out=json` prints
#     {"id": N, "line": "No minions matched the target."}
#     {"id": N, "done": true}                 after the last line of request N
#     {"id": N, "error": "..."}               the request failed as a whole
#     {"ready": true, "salt": "VERSION"}      once, first
# A minion the master expected that did not return within the timeout (after Salt's own
# find_job checks) gets the value "Minion did not return. [No response]", as the CLI
# prints it. Nothing secret passes through here. EOF on stdin ends the process.

import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

_out_lock = threading.Lock()
# The answers go to the real stdout only; whatever Salt prints itself goes to stderr.
_answers = sys.stdout
sys.stdout = sys.stderr


def emit(obj):
    text = json.dumps(obj, default=str)
    with _out_lock:
        _answers.write(text + "\n")
        _answers.flush()


def main():
    config_file = sys.argv[1]
    workers = max(1, int(sys.argv[2]))
    import salt.client
    import salt.config
    import salt.version

    opts = salt.config.client_config(config_file)
    local = threading.local()

    def client():
        if getattr(local, "client", None) is None:
            local.client = salt.client.LocalClient(mopts=opts)
        return local.client

    def match(req):
        # The master's own match of a target (accepted keys, grains and pillar caches):
        # no publish, no minion involved.
        rid = req.get("id")
        try:
            import os
            import salt.utils.minions

            if opts.get("order_masters"):
                # A top master of syndics knows only the syndics' keys: the minions
                # behind them answer a ping, forwarded by their syndic.
                raise LookupError("order_masters: minions behind syndics are not in this master's data")
            keys = os.path.join(opts["pki_dir"], "minions")
            if not os.access(keys, os.R_OK | os.X_OK):
                raise PermissionError("cannot read the accepted keys in %s" % keys)
            found = salt.utils.minions.CkMinions(opts).check_minions(
                req["tgt"], req.get("tgt_type") or "glob"
            )
            minions = list(found.get("minions") or [])
            missing = list(found.get("missing") or [])
            if not minions:
                # Only the master says for sure that nothing matches (its answer to a
                # publish that matches nothing is immediate).
                raise LookupError("no minion matched locally")
            sys.stderr.write(
                "match tgt_type=%s minions=%d\n" % (req.get("tgt_type"), len(minions))
            )
            sys.stderr.flush()
            if not minions and not missing:
                emit({"id": rid, "line": "No minions matched the target."})
            for minion in minions:
                emit({"id": rid, "line": {minion: True}})
            for minion in missing:
                emit({"id": rid, "line": {minion: "Minion did not return. [No response]"}})
            emit({"id": rid, "done": True})
        except Exception as exc:
            # The master's data may not be readable by this user (its pki and cache
            # directories are root's by default): ask the minions instead.
            sys.stderr.write("match failed (%s: %s); pinging instead\n" % (type(exc).__name__, exc))
            sys.stderr.flush()
            req = dict(req, op="publish", fun="test.ping", arg=[], kwarg={})
            publish(req)

    def run(req):
        if req.get("op") == "match":
            return match(req)
        return publish(req)

    def publish(req):
        rid = req.get("id")
        try:
            c = client()
            timeout = int(req.get("timeout") or 10)
            tgt_type = req.get("tgt_type") or "glob"
            if req.get("returns") is False:
                return publish_only(c, req, rid, timeout, tgt_type)
            # As LocalClient.cmd_iter does: listen before publishing (no return is
            # missed), stop listening afterwards (no events pile up between requests).
            was_listening = c.event.cpub
            try:
                pub, expected = run_job(c, req, timeout, tgt_type, listen=True)
                missing = list((pub or {}).get("missing") or [])
                if not pub or not pub.get("jid") or not expected:
                    if missing:
                        for minion in missing:
                            emit({"id": rid, "line": {minion: "Minion did not return. [No response]"}})
                    else:
                        emit({"id": rid, "line": "No minions matched the target."})
                    emit({"id": rid, "done": True})
                    return
                seen = set()
                for ret in c.get_iter_returns(
                    pub["jid"], expected, timeout=timeout, tgt=req["tgt"], tgt_type=tgt_type
                ):
                    if not ret:
                        continue
                    for minion, data in ret.items():
                        # `{"failed": True}` marks a minion Salt gave up on, or one named
                        # in a list that has no key: reported below as not returned,
                        # like the CLI does.
                        if isinstance(data, dict) and data.get("failed") and "ret" not in data:
                            if minion not in expected and minion not in missing:
                                missing.append(minion)
                            continue
                        if minion in seen or not isinstance(data, dict) or "ret" not in data:
                            continue
                        seen.add(minion)
                        emit({"id": rid, "line": {minion: data.get("ret")}})
            finally:
                if not was_listening:
                    c.event.close_pub()
            for minion in expected + missing:
                if minion not in seen:
                    emit({"id": rid, "line": {minion: "Minion did not return. [No response]"}})
            emit({"id": rid, "done": True})
        except Exception as exc:  # one request fails, the bridge goes on
            emit({"id": rid, "error": "%s: %s" % (type(exc).__name__, exc)})

    def run_job(c, req, timeout, tgt_type, listen):
        # The publish, and one line for it in the bridge's log (its stderr).
        pub = c.run_job(
            req["tgt"],
            req["fun"],
            arg=req.get("arg") or [],
            tgt_type=tgt_type,
            timeout=timeout,
            kwarg=req.get("kwarg") or {},
            listen=listen,
        )
        expected = list((pub or {}).get("minions") or [])
        if opts.get("order_masters") and tgt_type == "list" and (pub or {}).get("jid"):
            # A top master of syndics publishes whatever it matched itself (order_masters)
            # and expects only the minions it holds keys for; the listed ones behind its
            # syndics got the publish too, through them.
            listed = req["tgt"] if isinstance(req["tgt"], list) else str(req["tgt"]).split(",")
            expected += [m for m in listed if m and m not in expected]
        sys.stderr.write(
            "publish jid=%s fun=%s tgt_type=%s minions=%d%s\n"
            % (
                (pub or {}).get("jid") or "-",
                req["fun"],
                tgt_type,
                len(expected),
                "" if listen else " returns=no",
            )
        )
        sys.stderr.flush()
        return pub, expected

    def publish_only(c, req, rid, timeout, tgt_type):
        # No event subscription, no find_job polling: the publish is the whole cost.
        pub, expected = run_job(c, req, timeout, tgt_type, listen=False)
        missing = list((pub or {}).get("missing") or [])
        if not expected and not missing:
            emit({"id": rid, "line": "No minions matched the target."})
        for minion in expected:
            if minion not in missing:
                emit({"id": rid, "line": {minion: "published"}})
        for minion in missing:
            emit({"id": rid, "line": {minion: "Minion did not return. [No response]"}})
        emit({"id": rid, "done": True})

    pool = ThreadPoolExecutor(max_workers=workers)
    emit({"ready": True, "salt": salt.version.__version__})
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
        except ValueError as exc:
            emit({"id": None, "error": "bad request: %s" % exc})
            continue
        pool.submit(run, req)
    pool.shutdown(wait=False, cancel_futures=True)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
    except Exception as exc:
        emit({"fatal": "%s: %s" % (type(exc).__name__, exc)})
        sys.exit(1)
