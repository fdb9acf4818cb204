"""Project path validation: the mount boundary."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from sandbox.errors import InvalidArgumentError, PathNotAllowedError
from sandbox.session.paths import (
    SYSTEM_DIRS,
    _system_dir_conflict,
    is_within,
    project_owner,
    resolve_project_path,
)

EVERYWHERE = [Path("/")]  # roots that let the system-directory checks speak for themselves


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An allowed root with a project in it, and a place outside it."""
    (tmp_path / "root" / "project" / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    return tmp_path / "root"


@pytest.fixture(autouse=True)
def _no_engine_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Known socket locations come from HOME, XDG_RUNTIME_DIR and DOCKER_HOST: pin them."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("DOCKER_HOST", raising=False)


# ------------------------------------------------------------------------------ accepted


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("project", "project"),
        ("project/", "project"),
        ("project/sub", "project/sub"),
        ("project/sub/..", "project"),
        ("project/./sub", "project/sub"),
        ("", ""),  # the root itself
    ],
)
def test_directories_under_an_allowed_root_resolve(root: Path, given: str, expected: str) -> None:
    path = str(root) + ("/" + given if given else "")
    assert resolve_project_path(path, [root]) == (root / expected if expected else root)


def test_returns_the_resolved_path_for_a_symlink_inside_the_root(root: Path) -> None:
    (root / "link").symlink_to(root / "project" / "sub")
    assert resolve_project_path(str(root / "link"), [root]) == root / "project" / "sub"


def test_roots_are_resolved_too(root: Path, tmp_path: Path) -> None:
    (tmp_path / "root-link").symlink_to(root)
    assert resolve_project_path(str(root / "project"), [tmp_path / "root-link"]) == (
        root / "project"
    )
    assert resolve_project_path(str(tmp_path / "root-link" / "project"), [root]) == (
        root / "project"
    )


def test_any_of_several_roots_allows(root: Path, tmp_path: Path) -> None:
    roots = [tmp_path / "outside", root]
    assert resolve_project_path(str(root / "project"), roots) == root / "project"


def test_roots_expand_the_user_home(tmp_path: Path) -> None:
    (tmp_path / "home" / "code").mkdir()
    got = resolve_project_path(str(tmp_path / "home" / "code"), [Path("~")])
    assert got == tmp_path / "home" / "code"


def test_a_macos_style_temp_dir_is_not_a_system_directory() -> None:
    for path in ("/private/var/folders/xy/abc/T", "/private/var/folders/xy/abc/T/proj", "/tmp"):
        assert _system_dir_conflict(Path(path)) is None
    assert "/private/var" not in SYSTEM_DIRS
    assert "/var" not in SYSTEM_DIRS


