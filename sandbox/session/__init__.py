"""One container and its shell (``Session``), and the manager of many.

``profile`` turns a request and the server's configuration into a container spec (limits,
mounts, the shell's user); ``paths`` decides which project directories may be mounted;
``image`` builds the session image; ``session`` and its parts (``state``, ``commands``,
``control``, ``recovery``, ``views``, ``output``, ``read_budget``) run one shell;
``manager`` owns sessions: create, find, destroy, adopt durable ones, collect garbage;
``pool`` keeps warm sessions ready.
"""
