"""``strabo demo``: one UCP checkout, every part running for real.

A SyncServer and (unless ``--merchant`` names another) the bundled UCP merchant
are served on loopback ports; the Platform agent and the Business proxy connect
to the SyncServer over HTTP, and the proxy to the merchant. With ``--executor
peer`` no SyncServer runs: each agent is a ``PeerExecutor`` serving its own
endpoint on a loopback port, and they send each other what they perform. The
trace shows each Langshaw action as it is finalized (peer to peer: as the
Platform performs or accepts it) and each HTTP call the proxy makes.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from strabo.ucp.a2a_tools import CHOICES
from syncserver.options import CLOSED_STDOUT, DONE, positive, silence_stdout

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from peach.peer import PeerExecutor, Refusal

EXECUTORS = ("syncserver", "peer")
WIRES = {"mcp": "MCP", "a2a": "A2A"}
"""The transports other than REST, by the name the trace gives them."""
OUTCOMES = ("completed", "declined", "out-of-stock", "escalated", "revoked", "rejected")

DESCRIPTION = """\
Run one whole UCP checkout with embedded parts: a SyncServer, the bundled UCP
merchant, the Business proxy and the Platform agent, all on loopback.

It prints each Langshaw action as it is finalized (performer and keys), each
HTTP call the proxy makes (method, path, status), and a summary: checkout id,
order id and totals. Exit status 0 when the checkout completed.

With --executor peer there is no SyncServer: the Platform and the Business
proxy each run a PeerExecutor (peach.peer) with its log in memory, serve their
own endpoint on a loopback port and send each other what they perform. Each
agent checks its attempts against its own state alone, so there is no
finalization policy to choose (--policy is for the SyncServer only). The trace
numbers the actions in the Platform's own log.

With --protocol resilient (ResilientUCP: SimpleUCP with UCP's failures as
actions), --outcome picks how the checkout ends. The bundled merchant is told
through its testing endpoints to decline the payment, run out of stock, ask
for escalation or cancel the session; 'rejected' updates the cart to more than
the shop has, and the Platform cancels. Exit status 0 when the Platform saw the
ending the outcome calls for.

