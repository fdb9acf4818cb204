"""The warm pool: sessions started ahead of time and handed out on create (``SANDBOX_WARM_POOL``).

A container's bind mount, user and limits are fixed when it is created, so a warm session
can only stand in for a request that would have built exactly the same container: the pool is
keyed by the ``Blueprint`` of a request (image, security profile, project, user, environment,
...; the terminal size is not part of it: a taken session is resized). A warm session is
complete: its container runs, its shell has answered, its id and labels are its own, so
handing it out is a dictionary lookup. It is never shared: taken once, it leaves the pool.

A blueprint is pooled once it has been asked for; the pool then keeps ``size`` sessions of the
most recently wanted ``kinds`` blueprints, refilled by one background thread, and destroys
what falls out. Pooled containers are managed containers of this server like any other:
labelled, collected by ``gc`` if the server dies, destroyed when it closes.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
from collections.abc import Callable

from sandbox.errors import SandboxError
from sandbox.session.profile import Blueprint
from sandbox.session.session import Session

log = logging.getLogger(__name__)


class WarmPool:
    """Keeps ``size`` ready sessions per recently wanted blueprint (at most ``kinds`` of them)."""

    def __init__(
        self,
        size: int,
        *,
        build: Callable[[Blueprint], Session],
        discard: Callable[[Session], None],
        kinds: int = 4,
    ) -> None:
        self.size = size
        self._build = build
        self._discard = discard
        self._kinds = kinds
        self._ready: dict[Blueprint, collections.deque[Session]] = {}
        self._wanted: collections.OrderedDict[Blueprint, None] = collections.OrderedDict()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._fill, daemon=True, name="sandbox-pool")
        self._thread.start()

    def take(self, blueprint: Blueprint) -> Session | None:
        """A ready session for ``blueprint``, or None (build one cold)."""
        while True:
            with self._cond:
                queue = self._ready.get(blueprint)
                session = queue.popleft() if queue else None
                self._cond.notify_all()  # refill
            if session is None:
                return None
            if session.status == "running":
                return session
            self._discard(session)  # died while it waited (killed from outside, lifetime)

    def want(self, blueprint: Blueprint) -> None:
        """Keep sessions of ``blueprint`` ready from now on (most recent first)."""
        if blueprint.durable or self.size <= 0:
            return
        evicted: list[Session] = []
        with self._cond:
            self._wanted[blueprint] = None
            self._wanted.move_to_end(blueprint, last=False)
            while len(self._wanted) > self._kinds:
                old, _ = self._wanted.popitem()
                evicted += self._ready.pop(old, collections.deque())
            self._cond.notify_all()
        for session in evicted:
            self._discard(session)

    def count(self) -> int:
        with self._cond:
            return sum(len(q) for q in self._ready.values())

    def _next_missing(self) -> Blueprint | None:
        for blueprint in self._wanted:
            if len(self._ready.get(blueprint, ())) < self.size:
                return blueprint
        return None

    def _fill(self) -> None:
        while True:
            with self._cond:
                while not self._closed and self._next_missing() is None:
                    self._cond.wait()
                if self._closed:
                    return
                blueprint = self._next_missing()
            assert blueprint is not None
            try:
                session = self._build(blueprint)
            except SandboxError as exc:
                log.warning("warm pool: could not start a session: %s", exc.message)
                with self._cond:  # do not spin on a broken blueprint
                    self._wanted.pop(blueprint, None)
                continue
            with self._cond:
                if self._closed or blueprint not in self._wanted:
                    keep = False
                else:
                    self._ready.setdefault(blueprint, collections.deque()).append(session)
                    keep = True
            if not keep:
                self._discard(session)

    def close(self) -> None:
        """Destroy every pooled session and stop refilling (idempotent)."""
        with self._cond:
            self._closed = True
            sessions = [s for q in self._ready.values() for s in q]
            self._ready.clear()
            self._wanted.clear()
            self._cond.notify_all()
        self._thread.join(timeout=30)
        for session in sessions:
            with contextlib.suppress(SandboxError):
                self._discard(session)
