"""Where the tests' PostgreSQL comes from (``bench/_pgcluster.py``), and what
they say when there is none: pgserver has wheels only on some platforms, so
elsewhere the message must name the package to install."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from bench import _pgcluster
from bench._pgcluster import find_binaries, install_hint, pgserver_has_wheels
from tests.conftest import ROOT

DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'
UBUNTU = 'NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\n'
ROCKY = 'ID="rocky"\nID_LIKE="rhel centos fedora"\n'


@pytest.mark.parametrize(
    ("os_release", "platform", "command"),
    [
        (DEBIAN, "linux", "sudo apt-get install postgresql"),
        (UBUNTU, "linux", "sudo apt-get install postgresql"),
        (ROCKY, "linux", "sudo dnf install postgresql-server"),
        ("ID=alpine\n", "linux", "sudo apk add postgresql"),
        ("", "darwin", "brew install postgresql@16"),
        ("", "linux", "the system's PostgreSQL server package"),
    ],
)
def test_the_hint_names_the_package_of_the_system(
    os_release: str, platform: str, command: str
) -> None:
    hint = install_hint(os_release, platform, pgserver=False)
    assert command in hint and "STRABO_PG_BIN" in hint and "pgserver" not in hint, hint
    # pgserver is offered only where it has wheels.
    assert "pip install -e '.[dev]'" in install_hint(os_release, platform, pgserver=True)


def test_without_binaries_the_error_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STRABO_PG_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(_pgcluster, "_DISTRIBUTION_DIRS", (str(tmp_path / "pg*" / "bin"),))
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pgserver" else real(name, *a)
    )
    with pytest.raises(RuntimeError) as raised:
        find_binaries()
    message = str(raised.value)
    assert message.startswith("no PostgreSQL server binaries (initdb, postgres)"), message
    assert message.endswith(install_hint()) and "\n" not in message
    # Once there, they are found: STRABO_PG_BIN first.
    (tmp_path / "pg16" / "bin").mkdir(parents=True)
    for name in ("initdb", "postgres"):
        (tmp_path / "pg16" / "bin" / name).write_text("")
    assert find_binaries() == tmp_path / "pg16" / "bin"
    monkeypatch.setenv("STRABO_PG_BIN", str(tmp_path))
    (tmp_path / "initdb").write_text("")
    (tmp_path / "postgres").write_text("")
    assert find_binaries() == tmp_path


@pytest.mark.parametrize(
    ("version", "machine", "wheels"),
    [
        ((3, 11), "x86_64", True),  # manylinux, macOS
        ((3, 12), "AMD64", True),  # Windows
        ((3, 12), "arm64", True),  # macOS (Linux says aarch64)
        ((3, 13), "x86_64", False),
        ((3, 11), "aarch64", False),
        ((3, 11), "ARM64", False),  # Windows on ARM
    ],
)
def test_pgserver_is_required_only_where_it_has_wheels(
    version: tuple[int, int], machine: str, wheels: bool
) -> None:
    """The dev extra's marker and the hint's idea of it agree (pgserver 0.1.4's
    wheels: cp39-cp312, manylinux x86_64, macOS x86_64 and arm64, win_amd64)."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        dev = tomllib.load(file)["project"]["optional-dependencies"]["dev"]
    [line] = [Requirement(r) for r in dev if r.startswith("pgserver")]
    assert line.marker is not None
    env = {"python_version": f"{version[0]}.{version[1]}", "platform_machine": machine}
    assert line.marker.evaluate(env) is wheels
    assert pgserver_has_wheels(version, machine) is wheels
