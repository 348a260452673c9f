"""A bad configuration is refused at start, with a precise message per problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncserver import ConfigError, load_config
from tests.conftest import FIXTURES, PROTOCOLS

PURCHASE = PROTOCOLS / "purchase.lsh"
SIMPLE = PROTOCOLS / "atomic-ucp.lsh"


def problems(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> list[str]:
    path = tmp_path / "mas.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=environ or {})
    return [p.replace(str(path), "mas.toml") for p in caught.value.problems]


def test_a_good_config(tmp_path: Path) -> None:
    path = tmp_path / "mas.toml"
    path.write_text(
        f'[server]\npolicy = "batched"\nbatch_window_ms = 5\ndb = "x.db"\n'
        f'[mas.shop]\nprotocols = ["{SIMPLE}", "{PURCHASE}"]\n'
        '[mas.shop.agents.p]\nroles = ["Platform", "Purchase:Buyer"]\ntoken_env = "P_TOKEN"\n'
    )
    config = load_config(path, environ={"P_TOKEN": "secret"})
    shop = config.mas["shop"]
    assert list(shop.protocols) == ["SimpleUCP", "Purchase"]
    assert shop.agents["p"].roles == {
        "SimpleUCP": frozenset({"Platform"}),
        "Purchase": frozenset({"Buyer"}),
    }
    assert shop.agent_for_token("secret").name == "p"  # type: ignore[union-attr]
    assert config.policy == "batched" and config.batch_window_ms == 5
    assert config.db == str((tmp_path / "x.db").resolve())


def test_every_problem_is_reported(tmp_path: Path) -> None:
    bad = FIXTURES / "lsh" / "bad" / "duplicate-action.lsh"
    found = problems(
        tmp_path,
        f"""
[server]
policy = "eventually"
port = 3

[mas.shop]
protocols = ["{SIMPLE}", "missing.lsh", "{bad}"]
color = "red"

[mas.shop.agents.a]
roles = ["Platfrom"]
token = "t"

[mas.shop.agents.b]
roles = ["Business"]
token = "t"

[mas.shop.agents.c]
roles = ["Platform"]

[mas.shop.agents.d]
roles = ["Platform"]
token_env = "D_TOKEN"
""",
    )
    assert found[0].startswith(
        "mas.toml: server.port: unknown setting (known: batch_window_ms, body_timeout, db, "
    )
    assert found[1] == "mas.toml: server.policy: must be 'instant' or 'batched', not 'eventually'"
    assert found[2] == "mas.toml: mas.shop.color: unknown field (known: agents, protocols)"
    assert found[3].startswith("mas.toml: mas.shop.protocols: protocol 'missing.lsh' is invalid:")
    assert "cannot read: No such file or directory" in found[3]
    assert found[4].startswith(f"mas.toml: mas.shop.protocols: protocol '{bad}' is invalid:")
    assert "action 'Ship' is already declared at line 6" in found[4]
    assert found[5:] == [
        "mas.toml: mas.shop.agents.a.roles: no protocol has a role 'Platfrom' "
        "(roles: Business, Platform)",
        "mas.toml: mas.shop.agents.c: give exactly one of token (the secret) or token_env "
        "(a variable holding it)",
        "mas.toml: mas.shop.agents.d.token_env: environment variable D_TOKEN is not set (or empty)",
    ]


def test_shared_tokens_and_ambiguous_roles(tmp_path: Path) -> None:
    found = problems(
        tmp_path,
        f"""
[mas.m]
protocols = ["{SIMPLE}", "{PROTOCOLS / "incremental-ucp.lsh"}"]
[mas.m.agents.a]
roles = ["Platform"]
token = "same"
[mas.m.agents.b]
roles = ["SimpleUCP:Business", "Nope:Business", "IncrementalUCP:Boss"]
token = "other"
[mas.m.agents.c]
roles = ["SimpleUCP:Business"]
token = "same"
""",
    )
    assert found == [
        "mas.toml: mas.m.agents.a.roles: 'Platform' is a role of several protocols; write "
        "'SimpleUCP:Platform', 'IncrementalUCP:Platform'",
        "mas.toml: mas.m.agents.b.roles: 'Nope:Business': no protocol named 'Nope' here",
        "mas.toml: mas.m.agents.b.roles: 'IncrementalUCP:Boss': IncrementalUCP has no role 'Boss' "
        "(roles: Platform, Business)",
    ]


def test_files_that_are_not_configs(tmp_path: Path) -> None:
    assert problems(tmp_path, "[mas.x\n")[0].startswith("mas.toml: not valid TOML: ")
    assert problems(tmp_path, "") == [
        "mas.toml: no multiagent system: add at least one [mas.NAME] table"
    ]
    with pytest.raises(ConfigError, match=r"nowhere\.toml: cannot read: No such file"):
        load_config(tmp_path / "nowhere.toml")


def test_a_protocol_may_be_named_by_its_bundled_name(tmp_path) -> None:
    config = tmp_path / "mas.toml"
    config.write_text(
        '[mas.shop]\nprotocols = ["purchase", "atomic-ucp"]\n'
        '[mas.shop.agents.a]\nroles = ["Buyer", "Platform"]\ntoken = "t"\n'
    )
    loaded = load_config(config)
    assert set(loaded.mas["shop"].protocols) == {"Purchase", "SimpleUCP"}
    # A file of that name next to the configuration is what it means, if there is one.
    (tmp_path / "purchase").write_text("not a protocol\n")
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert "protocol 'purchase' is invalid" in str(info.value)


def test_every_parser_takes_the_policy_names_from_one_list() -> None:
    import argparse

    from strabo import demo
    from syncserver import cli
    from syncserver.config import POLICIES

    for module in (cli, demo):
        parser = argparse.ArgumentParser()
        module.configure(parser)
        [action] = [a for a in parser._actions if a.dest == "policy"]
        assert tuple(action.choices or ()) == POLICIES, module.__name__
