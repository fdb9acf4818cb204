"""The escalation ladder against a scripted target: which rungs it climbs, when it resets the
container, when it replaces only the shell, and that the ``signal`` tool's job target stops
at the rung that worked. No engine, no sleeping: the target says what each step sees."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from sandbox.errors import EngineError
from sandbox.shell.ladder import JobTarget, escalate, rungs

JOB = 42


@dataclass
class Scripted:
    """A session whose job ends after ``ends_after`` of the signals (^C counts), or never."""

    ends_after: int | None = None
    ignores_markers: bool = False  # nothing in front, but the end marker never comes
    blind: bool = False  # no control exec can start (a full pids limit)
    unsignalable: bool = False
    respawns: bool = True
    calls: list[str] = field(default_factory=list)
    received: int = 0
    ended: bool = False

    def _hit(self) -> None:
        self.received += 1
        if self.ends_after is not None and self.received >= self.ends_after:
            self.ended = True

    def interrupt(self) -> None:
        self.calls.append("^C")
        self._hit()

    def foreground_pgid(self) -> int | None:
        if self.blind:
            raise EngineError("exec failed: resource temporarily unavailable")
        return None if self.ended or self.ignores_markers else JOB

    def signal_group(self, pgid: int, signal: str) -> bool:
        assert pgid == JOB
        if self.unsignalable:
            return False
        self.calls.append(signal)
        self._hit()
        return True

    def wait_done(self, grace_s: float) -> bool:
        return self.ended

    def resync(self) -> None:
        self.calls.append("resync")

    def respawn(self) -> bool:
        self.calls.append("respawn")
        return self.respawns

    def reset(self) -> None:
        self.calls.append("reset")
        self.ended = True


def test_the_rungs_from_any_start() -> None:
    assert rungs("INT") == ["INT", "TERM", "KILL"]
    assert rungs("TERM") == ["TERM", "KILL"]
    assert rungs("KILL") == ["KILL"]
    assert rungs("HUP") == ["HUP", "INT", "TERM", "KILL"]


@pytest.mark.parametrize(
    ("ends_after", "sent"),
    [(1, ["SIGINT"]), (2, ["SIGINT", "SIGTERM"]), (3, ["SIGINT", "SIGTERM", "SIGKILL"])],
)
def test_it_climbs_until_the_job_ends_and_no_further(ends_after: int, sent: list[str]) -> None:
    target = Scripted(ends_after=ends_after)
    result = escalate(target, grace_s=0)
    assert result.stopped
    assert not result.reset
    assert not result.shell_restarted
    assert result.signals_sent == sent
    assert "reset" not in target.calls


def test_a_job_that_survives_kill_costs_the_container() -> None:
    target = Scripted(ends_after=None)
    result = escalate(target, grace_s=0)
    assert result.signals_sent == ["SIGINT", "SIGTERM", "SIGKILL"]
    assert result.reset
    assert result.stopped
    assert target.calls[-1] == "reset"


def test_when_it_cannot_look_inside_it_resets_at_once() -> None:
    target = Scripted(blind=True)
    result = escalate(target, grace_s=0)
    assert result.signals_sent == ["SIGINT"]  # ^C needs no exec
    assert result.reset
    assert target.calls == ["^C", "reset"]


def test_when_it_cannot_signal_it_resets() -> None:
    result = escalate(Scripted(unsignalable=True), grace_s=0)
    assert result.reset
    assert result.signals_sent == ["SIGINT"]


def test_an_idle_shell_that_lost_its_markers_is_replaced_not_the_container() -> None:
    target = Scripted(ignores_markers=True)
    result = escalate(target, grace_s=0)
    assert result.shell_restarted
    assert result.stopped
    assert not result.reset
    assert target.calls == ["^C", "resync", "respawn"]


def test_a_shell_that_cannot_be_replaced_costs_the_container() -> None:
    target = Scripted(ignores_markers=True, respawns=False)
    result = escalate(target, grace_s=0)
    assert result.reset
    assert target.calls[-1] == "reset"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize(("ends_after", "sent"), [(1, ["SIGINT"]), (2, ["SIGINT", "SIGTERM"])])
def test_the_signal_tools_job_target_stops_at_the_rung_that_worked(
    ends_after: int, sent: list[str]
) -> None:
    session = Scripted(ends_after=ends_after)
    clock = Clock()
    job = JobTarget(session, JOB, clock=clock, sleep=clock.sleep)
    result = escalate(job, grace_s=1.0, use_tty=False, last_resort=False)
    assert result.stopped
    assert not result.reset
    assert result.signals_sent == sent
    assert "resync" not in session.calls
    assert "respawn" not in session.calls


def test_the_signal_tool_does_not_reset_for_a_job_that_outlives_kill() -> None:
    session = Scripted(ends_after=None)
    clock = Clock()
    job = JobTarget(session, JOB, clock=clock, sleep=clock.sleep)
    result = escalate(job, grace_s=1.0, use_tty=False, last_resort=False)
    assert result.signals_sent == ["SIGINT", "SIGTERM", "SIGKILL"]
    assert not result.stopped
    assert not result.reset
    assert clock.now == pytest.approx(3.0, abs=0.2)  # a grace per rung, on the fake clock
