"""The unattended read budget: a token bucket of bytes, and a session that honours it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sandbox.backends.fake import FakeBackend
from sandbox.config import SandboxConfig
from sandbox.errors import InvalidArgumentError
from sandbox.models import CreateRequest
from sandbox.session import read_pacing as pacing_module
from sandbox.session.manager import SessionManager
from sandbox.session.read_budget import ReadBudget
from sandbox.session.read_pacing import ReadPacing
from sandbox.session.session import Session
from sandbox.session.waits import Waits

KIB = 1024


class FakeClock:
    """A monotonic clock that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_passes_then_reads_pause_for_what_they_took() -> None:
    budget = ReadBudget(rate=100 * KIB, burst=1024 * KIB, clock=FakeClock())
    assert budget.spend(1000 * KIB) == 0.0
    pause = budget.spend(74 * KIB)  # 50 KiB over the burst: half a second at 100 KiB/s
    assert pause == pytest.approx(0.5)


def test_refill_starts_a_full_burst_and_zero_rate_never_pauses() -> None:
    budget = ReadBudget(rate=100 * KIB, burst=64 * KIB, clock=FakeClock())
    assert budget.spend(128 * KIB) > 0
    budget.refill()
    assert budget.spend(64 * KIB) == 0.0
    unlimited = ReadBudget(rate=0, burst=0)
    assert all(unlimited.spend(1 << 30) == 0.0 for _ in range(3))


def test_the_budget_refills_with_time_but_never_past_the_burst() -> None:
    clock = FakeClock()
    budget = ReadBudget(rate=1000 * KIB, burst=100 * KIB, clock=clock)
    budget.spend(100 * KIB)
    clock.now += 0.05  # 50 KiB back
    assert budget.spend(40 * KIB) == 0.0
    assert budget.spend(20 * KIB) == pytest.approx(0.01)  # 10 KiB short: 10 ms at 1 MiB/s
    clock.now += 3600  # an hour idle refills the burst, no more
    assert budget.spend(100 * KIB) == 0.0
    assert budget.spend(1 * KIB) == pytest.approx(1 / 1000)


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[SessionManager]:
    (tmp_path / "proj").mkdir()
    config = SandboxConfig(
        state_dir=tmp_path / "state", allowed_roots=(tmp_path,), unattended_rate_kib=64
    )
    mgr = SessionManager(config, FakeBackend())
    yield mgr
    mgr.close()


