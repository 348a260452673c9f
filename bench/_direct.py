"""Direct clients of the checkout transports other than REST, for bench/proxy.py.

Each is the yardstick of its transport: what a platform would write by hand
with the transport's usual client, making the calls the Business proxy makes
for one SimpleUCP checkout (create, two shipping updates, complete), with the
same arguments, against the same merchant, at UCP 2026-04-08. Each has the
interface bench/proxy.py drives: ``name``, ``label``, ``open()`` (untimed:
discovery, sessions, a Platform profile on loopback, as the proxy serves one),
``checkout()`` (the seconds one checkout took) and ``aclose()``.

"The same arguments" is checked, not assumed: :func:`check_mcp` and
:func:`check_a2a` record what one checkout sends through the proxy and through
the direct client, and refuse to measure if they differ in anything but ids,
keys and ports.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from strabo.ucp import mcp_transport
from strabo.ucp.platform_agent import (
    SAMPLE_BUYER,
    SAMPLE_FULFILLMENT_PREF,
    SAMPLE_LINE_ITEMS,
    SAMPLE_PAYMENT_DATA,
)
from strabo.ucp.profile import ProfileSite, platform_profile
from strabo.ucpwire import NEW
from syncserver.client import Client, HttpxClient, LeanClient

# The checkout at UCP 2026-04-08, written by hand from the Platform's sample
# bindings (strabo.ucp.platform_agent), as the proxy translates them.
_FIRST, _LAST = SAMPLE_BUYER["full_name"].split(" ", 1)
BUYER = {"email": SAMPLE_BUYER["email"], "first_name": _FIRST, "last_name": _LAST}
METHOD: dict[str, Any] = SAMPLE_FULFILLMENT_PREF["methods"][0]
PAYMENT = {
    "instruments": [
        {
            **{k: SAMPLE_PAYMENT_DATA[k] for k in ("id", "handler_id", "type", "credential")},
            "display": {k: SAMPLE_PAYMENT_DATA[k] for k in ("brand", "last_digits")},
            "selected": True,
        }
    ]
}
SIGNALS = {"dev.ucp.buyer_ip": "127.0.0.1"}
Recorded = list[Any]


def _common(line_items: list[dict[str, Any]], fulfillment: dict[str, Any]) -> dict[str, Any]:
    return {
        "line_items": line_items,
        "context": {"currency": "USD"},
        "buyer": BUYER,
        "discounts": {"codes": ["10OFF"]},
        "fulfillment": fulfillment,
    }


class _Direct:
    """One checkout's calls at 2026-04-08; :meth:`call` sends one (``tool``, the
    checkout's id or None, the body) and gives back the checkout answered."""

    def __init__(self, merchant: str) -> None:
        self.merchant = merchant
        self.calls: Recorded | None = None  # what is sent, recorded when a list
        self._stack = contextlib.AsyncExitStack()
        self._site = ProfileSite(lambda: platform_profile(NEW))
        self._profile = ""

    async def _discovery(self) -> Any:
        self._profile = await self._site.open()
        async with httpx.AsyncClient() as client:
            return (await client.get(self.merchant + "/.well-known/ucp")).json()

    async def aclose(self) -> None:
        await self._stack.aclose()
        await self._site.close()

    async def call(self, tool: str, checkout: str | None, body: Any) -> dict[str, Any]:
        raise NotImplementedError

    async def checkout(self) -> float:
        start = time.perf_counter()
        items: list[dict[str, Any]] = [
            {"item": {"id": li["item"]["id"]}, "quantity": li["quantity"]}  # type: ignore[index]
            for li in SAMPLE_LINE_ITEMS
        ]
        session = await self.call("create_checkout", None, _common(
            items, {"methods": [{"type": METHOD["type"]}]}))
        for with_groups in (False, True):
            items = [{"id": li["id"], "quantity": li["quantity"], "item": {"id": li["item"]["id"]}}
                     for li in session["line_items"]]
            offered = session["fulfillment"]["methods"][0]
            method: dict[str, Any] = {
                "type": METHOD["type"],
                "selected_destination_id": METHOD["selected_destination_id"],
            }
            if with_groups:
                method["groups"] = [
                    {"selected_option_id": wanted["selected_option_id"], "id": group["id"]}
                    for wanted, group in zip(METHOD["groups"], offered["groups"], strict=False)
                ]
            method.update(id=offered["id"], line_item_ids=offered["line_item_ids"])
            session = await self.call("update_checkout", session["id"], _common(
                items, {"methods": [method]}))
        done = await self.call("complete_checkout", session["id"],
                               {"payment": PAYMENT, "signals": SIGNALS})
        if done.get("status") != "completed":
            raise RuntimeError(f"the checkout did not complete: {json.dumps(done)[:500]}")
        return time.perf_counter() - start