# ------------------------------------------------------------------------------ invalid


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("relative/dir", "not absolute"),
        (".", "not absolute"),
        ("~/project", "not absolute"),
        ("/tmp/a\x00b", "NUL"),
        ("/" + "a" * 5000, "too long"),
        ("/" + "/".join(["abcdefgh"] * 600), "too long"),
    ],
)
def test_malformed_paths_are_invalid_arguments(path: str, fragment: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        resolve_project_path(path, EVERYWHERE)
    assert type(info.value) is InvalidArgumentError
    assert info.value.code == "INVALID_ARGUMENT"
    assert fragment in info.value.message


@pytest.mark.parametrize("path", [None, 42, b"/tmp", ["/tmp"]])
def test_non_string_paths_are_invalid_arguments(path: object) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        resolve_project_path(path, EVERYWHERE)  # type: ignore[arg-type]  # clients send JSON
    assert info.value.code == "INVALID_ARGUMENT"
    assert "string" in info.value.message


def test_a_path_object_is_not_a_string_either(root: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        resolve_project_path(root / "project", [root])  # type: ignore[arg-type]  # runtime check


Setup = Callable[[Path], str]


def _missing(root: Path) -> str:
    return str(root / "nope")


def _missing_nested(root: Path) -> str:
    return str(root / "nope" / "deeper")


def _file(root: Path) -> str:
    (root / "file.txt").write_text("x")
    return str(root / "file.txt")


def _under_file(root: Path) -> str:
    (root / "file.txt").write_text("x")
    return str(root / "file.txt" / "sub")


def _link_to_file(root: Path) -> str:
    (root / "file.txt").write_text("x")
    (root / "link").symlink_to(root / "file.txt")
    return str(root / "link")


def _dangling(root: Path) -> str:
    (root / "dangling").symlink_to(root / "gone")
    return str(root / "dangling")


def _loop(root: Path) -> str:
    (root / "a").symlink_to(root / "b")
    (root / "b").symlink_to(root / "a")
    return str(root / "a")


def _long_component(root: Path) -> str:
    return str(root / ("x" * 300))


def _fifo(root: Path) -> str:
    os.mkfifo(root / "fifo")
    return str(root / "fifo")


@pytest.mark.parametrize(
    ("setup", "fragment"),
    [
        (_missing, "does not exist"),
        (_missing_nested, "does not exist"),
        (_file, "not a directory"),
        (_under_file, "does not exist"),
        (_link_to_file, "not a directory"),
        (_dangling, "does not exist"),
        (_loop, "symlink loop"),
        (_long_component, "too long"),
        (_fifo, "not a directory"),
    ],
)
def test_paths_that_are_not_existing_directories_are_invalid_arguments(
    root: Path, setup: Setup, fragment: str
) -> None:
    path = setup(root)
    with pytest.raises(InvalidArgumentError) as info:
        resolve_project_path(path, [root])
    assert type(info.value) is InvalidArgumentError
    assert info.value.code == "INVALID_ARGUMENT"
    assert fragment in info.value.message
    assert repr(path) in info.value.message


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads through any permission")
def test_an_unreadable_parent_is_an_invalid_argument(root: Path) -> None:
    (root / "locked" / "inner").mkdir(parents=True)
    (root / "locked").chmod(0)
    try:
        with pytest.raises(InvalidArgumentError) as info:
            resolve_project_path(str(root / "locked" / "inner"), [root])
        assert info.value.code == "INVALID_ARGUMENT"
    finally:
        (root / "locked").chmod(0o755)


# ------------------------------------------------------------------------------ not allowed


def _assert_not_allowed(path: str, roots: list[Path], fragment: str) -> PathNotAllowedError:
    with pytest.raises(PathNotAllowedError) as info:
        resolve_project_path(path, roots)
    err = info.value
    assert err.code == "PATH_NOT_ALLOWED"
    assert isinstance(err, InvalidArgumentError)  # the tree: PATH_NOT_ALLOWED is a bad argument
    assert fragment in err.message
    assert "SANDBOX_ALLOWED_ROOTS" in err.hint
    return err


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "//",
        "/etc",
        "/etc/",
        "/usr",
        "/usr/bin",
        "/usr/lib",
        "/bin",  # a symlink to usr/bin on merged-usr systems
        "/lib",
        "/proc",
        "/proc/self",
        "/sys",
        "/dev",
        "/run",
        "/var/run",
        "/var/lib",
        "/var",  # contains /var/lib and /var/run
    ],
)
def test_root_and_system_directories_are_not_allowed_even_under_root_slash(path: str) -> None:
    if not Path(path).exists():
        pytest.skip(f"{path} does not exist here")
    _assert_not_allowed(path, EVERYWHERE, "")


@pytest.mark.parametrize("target", ["/etc", "/usr/share", "/", "/proc/self"])
def test_a_symlink_inside_the_root_to_a_system_directory_is_not_allowed(
    root: Path, target: str
) -> None:
    (root / "evil").symlink_to(target)
    err = _assert_not_allowed(str(root / "evil"), [root], "resolves to")
    assert "system" in err.message or "root" in err.message


def test_a_system_directory_root_does_not_make_it_allowed() -> None:
    _assert_not_allowed("/etc", [Path("/etc")], "system directory /etc")
    _assert_not_allowed("/usr/share", [Path("/usr")], "system directory /usr")
    _assert_not_allowed("/", [Path("/")], "filesystem root")


def test_a_file_in_a_system_directory_is_not_allowed_rather_than_not_a_directory() -> None:
    _assert_not_allowed("/etc/hostname" if Path("/etc/hostname").exists() else "/etc", [], "")


def test_a_symlink_inside_the_root_pointing_outside_is_not_allowed(
    root: Path, tmp_path: Path
) -> None:
    (root / "escape").symlink_to(tmp_path / "outside")
    err = _assert_not_allowed(str(root / "escape"), [root], "not under an allowed root")
    assert str(tmp_path / "outside") in err.message
    assert str(root) in err.message


def test_a_relative_symlink_climbing_out_is_not_allowed(root: Path) -> None:
    (root / "project" / "up").symlink_to("../../outside")
    _assert_not_allowed(str(root / "project" / "up"), [root], "not under an allowed root")


def test_dotdot_out_of_the_root_is_not_allowed(root: Path) -> None:
    _assert_not_allowed(str(root / ".." / "outside"), [root], "not under an allowed root")


def test_a_sibling_sharing_the_roots_prefix_is_not_allowed(root: Path, tmp_path: Path) -> None:
    (tmp_path / "root-evil").mkdir()
    _assert_not_allowed(str(tmp_path / "root-evil"), [root], "not under an allowed root")


def test_the_parent_of_a_root_is_not_allowed(root: Path, tmp_path: Path) -> None:
    _assert_not_allowed(str(tmp_path), [root], "not under an allowed root")


