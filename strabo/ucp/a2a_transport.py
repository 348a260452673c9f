"""UCP checkout over A2A, as the Business proxies send it (``transport="a2a"``).

A merchant may serve checkout to agents over A2A (checkout/a2a.md): its profile
lists an agent card in ``services["dev.ucp.shopping"]`` (``transport: "a2a"``),
the card names a JSON-RPC endpoint, and each checkout request is an A2A
``message/send`` whose data parts carry the UCP objects. As with MCP
(:mod:`strabo.ucp.mcp_transport`), the proxies' routes stay REST-shaped and only
the sending changes: :class:`A2aCheckout` is a client with the proxy's request
interface (``syncserver.client.Client``) that sends each checkout request as the
A2A message it stands for and gives back the answer REST would have given, so
that the proxy's idempotency keys, retries, failure policies and field mapping
work unchanged.

The spec fixes the headers (``UCP-Agent``, ``X-A2A-Extensions`` naming the UCP
extension of the version spoken), the ``contextId`` per session, ``messageId``
as the idempotency key, and the data-part keys; the ``action`` of each request
and the ``a2a.ucp.error`` answer are strabo's convention, shared with the
bundled merchant (docs/proxy.md, *Transports*):

- ``POST /checkout-sessions`` is ``create_checkout`` with the body under
  ``a2a.ucp.checkout``; ``GET``/``PUT /checkout-sessions/{id}``, ``.../complete``
  and ``.../cancel`` are ``get_checkout``, ``update_checkout`` (the body under
  ``a2a.ucp.checkout``), ``complete_checkout`` (payment and signals in a second
  data part, under the version's keys) and ``cancel_checkout``, with ``id``;
- ``messageId`` is the request's ``Idempotency-Key``, so a retry is a replay;
  ``contextId`` is one per checkout, kept here (checkout id -> context); a
  create's is derived from its key, so that its retry is the same message;
- an ``a2a.ucp.checkout`` data part is a 200 answer with that body, an
  ``a2a.ucp.error`` one the ``status`` it names with the rest as the body; an
  HTTP error with no JSON-RPC in it is that status; a JSON-RPC error the status
  REST gives for its kind; no answer (refused, timed out, not JSON-RPC) is
  :class:`~syncserver.client.NoAnswer`, which the proxy retries;
- any other request (discovery, orders) goes over REST.

That is the *session* dialect. An agent whose card does not name strabo's
actions (Google's UCP samples' business agent, whose actions are its model's
tools) is spoken to in the *tool* dialect instead (:mod:`strabo.ucp.a2a_tools`:
``add_to_checkout`` per line item, ``update_customer_details``...), chosen from
the card (:func:`strabo.ucp.a2a_tools.dialect_of`) unless ``dialect=`` forces
one (the proxies' ``a2a_dialect``, ``strabo demo --a2a-dialect``; a forced
dialect the card reads otherwise is used all the same, with a warning: the card
is read by a guess, which forcing is there to overrule). Such an agent runs a
replayed message again, so in that dialect a request that may have arrived is
never given back as NoAnswer (which the proxy resends) unless its tool is safe
to replay (a read, the same details set again): an unanswered
``add_to_checkout`` is settled by reading the context's checkout
(``get_checkout``), an unanswered ``complete_checkout`` is a 409
``outcome_unknown`` (not resent: the order may exist), and so is an answer the
proxy would resend (``RETRY_STATUS``: 408, 429, 500, 502-504). What was never
sent (the connection refused) is NoAnswer in both dialects. A card that names
``localhost`` at another origin than the loopback one it was read from
(Google's says ``http://localhost:10999`` whatever port the agent runs on) is
read as naming the origin it was read from, and so is a profile's card URL
(:func:`a2a_endpoint` with ``read_from``: a profile written for a local run,
served at another loopback address).

Why not the A2A SDK's client (a2a-sdk 1.3, whose ``a2a.compat.v0_3``
``CompatJsonRpcTransport`` does speak 0.3 ``message/send`` and takes headers per
call through ``ClientCallContext.service_parameters``): it converts every
message through the 1.0 protobuf types, where a data part is a
``google.protobuf.Struct``, and every JSON number a double. Measured with the
SDK's own ``to_compat_send_message_request`` and ``to_core_message``: a
quantity of ``2`` goes out as ``2.0``, an amount of ``2500`` comes back as
``2500.0``, and ``12345678901234567`` as ``1.2345678901234568e+16``. UCP
amounts are integers in minor units and the protocols' types check them, so
the round trip is not faithful. The SDK's transport also reports an HTTP error
and a refused connection as the same ``A2AClientError`` (the status only in
its text). A ``message/send`` is one JSON-RPC POST, so it is sent here as JSON
through the project's one HTTP client (``syncserver.client.open_client``, the
lean keep-alive client), whose error mapping is already the proxy's. The SDK is
not imported at all.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from strabo.ucp import a2a_tools, versions
from strabo.ucp._routed import Routed
from strabo.ucp.mcp_transport import McpAnswer, rebased
from syncserver.client import Client, NoAnswer, Unsendable, open_client
from syncserver.retry import RETRY_STATUS

log = logging.getLogger("strabo.ucp")

EXTENSIONS = {
    versions.NEW: f"https://ucp.dev/{versions.NEW}/specification/reference",
    versions.OLD: f"https://ucp.dev/specification/reference?v={versions.OLD}",
}
"""The UCP extension URI named in ``X-A2A-Extensions``, per version."""
PAYMENT_KEYS = {
    versions.NEW: ("a2a.ucp.checkout.payment", "a2a.ucp.checkout.signals"),
    versions.OLD: ("a2a.ucp.checkout.payment_data", "a2a.ucp.checkout.risk_signals"),
}
"""The data-part keys of a complete's payment and signals, per version."""
CHECKOUT, ERROR = "a2a.ucp.checkout", "a2a.ucp.error"
CONTEXTS_KEPT = 4096
"""How many checkouts' contextIds a client keeps (the oldest go first)."""
SEEN_KEPT = 256
"""Checkouts a tool-style agent answered, kept (each up to an answer's size)."""
_CONTEXTS = uuid.UUID("6f1c7a52-2f1e-4d0a-9c55-3a2a5b1e0c11")
"""The namespace of the contextIds derived from a create's idempotency key."""
_RPC_STATUS = {-32700: 400, -32600: 400, -32602: 400, -32601: 501, -32004: 501,
               -32005: 415, -32001: 404, -32002: 409, -32003: 501}
