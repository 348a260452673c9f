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
    # Each problem at its line, in the order of the file.
    assert found[0] == "mas.toml:3: server.policy: must be 'instant' or 'batched', not 'eventually'"
    assert found[1].startswith(
        "mas.toml:4: server.port: unknown setting (known: policy, batch_window_ms, db, max_body, "
    )
    assert found[2].startswith("mas.toml:7: mas.shop.protocols: protocol 'missing.lsh' is invalid:")
    assert "cannot read: No such file or directory" in found[2]
    assert found[3].startswith(f"mas.toml:7: mas.shop.protocols: protocol '{bad}' is invalid:")
    assert "action 'Ship' is already declared at line 6" in found[3]
    assert found[4] == (
        "mas.toml:8: mas.shop.color: unknown setting (known: protocols, agents)"
    )
    assert found[5:] == [
        "mas.toml:11: mas.shop.agents.a.roles: no protocol has a role 'Platfrom' "
        "(roles: Business, Platform)",
        "mas.toml:18: mas.shop.agents.c: give exactly one of token (the secret) or token_env "
        "(a variable holding it)",
        "mas.toml:23: mas.shop.agents.d.token_env: environment variable D_TOKEN is not set "
        "(or empty)",
    ]


def test_wrong_types_and_ranges_say_what_was_expected(tmp_path: Path) -> None:
    found = problems(
        tmp_path,
        f"""[server]
batch_window_ms = true
max_body = "1MB"
header_timeout = -1
write_timeout = inf
db = 3

[mas.shop]
protocols = []

[mas.other]
protocols = ["{SIMPLE}"]
agents = 3

[mas.third]
protocols = ["{SIMPLE}"]
[mas.third.agents.a]
roles = "Platform"
token = ""
url = "ftp://x"
[mas.third.agents.b]
role = ["Platform"]
token = "t"
""",
    )
    assert found == [
        "mas.toml:2: server.batch_window_ms: must be a positive number, not True",
        "mas.toml:3: server.max_body: must be a positive whole number, not '1MB'",
        "mas.toml:4: server.header_timeout: must be a positive number of seconds, not -1",
        "mas.toml:5: server.write_timeout: must be a positive number of seconds, not inf",
        "mas.toml:6: server.db: must be a path or a postgresql:// URL (a string), not 3",
        "mas.toml:9: mas.shop.protocols: must be a non-empty list of protocol file paths, not []",
        "mas.toml:13: mas.other.agents: must be [AGENT] tables, not 3",
        "mas.toml:18: mas.third.agents.a.roles: must be a non-empty list of role names, "
        "not 'Platform'",
        "mas.toml:19: mas.third.agents.a.token: must be a non-empty string, not ''",
        "mas.toml:20: mas.third.agents.a.url: must be an http:// or https:// URL, not 'ftp://x'",
        "mas.toml:21: mas.third.agents.b.roles: missing: it is required",
        "mas.toml:22: mas.third.agents.b.role: unknown setting (did you mean 'roles'? known: "
        "roles, token, token_env, url, acts_for, mandate)",
    ]


def test_a_config_built_in_code_is_checked_the_same_way() -> None:
    from syncserver import build_config

    with pytest.raises(ConfigError) as caught:
        build_config({"mas": {"m": {"protocols": [str(SIMPLE)], "agents": {"a": {"roles": []}}}}})
    assert caught.value.problems == [
        "<config>: mas.m.agents.a.roles: must be a non-empty list of role names, not []"
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
        "mas.toml:5: mas.m.agents.a.roles: 'Platform' is a role of several protocols; write "
        "'SimpleUCP:Platform', 'IncrementalUCP:Platform'",
        "mas.toml:8: mas.m.agents.b.roles: 'Nope:Business': no protocol named 'Nope' here",
        "mas.toml:8: mas.m.agents.b.roles: 'IncrementalUCP:Boss': IncrementalUCP has no role "
        "'Boss' (roles: Platform, Business)",
    ]


def test_files_that_are_not_configs(tmp_path: Path) -> None:
    assert problems(tmp_path, "[mas.x\n") == [
        "mas.toml:1:7: not valid TOML: Expected ']' at the end of a table declaration"
    ]
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
