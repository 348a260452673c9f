"""A hostile review of the day's commits 502e561 .. f40ffd7: the approval wait
(peach/_mandate.py, peach/llm/_asking.py), mandates checked against the
agent's roles (syncserver/mandate.py), RoleAgent's bounded tasks
(peach/a2a/server.py), the A2A dialect and rebased endpoints (strabo/ucp),
the merchant's replay memory (strabo/merchant/_idempotency.py).

Each test is a finding, fixed in the product code, or pins down an edge the
review tried; each fails on the code before its fix.
"""

from __future__ import annotations

import asyncio
import io
import sys
from collections.abc import Sequence

import pytest

from langshaw import ActionInstance
from peach import MandateRefused, PeachAdapter
from tests.harness import Harness
from tests.peach.test_mandate import AGENTS, SIMPLE, create, mandate, mine

# 1. The approval wait ------------------------------------------------------------


async def test_a_yes_that_comes_after_the_timeout_approves_nothing() -> None:
    """An approver that does not let itself be cancelled (it catches the
    cancellation, or waits in something that swallows it, as wait_for could
    on Python 3.11) and answers yes once the time is up: the attempt was
    given up on, and must be refused, not sent."""
    asked, never = asyncio.Event(), asyncio.Event()

    async def stubborn(agent: str, instances: Sequence[ActionInstance]) -> bool:
        asked.set()
        try:
            await never.wait()
        except asyncio.CancelledError:
            return True  # "yes", after the adapter gave up on the question
        return True

    async with asyncio.timeout(30), Harness("local", [SIMPLE], AGENTS) as h:
        platform = PeachAdapter(
            "platform", SIMPLE, "Platform", h.executor("platform"),
            mandate=mandate(approval=["Create"]), approve=stubborn, approve_timeout=0.1,
        )
        h.adapters.append(platform)
        async with platform:
            with pytest.raises(MandateRefused, match=r"Create was not approved within 0\.1 s"):
                await platform.attempt([create(platform)])
            assert asked.is_set()
            assert mine(platform, "Create") == 0
            assert platform._guard is not None and platform._guard._flying == []


