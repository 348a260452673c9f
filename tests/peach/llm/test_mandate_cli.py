"""``strabo agent --mandate``: the principal's bounds hold whatever the model
asks, each refusal is told to the model, and approval is the principal's.

Real parts: an embedded SyncServer, the bundled merchant over HTTP behind the
Business proxy, the scripted model on loopback. The model over-reaches on
purpose: a hundred bouquets, then one, then another checkout, in one answer.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from samples.llm import scenarios
from tests.peach.llm.test_cli import parse
from tests.peach.llm.test_outcomes import CREATE, merchant, strabo_agent_ucp

MANDATE = """\
enactments = 1
approval = ["Complete"]

[actions.Complete]
per_run = 1

[values."Create.line_items"]
path = "$[*].quantity"
total = 1

[ceiling]
attribute = "totals"
path = "$[?(@.type == 'total')].amount"
max = 5000
on = ["Complete"]
"""


def greedy() -> list[dict[str, Any]]:
    hundred = {**CREATE, "line_items": [{**CREATE["line_items"][0], "quantity": 100}]}
    return [
        {"when": {"has": ["Create"], "prompt_has": ["You are in no enactment yet"]},
         "content": [{"type": "tool_use", "name": "Create", "input": hundred},
                     {"type": "tool_use", "name": "Create", "input": CREATE},
                     {"type": "tool_use", "name": "Create", "input": CREATE},
                     {"type": "tool_use", "name": "wait",
                      "input": {"for_actions": ["Created", "Failed"]}}]},
        # Told of the refusals: it waits for the checkout that was created.
        {"when": {"prompt_has": ["mandate enactments = 1"]},
         "content": [{"type": "tool_use", "name": "wait",
                      "input": {"for_actions": ["Created", "Failed"]}}]},
        {"when": {"has": ["Complete"]}, "reusable": True,
         "content": [{"type": "tool_use", "name": "Complete",
                      "input": {"payment_data": scenarios.payment_data(),
                                "risk_signals": {"ip": "127.0.0.1"}}},
                     {"type": "tool_use", "name": "wait",
                      "input": {"for_actions": ["Completed"]}}]},
        {"when": {"has": ["done"], "prompt_has": ["Complete"]}, "reusable": True,
         "content": [{"type": "tool_use", "name": "wait",
                      "input": {"for_actions": ["Completed"]}}]},
        {"when": {"has": ["done"]}, "reusable": True,
         "content": [{"type": "tool_use", "name": "done", "input": {"summary": "done"}}]},
    ]


def results(model: Any) -> str:
    return "\n".join(str(r) for request in model.requests for r in request["results"])


async def test_the_mandate_holds_and_the_model_is_told(model, capsys, tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text(MANDATE)
    model.answers = greedy()
    async with merchant() as url:
        status = await strabo_agent_ucp(
            model, url, "--mandate", str(tmp_path / "m.toml"), "--yes",
            "--success", "Completed", "--max-calls", "8",
        )
    out, err = capsys.readouterr()
    told = results(model)
    assert "mandate values.Create.line_items: the values add up to 100, above 1" in told
    assert "mandate enactments = 1" in told
    assert "approved by --yes: Complete" in out
    assert status == 0, (out, err, model.unanswered)
    assert "goal reached: Completed in E1" in out
    assert not re.search(r"\bE2\b", out)  # one checkout, never a second (E2 as a label)
    # The report says why: what the mandate refused, by rule, and the first message.
    assert "2 rejected (2 mandate)" in out, out
    assert "refused (mandate), first: Create: mandate values.Create.line_items" in out


async def test_without_approval_nothing_is_paid(model, capsys, tmp_path: Path) -> None:
    """No --yes, and no terminal to ask (the tests' stdin): Complete is refused."""
    (tmp_path / "m.toml").write_text(MANDATE)
    model.answers = greedy()
    async with merchant() as url:
        status = await strabo_agent_ucp(
            model, url, "--mandate", str(tmp_path / "m.toml"), "--success", "Completed",
            "--max-calls", "4",
        )
    out, err = capsys.readouterr()
    assert status == 1, (out, err)
    assert "Complete was not approved by the principal" in results(model)
    assert "needs approval and no terminal can ask" in err
    assert "Completed in E1" not in out


def test_a_wrong_mandate_is_a_usage_error(tmp_path: Path, capsys) -> None:
    from peach.llm import cli

    (tmp_path / "m.toml").write_text("[actions.Pay]\nper_run = 1\n")
    args = parse("--protocol", "atomic-ucp", "--role", "Platform", "--goal", "g",
                 "--embedded", "--provider", "openai", "--base-url", "http://127.0.0.1:9/v1",
                 "--model", "m", "--mandate", str(tmp_path / "m.toml"))
    assert cli.run(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("strabo agent: --mandate: ")
    assert "m.toml:1: actions.Pay: no protocol here has an action 'Pay'" in err
