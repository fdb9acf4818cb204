"""The shell inside the container and how we speak to it.

The marker protocol that bounds each command's output and carries its exit code
(``markers``) and its state, fed the shell's bytes and returning events (``tracker``); the
escalation ladder that stops what hangs: SIGINT, SIGTERM, SIGKILL (``ladder``) and the sweep of
what escaped a command's process group (``sweep``); the one-exec look inside a session
(``probe``) and at its foreground job (``foreground``), and durable shells kept in tmux on a
named volume (``durable``). Pure protocol and scripts: the session drives them through a
backend.
"""
