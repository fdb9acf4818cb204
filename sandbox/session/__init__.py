"""One container and its shell (``Session``), and the manager of many.

``profile`` turns a request and the server's configuration into a container spec (limits,
mounts, the shell's user); ``paths`` decides which project directories may be mounted;
``image`` builds the session image; ``session`` is the facade over one session's parts:
``shell_link`` (the shell's exec and reader thread), ``display`` (what the terminal shows),
``terminal_view`` (send, read, resize), ``process_control`` (signals, the ladder, the probe),
``recovery`` (respawn, reset), ``command_runner`` (execute; with ``output`` and ``notices``),
``spec`` (what it was created with) and ``read_budget``; ``manager`` owns sessions: create,
find, destroy, adopt durable ones, collect garbage, with ``factory`` (build and remove one
session's container) and ``server_locks`` (which servers are alive); ``pool`` keeps warm
sessions ready.
"""
