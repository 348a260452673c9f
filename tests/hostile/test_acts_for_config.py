"""Hostile tests of ``acts_for``'s configuration (syncserver.acts_for): a pin
no instance could meet, or that the server would report otherwise than it
holds, is a configuration error, named where it is, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from langshaw import LangshawProtocol
from syncserver import SyncServer
from syncserver.acts_for import ActsFor
from syncserver.config import ConfigError, build_config, load_config
from tests.conftest import PROTOCOLS

MARKET_FILE = PROTOCOLS / "patterns" / "market.lsh"
MARKET = LangshawProtocol.load(MARKET_FILE)
STRABO = str(Path(sys.executable).parent / "strabo")


# Configuration ------------------------------------------------------------------------


def config(pins: Any, roles: tuple[str, ...] = ("Seller",)) -> ActsFor:
    built = build_config(
        {
            "mas": {
                "default": {
                    "protocols": [MARKET],
                    "agents": {"steady": {"roles": list(roles), "token": "t", "acts_for": pins}},
                }
            }
        },
        source="<test>",
    )
    return built.mas["default"].agents["steady"].acts_for


def test_describe_round_trips_the_pins_a_client_is_told() -> None:
    pins = {"seller": "steady", "Take.queue": "x"}  # no Take in Market: an error
    with pytest.raises(ConfigError):
        config(pins)
    parsed = config({"Price.seller": "steady", "market": "m1", "Price.round": 7})
    assert ActsFor.of(parsed.describe()) == parsed


def test_a_target_with_an_empty_action_name_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError) as error:
        config({".seller": "x", "seller": "steady"})
    assert ".seller" in str(error.value)


def test_contradictory_pins_are_a_configuration_error() -> None:
    with pytest.raises(ConfigError) as error:
        config({"seller": "steady", "Price.seller": "other"})
    assert "Price.seller" in str(error.value)


def test_a_pin_on_an_action_the_agent_never_performs_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError) as error:
        config({"Price.seller": "m"}, roles=("Market",))
    assert "Price.seller" in str(error.value)


@pytest.mark.parametrize("pins", [{"seller": 1}, {"Call": "x"}, {"price": "cheap"}])
def test_a_pin_no_instance_could_meet_is_a_configuration_error(pins: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        config(pins)


def test_a_non_string_target_in_code_is_a_configuration_error() -> None:
    pins: dict[Any, Any] = {1: "x"}
    with pytest.raises(ConfigError):
        SyncServer.embedded([MARKET], {"steady": ["Seller"]}, acts_for={"steady": pins})


def test_a_dotted_toml_key_and_other_mistakes_exit_2_naming_each_place(tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text(
        f"""
[mas.m]
protocols = [{json.dumps(str(MARKET_FILE))}]
[mas.m.agents.cutter]
roles = ["Seller"]
token = "c"
acts_for = {{ Price.seller = "cutter", sellr = "x", buyer = 1.5, seller = true }}
[mas.m.agents.mk]
roles = ["Market"]
token = "m"
acts_for = "mk"
[mas.m.agents.ok]
roles = ["Seller"]
token = "o"
[mas.m.agents.ok.acts_for]
"Price.seller" = "ok"
"""
    )
    run = subprocess.run(
        [STRABO, "syncserver", "--config", str(tmp_path / "m.toml"), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert "Traceback" not in run.stderr
    lines = [line for line in run.stderr.splitlines() if "acts_for" in line]
    assert len(lines) == 5, run.stderr
    for place in (
        "cutter.acts_for.Price:",
        "cutter.acts_for.sellr:",
        "cutter.acts_for.buyer:",
        "cutter.acts_for.seller:",
        "mk.acts_for:",
    ):
        assert any(place in line for line in lines), (place, run.stderr)
    assert "agents.ok" not in run.stderr  # a [...acts_for] table is fine


def test_a_toml_config_states_its_pins_in_both_forms(tmp_path: Path) -> None:
    file = tmp_path / "m.toml"
    file.write_text(
        f"""
[mas.m]
protocols = [{json.dumps(str(MARKET_FILE))}]
[mas.m.agents.cutter]
roles = ["Seller"]
token = "c"
acts_for = {{ "Price.seller" = "cutter", market = "b3" }}
"""
    )
    pins = load_config(file).mas["m"].agents["cutter"].acts_for
    assert pins.describe() == {"Price.seller": "cutter", "market": "b3"}
    assert ActsFor.of(pins.describe()) == pins