"""JSON-RPC and A2A error codes -> the REST status (others: 500)."""
_SKIP_HEADERS = {"idempotency-key", "content-type", "content-length"}
def a2a_endpoint(profile: Any, read_from: str | None = None) -> str | None:
    """The agent card URL a discovery profile lists for shopping, or None: a
    2026-04-08 entry ``{"transport": "a2a", "endpoint": ...}`` or a 2026-01-11
    service's ``a2a.endpoint``; with ``read_from`` (where the profile was read),
    :func:`rebased` onto it, as the card's own URL is onto the card's."""
    listed = _listed_card(profile)
    if listed is None or read_from is None:
        return listed
    found = rebased(listed, read_from)
    if found != listed:
        log.info("the profile read from %s lists the agent card %s: reading it at %s",
                 read_from, listed, found)
    return found


def _listed_card(profile: Any) -> str | None:
    ucp = profile.get("ucp") if isinstance(profile, dict) else None
    services = ucp.get("services") if isinstance(ucp, dict) else None
    shopping = services.get("dev.ucp.shopping") if isinstance(services, dict) else None
    if isinstance(shopping, dict):  # 2026-01-11: one service, a binding per transport
        binding = shopping.get("a2a")
        endpoint = binding.get("endpoint") if isinstance(binding, dict) else None
        return endpoint if isinstance(endpoint, str) else None
    for entry in shopping if isinstance(shopping, list) else []:
        if isinstance(entry, dict) and entry.get("transport") == "a2a" and isinstance(
                entry.get("endpoint"), str):
            return str(entry["endpoint"])
    return None


def rpc_url(card: Any, card_url: str) -> str | None:
    """The JSON-RPC endpoint an agent card names (relative to ``card_url``), or
    None: a 0.3 card's ``url`` (when its ``preferredTransport`` is JSON-RPC) or
    ``additionalInterfaces``, a 1.0 card's ``supportedInterfaces``."""
    if not isinstance(card, dict):
        return None
    offered: list[tuple[Any, Any]] = []
    if card.get("preferredTransport", "JSONRPC") == "JSONRPC":
        offered.append((card.get("url"), "JSONRPC"))
    for key, kind in (("additionalInterfaces", "transport"),
                      ("supportedInterfaces", "protocolBinding")):
        entries = card.get(key)
        offered += [(e.get("url"), e.get(kind)) for e in
                    (entries if isinstance(entries, list) else []) if isinstance(e, dict)]
    for url, binding in offered:
        if binding == "JSONRPC" and isinstance(url, str) and url:
            try:
                return urljoin(card_url, url)
            except ValueError:  # no URL urllib can read ("http://[x/"): no endpoint
                return None
    return None


