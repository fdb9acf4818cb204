"""The ``sandbox`` command without an engine: argument parsing, usage errors, help, and the
output filters and doctor logic the commands are built from."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sandbox.cli.check import Check, exit_code
from sandbox.cli.console import PipeCleaner, TerminalFilter, format_age, readable_commands
from sandbox.cli.doctor import run_checks
from sandbox.cli.doctor_limits import judge_limits, parse_cgroup_output
from sandbox.cli.main import COMMANDS, EXAMPLES, build_parser, main
from sandbox.cli.run import command_line as run_line
from sandbox.errors import EngineUnavailableError
from sandbox.shell.markers import command_line, resync_line

# -- usage errors: exit 2, one line on stderr ----------------------------------------------------


def _exit_code(argv: list[str]) -> int | str | None:
    """What the process would exit with (argparse exits by raising SystemExit)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["bogus"],
        ["run"],
        ["run", "--"],
        ["run", "--timeout", "0", "--", "true"],
        ["run", "--timeout", "soon", "--", "true"],
        ["run", "--memory", "8", "--", "true"],
        ["run", "--cpus", "-1", "--", "true"],
        ["run", "--env", "NOEQUALS", "--", "true"],
        ["logs"],
        ["kill"],
        ["attach"],
        ["ls", "--yaml"],
        ["image"],
        ["image", "push"],
        ["gc", "--force"],
    ],
)
def test_bad_arguments_are_usage_errors_with_exit_code_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _exit_code(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip()


def test_usage_error_is_one_line_with_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--timeout", "0", "--", "true"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("sandbox run: usage error:")
    assert "hint: `sandbox run --help`" in err


def test_run_without_a_command_says_how_to_give_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["run", "--project", "."])
    assert exc.value.code == 2
    assert "sandbox run [OPTIONS] -- CMD" in capsys.readouterr().err


# -- parsing -------------------------------------------------------------------------------------


def test_run_keeps_the_command_argv_verbatim_after_double_dash() -> None:
    args = build_parser().parse_args(
        ["run", "--env", "A=1=2", "--memory", "256", "--", "sh", "-c", "echo $A --x"]
    )
    assert args.argv == ["--", "sh", "-c", "echo $A --x"]
    assert args.env == [("A", "1=2")]
    assert args.memory == 256


def test_run_flags_parse_to_their_types() -> None:
    args = build_parser().parse_args(
        [
            "run",
            "--project",
            "/p",
            "--image",
            "img:1",
            "--network",
            "--timeout",
            "2.5",
            "--cpus",
            "1.5",
            "--read-only-project",
            "--debug",
            "--",
            "true",
        ]
    )
    assert (args.project, args.image, args.network, args.timeout) == ("/p", "img:1", True, 2.5)
    assert (args.cpus, args.read_only_project, args.debug) == (1.5, True, True)


def test_debug_is_accepted_before_or_after_the_command() -> None:
    parser = build_parser()
    assert parser.parse_args(["--debug", "ls"]).debug is True
    assert parser.parse_args(["ls", "--debug"]).debug is True
    assert parser.parse_args(["ls"]).debug is False


def test_logs_follow_and_gc_flags() -> None:
    parser = build_parser()
    logs = parser.parse_args(["logs", "abc", "-f"])
    assert (logs.id, logs.follow, logs.raw) == ("abc", True, False)
    gc = parser.parse_args(["gc", "--dry-run", "--all-owners"])
    assert (gc.dry_run, gc.all_owners) == (True, True)


def test_run_command_line_runs_argv_without_shell_expansion_and_no_stdin() -> None:
    assert run_line(["echo", "$HOME", "a b"]) == "echo '$HOME' 'a b' </dev/null"


# -- help ----------------------------------------------------------------------------------------


def test_every_command_has_help_with_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    for name in COMMANDS:
        with pytest.raises(SystemExit) as exc:
            main([name, "--help"])
        assert exc.value.code == 0
        out = capsys.readouterr().out
        assert "example" in out, name
        assert EXAMPLES[name].splitlines()[1].strip() in out, name


def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert f"    {name} " in out


def test_every_option_with_a_default_says_it(capsys: pytest.CaptureFixture[str]) -> None:
    """Each valued option of run/shell/serve names its default (flags and ids have none)."""
    for name in ("run", "shell", "serve"):
        with pytest.raises(SystemExit):
            main([name, "--help"])
        text = capsys.readouterr().out.split("options:")[1].split("example")[0]
        out = " ".join(text.split())  # argparse wraps the help
        options = ["--project", "--image", "--memory", "--cpus"] if name != "serve" else []
        options += ["--timeout"] if name == "run" else []
        options += ["--host", "--port"] if name == "serve" else []
        for option in options:
            described = out.split(f"{option} ", 1)[1].split(" --", 1)[0]
            assert "(default: " in described, (name, option, described)
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: the current directory)" in out
    assert "SANDBOX_MAX_LIFETIME_S" in out


def test_image_build_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["image", "build", "--help"])
    assert exc.value.code == 0
    assert "sandbox image build" in capsys.readouterr().out


# -- errors: one line with a hint, exit 1 -------------------------------------------------------