class McpDirect(_Direct):
    """Checkouts over MCP with the official SDK's streamable-HTTP ``ClientSession``:
    one session, opened (and its protocol version negotiated, as ``mcp.Client``
    does) before the timed checkouts; the MCP endpoint from the
    merchant's discovery profile; ``meta`` naming the profile and a fresh key.
    With ``lean``, the proxy's own lean MCP client instead
    (``strabo.ucp.mcp_transport.LeanMcp``: one POST per call, MCP's stateless
    revision), which tells what the bridge costs beyond the choice of client."""

    def __init__(self, merchant: str, lean: bool = False) -> None:
        super().__init__(merchant)
        self.lean = lean
        self.name = "mcp-lean" if lean else "mcp"
        self.label = "direct lean MCP client" if lean else "direct MCP ClientSession"
        self.protocol_version = "?"
        self._session: Any = None

    async def open(self) -> None:
        from mcp import ClientSession, MCPError
        from mcp.client.streamable_http import streamable_http_client

        endpoint = mcp_transport.mcp_endpoint(await self._discovery())
        if endpoint is None:
            raise SystemExit(f"the merchant at {self.merchant} lists no MCP endpoint")
        if self.lean:
            lean = mcp_transport.LeanMcp(endpoint, 10)
            self._stack.push_async_callback(lean.aclose)
            if not await lean.discover():
                raise SystemExit(f"{endpoint} does not speak MCP's stateless revision")
            self.protocol_version, self._session = str(lean.version), lean
            return
        read, write = await self._stack.enter_async_context(streamable_http_client(endpoint))
        session = await self._stack.enter_async_context(ClientSession(read, write))
        try:  # mcp.Client's "auto": the modern discover, else the handshake
            await session.discover()
        except MCPError:
            await session.initialize()
        self.protocol_version = str(session.protocol_version)
        self._session = session

    async def call(self, tool: str, checkout: str | None, body: Any) -> dict[str, Any]:
        arguments: dict[str, Any] = {
            "meta": {"ucp-agent": {"profile": self._profile},
                     "idempotency-key": str(uuid.uuid4())}}
        if checkout is not None:
            arguments["id"] = checkout
        arguments["checkout"] = body
        if self.calls is not None:
            self.calls.append((tool, arguments))
        result = await self._session.call_tool(tool, arguments)
        if result.is_error or not isinstance(result.structured_content, dict):
            raise RuntimeError(f"{tool} over MCP failed: {result.content!r}"[:500])
        return result.structured_content