def parts_of(tool: str, checkout: str | None, body: Any, version: str) -> list[dict[str, Any]]:
    """The data parts of the message a REST request stands for."""
    data: dict[str, Any] = {"action": tool}
    if checkout is not None:
        data["id"] = checkout
    given = body if isinstance(body, dict) else {}
    if tool in ("create_checkout", "update_checkout"):
        data[CHECKOUT] = given
    parts = [{"kind": "data", "data": data}]
    if tool == "complete_checkout":
        pay, signals = PAYMENT_KEYS.get(version, PAYMENT_KEYS[versions.NEW])
        extra: dict[str, Any] = {}
        for key, value in given.items():
            if value is None:
                continue
            if key in ("payment", "payment_data"):
                extra[pay] = value
            elif key in ("signals", "risk_signals"):
                extra[signals] = value
            elif key == "ap2":
                extra[key] = value
            # the rest (the body's ``id``, the path's) has no key in the binding
        if extra:
            parts.append({"kind": "data", "data": extra})
    return parts


@dataclass(frozen=True)
class A2aAnswer(McpAnswer):
    """An A2A answer read as the REST answer it stands for
    (``syncserver.client.Answer``); ``context`` is the contextId it carries."""

    context: str | None = None

    @property
    def reason_phrase(self) -> str:
        return "OK" if self.status_code < 400 else "A2A error"


def answer_of_error(error: Any, context: str | None = None) -> A2aAnswer:
    """An ``a2a.ucp.error`` object: its ``status`` (a ``retry_after`` as the
    ``Retry-After`` header) and the rest as REST's error body."""
    body = dict(error) if isinstance(error, dict) else {"content": str(error)[:300]}
    status = body.pop("status", 500)
    headers: dict[str, str] = {}
    retry = body.pop("retry_after", None)
    if retry is not None:
        headers["retry-after"] = str(retry)
    status = status if isinstance(status, int) and 200 <= status < 600 else 500
    body.setdefault("code", "error")
    return A2aAnswer(status, body, headers, context)


def answer_of_result(result: Any) -> A2aAnswer:
    """A ``message/send`` result (a Message, or a Task with the answer in its
    artifacts or status message) as REST's answer."""
    result = result if isinstance(result, dict) else {}
    context = result.get("contextId") if isinstance(result.get("contextId"), str) else None
    status = result.get("status") if isinstance(result.get("status"), dict) else {}
    state = str(status.get("state", "")).lower().removeprefix("task_state_").replace("_", "-")
    if state in _ENDED_BADLY:
        # A task that failed (or was rejected, canceled) is no checkout answer,
        # whatever checkout its history still holds.
        said = " ".join(p["text"] for p in _parts({"status": status, "parts": []})
                        if isinstance(p.get("text"), str))
        return A2aAnswer(502 if state == "failed" else 409, {
            "code": f"task_{state.replace('-', '_')}",
            "content": f"the A2A task ended {state}{': ' + said if said else ''}"[:300]},
            {}, context)
    texts: list[str] = []
    for part in _parts(result):
        data = part.get("data")
        if isinstance(data, dict) and ERROR in data:
            return answer_of_error(data[ERROR], context)
        if isinstance(data, dict) and CHECKOUT in data:
            if not isinstance(data[CHECKOUT], dict):
                return A2aAnswer(502, {"code": "malformed_answer", "content":
                                       f"the A2A answer's {CHECKOUT} is not an object"},
                                 {}, context)
            return A2aAnswer(200, data[CHECKOUT], {}, context)
        if isinstance(part.get("text"), str):
            texts.append(part["text"])
    said = f": {' '.join(texts)}"[:300] if texts else ""
    return A2aAnswer(502, {"code": "malformed_answer", "content":
                           f"the A2A answer holds no {CHECKOUT} nor {ERROR} data part{said}"},
                     {}, context)


_ENDED_BADLY = frozenset({"failed", "rejected", "canceled", "cancelled"})


