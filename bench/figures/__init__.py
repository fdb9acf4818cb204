"""The figures, in the order a full run measures them (``--only NAME`` picks one)."""

from __future__ import annotations

from collections.abc import Callable

from bench.context import Context
from bench.figures import (
    create,
    egress,
    execute,
    gvisor,
    interactive,
    mcp_stdio,
    output,
    peers,
    scale,
    screen,
)

FIGURES: dict[str, Callable[[Context], None]] = {
    "execute": execute.run,
    "mcp": mcp_stdio.run,
    "output": output.run,
    "create": create.run,
    "screen": screen.run,
    "interactive": interactive.run,
    "scale": scale.run,
    "gvisor": gvisor.run,
    "egress": egress.run,
}

# only with ``--peers``: it installs the peers on first use
PEERS_FIGURE: Callable[[Context], None] = peers.run