async def test_the_terminal_reads_the_stdin_of_the_time_it_asks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``strabo agent`` checks ``sys.stdin.isatty()`` when it asks; the
    answer must come from that same stdin, not the one there was when
    peach.llm._asking was first imported (as ``input`` did before)."""
    from peach.llm._asking import Terminal

    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    shown: list[str] = []
    terminal = Terminal(write=shown.append)
    async with asyncio.timeout(10):
        assert await terminal.ask("Approve? ") == "y"
    assert shown == ["Approve? "]


# 2. Mandate clauses checked against the agent's roles -------------------------------

GO_BY_A = "P1\nwho A, B\nwhat id key, Go\ndo\n  A : Go(id, amount)\nsayso\n  A : amount\n"
GO_BY_B = "P2\nwho A, B\nwhat id key, Go\ndo\n  B : Go(id, note)\nsayso\n  B : note\n"


@pytest.mark.parametrize("order", [(0, 1), (1, 0)], ids=["p1-first", "p2-first"])
def test_an_action_name_two_protocols_share_is_the_agents_if_it_performs_it_in_either(
    order: tuple[int, int],
) -> None:
    """The agent plays A in both protocols: it performs P1's Go (A's), not
    P2's (B's). Its mandate bounds Go and Go's amount: whichever protocol
    comes last, that is not a mistake (the check read one protocol per
    action name, the last, and called the clause a bound on nothing)."""
    from langshaw import LangshawProtocol
    from syncserver.mandate import Mandate

    pair = [LangshawProtocol.parse(GO_BY_A), LangshawProtocol.parse(GO_BY_B)]
    protocols = [pair[i] for i in order]
    problems: list[str] = []
    table = {
        "actions": {"Go": {"per_run": 2}},
        "values": {"amount": {"max": 10}, "Go.amount": {"max": 5}},
        "approval": ["Go"],
    }
    mandate = Mandate.parse(
        table, protocols, "mandate", lambda at, m: problems.append(f"{'.'.join(at)}: {m}"),
        {"P1": {"A"}, "P2": {"A"}},
    )
    assert problems == []
    assert mandate.approval == frozenset({"Go"})
    # Still refused: a role that performs neither protocol's Go, an attribute
    # only the other role's Go has.
    problems.clear()
    Mandate.parse(
        {"actions": {"Go": {"per_run": 2}}, "values": {"note": {"max": 1}}}, protocols,
        "mandate", lambda at, m: problems.append(f"{'.'.join(at)}: {m}"),
        {"P1": {"B"}, "P2": {"A"}},
    )
    assert len(problems) == 2, problems
    assert "performed by" in problems[0] and "no action this agent performs" in problems[1]


# 4. Endpoints read where the profile was ---------------------------------------------


@pytest.mark.parametrize("listed", ["http://[::1/a2a", "http://[localhost/.well-known/agent.json"])
def test_an_endpoint_urllib_cannot_read_is_left_for_the_transport_to_refuse(listed: str) -> None:
    """A profile naming an endpoint urllib refuses ("Invalid IPv6 URL"): the
    rebasing added today raised ValueError out of discovery (a traceback),
    where the transport has always refused such a URL clearly (Unsendable,
    "not an http(s) URL")."""
    from strabo.ucp.a2a_transport import A2aCheckout, Unsendable, a2a_endpoint
    from strabo.ucp.mcp_transport import mcp_endpoint, rebased

    read_from = "http://127.0.0.1:8182"
    assert rebased(listed, read_from) == listed
    new = {"ucp": {"services": {"dev.ucp.shopping": [
        {"transport": "a2a", "endpoint": listed}, {"transport": "mcp", "endpoint": listed}]}}}
    old = {"ucp": {"services": {"dev.ucp.shopping": {"a2a": {"endpoint": listed}}}}}
    assert a2a_endpoint(new, read_from) == listed
    assert a2a_endpoint(old, read_from) == listed
    assert mcp_endpoint(new, read_from) == listed
    with pytest.raises(Unsendable, match="not an http"):
        asyncio.run(A2aCheckout(listed, "2026-01-11")._open())


# 5. The merchant's replay memory, bounded in bytes -------------------------------------


def test_the_byte_bound_counts_the_idempotency_keys_too() -> None:
    """An Idempotency-Key is the client's to choose, up to what the HTTP server
    takes in a header (16 KiB with h11), and the REST intake bounds it no
    further: a hundred thousand tiny replies under 16 KiB keys are 1.6 GB
    that a bound weighing the replies alone never sees."""
    from strabo.merchant._idempotency import IdempotencyStore, Reply, fingerprint

    store = IdempotencyStore(kept=1_000, kept_bytes=50_000)
    for n in range(20):
        key = f"{n:05d}" + "k" * 16_000
        store.remember(key, fingerprint("create", None, {}), Reply(201, {"id": n}))
    records = store._records
    assert records.bytes <= 50_000 or len(records) == 1
    assert sum(len(k) for k in records) <= 50_000
    latest = f"{19:05d}" + "k" * 16_000
    assert store.replay(latest, fingerprint("create", None, {})) == Reply(201, {"id": 19})


def test_a_dialect_that_is_none_is_called_so_whatever_the_transport() -> None:
    """``business_proxy(a2a_dialect="soap")`` over REST said the dialect "is
    for transport='a2a'", as if "soap" were one: the value is wrong first."""
    from strabo.ucp.business_proxy import business_proxy

    with pytest.raises(ValueError, match="must be one of auto, session, tool, not 'soap'"):
        business_proxy(object(), "http://127.0.0.1:1", a2a_dialect="soap")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="is for transport='a2a'"):
        business_proxy(object(), "http://127.0.0.1:1", a2a_dialect="tool")  # type: ignore[arg-type]


SCRIPT = """
import asyncio
from peach.llm._asking import Terminal

async def main():
    terminal = Terminal()
    try:
        async with asyncio.timeout(0.1):  # the adapter's approve_timeout, shortened
            await terminal.ask("Approve? ")
    except TimeoutError:
        print("given up", flush=True)

asyncio.run(main())
print("done", flush=True)
"""


def test_a_question_given_up_on_does_not_hold_the_program_at_its_end() -> None:
    """The read outlives its question (it cannot be cancelled): in the default
    executor, asyncio.run's end waited for it, so ``strabo agent`` could not
    exit after an approval timed out until someone pressed Enter. Its stdin
    here is a pipe that stays open and never gets a line."""
    import subprocess

    from tests.conftest import ROOT

    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        process.wait(timeout=20)  # stdin open all along (communicate would close it)
        hung = False
    except subprocess.TimeoutExpired:
        hung = True
        process.kill()
        process.wait()
    finally:
        process.stdin.close()
    out = process.stdout.read()
    process.stdout.close()
    assert not hung, f"still waiting for a line after the question was given up on: {out!r}"
    assert out.splitlines()[-2:] == ["Approve? given up", "done"]