def _parts(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The parts of a Message, or of a Task's artifacts, status message and history."""
    lists: list[Any] = [result.get("parts")]
    if result.get("kind") == "task" or "status" in result:
        artifacts, history = result.get("artifacts"), result.get("history")
        lists += [a.get("parts") for a in (artifacts if isinstance(artifacts, list) else [])
                  if isinstance(a, dict)]
        status = result.get("status")
        message = status.get("message") if isinstance(status, dict) else None
        lists.append(message.get("parts") if isinstance(message, dict) else None)
        lists += [m.get("parts") for m in reversed(history if isinstance(history, list) else [])
                  if isinstance(m, dict) and m.get("role") == "agent"]
    return [p for parts in lists if isinstance(parts, list) for p in parts if isinstance(p, dict)]


def answer_of_rpc_error(error: Any) -> A2aAnswer:
    """A JSON-RPC error object: the status REST gives for its kind (400 for a
    request the agent cannot read, 501 for a method or operation it lacks...)."""
    error = error if isinstance(error, dict) else {}
    code = error.get("code")
    status = _RPC_STATUS.get(code, 500) if isinstance(code, int) else 500
    if isinstance(error.get("data"), dict) and ERROR in error["data"]:
        return answer_of_error(error["data"][ERROR])
    return A2aAnswer(status, {"code": "a2a_error", "content":
                              f"JSON-RPC error {code}: {error.get('message', '')}"[:300]})


def _split(url: str) -> tuple[str, str]:
    """An absolute URL as its origin and the rest (path and query)."""
    try:
        parts = urlsplit(url)
    except ValueError:  # "http://[not-an-address/": urllib refuses it
        raise Unsendable(f"not an http(s) URL: {url!r}") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise Unsendable(f"not an http(s) URL: {url!r}")
    rest = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return f"{parts.scheme}://{parts.netloc}", rest


class A2aCheckout:
    """Checkout over A2A with the agent whose card is at ``card_url``, speaking
    UCP ``version``; other requests through a REST client (:meth:`over`). The card
    is read on the first call (again after a call that found it unusable).
    ``dialect`` forces one (``"session"`` or ``"tool"``); None or ``"auto"``:
    the card's. :meth:`aclose` closes the connections."""

    def __init__(self, card_url: str, version: str, timeout: float = 10.0,
                 dialect: str | None = None) -> None:
        if version not in EXTENSIONS:
            raise ValueError(f"version must be one of {', '.join(EXTENSIONS)}, not {version!r}")
        self.card_url, self.version, self.timeout = card_url, version, timeout
        self.forced = a2a_tools.forced(dialect)  # "auto" or None: the card's
        self.dialect = self.forced  # None until the card is read, unless forced
        self.card_says: str | None = None  # the card's dialect, once read
        self.endpoint: str | None = None  # the JSON-RPC URL, once the card is read
        self.contexts: OrderedDict[str, str] = OrderedDict()
        self.seen: OrderedDict[str, Any] = OrderedDict()
        """Checkout id -> the last checkout an answer carried (a tool-style agent
        forgets a completed checkout: this is what is left of it here)."""
        self.calls = 0
        self._rpc: tuple[Client, str] | None = None
        self._opening = asyncio.Lock()

    def over(self, rest: Client) -> Client:
        """A client that sends checkout requests here and others to ``rest``."""
        return Routed(self.send, rest)

    def context_of(self, tool: str, checkout: str | None, key: str | None) -> str:
        """The contextId of a request: the checkout's (a new one kept for a
        checkout not seen yet); for a create, one derived from its key."""
        if checkout is None:
            return str(uuid.uuid5(_CONTEXTS, key) if key else uuid.uuid4())
        context = self.contexts.get(checkout) or str(uuid.uuid4())
        self._keep(checkout, context)
        return context

    def _keep(self, checkout: str, context: str, answer: A2aAnswer | None = None) -> None:
        kept: OrderedDict[str, Any]
        for kept, value, bound in ((self.contexts, context, CONTEXTS_KEPT),
                                   (self.seen, None, SEEN_KEPT)):
            if value is None:
                if (answer is None or answer.status_code >= 400
                        or self.dialect != a2a_tools.TOOL):
                    continue  # only a tool-style agent forgets its checkouts
                value = answer.json()
            kept[checkout] = value
            kept.move_to_end(checkout)
            while len(kept) > bound:
                kept.popitem(last=False)

    def message(self, tool: str, checkout: str | None, body: Any,
                headers: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
        """The ``message/send`` request and its HTTP headers: the request's own
        (its Idempotency-Key is the messageId) and ``X-A2A-Extensions``."""
        key = next((v for k, v in headers.items() if k.lower() == "idempotency-key"), None)
        message = {"kind": "message", "role": "user",
                   "messageId": key or str(uuid.uuid4()),
                   "contextId": self.context_of(tool, checkout, key),
                   "parts": parts_of(tool, checkout, body, self.version)}
        sent = {k: v for k, v in headers.items() if k.lower() not in _SKIP_HEADERS}
        sent["X-A2A-Extensions"] = EXTENSIONS[self.version]
        request = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": "message/send",
                   "params": {"message": message}}
        return request, sent

    async def send(self, tool: str, checkout: str | None, body: Any,
                   headers: Mapping[str, str]) -> A2aAnswer:
        """Send the message ``tool`` stands for; raise NoAnswer when there is none."""
        await self._open()
        request, sent = self.message(tool, checkout, body, headers)
        if self.dialect == a2a_tools.TOOL:
            answer = await self._send_tool(tool, checkout, body, request, sent)
        else:
            answer = await self._post(request, sent, tool)
        mine = request["params"]["message"]["contextId"]
        given = answer.context
        # The merchant's contextId is kept per checkout: one of a sane size only.
        context = given if isinstance(given, str) and 0 < len(given) <= 255 else mine
        made = answer.json() if tool == "create_checkout" else None
        if isinstance(made, dict) and isinstance(made.get("id"), str) and answer.status_code < 400:
            checkout = made["id"]
        if checkout is not None:
            self._keep(checkout, context, answer)
        return answer

    async def _post(self, request: dict[str, Any], sent: dict[str, str],
                    tool: str) -> A2aAnswer:
        client, path = await self._open()
        response = await client.request("POST", path, request, sent)
        self.calls += 1
        return self._read(response, request["id"], tool)

    async def _send_tool(self, tool: str, checkout: str | None, body: Any,
                         request: dict[str, Any], sent: dict[str, str]) -> A2aAnswer:
        """The tool dialect: the message as :func:`a2a_tools.plan` has it, and
        never a resend of an unsafe tool that may have arrived."""
        planned = a2a_tools.plan(tool, body, PAYMENT_KEYS.get(self.version, PAYMENT_KEYS[
            versions.OLD]), self.seen.get(checkout) if checkout else None)
        message = request["params"]["message"]
        if isinstance(planned[0], int):
            return A2aAnswer(planned[0], planned[1], {}, message["contextId"])
        action, message["parts"] = planned
        try:
            answer = await self._post(request, sent, action)
        except NoAnswer as exc:
            if action in a2a_tools.SAFE or _unsent(exc):
                raise
            return await self._settle(action, str(exc), body, message["contextId"], sent)
        if answer.status_code in RETRY_STATUS and action not in a2a_tools.SAFE:
            said = f"HTTP {answer.status_code}: {answer.text[:200]}"
            return await self._settle(action, said, body, message["contextId"], sent)
        return answer

    async def _settle(self, action: str, reason: str, body: Any, context: str,
                      sent: dict[str, str]) -> A2aAnswer:
        """What to answer for an unsafe tool that may have run (no answer, or one
        the proxy would resend): read the context's checkout; an add found done
        is its checkout, anything else a 409 ``outcome_unknown``, not resent."""
        read = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": "message/send",
                "params": {"message": {
                    "kind": "message", "role": "user", "messageId": str(uuid.uuid4()),
                    "contextId": context, "parts": [{"kind": "data", "data": {
                        "action": "get_checkout"}}]}}}
        try:
            found = await self._post(read, sent, "get_checkout")
        except NoAnswer as exc:
            found = A2aAnswer(599, {"message": f"no answer either ({exc})"})
        if action == "add_to_checkout" and found.status_code == 200 and a2a_tools.holds(
                found.json(), body):
            log.warning("add_to_checkout over A2A: %s; the context's checkout holds the items: "
                        "it arrived", reason)
            return A2aAnswer(200, found.json(), {}, context)
        now = found.json() if isinstance(found.json(), dict) else {}
        seen = (f"status {now.get('status')}" if found.status_code == 200 else
                str(now.get("message") or now.get("content") or found.status_code))[:200]
        message = (f"{action} over A2A: {reason[:200]}; not resent (the agent runs a replayed "
                   f"message again); get_checkout then said: {seen}")
        log.warning("%s", message)
        return A2aAnswer(409, {"code": "outcome_unknown", "message": message,
                               "content": message}, {}, context)

    def _read(self, response: Any, rpc_id: str, tool: str) -> A2aAnswer:
        try:
            reply = json.loads(response.content) if response.content else None
        except (ValueError, RecursionError):  # not JSON, or nested past any checkout
            reply = None
        if not (isinstance(reply, dict) and ("result" in reply or "error" in reply)):
            if response.status_code >= 400:  # an HTTP error, not JSON-RPC: its status
                retry = response.headers.get("retry-after")
                return A2aAnswer(response.status_code, {
                    "code": "a2a_http_error", "content": f"{tool} over A2A: HTTP "
                    f"{response.status_code} {response.reason_phrase}"},
                    {"retry-after": retry} if retry else {})
            raise NoAnswer(f"{tool} over A2A: the answer is not JSON-RPC "
                           f"(HTTP {response.status_code}): {response.text[:200]!r}")
        if reply.get("id") not in (rpc_id, None):
            raise NoAnswer(f"{tool} over A2A: the answer is to another request "
                           f"(id {reply.get('id')!r})")
        if self.dialect == a2a_tools.TOOL:
            if "error" in reply:  # the agent refused what it read (headers, profile, payment)
                error = reply["error"] if isinstance(reply["error"], dict) else {}
                answer = answer_of_rpc_error(error)
                return A2aAnswer(400, answer.json()) if error.get("code") == -32603 else answer
            result = reply["result"] if isinstance(reply["result"], dict) else {}
            context = result.get("contextId")
            context = context if isinstance(context, str) else None
            refused = next((p["data"][ERROR] for p in _parts(result) if isinstance(
                p.get("data"), dict) and ERROR in p["data"]), None)
            if refused is not None:  # strabo's error part: a session agent, tool forced
                return answer_of_error(refused, context)
            status, body = a2a_tools.answer_of(result)
            return A2aAnswer(status, body, {}, context)
        if "error" in reply:
            return answer_of_rpc_error(reply["error"])
        return answer_of_result(reply["result"])

    async def _open(self) -> tuple[Client, str]:
        """The JSON-RPC client and path, reading the agent card first if need be."""
        if self._rpc is not None:  # every call but the first: no lock
            return self._rpc
        async with self._opening:
            if self._rpc is None:
                if self.endpoint is None:
                    self.endpoint = await self._read_card()
                origin, path = _split(self.endpoint)
                self._rpc = (open_client(origin, self.timeout), path)
                log.info("checkout over A2A at %s (card %s)", self.endpoint, self.card_url)
            return self._rpc

    async def _read_card(self) -> str:
        origin, path = _split(self.card_url)
        client = open_client(origin, self.timeout)
        try:
            response = await client.request("GET", path, headers={"Accept": "application/json"})
        finally:
            await client.aclose()
        try:
            card = response.json() if response.status_code == 200 else None
        except (ValueError, RecursionError):  # not JSON, or nested past any card
            card = None
        url = rpc_url(card, self.card_url)
        if url is not None:  # a card that failed says nothing
            self.card_says, why = a2a_tools.card_dialect(card)
            self.dialect = self.forced or self.card_says
            if self.dialect != self.card_says:
                log.warning("the agent card at %s reads as the %s dialect (%s), but the %s "
                            "dialect is forced (a2a_dialect): speaking %s", self.card_url,
                            self.card_says, why, self.dialect, self.dialect)
        if url is not None and url != rebased(url, self.card_url):
            log.info("the agent card at %s names %s: posting to %s", self.card_url, url,
                     rebased(url, self.card_url))
            url = rebased(url, self.card_url)
        if url is None:
            said = "is not an agent card" if response.status_code == 200 else (
                f"answered HTTP {response.status_code}")
            raise Unsendable(f"the merchant's A2A agent card at {self.card_url} {said} with "
                             "a JSON-RPC endpoint: checkout cannot be sent over A2A")
        return url

    async def aclose(self) -> None:
        rpc, self._rpc = self._rpc, None
        if rpc is not None:
            await rpc[0].aclose()


def _unsent(error: NoAnswer) -> bool:
    """Whether no byte of the request went out (the lean client could not
    connect): then a resend cannot run it twice."""
    return str(error).startswith(("cannot connect", "the client is closed"))


__all__ = ["CHECKOUT", "ERROR", "EXTENSIONS", "PAYMENT_KEYS", "A2aAnswer", "A2aCheckout",
           "a2a_endpoint", "answer_of_error", "answer_of_result", "parts_of", "rebased",
           "rpc_url"]
