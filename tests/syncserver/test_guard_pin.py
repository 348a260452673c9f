"""The connection guard reaches into uvicorn's internals, so uvicorn is pinned to
the versions it is tested with: this fails when the two drift apart."""

from __future__ import annotations

import re
import tomllib

import uvicorn

from syncserver._guard import TESTED_UVICORN
from tests.conftest import ROOT


def test_the_installed_uvicorn_is_one_the_guard_is_tested_with() -> None:
    minor = ".".join(uvicorn.__version__.split(".")[:2])
    assert minor in TESTED_UVICORN, (uvicorn.__version__, TESTED_UVICORN)


def test_pyproject_pins_uvicorn_to_the_tested_versions() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [pin] = [d for d in project["dependencies"] if d.startswith("uvicorn")]
    low, high = re.fullmatch(r"uvicorn>=([\d.]+),<([\d.]+)", pin).groups()  # type: ignore[union-attr]
    lowest = min(TESTED_UVICORN, key=lambda v: tuple(map(int, v.split("."))))
    highest = max(TESTED_UVICORN, key=lambda v: tuple(map(int, v.split("."))))
    major, top = highest.split(".")
    assert low == lowest and high == f"{major}.{int(top) + 1}", pin
