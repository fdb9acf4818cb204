"""Session containers made and unmade: a cold session built from a blueprint (its image, its
durable volume, its egress registration, its container, its shell), and everything of one
removed again.
"""

from __future__ import annotations

import logging
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

from sandbox.backends.base import Backend
from sandbox.config import LABEL_MANAGED, LABEL_OWNER, LABEL_SESSION, SandboxConfig
from sandbox.egress.service import Egress
from sandbox.errors import SandboxError
from sandbox.session.image import ensure_session_image
from sandbox.session.profile import Blueprint, container_spec, session_spec, volume_name
from sandbox.session.session import Session, SessionSpec
from sandbox.session.waits import Waits

log = logging.getLogger(__name__)


class SessionFactory:
    """Builds sessions for one server (``instance_id``) and removes what they leave."""

    def __init__(
        self,
        config: SandboxConfig,
        backend: Backend,
        instance_id: str,
        egress: Egress,
        on_build_line: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.backend = backend
        self.instance_id = instance_id
        self.egress = egress
        self.waits = Waits()  # shared by the sessions: a waited-on one comes before floods
        self._on_build_line = on_build_line

    def build(self, bp: Blueprint, rows: int = 24, cols: int = 80) -> Session:
        """Start a session's container and shell (cold); clean up everything on failure."""
        ensure_session_image(self.backend, bp.image, self._on_build_line)
        sid = secrets.token_hex(6)
        spec = session_spec(bp, sid, rows, cols, self.config.owner)
        if spec.egress is not None:
            self.egress.register(sid, spec.egress_secret, spec.egress)
        if spec.durable:
            self.backend.create_volume(volume_name(sid), self._volume_labels(sid))
        try:
            cid = self.backend.create(container_spec(self.config, self.instance_id, spec))
        except BaseException:
            if spec.durable:
                self.remove_volume(sid)
            self.egress.forget(sid)
            raise
        session = self.wrap(spec, cid)
        try:
            session.open_shell()
        except BaseException:
            self.discard(session)
            raise
        return session

    def discard(self, session: Session) -> None:
        """Remove a session that was never (or is no longer) registered."""
        session.close()
        self.remove_container(session.container_id)
        self.egress.forget(session.id)
        if session.spec.durable:
            self.remove_volume(session.id)
        shutil.rmtree(self.session_dir(session.id), ignore_errors=True)

    def wrap(self, spec: SessionSpec, container_id: str) -> Session:
        return Session(
            spec,
            backend=self.backend,
            container_id=container_id,
            log_path=self.session_dir(spec.session_id) / "raw.log",
            log_max_bytes=self.config.log_max_bytes,
            execute_max_bytes=self.config.execute_max_bytes,
            unattended_rate=self.config.unattended_rate_kib * 1024,
            record=self.config.record,
            waits=self.waits,
        )

    def _volume_labels(self, session_id: str) -> dict[str, str]:
        return {
            LABEL_MANAGED: "true",
            LABEL_SESSION: session_id,
            LABEL_OWNER: self.config.owner,
        }

    def remove_volume(self, session_id: str) -> None:
        try:
            self.backend.remove_volume(volume_name(session_id))
        except SandboxError as exc:
            log.warning("could not remove the volume of session %s: %s", session_id, exc)

    def session_dir(self, session_id: str) -> Path:
        return self.config.state_dir / "sessions" / session_id

    def remove_container(self, container_id: str) -> None:
        try:
            self.backend.remove(container_id)
        except SandboxError as exc:
            log.warning("could not remove container %s: %s", container_id[:12], exc)
