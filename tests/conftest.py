"""Shared fixtures: temporary projects a uid-1000 shell can use."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# A base directory every project of this run lives under (pytest's tmp_path is mode 0700 and
# its parents are not readable by the sandbox user).
_BASE = Path(tempfile.gettempdir()) / f"sandbox-tests-{os.getpid()}"


def make_project(name: str = "proj", owner: tuple[int, int] | None = (1000, 1000)) -> Path:
    _BASE.mkdir(mode=0o755, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=_BASE))
    path.chmod(0o755)
    if owner is not None and os.geteuid() == 0:
        os.chown(path, *owner)
    return path


@pytest.fixture
def project() -> Iterator[Path]:
    path = make_project()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def allowed_root() -> Iterator[Path]:
    _BASE.mkdir(mode=0o755, exist_ok=True)
    yield _BASE
    shutil.rmtree(_BASE, ignore_errors=True)