def test_a_bad_environment_variable_is_a_one_line_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SANDBOX_MEMORY_MB", "lots")
    assert main(["ls"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "SANDBOX_MEMORY_MB" in err
    assert "hint:" in err
    assert "Traceback" not in err


def test_unexpected_errors_have_no_traceback_without_debug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(*args: object) -> int:
        raise RuntimeError("kaboom")

    monkeypatch.setitem(COMMANDS, "ls", boom)
    assert main(["ls"]) == 1
    err = capsys.readouterr().err
    assert "kaboom" in err
    assert "--debug" in err
    assert "Traceback" not in err
    assert main(["--debug", "ls"]) == 1
    assert "Traceback" in capsys.readouterr().err


# -- output filters ------------------------------------------------------------------------------


def _piped(*chunks: bytes) -> list[str]:
    out: list[str] = []
    cleaner = PipeCleaner(out.append)
    for chunk in chunks:
        cleaner.feed(chunk)
    cleaner.finish()
    return out


def test_pipe_output_is_plain_text_without_colours() -> None:
    assert "".join(_piped(b"\x1b[31mred\x1b[0m\r\n", b"plain\r\n")) == "red\nplain\n"


def test_pipe_output_writes_a_partial_line_at_once() -> None:
    out: list[str] = []
    cleaner = PipeCleaner(out.append)
    cleaner.feed(b"Enter name: ")
    assert out == ["Enter name: "]


def test_pipe_output_keeps_a_progress_bar_final_state_only() -> None:
    assert "".join(_piped(b"\r10%", b"\r50%", b"\r100%\r\n", b"done\r\n")) == "100%\ndone\n"


def test_pipe_output_survives_sequences_and_characters_cut_between_chunks() -> None:
    data = "\x1b[1;32mgrün\x1b[0m ok\r\n".encode()
    for cut in range(1, len(data)):
        assert "".join(_piped(data[:cut], data[cut:])) == "grün ok\n", cut


def test_pipe_output_marks_an_overwritten_line_that_was_partly_shown() -> None:
    assert "".join(_piped(b"10%", b"\r100%\r\n")) == "10%\n100%\n"


def test_terminal_output_keeps_colours_and_drops_markers_and_queries() -> None:
    out: list[bytes] = []
    screen = TerminalFilter(out.append)
    screen.feed(b"\x1b[31mred\x1b[0m\x1b]777;sb;abc;E;0\x07 \x1b[6n\x1b[>c!")
    screen.finish()
    assert b"".join(out) == b"\x1b[31mred\x1b[0m !"


def test_terminal_output_drops_a_marker_cut_between_chunks() -> None:
    data = b"a\x1b]777;sb;P\x07b\x1b[32mc"
    for cut in range(1, len(data)):
        out: list[bytes] = []
        screen = TerminalFilter(out.append)
        screen.feed(data[:cut])
        screen.feed(data[cut:])
        screen.finish()
        assert b"".join(out) == b"ab\x1b[32mc", cut


def test_terminal_output_keeps_queries_when_the_remote_does_not_answer() -> None:
    out: list[bytes] = []
    TerminalFilter(out.append, drop_queries=False).feed(b"x\x1b[6n")
    assert b"".join(out) == b"x\x1b[6n"


def test_readable_commands_shows_what_execute_typed() -> None:
    typed = command_line("echo 'a' \\ b\ncat <<EOF\nü\nEOF", "ab12")[2:-1]
    data = b"$ " + typed + b"\r\na\r\n$ " + resync_line("ab12", 130)[2:-1] + b"\r\n"
    assert (
        readable_commands(data)
        == "$ echo 'a' \\ b\r\ncat <<EOF\r\nü\r\nEOF\r\na\r\n$ \r\n".encode()
    )


def test_format_age() -> None:
    now = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
    assert format_age("2024-05-01T11:59:30Z", now) == "30s"
    assert format_age("2024-05-01T11:00:00Z", now) == "1h"
    assert format_age("2024-04-28T12:00:00Z", now) == "3d"
    assert format_age("garbage", now) == "?"


# -- doctor --------------------------------------------------------------------------------------


def test_doctor_reads_cgroup_v2_limits() -> None:
    values = parse_cgroup_output("memory.max=67108864\npids.max=64\ncpu.max=50000 100000\n")
    checks = list(judge_limits(values))
    assert [c.status for c in checks] == ["ok", "ok", "ok"]
    assert "v2" in checks[0].detail


def test_doctor_reads_cgroup_v1_limits() -> None:
    values = parse_cgroup_output(
        "memory/memory.limit_in_bytes=67108864\npids/pids.max=64\n"
        "cpu,cpuacct/cpu.cfs_quota_us=50000\ncpu,cpuacct/cpu.cfs_period_us=100000\n"
    )
    assert [c.status for c in judge_limits(values)] == ["ok", "ok", "ok"]


def test_doctor_fails_limits_the_engine_ignores() -> None:
    values = parse_cgroup_output("memory.max=max\npids.max=max\ncpu.max=max 100000\n")
    checks = list(judge_limits(values))
    assert [c.status for c in checks] == ["FAIL", "FAIL", "FAIL"]
    assert all(c.fix for c in checks)
    assert exit_code(checks) == 1


def test_doctor_without_an_engine_fails_with_the_fix(tmp_path: object) -> None:
    def no_engine() -> object:
        raise EngineUnavailableError("the container engine does not answer")

    env = {"DOCKER_HOST": "unix:///nonexistent.sock", "SANDBOX_STATE_DIR": str(tmp_path)}
    checks = list(run_checks(env, backend_factory=no_engine))
    engine = next(c for c in checks if c.name == "engine answers")
    assert engine.status == "FAIL"
    assert "unix:///nonexistent.sock" in engine.detail
    assert "DOCKER_HOST" in engine.fix
    assert exit_code(checks) == 1
    assert "fix:" in engine.render()


def test_doctor_optional_checks_do_not_fail_the_run() -> None:
    checks = [Check("a", "ok"), Check("b", "FAIL", required=False), Check("c", "info")]
    assert exit_code(checks) == 0