class A2aDirect(_Direct):
    """Checkouts over A2A: JSON-RPC ``message/send`` (A2A 0.3, as the spec's
    examples) posted with httpx, or with the lean client the proxy uses if
    ``lean``, through ``syncserver.client`` (as the REST direct clients); the
    endpoint from the agent card the merchant's profile lists; the UCP-Agent
    and X-A2A-Extensions headers; a fresh messageId per request and a contextId
    per checkout (docs/proxy.md, *Transports*)."""

    EXTENSION = "https://ucp.dev/2026-04-08/specification/reference"

    def __init__(self, merchant: str, lean: bool = False) -> None:
        super().__init__(merchant)
        self.lean = lean
        self.name = "a2a-lean" if lean else "a2a"
        self.label = "direct lean JSON-RPC" if lean else "direct httpx JSON-RPC"
        self._client: Client | None = None
        self._path = ""
        self._context = ""

    async def open(self) -> None:
        profile = await self._discovery()
        shopping = profile["ucp"]["services"]["dev.ucp.shopping"]
        card_url = next(e["endpoint"] for e in shopping if e.get("transport") == "a2a")
        async with httpx.AsyncClient() as client:
            card = (await client.get(card_url)).json()
        url = urlsplit(urljoin(card_url, card["url"]))
        origin = f"{url.scheme}://{url.netloc}"
        self._path = url.path
        self._client = LeanClient(origin, 10) if self.lean else HttpxClient(origin, 10, None)
        self._stack.push_async_callback(self._client.aclose)

    async def checkout(self) -> float:
        self._context = str(uuid.uuid4())  # one per checkout
        return await super().checkout()

    async def call(self, tool: str, checkout: str | None, body: Any) -> dict[str, Any]:
        data: dict[str, Any] = {"action": tool}
        if checkout is not None:
            data["id"] = checkout
        parts = [data]
        if tool == "complete_checkout":
            parts.append({"a2a.ucp.checkout.payment": body["payment"],
                          "a2a.ucp.checkout.signals": body["signals"]})
        else:
            data["a2a.ucp.checkout"] = body
        request = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": "message/send",
                   "params": {"message": {
                       "kind": "message", "role": "user", "messageId": str(uuid.uuid4()),
                       "contextId": self._context,
                       "parts": [{"kind": "data", "data": d} for d in parts]}}}
        headers = {"UCP-Agent": f'profile="{self._profile}"', "Request-Id": str(uuid.uuid4()),
                   "X-A2A-Extensions": self.EXTENSION}
        if self.calls is not None:
            self.calls.append((request, headers))
        assert self._client is not None, "open() first"
        reply = (await self._client.request("POST", self._path, request, headers)).json()
        answer = reply.get("result", {}).get("parts", [{}])[0].get("data", {})
        if "a2a.ucp.checkout" not in answer:
            raise RuntimeError(f"{tool} over A2A failed: {json.dumps(reply)[:500]}")
        return dict(answer["a2a.ucp.checkout"])


# Checking that the direct client sends what the proxy sends ----------------------------


@contextlib.contextmanager
def _recording(cls: Any, method: str, record: Any) -> Iterator[Recorded]:
    """Record what ``cls.method`` is called with while inside (``record`` picks it)."""
    calls: Recorded = []
    original = getattr(cls, method)

    def recording(self: Any, *args: Any) -> Any:
        result = original(self, *args)
        calls.append(record(args, result))
        return result

    setattr(cls, method, recording)
    try:
        yield calls
    finally:
        setattr(cls, method, original)


_VOLATILE = (
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<id>"),
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:<port>"),
)


def normalized(calls: Recorded) -> list[str]:
    """The calls as JSON lines, keys sorted (header names in lower case), ids and
    ports blanked."""
    lines = []
    for call in calls:
        if isinstance(call, tuple) and len(call) == 2 and isinstance(call[1], dict):
            call = (call[0], {str(k).lower(): v for k, v in call[1].items()})
        text = json.dumps(call, sort_keys=True)
        for pattern, placeholder in _VOLATILE:
            text = pattern.sub(placeholder, text)
        lines.append(text)
    return lines


async def _check(pipeline: Any, direct: _Direct, proxy_calls: Any, what: str) -> None:
    with proxy_calls as through_proxy:
        await pipeline.checkout()
    direct.calls = []
    try:
        await direct.checkout()
    finally:
        made, direct.calls = direct.calls, None
    if normalized(through_proxy) != normalized(made):
        diff = "\n".join(difflib.unified_diff(
            normalized(through_proxy), normalized(made), "proxy", "direct", lineterm=""))
        raise SystemExit(f"the direct {what} client's calls differ from the proxy's:\n{diff}")


def _awaited_call(args: tuple[Any, ...], result: Any) -> Any:
    return args[0], args[1]  # McpCheckout.call(tool, arguments)


async def check_mcp(pipeline: Any, direct: McpDirect) -> None:
    """Refuse to measure unless one checkout makes the same tool calls, with the
    same arguments, through the proxy (``McpCheckout.call``) and ``direct``."""
    recorder = _recording(mcp_transport.McpCheckout, "call", _awaited_call)
    await _check(pipeline, direct, recorder, "MCP")


async def check_a2a(pipeline: Any, direct: A2aDirect) -> None:
    """Refuse to measure unless one checkout sends the same ``message/send``
    requests and headers through the proxy (``A2aCheckout.message``) and ``direct``."""
    from strabo.ucp.a2a_transport import A2aCheckout

    recorder = _recording(A2aCheckout, "message", lambda args, result: result)
    await _check(pipeline, direct, recorder, "A2A")