To use another UCP merchant (the UCP samples' Python reference server, say),
give its base URL with --merchant; it must publish its UCP profile at
/.well-known/ucp and sell the item 'bouquet_roses' (both the reference and the
bundled merchant do), or the product --product names: then the buyer also
carries a shipping address, for a merchant that takes it with the buyer's
details (Google's A2A business agent: --product BISC-001). Exit status 2 when
a URL given is not a URL or what answers is not a UCP merchant, 1 when nothing
answers.

Examples:
  strabo demo                     # REST, the bundled merchant, a SyncServer
  strabo demo --transport mcp     # checkout over the merchant's MCP tools
  strabo demo --merchant http://127.0.0.1:8182
  strabo demo --executor peer     # no SyncServer: the two agents are peers
"""


def configure(parser: argparse.ArgumentParser) -> None:
    from syncserver.config import POLICIES

    parser.add_argument(
        "--merchant",
        metavar="URL",
        help="base URL of a running UCP merchant (default: start the bundled one)",
    )
    parser.add_argument(
        "--protocol",
        choices=["atomic", "incremental", "resilient"],
        default="atomic",
        help="SimpleUCP, one Create for the whole checkout (default), IncrementalUCP, "
        "one version per change, or ResilientUCP, SimpleUCP with every ending as an action",
    )
    parser.add_argument(
        "--outcome",
        choices=list(OUTCOMES),
        default=None,
        help="with --protocol resilient: how the checkout should end (default completed); "
        "all but completed need the bundled merchant",
    )
    parser.add_argument(
        "--ucp-version",
        choices=["2026-01-11", "2026-04-08"],
        default=None,
        help="the UCP version the bundled merchant serves (default 2026-01-11); the "
        "proxy reads it from the merchant's profile either way",
    )
    parser.add_argument(
        "--product",
        metavar="ID",
        default=None,
        help="with --merchant: the product the Platform buys (the merchant's item id, "
        "e.g. BISC-001 for Google's A2A business agent; default bouquet_roses), for a "
        "buyer with a shipping address; with --protocol atomic or incremental",
    )
    parser.add_argument(
        "--transport",
        choices=["rest", "mcp", "a2a"],
        default="rest",
        help="what the proxy sends checkout over: REST (default), the merchant's MCP "
        "tools, which UCP 2026-04-08 has, or its A2A agent (both versions); either "
        "makes the bundled merchant serve 2026-04-08 unless --ucp-version says otherwise",
    )
    parser.add_argument(
        "--a2a-dialect",
        choices=CHOICES,
        default="auto",
        help="with --transport a2a: the messages the proxy sends, strabo's (session: "
        "create_checkout...; the bundled merchant) or a tool-style agent's (tool: "
        "add_to_checkout...; Google's A2A business agent); default auto, as the agent card "
        "says. A forced dialect the card reads otherwise is used, with a warning",
    )
    parser.add_argument(
        "--platform-profile",
        metavar="URL",
        default=None,
        help="the public URL of the Platform profile the proxy names in UCP-Agent, for a "
        "merchant that cannot reach loopback (publish the proxy's profile there); default: "
        "the proxy serves it on loopback. It must answer; the order's webhooks are then "
        "not followed (a published profile cannot name this run's receiver)",
    )
    parser.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="syncserver",
        help="how the agents enact the protocol: through a SyncServer (default), or "
        "peer to peer with no SyncServer (a PeerExecutor per agent, over HTTP on loopback)",
    )
    parser.add_argument(
        "--policy",
        choices=POLICIES,
        default=None,
        help="the SyncServer's finalization policy (default instant); not with "
        "--executor peer, which has no SyncServer",
    )
    parser.add_argument(
        "--timeout",
        type=positive,
        default=30.0,
        metavar="SECONDS",
        help="give up if the checkout is not complete by then (default 30)",
    )


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    logging.basicConfig(level=logging.WARNING, format="  ! %(name)s: %(message)s")
    logging.getLogger("strabo.merchant").setLevel(logging.ERROR)
    if args.executor == "peer" and args.policy is not None:
        print(
            "strabo demo: --policy is the SyncServer's finalization policy, and "
            "--executor peer runs no SyncServer (each agent's attempt is final on its "
            "own log): drop --policy",
            file=sys.stderr,
        )
        return 2
    problem = _outcome_problem(args.protocol, args.outcome, args.merchant)
    if args.ucp_version and args.merchant:
        problem = ("--ucp-version is the bundled merchant's; a merchant given with "
                   "--merchant serves what it serves (the proxy reads its profile)")
    problem = _product_problem(args.protocol, args.product, args.merchant) or problem
    if args.transport == "mcp" and args.ucp_version == "2026-01-11":
        problem = "--transport mcp needs UCP 2026-04-08 (2026-01-11 has no MCP checkout)"
    problem = _dialect_problem(args.transport, args.a2a_dialect) or problem
    problem = _urls_problem(args.merchant, args.platform_profile) or problem
    if problem:
        print(f"strabo demo: {problem}", file=sys.stderr)
        return 2
    if args.transport != "rest" and not args.merchant and not args.ucp_version:
        args.ucp_version = "2026-04-08"
    return asyncio.run(
        demo(args.protocol, args.policy, args.merchant, args.timeout, executor=args.executor,
             outcome=args.outcome, ucp_version=args.ucp_version,
             platform_profile=args.platform_profile, transport=args.transport,
             product=args.product, a2a_dialect=args.a2a_dialect)
    )


def _urls_problem(merchant: str | None, platform_profile: str | None) -> str | None:
    from strabo._demo_checks import url_problem

    return url_problem("--merchant", merchant) or url_problem(
        "--platform-profile", platform_profile)


def _product_problem(protocol: str, product: str | None, merchant: str | None) -> str | None:
    if product and (not merchant or protocol == "resilient"):
        return ("--product names an item of the merchant given with --merchant, for "
                "--protocol atomic or incremental (the bundled merchant sells the sample)")
    return None


def _dialect_problem(transport: str, dialect: str) -> str | None:
    if dialect != "auto" and transport != "a2a":
        return (f"--a2a-dialect is the dialect of an A2A agent: it goes with --transport "
                f"a2a, not {transport}")
    return None


def _outcome_problem(protocol: str, outcome: str | None, merchant: str | None) -> str | None:
    if outcome is not None and protocol != "resilient":
        return ("--outcome needs --protocol resilient (only ResilientUCP has an action for "
                "each ending)")
    if outcome not in (None, "completed") and merchant:
        return (f"--outcome {outcome} tells the bundled merchant how to fail, through its "
                "testing endpoints: drop --merchant")
    return None


async def demo(
    protocol_name: str,
    policy: str | None,
    merchant: str | None,
    seconds: float,
    *,
    executor: str = "syncserver",
    outcome: str | None = None,
    ucp_version: str | None = None,
    platform_profile: str | None = None,
    transport: str = "rest",
    product: str | None = None,
    a2a_dialect: str = "auto",
) -> int:
    """Run one checkout; 0 when it completed. ``executor`` is "syncserver" (one
    embedded, with ``policy``, default instant) or "peer" (no SyncServer: a
    PeerExecutor per agent; ``policy`` must be None). With ``protocol_name``
    "resilient", ``outcome`` (default "completed") is how it must end, and 0
    means the Platform saw that ending. ``ucp_version`` is the version the bundled
    merchant serves. ``platform_profile`` is the public URL of the Platform
    profile the proxy names (None: the proxy serves it on loopback). ``transport``
    is what the proxy sends checkout over: "rest", "mcp" (2026-04-08 only) or
    "a2a". With ``merchant``, ``product`` is the item the Platform buys, for a
    buyer with a shipping address. ``a2a_dialect`` is the proxy's over A2A
    ("auto", the card's; "session" or "tool" forced)."""
    import asyncio
    import contextlib

    from langshaw import LangshawProtocol
    from peach import Executor, SyncExecutor
    from strabo import serve
    from strabo.merchant import create_app as merchant_app
    from strabo.merchant import merchant_of
    from strabo.proxy import ProxyError, ProxyRequest, Route
    from strabo.ucp.business_proxy import business_proxy, ucp_header_hook
    from strabo.ucp.incremental_platform import incremental_platform
    from strabo.ucp.incremental_proxy import incremental_proxy
    from strabo.ucp.platform_agent import PROTOCOL as ATOMIC
    from strabo.ucp.platform_agent import platform_agent

    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, not {executor!r}")
    if executor == "peer" and policy is not None:
        raise ValueError("a finalization policy is the SyncServer's: give none with peer")
    problem = _outcome_problem(protocol_name, outcome, merchant) or _product_problem(
        protocol_name, product, merchant) or _dialect_problem(transport, a2a_dialect)
    problem = problem or _urls_problem(merchant, platform_profile)
    if problem:
        raise ValueError(problem)
    from strabo import _demo_checks
    from strabo.ucp.a2a_tools import forced

    forced(a2a_dialect)  # ValueError for a dialect not in CHOICES, before anything starts
    outcome = outcome or "completed"
    make_platform: Callable[..., tuple[Any, asyncio.Event]]
    make_proxy: Callable[..., Any]  # each takes transport=; a2a_dialect is set after
    if protocol_name == "atomic":
        protocol = LangshawProtocol.load(ATOMIC)
        make_platform, make_proxy = platform_agent, business_proxy
    elif protocol_name == "resilient":
        from strabo.ucp.resilient_proxy import PROTOCOL as RESILIENT
        from strabo.ucp.resilient_proxy import resilient_proxy

        protocol = LangshawProtocol.load(RESILIENT)
        make_proxy = resilient_proxy
    else:
        from strabo.ucp.incremental_platform import PROTOCOL as INCREMENTAL

        protocol = LangshawProtocol.load(INCREMENTAL)
        make_platform, make_proxy = incremental_platform, incremental_proxy
    roles = {"platform": ["Platform"], "business": ["Business"]}
    trace = _Trace()
    failures: list[str] = []
    executors: dict[str, Executor] = {}
    peers: dict[str, PeerExecutor] = {}

    async with contextlib.AsyncExitStack() as stack:
        if executor == "peer":
            peers = _peers(protocol, roles)
            executors = dict(peers)
            header = [f"strabo demo: a UCP checkout with {protocol.name}, peer to peer"]
            header += [
                f"  {name:<11} {peer.me.url} (peer to peer, no SyncServer, log in memory)"
                for name, peer in peers.items()
            ]
        else:
            from syncserver import SyncServer, create_app, uvicorn_options

            policy = policy or "instant"
            server = SyncServer.embedded([protocol], roles, policy=policy)
            sync_url = await stack.enter_async_context(
                serve(create_app(server), **uvicorn_options(server.config.limits))
            )
            executors = {name: SyncExecutor(sync_url, name) for name in roles}
            header = [
                f"strabo demo: a UCP checkout with {protocol.name}, {policy} finalization",
                f"  SyncServer  {sync_url} (log in memory)",
            ]
        bundled = merchant_app(ucp_version=ucp_version or "2026-01-11")
        merchant_url: str = (
            merchant if merchant else await stack.enter_async_context(serve(bundled))
        )
        if protocol_name == "resilient":
            from strabo import _demo_endings

            testing = _testing(merchant_url, merchant_of(bundled).simulation_secret, trace)

            def make_platform(ex: Executor) -> tuple[Any, asyncio.Event]:
                return _demo_endings.platform(ex, outcome, testing)
        trace("\n".join(header))
        kind = "external" if merchant else f"bundled, UCP {ucp_version or '2026-01-11'}"
        kind += f", checkout over {WIRES[transport]}" if transport in WIRES else ""
        kind += f", {a2a_dialect} dialect (forced)" if a2a_dialect != "auto" else ""
        trace(f"  merchant    {merchant_url} ({kind})\n")
        problem, status = (await _demo_checks.profile_problem(merchant_url, seconds)
                           if merchant else (None, DONE))
        if platform_profile and not problem:  # else the merchant would wait on it, or refuse
            problem, status = await _demo_checks.platform_profile_problem(
                platform_profile, seconds)
        if problem:
            print(f"strabo demo: {problem}", file=sys.stderr)
            return status

        proxy = make_proxy(executors["business"], merchant_url, transport=transport)
        proxy.platform_profile = platform_profile
        proxy.a2a_dialect = a2a_dialect
        platform, done = make_platform(executors["platform"], **_buying(product))
        from strabo.ucp import order_demo  # the order through to delivery (UCPOrder)

        done = await order_demo.stage(
            stack, proxy, done, failures, trace,
            merchant_url=merchant_url, seconds=seconds,
            secret=None if merchant or outcome != "completed" or platform_profile
            else merchant_of(bundled).simulation_secret,
            version=ucp_version or "2026-01-11", peer=executor == "peer")
        platform.listeners.append(lambda batch, newly: _print_batch(trace, batch))
        # An ending with no order is final: the order stage would wait for nothing.
        ended = _demo_checks.ending(platform, protocol)
        proxy.http_listeners.append(lambda event: _print_http(trace, event, transport))

        @proxy.on_error
        async def on_error(error: ProxyError, route: Route, trigger: Any) -> None:
            failures.append(_failure(proxy, route, error))
            done.set()

        def refusals(agent: str) -> Callable[[Refusal], None]:
            def refused(refusal: Refusal) -> None:  # peer to peer: the enactment diverged
                by, of = (agent, refusal.peer) if refusal.incoming else (refusal.peer, agent)
                failures.append(
                    f"{by} refused a message of {of} ({refusal.rule}): {refusal.message}"
                )
                done.set()

            return refused

        for name, peer in peers.items():
            peer.refusal_listeners.append(refusals(name))

        async with proxy, platform:
            waiters = [asyncio.ensure_future(e.wait()) for e in (done, ended, trace.gone)]
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waiters:
                waiter.cancel()
            if trace.gone.is_set():
                # The reader went away (| head): nothing more to show; a failure
                # already recorded still decides the status.
                return 1 if failures else CLOSED_STDOUT
            if not (done.is_set() or ended.is_set()):
                failures.append(f"the checkout did not complete within {seconds:g} s")
            await platform.drain()
            await _delivered(list(peers.values()))
            history = [i for root in platform.enactments() for _, i, _ in platform.history(root)]

        if protocol_name == "resilient":
            from strabo import _demo_endings

            ok, lines = _demo_endings.summary(platform, outcome)
            print("\nSummary", file=sys.stdout if ok and not failures else sys.stderr)
            for line in [*lines, *(f"  {f}" for f in failures)]:
                print(line, file=sys.stdout if ok and not failures else sys.stderr)
            return 0 if ok and not failures else 1
        failures += _unsaid(history, proxy)
        if failures or not any(i.name == "Completed" for i in history):
            print("\nThe checkout did not complete:", file=sys.stderr)
            for failure in failures or [_demo_checks.refused(history)]:
                print(f"  {failure}", file=sys.stderr)
            return 1
        checkout = next(i["id"] for i in history if i.name == "Created")
        order = next(i["order"] for i in history if i.name == "Completed")
        session = await _session(merchant_url, checkout, ucp_header_hook, ProxyRequest)
        # A checkout sent over A2A may have no REST side (Google's agent): the last
        # state its answers carried.
        session = session or getattr(getattr(proxy, "_mcp", None), "seen", {}).get(checkout, {})
    print("\nSummary")
    print(f"  checkout  {checkout} ({session.get('status', '?')})")
    print(f"  order     {(order or {}).get('id')}")
    print(f"  totals    {_totals(session)}")
    return 0


def _buying(product: str | None) -> dict[str, Any]:
    """The Platform's options for ``--product``: its line items, and a buyer with
    a shipping address (in UCP's address fields)."""
    if product is None:
        return {}
    from strabo.ucp.buying import SAMPLE_ADDRESS, line_items_of
    from strabo.ucp.platform_agent import SAMPLE_BUYER

    return {"line_items": line_items_of(product), "buyer": {**SAMPLE_BUYER, **SAMPLE_ADDRESS}}


def _failure(proxy: Any, route: Any, error: Any) -> str:
    """One line for a failure the protocol could not say (the proxy escalated it):
    whether the merchant placed an order, which must not be cancelled, first."""
    escalations = getattr(proxy, "escalations", None) or [None]
    order = getattr(escalations[-1], "order", None)
    if order:
        return (f"{route.trigger}: the merchant placed order {order}, but its answer cannot "
                f"be said in the protocol ({error.message}); escalated, not cancelled: "
                "follow the order with the merchant")
    return f"{route.trigger}: {error.message}"


def _unsaid(history: list[Any], proxy: Any) -> list[str]:
    """IncrementalUCP: a Complete answered by a StatusChange, which ends the
    checkout (the Platform may not cancel after Complete), as a line for the summary."""
    from strabo.ucp.incremental_platform import CANCELLABLE

    lines = []
    for change in (i for i in history if i.name == "StatusChange"):
        if change["status"] in CANCELLABLE:
            lines.append(f"Complete: the merchant did not complete the checkout (status "
                         f"{change['status']}: no order); its session stays open (see the "
                         "log above)")
            continue
        checkout = next((i["id"] for i in history if i.name == "Created"), None)
        order = getattr(proxy, "placed", {}).get(checkout)
        said = f"the merchant placed order {order}" if order else (
            f"the checkout is {change['status']}")
        lines.append(f"Complete: {said}, but its answer cannot be said as Completed; "
                     "not cancelled: follow it with the merchant (see the log above)")
    return lines


def _peers(protocol: Any, roles: dict[str, list[str]]) -> dict[str, PeerExecutor]:
    """A PeerExecutor per agent, each to serve its endpoint on a free loopback
    port, with its log in memory; the directory is built here, with a secret of
    the run's own for each agent."""
    import secrets

    from peach.peer import Directory, PeerExecutor
    from strabo.serving import free_port

    directory = Directory.of(
        [protocol],
        {
            name: {
                "roles": played,
                "token": secrets.token_hex(16),
                "url": f"http://127.0.0.1:{free_port()}",
            }
            for name, played in roles.items()
        },
        mas="default",
    )
    return {name: PeerExecutor(name, directory) for name in roles}


async def _delivered(peers: list[PeerExecutor], seconds: float = 5.0) -> None:
    """Peer to peer: wait (a little) until each agent's peers have acknowledged
    what it performed, so that stopping does not cut a delivery short."""
    import asyncio
    import contextlib

    async def wait() -> None:
        for peer in peers:
            while peer.outstanding():
                peer.progress.clear()  # set again on every acknowledgement
                if peer.outstanding():
                    await peer.progress.wait()

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(wait(), seconds)


class _Trace:
    """The demo's running output. A reader that goes away (``strabo demo | head``)
    ends the demo at once, quietly: what it read was what it wanted."""

    def __init__(self) -> None:
        import asyncio

        self.gone = asyncio.Event()

    def __call__(self, text: str) -> None:
        if self.gone.is_set():
            return
        try:
            print(text, flush=True)
        except BrokenPipeError:
            silence_stdout()
            self.gone.set()


def _print_batch(trace: _Trace, batch: Any) -> None:
    for entry in batch.entries:
        instance = entry.instance
        keys = " ".join(f"{k}={v}" for k, v in instance.keys.items())
        trace(f"  #{batch.seq:<3} {instance.name:<17} by {entry.performer:<9} {keys}")


def _print_http(trace: _Trace, event: Any, transport: str = "rest") -> None:
    """One line per exchange: ``HTTP`` with the method and path, or, for a checkout
    request sent over MCP or A2A, the transport and the tool or action it was
    sent as (the route's path is REST's, not what went on the wire)."""
    from strabo.ucp.mcp_transport import tool_of
    from strabo.ucp.order_demo import fit

    status = event.status if event.status is not None else f"no answer ({event.error})"
    retry = f"  (try {event.attempt})" if event.attempt > 1 else ""
    found = tool_of(event.method, event.path) if transport in WIRES else None
    if found is None:
        what = f"HTTP {event.method:<5} {fit(event.path, 64)}"
    else:
        tool, checkout = found
        label = f"{tool} {checkout}" if checkout else tool
        what = f"{WIRES[transport]:<4} {fit(label, 70)}"
    trace(f"       {what} {status}  {event.seconds * 1000:.1f} ms{retry}")


async def _session(url: str, checkout: str, hook: Any, request: Any) -> dict[str, Any]:
    """The session as the merchant sees it now (for the summary only)."""
    import httpx

    target = f"{url.rstrip('/')}/checkout-sessions/{checkout}"
    headers = dict(hook(request("Get", "GET", target, None, "-", 1)))
    headers.pop("Idempotency-Key", None)
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            response = await client.get(target, headers=headers)
        return response.json() if response.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        return {}


def _totals(session: dict[str, Any]) -> str:
    currency = session.get("currency", "")
    parts = []
    for total in session.get("totals") or []:
        amount = total.get("amount", 0) / 100
        sign = "-" if total.get("type") == "discount" else ""
        parts.append(f"{total.get('type')} {sign}{amount:.2f}")
    return (", ".join(parts) + f" {currency}").strip() or "(unknown)"


def _testing(
    url: str, secret: str, trace: _Trace
) -> Callable[[str, str, Any], Awaitable[None]]:
    """A caller of the bundled merchant's testing endpoints, for --outcome."""
    import httpx

    async def call(method: str, path: str, body: Any) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            response = await client.request(method, f"/testing/{path}", json=body,
                                             headers={"Simulation-Secret": secret})
        response.raise_for_status()
        trace(f"       (merchant told: {method} /testing/{path})")

    return call
