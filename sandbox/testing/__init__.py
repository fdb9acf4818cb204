"""A sandbox server for tests: a testcontainers module and a pytest plugin (see docs/CI.md).

``SandboxServerContainer`` runs the server image (``sandbox-server:latest``, made by
``scripts/server-image.sh``) with the engine socket mounted, a random token, and a projects
directory mounted at the same path as on the host, and waits for ``/healthz``::

    from sandbox.testing import SandboxServerContainer

    with SandboxServerContainer() as server:
        project = server.make_project()
        (project / "hello.py").write_text("print('hi')")
        result = server.call(
            "execute", {"project_path": str(project), "command": "python3 hello.py"}
        )
        assert result["output"] == "hi\\n"

    async def main(server: SandboxServerContainer) -> None:  # any MCP client: url + token
        async with server.client() as client:  # the SDK's client session, bearer token set
            await client.call_tool("session_list", {})

The pytest plugin (entry point ``pytest11``, so it loads wherever sandbox is installed) only
defines fixtures, which do nothing until a test asks for them:

* ``sandbox_server`` (session scope): one ``SandboxServerContainer`` for the run;
* ``sandbox_session``: a ``SandboxSession`` on a fresh project directory under the server's
  projects directory, destroyed (and the directory removed) afterwards.

Settings, from the environment: ``SANDBOX_SERVER_IMAGE`` (the image), ``SANDBOX_PROJECTS``
(a host directory for the projects; default a new temporary one), ``SANDBOX_DOCKER_GID`` (the
engine socket's group, when it cannot be found out), ``SANDBOX_TESTING_OWNER`` (the
``sandbox.owner`` label of the server and its sessions; default random. It must be unique to
the run: cleanup removes every session that carries it).

Ryuk: testcontainers starts its reaper container (``testcontainers/ryuk``) unless
``TESTCONTAINERS_RYUK_DISABLED`` is true, and that image cannot be pulled where no registry is
reachable. ``SandboxServerContainer`` therefore sets ``TESTCONTAINERS_RYUK_DISABLED=true`` when
the variable is unset (when it is created, not when this module is imported, so other
testcontainers users in the same run keep their default unless they start later). Cleanup does
not need the reaper: ``stop()`` (the ``with`` block, the fixture) stops the server with SIGTERM
so it destroys its sessions, removes what is left with its owner label, then removes the
container. Set ``TESTCONTAINERS_RYUK_DISABLED=false`` to have Ryuk as well, for runs that are
killed before they can clean up.
"""

from __future__ import annotations

from sandbox.testing.plugin import SandboxSession, sandbox_server, sandbox_session
from sandbox.testing.server import (
    DEFAULT_SERVER_IMAGE,
    SandboxServerContainer,
    SandboxToolError,
    disable_ryuk_unless_set,
)

__all__ = [
    "DEFAULT_SERVER_IMAGE",
    "SandboxServerContainer",
    "SandboxSession",
    "SandboxToolError",
    "disable_ryuk_unless_set",
    "sandbox_server",
    "sandbox_session",
]
