"""Configuration: one model read from ``SANDBOX_*`` variables, and the README's table of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sandbox.config import SandboxConfig, env_var
from sandbox.errors import InvalidArgumentError

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_variables() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Configuration") :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(r"^\| `(SANDBOX_[A-Z0-9_]+)` \|", section, re.MULTILINE)


def test_the_readme_table_names_every_setting_once_and_nothing_else() -> None:
    listed = _readme_variables()
    assert len(listed) == len(set(listed)), "a variable is listed twice"
    assert set(listed) == {env_var(name) for name in SandboxConfig.model_fields}


def test_every_field_is_read_from_its_prefixed_variable(tmp_path: Path) -> None:
    environ = {
        "SANDBOX_STATE_DIR": str(tmp_path),
        "SANDBOX_EXECUTE_MAX_BYTES": "8192",
        "SANDBOX_ALLOWED_ROOTS": f"{tmp_path}/a:{tmp_path}/b",
        "SANDBOX_TOKENS": " x , y ",
        "SANDBOX_RECORD": "0",
        "SANDBOX_IMAGE": "   ",  # blank: unset
    }
    config = SandboxConfig.from_env(environ)
    assert config.state_dir == tmp_path
    assert config.execute_max_bytes == 8192
    assert config.allowed_roots == (tmp_path / "a", tmp_path / "b")
    assert config.tokens == ("x", "y")
    assert config.record is False
    assert config.image == SandboxConfig.defaults().image


def test_flags_win_over_variables_and_none_means_not_given(tmp_path: Path) -> None:
    environ = {"SANDBOX_TOKEN": "from-env", "SANDBOX_STATE_DIR": str(tmp_path)}
    assert SandboxConfig.from_env(environ, token="flag").token == "flag"
    assert SandboxConfig.from_env(environ, token=None).token == "from-env"


def test_constructing_reads_the_process_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOX_MAX_SESSIONS", "7")
    assert SandboxConfig(state_dir=tmp_path).max_sessions == 7
    assert SandboxConfig(state_dir=tmp_path, max_sessions=3).max_sessions == 3


def test_a_bad_value_names_its_variable() -> None:
    with pytest.raises(InvalidArgumentError) as bad:
        SandboxConfig.from_env({"SANDBOX_PIDS": "many"})
    assert "SANDBOX_PIDS" in bad.value.message
    assert "'many'" in bad.value.message
    assert bad.value.hint == "Fix or unset SANDBOX_PIDS."
