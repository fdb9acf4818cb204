#!/bin/sh
# Squid in the foreground, as the unprivileged user the container runs as (no capabilities).
# Its logs (the access log: one line a decision, prefixed "egress") reach the container's
# stdout through a FIFO, since a log path must be a file squid can open.
# The policy files live in /run (a tmpfs): none until the server writes them, so a fresh or
# restarted proxy refuses everything until then.
set -eu
mkdir -p /run/sandbox-egress /run/squid /var/spool/squid
rm -f /run/squid/access.fifo && mkfifo -m 0600 /run/squid/access.fifo
cat /run/squid/access.fifo &
exec squid -N -f /etc/squid/squid.conf
