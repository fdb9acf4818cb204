#!/bin/sh
# Squid in the foreground. Its logs (the access log: one line a decision, prefixed "egress")
# reach the container's stdout through a FIFO: squid writes them as its own user, who cannot
# open the engine's pipe.
# The policy lives in /run (a tmpfs): empty until the server writes it, so a fresh or restarted
# proxy refuses everything until then.
set -eu
mkdir -p /run/sandbox-egress /run/squid /var/spool/squid /var/log/squid
[ -f /run/sandbox-egress/policy.json ] || echo '{"sessions": {}}' > /run/sandbox-egress/policy.json
chmod 0644 /run/sandbox-egress/policy.json
rm -f /run/squid/access.fifo && mkfifo -m 0600 /run/squid/access.fifo
chown -R proxy:proxy /run/squid /var/spool/squid /var/log/squid
cat /run/squid/access.fifo &
exec squid -N -f /etc/squid/squid.conf
