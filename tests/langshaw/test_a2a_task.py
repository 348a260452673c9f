"""A2ATask (protocols/a2a-task.lsh): A2A's task lifecycle as a Langshaw protocol.

The verifier finds it safe and live under both semantics; on a SocialState a task
goes through A2A's states (submitted, working, input-required and back to
working, then one terminal state), the terminal states exclude each other and
each completes the enactment, the Agent reports nothing after one, and neither
role can act for the other. The last test shows why the Client's own Cancel is
not refused once the task completed: that rule would be unsafe between peers.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from langshaw import ActionInstance, LangshawProtocol, SocialState, Violation
from langshaw.verify import verify
from tests.conftest import PROTOCOLS, load

PROTOCOL = load("a2a-task.lsh")
ROOT = {"ctx": "ctx-1", "task": "msg-1"}  # one task: its context and opening message
TERMINAL = ["Completed", "Failed", "Canceled", "Rejected"]

# What each action binds besides ROOT (dependencies as True, as an adapter fills them).
BINDINGS: dict[str, dict[str, Any]] = {
    "Send": {"message": {"role": "ROLE_USER", "parts": [{"text": "book a table"}]}},
    "Submitted": {"Send": True, "task_id": "task-9"},
    "Working": {"Submitted": True},
    "InputRequired": {"turn": "q-1", "Working": True,
                      "question": {"role": "ROLE_AGENT", "parts": [{"text": "for how many?"}]}},
    "Reply": {"turn": "q-1", "InputRequired": True, "task_id": "task-9",
              "reply": {"role": "ROLE_USER", "parts": [{"text": "four"}]}},
    "Resumed": {"turn": "q-1", "Reply": True},
    "Completed": {"Working": True, "artifacts": [{"artifactId": "a-1", "parts": []}]},
    "Failed": {"Submitted": True, "error": {"parts": [{"text": "kitchen on fire"}]}},
    "Rejected": {"Send": True, "rejection": {"parts": [{"text": "not a restaurant"}]}},
    "Cancel": {"Submitted": True, "task_id": "task-9"},
    "Canceled": {"Cancel": True},
}

# The shortest way to each terminal state, from an empty state.
PATHS = {
    "Completed": ["Send", "Submitted", "Working", "Completed"],
    "Failed": ["Send", "Submitted", "Failed"],
    "Canceled": ["Send", "Submitted", "Cancel", "Canceled"],
    "Rejected": ["Send", "Rejected"],
}


def instance(name: str, **overrides: Any) -> ActionInstance:
    return ActionInstance(PROTOCOL.action(name), {**ROOT, **BINDINGS[name], **overrides})


def perform(state: SocialState, name: str, role: str | None = None, **overrides: Any) -> None:
    roles = [role or PROTOCOL.action(name).actor]
    violation = state.attempt([instance(name, **overrides)], roles)
    assert violation is None, violation


def refused(state: SocialState, name: str, **overrides: Any) -> Violation:
    violation = state.check([instance(name, **overrides)], [PROTOCOL.action(name).actor])
    assert violation is not None, f"{name} was accepted"
    return violation


def offered(state: SocialState, role: str) -> list[str]:
    return sorted(e.action.name for e in state.enabled(role, ROOT))


def run(*names: str) -> SocialState:
    state = SocialState(PROTOCOL)
    for name in names:
        perform(state, name)
    return state


# The verifier ---------------------------------------------------------------------


@pytest.mark.parametrize("semantics", ["shared", "decentralized"])
def test_the_verifier_finds_it_safe_and_live(semantics: str) -> None:
    report = verify(PROTOCOL, semantics=semantics)
    assert report.complete and report.live and report.safe, report.to_json()
    assert report.verdict == "ok" and report.conflicts == []
    assert report.dead == {} and report.never_hold == []


def test_strabo_check_verify_says_ok() -> None:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "strabo"), "check", "--verify",
         str(PROTOCOLS / "a2a-task.lsh")],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "shared: ok" in done.stdout and "decentralized: ok" in done.stdout


def test_the_keys_are_the_context_and_the_task_with_a_turn_per_question() -> None:
    assert PROTOCOL.roles == ("Client", "Agent")
    assert PROTOCOL.root_keys == ("ctx", "task")
    assert PROTOCOL.keys == ("ctx", "task", "turn")
    assert PROTOCOL.completion == (tuple(TERMINAL),)


# The lifecycle ---------------------------------------------------------------------


def test_a_task_is_submitted_works_asks_for_input_resumes_and_completes() -> None:
    state = SocialState(PROTOCOL)
    perform(state, "Send")
    assert offered(state, "Agent") == ["Rejected", "Submitted"]
    perform(state, "Submitted")
    assert offered(state, "Client") == ["Cancel"]
    perform(state, "Working")
    perform(state, "InputRequired")
    assert "Reply" in offered(state, "Client")
    perform(state, "Reply")
    assert "Resumed" in offered(state, "Agent")
    perform(state, "Resumed")
    assert not state.is_complete(ROOT)
    perform(state, "Completed")
    assert state.is_complete(ROOT)


def test_a_task_may_ask_for_input_more_than_once() -> None:
    state = run("Send", "Submitted", "Working", "InputRequired", "Reply", "Resumed")
    perform(state, "InputRequired", turn="q-2")
    perform(state, "Reply", turn="q-2", reply={"parts": [{"text": "at eight"}]})
    perform(state, "Resumed", turn="q-2")
    perform(state, "Completed")
    assert state.is_complete(ROOT)


def test_the_reply_carries_the_agents_task_id() -> None:
    state = run("Send", "Submitted", "Working", "InputRequired")
    violation = refused(state, "Reply", task_id="task-other")
    assert (violation.rule, violation.attribute) == ("bound", "task_id")


def test_each_task_of_a_context_is_an_enactment_of_its_own() -> None:
    state = run("Send", "Submitted", "Working", "Completed")
    other = {"ctx": "ctx-1", "task": "msg-2"}
    perform(state, "Send", **other)
    perform(state, "Submitted", **other, task_id="task-10")
    assert state.is_complete(ROOT) and not state.is_complete(other)
    perform(state, "Failed", **other)
    assert state.is_complete(other)


# Terminal states -------------------------------------------------------------------


@pytest.mark.parametrize("terminal", TERMINAL)
def test_each_terminal_state_completes_the_enactment_and_is_final(terminal: str) -> None:
    state = SocialState(PROTOCOL)
    for name in PATHS[terminal][:-1]:
        perform(state, name)
    assert not state.is_complete(ROOT)
    perform(state, terminal)
    assert state.is_complete(ROOT)
    assert offered(state, "Agent") == []  # no more status updates for this task
    for other in TERMINAL:
        if other != terminal:
            assert refused(state, other).rule in ("nono", "dependency")


def test_a_cancel_after_completed_is_refused() -> None:
    state = run("Send", "Submitted", "Working", "Completed")
    # The Client's request may still arrive (it may not have heard of Completed),
    # but the Agent cannot cancel a completed task.
    perform(state, "Cancel")
    violation = refused(state, "Canceled")
    assert (violation.rule, violation.attribute) == ("nono", "Completed")
    assert offered(state, "Agent") == []


@pytest.mark.parametrize("first, second", [("Completed", "Canceled"), ("Canceled", "Completed")])
def test_canceled_and_completed_exclude_each_other(first: str, second: str) -> None:
    state = run("Send", "Submitted", "Working", "Cancel")
    assert {"Canceled", "Completed"} <= set(offered(state, "Agent"))
    perform(state, first)
    violation = refused(state, second)
    assert (violation.rule, violation.attribute) == ("nono", first)


def test_a_rejected_task_ends_the_enactment() -> None:
    state = run("Send", "Rejected")
    assert state.is_complete(ROOT)
    violation = refused(state, "Submitted")
    assert (violation.rule, violation.attribute) == ("nogo", "Rejected")
    assert offered(state, "Agent") == [] and offered(state, "Client") == []


def test_a_task_may_be_rejected_while_working_and_then_takes_no_reply() -> None:
    state = run("Send", "Submitted", "Working", "InputRequired", "Rejected")
    assert state.is_complete(ROOT)
    perform(state, "Reply")  # late: the Client had not heard of the rejection
    violation = refused(state, "Resumed")
    assert (violation.rule, violation.attribute) == ("nogo", "Rejected")


# Roles -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Send", "Reply", "Cancel"])
def test_the_agent_cannot_act_for_the_client(name: str) -> None:
    state = run("Send", "Submitted", "Working", "InputRequired")
    if name == "Send":
        state = SocialState(PROTOCOL)
    violation = state.check([instance(name)], ["Agent"])
    assert violation is not None and violation.rule == "role", violation
    assert state.check([instance(name)], ["Client"]) is None


@pytest.mark.parametrize("name", ["Submitted", "Completed"])
def test_the_client_cannot_act_for_the_agent(name: str) -> None:
    state = run(*PATHS["Completed"][: PATHS["Completed"].index(name)])
    violation = state.check([instance(name)], ["Client"])
    assert violation is not None and violation.rule == "role", violation
    assert state.check([instance(name)], ["Agent"]) is None


# Why the Client's Cancel is not refused after Completed --------------------------


def test_refusing_the_clients_cancel_after_completed_would_be_unsafe_between_peers() -> None:
    text = (PROTOCOLS / "a2a-task.lsh").read_text() + "  Completed -/> Cancel\n"
    strict = LangshawProtocol.parse(text, source="strict.lsh", base=PROTOCOLS)
    assert verify(strict, semantics="shared").safe
    report = verify(strict, semantics="decentralized")
    assert not report.safe
    assert {(c.rule, c.actions) for c in report.conflicts} == {("nogo", ("Completed", "Cancel"))}