def test_no_roots_means_nothing_is_allowed(root: Path) -> None:
    _assert_not_allowed(str(root / "project"), [], "none configured")


def test_relative_roots_are_ignored(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(root)
    _assert_not_allowed(str(root / "project"), [Path(), Path("project")], "none configured")


def test_the_not_allowed_message_lists_the_roots(root: Path, tmp_path: Path) -> None:
    roots = [root, tmp_path / "home"]
    err = _assert_not_allowed(str(tmp_path / "outside"), roots, "allowed:")
    assert str(root) in err.message
    assert str(tmp_path / "home") in err.message


# ------------------------------------------------------------------------------ engine sockets


def _bind_socket(directory: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(directory)  # AF_UNIX paths are short: bind relative to the directory
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(name)
    sock.close()
    return directory / name


def test_the_docker_socket_itself_is_not_allowed() -> None:
    for path in ("/var/run/docker.sock", "/run/docker.sock"):
        if Path(path).exists():
            _assert_not_allowed(path, EVERYWHERE, "")


@pytest.mark.parametrize("name", ["docker.sock", "podman.sock", "containerd.sock"])
def test_an_engine_socket_under_the_root_is_not_allowed(
    root: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sock = _bind_socket(root / "project", name, monkeypatch)
    _assert_not_allowed(str(sock), [root], "engine socket")


def test_any_socket_file_is_not_allowed(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sock = _bind_socket(root / "project", "app.sock", monkeypatch)
    _assert_not_allowed(str(sock), [root], "engine socket")


def test_a_regular_file_named_docker_sock_is_not_allowed(root: Path) -> None:
    (root / "docker.sock").write_text("")
    _assert_not_allowed(str(root / "docker.sock"), [root], "engine socket")


@pytest.mark.parametrize("name", ["docker.sock", "podman.sock"])
def test_a_directory_holding_an_engine_socket_is_not_allowed(
    root: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _bind_socket(root / "project", name, monkeypatch)
    err = _assert_not_allowed(str(root / "project"), [root], "engine socket")
    assert name in err.message
    # The subdirectory next to it is fine.
    assert resolve_project_path(str(root / "project" / "sub"), [root]) == root / "project" / "sub"


def test_a_directory_holding_a_symlink_to_the_docker_socket_is_not_allowed(root: Path) -> None:
    (root / "project" / "docker.sock").symlink_to("/var/run/docker.sock")
    _assert_not_allowed(str(root / "project"), [root], "engine socket")


def test_a_symlink_to_the_docker_socket_is_not_allowed(root: Path) -> None:
    if not Path("/var/run/docker.sock").exists():
        pytest.skip("no docker socket here")
    (root / "sock").symlink_to("/var/run/docker.sock")
    _assert_not_allowed(str(root / "sock"), [root], "")


def test_a_home_holding_docker_desktops_socket_is_not_allowed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".docker" / "run").mkdir(parents=True)
    (home / ".docker" / "run" / "docker.sock").write_text("")
    (home / "code").mkdir()
    for path in (home, home / ".docker", home / ".docker" / "run"):
        _assert_not_allowed(str(path), [home], "engine socket")
    assert resolve_project_path(str(home / "code"), [home]) == home / "code"


def test_a_directory_holding_the_docker_host_socket_is_not_allowed(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / "project" / "sub" / "engine.sock").write_text("")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{root / 'project' / 'sub' / 'engine.sock'}")
    _assert_not_allowed(str(root / "project"), [root], "engine socket")
    _assert_not_allowed(str(root), [root], "engine socket")


def test_a_directory_holding_the_rootless_socket_is_not_allowed(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / "project" / "docker.sock").write_text("")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(root / "project"))
    _assert_not_allowed(str(root), [root], "engine socket")


# ------------------------------------------------------------------------------ helpers


@pytest.mark.parametrize(
    ("child", "parent", "expected"),
    [
        ("/a/b", "/a", True),
        ("/a", "/a", True),
        ("/a/", "/a", True),
        ("/a/b/c", "/a/b", True),
        ("/a", "/a/b", False),
        ("/ab", "/a", False),
        ("/a-b", "/a", False),
        ("/b", "/a", False),
        ("/a/../b", "/a", False),
        ("/a/b/..", "/a", True),
        ("/anything", "/", True),
        ("/", "/", True),
    ],
)
def test_is_within(child: str, parent: str, expected: bool) -> None:
    assert is_within(Path(child), Path(parent)) is expected


def test_project_owner_is_the_directorys_uid_and_gid(tmp_path: Path) -> None:
    st = tmp_path.stat()
    assert project_owner(tmp_path) == (st.st_uid, st.st_gid)
    assert project_owner(tmp_path)[0] == os.getuid()