def test_an_unattended_flood_waits_on_its_writes_and_loses_nothing(
    manager: SessionManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    burst = 64 * KIB
    monkeypatch.setattr(pacing_module, "UNATTENDED_BURST", burst)
    created = manager.create(CreateRequest(project_path=str(tmp_path / "proj")))
    session = manager.get(created.session_id)
    total = 4 * 1024 * KIB
    start = session.log.size
    started = session.execute(
        f"sleep 1; head -c {total} /dev/zero | tr '\\0' Q; echo; echo flood-$((6*7))",
        background=True,
        timeout_s=0.5,
    )
    assert started.still_running
    time.sleep(2.5)  # the flood starts after 1 s; nobody waits: a burst, then 64 KiB/s
    unattended = session.log.size - start
    # about 64 + 96 KiB and what the pty held; unthrottled, the reader takes a MiB and more
    assert burst <= unattended < 512 * KIB
    read = session.read(wait_for="flood-42", timeout_ms=20_000)  # attending: full speed again
    assert read.matched
    flood = session.log.read(start, session.log.size)
    assert total <= flood.count(b"Q") <= total + 4  # the typed command line has one Q


def test_while_another_session_is_waited_on_a_flood_drains_slower_and_loses_nothing(
    manager: SessionManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    burst = 64 * KIB
    monkeypatch.setattr(pacing_module, "UNATTENDED_BURST", burst)
    project = str(tmp_path / "proj")
    waited = manager.get(manager.create(CreateRequest(project_path=project)).session_id)
    flood = manager.get(manager.create(CreateRequest(project_path=project)).session_id)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(waited.execute, "sleep 3; echo waited", timeout_s=20)
        start = flood.log.size
        started = flood.execute(
            f"sleep 1; head -c {4 * 1024 * KIB} /dev/zero | tr '\\0' Q; echo flood-$((6*7))",
            background=True,
            timeout_s=0.5,
        )
        assert started.still_running
        time.sleep(2.0)  # the flood runs 1.5 s while the other execute waits
        unattended = flood.log.size - start
        assert not waiting.done()
        # an eighth of the burst and of 64 KiB/s: about 8 + 12 KiB, where alone it takes the
        # burst and more (the test above)
        assert unattended < burst * 3 // 4
        assert waiting.result().output == "waited\n"
    read = flood.read(wait_for="flood-42", timeout_ms=20_000)
    assert read.matched
    assert flood.log.read(start, flood.log.size).count(b"Q") >= 4 * 1024 * KIB


def test_a_background_execute_is_paced_too_while_another_session_is_waited_on(
    manager: SessionManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    burst = 64 * KIB
    monkeypatch.setattr(pacing_module, "UNATTENDED_BURST", burst)
    project = str(tmp_path / "proj")
    waited = manager.get(manager.create(CreateRequest(project_path=project)).session_id)
    flood = manager.get(manager.create(CreateRequest(project_path=project)).session_id)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(waited.execute, "sleep 3; echo waited", timeout_s=20)
        time.sleep(0.3)
        start = flood.log.size
        started = flood.execute("yes", background=True, timeout_s=2.0)
        # it asked not to be waited for: taken like unattended output, an eighth of the rate
        assert started.still_running
        assert flood.log.size - start < burst * 3 // 4
        assert not waiting.done()
        assert waiting.result().output == "waited\n"
    flood.signal("INT")


def test_waits_count_what_is_in_progress() -> None:
    waits = Waits()
    assert not waits.any
    with waits.waiting(), waits.waiting():
        assert waits.any
    assert not waits.any


@pytest.fixture
def pausing(manager: SessionManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Session:
    """A session whose reader, unattended, pauses an hour after each short read."""
    monkeypatch.setattr(pacing_module, "UNATTENDED_PAUSE_S", 3600.0)
    created = manager.create(CreateRequest(project_path=str(tmp_path / "proj")))
    return manager.get(created.session_id)


def test_an_execute_ends_the_readers_pause_at_once(pausing: Session) -> None:
    # Each execute's prompt arrives after its end marker, when nobody waits: the reader
    # pauses. The next execute must wake it: a pause waited out would outlast its timeout.
    session = pausing
    for i in range(3):
        result = session.execute(f"echo {i}", timeout_s=20)
        assert (result.output, result.exit_code, result.timed_out) == (f"{i}\n", 0, False)


def test_the_rate_comes_from_the_environment_and_a_bad_one_is_named(tmp_path: Path) -> None:
    base = {"SANDBOX_STATE_DIR": str(tmp_path / "s"), "SANDBOX_ALLOWED_ROOTS": str(tmp_path)}
    config = SandboxConfig.from_env({**base, "SANDBOX_UNATTENDED_RATE_KIB": "64"})
    assert config.unattended_rate_kib == 64
    assert SandboxConfig.from_env(base).unattended_rate_kib == 256
    with pytest.raises(InvalidArgumentError) as bad:
        SandboxConfig.from_env({**base, "SANDBOX_UNATTENDED_RATE_KIB": "-1"})
    assert "SANDBOX_UNATTENDED_RATE_KIB" in bad.value.message
    assert bad.value.hint


def test_output_held_back_is_not_a_quiet_stretch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A background execute of a flood while another session is waited on: its reader pauses
    seconds between reads (an eighth of 16 KiB/s), and that is not the program going quiet,
    so the execute runs to its timeout instead of returning ``idle`` after 1 s."""
    monkeypatch.setattr(pacing_module, "UNATTENDED_BURST", 16 * KIB)
    (tmp_path / "proj").mkdir()
    config = SandboxConfig(
        state_dir=tmp_path / "state", allowed_roots=(tmp_path,), unattended_rate_kib=16
    )
    manager = SessionManager(config, FakeBackend())
    try:
        project = str(tmp_path / "proj")
        waited = manager.get(manager.create(CreateRequest(project_path=project)).session_id)
        flood = manager.get(manager.create(CreateRequest(project_path=project)).session_id)
        assert flood.execute("true", timeout_s=20).exit_code == 0  # its prompt is up
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(waited.execute, "sleep 4; echo waited", timeout_s=20)
            time.sleep(0.3)
            started = flood.execute("yes", background=True, timeout_s=2.5)
            assert started.still_running
            assert not started.idle
            assert started.duration_ms >= 2500
            assert waiting.result().output == "waited\n"
        flood.signal("INT")
    finally:
        manager.close()


class _RacingAttention(threading.Event):
    """The reader's attention event, with an attend landing in the race window each time the
    reader clears it: after its read returned, just before it clears the event to pause."""

    def __init__(self, pacing: ReadPacing) -> None:
        super().__init__()
        self._pacing = pacing
        self.raced = 0

    def clear(self) -> None:
        self.raced += 1
        self._pacing.attend()
        super().clear()


def test_an_attend_in_the_readers_race_window_is_not_lost(pausing: Session) -> None:
    # Unattended, the reader pauses after every short read until someone attends; an attend
    # that the pause's clear would erase must still end that pause, or the output waits
    # unread (here: an hour) until someone reads.
    session = pausing
    assert session.execute("true", timeout_s=20).exit_code == 0
    pacing = session.link.pacing
    paused_on = pacing._attention
    racing = _RacingAttention(pacing)
    pacing._attention = racing
    paused_on.set()  # a reader pausing on the old event goes on, to pause on this one
    start = session.log.size
    # typed straight into the channel: no attend but the raced ones; the echo first, the
    # line half a second later
    session.link.require_alive().write(b"sleep 0.5; echo late-$((6*7))\r")
    deadline = time.monotonic() + 20
    while b"late-42" not in session.log.read(start, session.log.size):  # nobody attends
        assert time.monotonic() < deadline, "the output stayed unread: the wake-up was lost"
        time.sleep(0.05)
    assert racing.raced


def test_who_attends_decides_full_speed() -> None:
    waits, turn = Waits(), threading.Lock()
    pacing = ReadPacing(rate=64 * KIB, waits=waits, turn=turn)
    assert not pacing.full_speed()  # nobody
    with turn:  # an execute runs
        assert pacing.full_speed()
        pacing.background_turn = True  # ... in the background: still full speed alone
        assert pacing.full_speed()
        with waits.waiting():  # while someone waits on another session it is paced
            assert not pacing.full_speed()
            with pacing.watching():  # unless someone reads this one
                assert pacing.full_speed()
                assert pacing.wakes_on_every_chunk


def test_output_held_back_is_output_still_arriving() -> None:
    pacing = ReadPacing(rate=64 * KIB, waits=Waits(), turn=threading.Lock())
    long_ago = time.monotonic() - 60
    assert pacing.quiet_since(long_ago) == long_ago
    pacing.holding_back = True
    assert pacing.quiet_since(long_ago) >= time.monotonic() - 1
