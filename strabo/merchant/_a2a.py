"""UCP checkout over A2A, beside REST and MCP (checkout/a2a.md), with the A2A SDK.

A merchant serves, when the A2A SDK is installed (``_discovery.a2a_available``),
an A2A agent at :data:`_discovery.A2A_PATH`: JSON-RPC with A2A 1.0's
``SendMessage`` and 0.3's ``message/send`` (the spec's examples), and its agent
card at :data:`_discovery.A2A_CARD_PATH`, which the profile lists as the ``a2a``
transport. The card advertises the UCP extension of each version served, with
the merchant's capabilities as its ``params``.

Each message is turned into the REST request it stands for (``_a2a_wire``: the
message's ``UCP-Agent`` header as ``UCP-Agent``, its ``messageId`` as
``Idempotency-Key``, ``id`` as the path, ``a2a.ucp.checkout`` as the body) and
sent to the merchant's own app, in process (``_inprocess``), as ``_mcp`` does for
MCP: the same version negotiation and translation, rules, idempotency, webhooks
and AP2 signatures as REST. The answer is an A2A Message (never a task) with one
data part, the checkout or the error REST answered.

What is the A2A side's own: which version a message speaks (the extension URI
it activates, else 400 ``extension_required``); its ``messageId`` as its
idempotency key, a replay answered with the first answer, the same id for other
content a 409, as REST's keys (successes only are kept, as REST keeps them); the
checkout each context works on, so that ``id`` may be left out; and
``add_to_checkout`` (the spec's example action), which reads the checkout and
updates it (or creates one) through REST.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from a2a.extensions.common import get_requested_extensions
from a2a.helpers.proto_helpers import get_data_parts, get_text_parts, new_data_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentSkill,
    Message,
    Role,
)
from a2a.utils.errors import UnsupportedOperationError
from google.protobuf import json_format  # type: ignore[import-untyped]
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from . import _a2a_wire as wire
from ._discovery import A2A_CARD_PATH, A2A_PATH
from ._idempotency import KEPT, KEPT_BYTES, Kept, fingerprint, json_size
from ._inprocess import call
from ._versions import SUPPORTED

log = logging.getLogger("strabo.merchant")

LEGACY_EXTENSIONS = "x-a2a-extensions"
"""The header the spec names (A2A 0.3's); A2A 1.0 says ``A2A-Extensions``. Both are read."""
MAX_DEPTH = 40
"""The deepest JSON-RPC body read (objects and arrays within each other): the
SDK's protobuf parser refuses a data part nested about 48 deep, and Python's
json about 1000, both as an internal error; a checkout is some ten deep."""
_SIGNATURE = "a2a"
"""``Request-Signature`` of the REST requests when the message has none:
2026-01-11 REST requires the header (and never checks it), A2A carries none."""


class CheckoutA2a:
    """The A2A agent of one merchant app, which it calls back (:meth:`bind`).

    ``serving`` is the newest UCP version served (each older one is served
    too); ``base`` the merchant's base URL for a request; ``capabilities`` the
    2026-01-11 profile's capabilities for a request (the card's ``params``);
    ``title_of`` and ``currency`` fill the 2026-01-11 bodies of
    ``add_to_checkout``. :meth:`running` must wrap the app's lifespan."""

    def __init__(self, *, serving: str, base: Callable[[Request], str],
                 capabilities: Callable[[Request], list[dict[str, Any]]],
                 title_of: Callable[[str], str | None], currency: str,
                 name: str = "strabo merchant") -> None:
        self.versions = [v for v in SUPPORTED if v <= serving]
        self.base, self.capabilities = base, capabilities
        self.title_of, self.currency, self.name = title_of, currency, name
        self._app: ASGIApp | None = None
        # messageId -> digest, data; (UCP-Agent, contextId) -> checkout: the KEPT
        # latest of each, so that made-up ids cannot fill the memory.
        self._replies: Kept[str, tuple[str, dict[str, Any]]] = Kept(
            KEPT, KEPT_BYTES, lambda reply: json_size(reply[1]))
        self._busy: dict[str, tuple[asyncio.Lock, list[int]]] = {}  # messageId -> lock, users
        self._contexts: Kept[tuple[str, str], str] = Kept(KEPT)
        self._handler = DefaultRequestHandler(
            agent_executor=_Executor(self), task_store=InMemoryTaskStore(),
            agent_card=self.agent_card(A2A_PATH, []))

    def bind(self, app: ASGIApp) -> None:
        """The merchant app that REST requests go to."""
        self._app = app

    def routes(self) -> list[Route]:
        """The agent card and the JSON-RPC endpoint (1.0 and 0.3 method names)."""
        [sdk] = create_jsonrpc_routes(self._handler, A2A_PATH, context_builder=_Context(),
                                      enable_v0_3_compat=True)
        return [Route(A2A_CARD_PATH, self.card, methods=["GET"]),
                Route(A2A_PATH, _whole_numbers(sdk.endpoint), methods=["POST"])]

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve while inside; on the way out, the SDK's handler is closed."""
        try:
            yield
        finally:
            await self._handler.aclose()

    # ------------------------------------------------------------------ the card

    def agent_card(self, url: str, capabilities: list[dict[str, Any]]) -> AgentCard:
        """The card of the agent at ``url`` (its JSON-RPC endpoint), advertising
        the UCP extension of each version served with ``capabilities`` (the
        2026-01-11 profile's) in the spec's form, at that version."""
        extensions = []
        for version in reversed(self.versions):
            listed: dict[str, list[dict[str, Any]]] = {}
            for capability in capabilities:
                entry = {"version": version}
                if isinstance(capability.get("extends"), str):
                    entry["extends"] = capability["extends"]
                listed.setdefault(str(capability.get("name")), []).append(entry)
            extension = AgentExtension(uri=wire.EXTENSIONS[version],
                                       description="Business agent supporting UCP")
            # the actions it takes: what tells strabo's dialect from a tool-style
            # agent's (strabo.ucp.a2a_tools.dialect_of)
            extension.params.update({"capabilities": listed, "actions": list(wire.ACTIONS)})
            extensions.append(extension)
        actions = ", ".join(wire.ACTIONS)
        return AgentCard(
            name=self.name,
            description=("UCP checkout (dev.ucp.shopping.checkout) over A2A, the same "
                         "checkouts as this merchant's REST API. Activate the UCP extension "
                         "(X-A2A-Extensions), send UCP-Agent, and one data part "
                         '{"action": ..., "id": ..., "a2a.ucp.checkout": {...}}; actions: '
                         f"{actions}. Answers are messages with a data part "
                         '"a2a.ucp.checkout" or "a2a.ucp.error".'),
            version="1.0.0",
            supported_interfaces=[
                AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
                AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3"),
            ],
            capabilities=AgentCapabilities(streaming=False, push_notifications=False,
                                           extensions=extensions),
            default_input_modes=["application/json"],
            default_output_modes=["application/json"],
            skills=[AgentSkill(id="dev.ucp.shopping.checkout", name="UCP checkout",
                               description=f"Checkout sessions: {actions}.",
                               tags=["ucp", "checkout", "shopping"],
                               input_modes=["application/json"],
                               output_modes=["application/json"])],
        )

    async def card(self, request: Request) -> Response:
        """``GET`` the agent card, its URLs where the client reached the merchant."""
        capabilities = [c for c in self.capabilities(request) if isinstance(c, dict)]
        card = self.agent_card(self.base(request).rstrip("/") + A2A_PATH, capabilities)
        return JSONResponse(agent_card_to_dict(card))

    # -------------------------------------------------------------- one message

    async def respond(self, message: Message, context: ServerCallContext,
                      context_id: str) -> dict[str, Any]:
        """The data part answering ``message``, sent in ``context_id`` (never an
        exception)."""
        try:
            return await self._respond(message, context, context_id)
        except wire.Refused as refused:
            return refused.data()
        except Exception as exc:  # a bug of ours: said as such, never a hung client
            log.exception("A2A message failed")
            return {wire.ERROR: {"status": 500, "code": "internal_error",
                                 "content": f"the merchant failed ({type(exc).__name__})"}}

    async def _respond(self, message: Message, context: ServerCallContext,
                       context_id: str) -> dict[str, Any]:
        headers: Mapping[str, str] = context.state.get("headers") or {}
        version = wire.version_of(context.requested_extensions, self.versions)
        agent = headers.get("ucp-agent")
        if agent is not None:
            agent = wire.header_value(agent, "the UCP-Agent header")
        key = wire.header_value(message.message_id, "messageId", limit=255)
        if len(context_id) > 255:  # it keys what is kept per context
            raise wire.invalid("contextId must be at most 255 characters")
        try:
            data_parts = get_data_parts(message.parts)
        except (ValueError, json_format.Error):  # protobuf's Value holds them, JSON has none
            raise wire.invalid("a data part holds a number JSON has not (NaN, Infinity, "
                               "or one too big for a double, such as 1e400)") from None
        ask = wire.read(data_parts, version)
        # the message's own contextId (a missing one is made up anew by the SDK, so a
        # retry without one stays a replay): the same id and data in another context
        # is another request (its checkout is that context's)
        digest = fingerprint("a2a", f"{version} {agent} {message.context_id}",
                             [wire.integers(data_parts), get_text_parts(message.parts)])
        async with self._exclusive(key):
            stored = self._replies.get(key)
            if stored is not None:
                if stored[0] != digest:
                    raise wire.Refused(409, "idempotency_conflict",
                                       "messageId reused with different content")
                return stored[1]
            request = _Request(self, version, agent, headers.get("request-signature"), key,
                               context.state.get("origin"))
            data = await request.run(ask, (agent or "", context_id))
            if wire.ERROR not in data:
                self._replies[key] = (digest, data)
            return data

    @asynccontextmanager
    async def _exclusive(self, key: str) -> AsyncIterator[None]:
        """One message with a given id at a time (a retry waits for the first)."""
        lock, users = self._busy.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._busy[key]


class _Request:
    """The REST requests of one message."""

    def __init__(self, agent: CheckoutA2a, version: str, ucp_agent: str | None,
                 signature: str | None, key: str, origin: Mapping[str, Any] | None) -> None:
        self.agent, self.version, self.key, self.origin = agent, version, key, origin
        self.headers = {"request-signature": wire.header_value(signature, "Request-Signature")
                        if signature is not None else _SIGNATURE}
        if ucp_agent is not None:  # without one, REST says what is missing
            self.headers["ucp-agent"] = ucp_agent

    async def run(self, ask: wire.Ask, context: tuple[str, str]) -> dict[str, Any]:
        """The answer to ``ask``; the context remembers the checkout it names."""
        contexts = self.agent._contexts
        checkout_id = ask.checkout_id or contexts.get(context)
        if ask.action == "add_to_checkout":
            data = await self.add(ask, checkout_id, named=ask.checkout_id is not None)
        else:
            data = await self.send(wire.rest_call(ask, self.version, checkout_id))
        named = wire.checkout_id_of(data)
        if named is not None:
            contexts[context] = named
        return data

    async def add(self, ask: wire.Ask, checkout_id: str | None, *, named: bool
                  ) -> dict[str, Any]:
        """``add_to_checkout``: the checkout with the product added, or a new
        checkout with it when the context has none, or only a finished one (a
        finished checkout the message ``named`` gets REST's 409 instead)."""
        current = None
        if checkout_id is not None:
            data = await self.send(wire.RestCall("GET", f"/checkout-sessions/{checkout_id}"))
            if wire.ERROR in data:
                return data
            current = data[wire.CHECKOUT]
            if not named and current.get("status") in ("completed", "canceled"):
                current = None
        operation, body = wire.add_to_cart(
            self.version, current, ask.fields.get("product_id"), ask.fields.get("quantity", 1),
            title_of=self.agent.title_of, currency=self.agent.currency)
        if operation == "create":
            return await self.send(wire.RestCall("POST", "/checkout-sessions", body, keyed=True))
        return await self.send(wire.RestCall("PUT", f"/checkout-sessions/{checkout_id}", body,
                                             keyed=True))

    async def send(self, rest: wire.RestCall) -> dict[str, Any]:
        """``rest`` through the merchant app; its answer as a data part."""
        app = self.agent._app
        if app is None:
            raise RuntimeError("CheckoutA2a is not bound to a merchant app")
        headers = {**self.headers, "request-id": str(uuid.uuid4())}
        if rest.keyed:
            headers["idempotency-key"] = self.key
        answer = await call(app, rest.method, rest.path, headers, rest.body, self.origin)
        return wire.answer(answer.status, answer.body, answer.headers.get("retry-after"))


def _whole_numbers(endpoint: Callable[[Request], Awaitable[Response]]
                   ) -> Callable[[Request], Awaitable[Response]]:
    """``endpoint`` with whole numbers written as integers in its JSON answers.

    The SDK carries a data part as protobuf's Value, whose numbers are all
    doubles: an amount of 3800 would go out as ``3800.0``. JSON does not tell
    the two apart, but clients that parse it into types do, so the answer is
    written as REST wrote it."""

    async def answered(request: Request) -> Response:
        try:
            body = await request.body()
        except ClientDisconnect:  # gone before its body came: nobody to answer
            return Response(status_code=400)
        refused = _unreadable(body)
        if refused is not None:
            return refused
        response = await endpoint(request)
        if not isinstance(response, JSONResponse):
            return response  # a stream: not served (the card says streaming: false)
        try:
            body = json.loads(bytes(response.body))
        except ValueError:
            return response
        if isinstance(body, dict) and "result" in body:
            body["result"] = wire.integers(body["result"])
        headers = {k: v for k, v in response.headers.items()
                   if k.lower() not in ("content-length", "content-type")}
        return JSONResponse(body, status_code=response.status_code, headers=headers)

    return answered


def _unreadable(body: bytes) -> Response | None:
    """A JSON-RPC error for a body the SDK would answer with an internal error
    (and a traceback in the log): not UTF-8, or nested past :data:`MAX_DEPTH`.
    None for any other body (the SDK says what is wrong with it)."""
    try:
        parsed = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return _rpc_error(None, -32700, f"the body is not UTF-8 (byte {exc.start})")
    except RecursionError:
        return _rpc_error(None, -32600, f"the body is nested deeper than {MAX_DEPTH} levels")
    except ValueError:
        return None
    rpc_id = parsed.get("id") if isinstance(parsed, dict) else None
    level: list[Any] = [parsed]
    for _ in range(MAX_DEPTH + 1):
        level = [v for c in level if isinstance(c, dict | list)
                 for v in (c.values() if isinstance(c, dict) else c)]
        if not level:
            return None
    return _rpc_error(rpc_id if isinstance(rpc_id, str | int) else None, -32600,
                      f"the body is nested deeper than {MAX_DEPTH} levels")


def _rpc_error(rpc_id: str | int | None, code: int, message: str) -> Response:
    return JSONResponse({"jsonrpc": "2.0", "id": rpc_id,
                         "error": {"code": code, "message": message}})


class _Context(DefaultServerCallContextBuilder):
    """The SDK's call context, with the extensions of both header names and
    what the REST request needs of the HTTP one (where it was reached)."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.requested_extensions |= get_requested_extensions(
            request.headers.getlist(LEGACY_EXTENSIONS))
        context.state["origin"] = {"scheme": request.url.scheme,
                                   "server": request.scope.get("server"),
                                   "client": request.scope.get("client"),
                                   "host": request.headers.get("host")}
        return context


class _Executor(AgentExecutor):
    """The SDK's side: one answer, a Message, per message."""

    def __init__(self, agent: CheckoutA2a) -> None:
        self.agent = agent

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None  # a message always comes with execute
        context_id = str(context.context_id)
        data = await self.agent.respond(context.message, context.call_context, context_id)
        await event_queue.enqueue_event(Message(
            message_id=str(uuid.uuid4()), context_id=context_id,
            role=Role.ROLE_AGENT, parts=[new_data_part(data)]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise UnsupportedOperationError(message="the merchant answers with messages, not tasks")


__all__ = ["CheckoutA2a"]
