"""Squid helpers of the sandbox egress proxy (stdlib only; runs inside the proxy image).

``helper.py auth``: squid's basic-auth protocol, one ``user password`` line in, ``OK`` or
``ERR`` out: the user is a session id and the password its secret. ``helper.py acl``: squid's
external ACL protocol, ``session host port`` (then squid's ``-``) in, ``OK`` or ``ERR message=...`` out, from the
session's allow-list. ``helper.py put JSON``: replace the policy (the server calls it).

The policy is ``{"sessions": {id: {"secret": s, "allow": [pattern...], "match": regex}}}``,
written by the server: the patterns are compiled there (``sandbox.egress.policy``), so this
file only applies the regex to ``host:port``. It is re-read whenever it changes, so an
allow-list changes without restarting anything; a missing or broken file refuses everything.
"""

import hmac
import json
import os
import re
import sys
import urllib.parse

POLICY = "/run/sandbox-egress/policy.json"


class Policy:
    def __init__(self) -> None:
        self.stamp = None
        self.sessions = {}

    def current(self) -> dict:
        try:
            stamp = os.stat(POLICY).st_mtime_ns
        except OSError:
            return {}
        if stamp != self.stamp:
            try:
                with open(POLICY, encoding="utf-8") as handle:
                    sessions = json.load(handle)["sessions"]
                for entry in sessions.values():
                    entry["rx"] = re.compile(entry["match"])
            except (OSError, ValueError, KeyError, TypeError, re.error):
                sessions = {}
            self.stamp, self.sessions = stamp, sessions
        return self.sessions


def auth(policy: Policy, fields: list) -> str:
    if len(fields) != 2:
        return "ERR"
    entry = policy.current().get(fields[0])
    if entry is None or not hmac.compare_digest(entry["secret"], fields[1]):
        return "ERR"
    return "OK"


def acl(policy: Policy, fields: list) -> str:
    if len(fields) < 3:  # squid 5 appends the ACL's arguments ("-": none)
        return "ERR"
    session, host, port = fields[:3]
    entry = policy.current().get(session)
    if entry is None:
        return 'ERR message="this session has no egress allow-list"'
    if entry["rx"].fullmatch(f"{host.lower().rstrip('.')}:{port}"):
        return "OK"
    allowed = ", ".join(entry["allow"]) or "nothing"
    return f'ERR message="allowed for this session: {allowed}"'


def serve(mode: str) -> None:
    policy = Policy()
    check = auth if mode == "auth" else acl
    for line in sys.stdin:
        fields = [urllib.parse.unquote(f) for f in line.split()]
        sys.stdout.write(check(policy, fields) + "\n")
        sys.stdout.flush()


def put(text: str) -> None:
    json.loads(text)
    tmp = POLICY + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, POLICY)


if __name__ == "__main__":
    if sys.argv[1:2] == ["put"] and len(sys.argv) == 3:
        put(sys.argv[2])
    elif sys.argv[1:] in (["auth"], ["acl"]):
        serve(sys.argv[1])
    else:
        sys.exit("usage: helper.py auth | acl | put JSON")
