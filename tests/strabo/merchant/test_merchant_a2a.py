"""UCP checkout over A2A (checkout/a2a.md and strabo's wire, docs/merchant.md):
the A2A SDK's own client against a merchant on loopback.

The client finds the agent card in the merchant's profile, and checks out the
bundled catalog's roses and pots (create with a shipping method, update the
destination, then the option, get, complete with the mock payment) as a
platform with a profile of its own (served on loopback, as in
``test_merchant_schemas``), with A2A 1.0's ``SendMessage`` and 0.3's
``message/send`` (the SDK's compat transport), at both UCP versions. Every
checkout answer is validated against the vendored schemas of its version, the
order is in the merchant afterwards (REST says so too), and a replayed
messageId places nothing twice. Refusals are answered with ``a2a.ucp.error``
and their status, never a JSON-RPC error or a traceback.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import jsonschema_rs
import pytest
from a2a.client import A2ACardResolver, ClientCallContext, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_data_parts, new_data_part, new_text_part
from a2a.types import Message, Part, Role, SendMessageRequest
from starlette.applications import Starlette

from strabo.merchant import create_app, merchant_of
from strabo.serving import serve

from .conftest import SIMULATION_SECRET
from .test_merchant_schemas import (  # noqa: F401  (platform is a fixture)
    CHECKOUT_EXTENSIONS,
    NEW,
    OLD,
    UCP_DEV,
    Platform,
    _refuse,
    _registry,
    platform,
    violations,
)

URI = {OLD: "https://ucp.dev/specification/reference?v=2026-01-11",
       NEW: "https://ucp.dev/2026-04-08/specification/reference"}
CARD = "/ucp/a2a/.well-known/agent-card.json"


@asynccontextmanager
async def merchant(version: str) -> AsyncIterator[tuple[Starlette, str, dict[str, Any]]]:
    """A merchant on loopback: its app, its URL and its profile."""
    app = create_app(ucp_version=version, simulation_secret=SIMULATION_SECRET)
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        profile = (await client.get("/.well-known/ucp")).json()
        yield app, url, profile


def card_url(profile: dict[str, Any]) -> str:
    """The agent card the profile names, in either version's form."""
    services = profile["ucp"]["services"]["dev.ucp.shopping"]
    if isinstance(services, dict):  # 2026-01-11
        return str(services["a2a"]["endpoint"])
    [entry] = [e for e in services if e["transport"] == "a2a"]
    return str(entry["endpoint"])


def integers(value: Any) -> Any:
    """Protobuf's Value gives every number as a double: whole ones back to int."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: integers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integers(v) for v in value]
    return value


@dataclass
class Shopper:
    """A platform talking A2A to one merchant: its SDK client, its headers, the
    context of its checkout, and every answer it got."""

    client: Any
    version: str
    profile_url: str
    context_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    extensions: str | None = None

    def headers(self) -> dict[str, str]:
        return {"UCP-Agent": f'profile="{self.profile_url}"',
                "X-A2A-Extensions": self.extensions or URI[self.version]}

    async def send(self, *parts: Any, message_id: str | None = None,
                   headers: dict[str, str] | None = None) -> dict[str, Any]:
        """One message of data parts (a text for a str); the answer's one data part."""
        message = Message(role=Role.ROLE_USER, message_id=message_id or str(uuid.uuid4()),
                          context_id=self.context_id,
                          parts=[new_text_part(p) if isinstance(p, str) else
                                 p if isinstance(p, Part) else new_data_part(p)
                                 for p in parts])
        context = ClientCallContext(service_parameters=headers or self.headers())
        [response] = [r async for r in self.client.send_message(
            SendMessageRequest(message=message), context=context)]
        assert response.HasField("message"), response  # a Message, never a task
        answer = response.message
        assert answer.role == Role.ROLE_AGENT
        assert answer.context_id == self.context_id
        [data] = get_data_parts(answer.parts)
        assert len(answer.parts) == 1
        return integers(data)  # type: ignore[no-any-return]

    async def checkout(self, *parts: Any, **kwargs: Any) -> dict[str, Any]:
        """A message answered with a checkout, valid against its version's schemas."""
        data = await self.send(*parts, **kwargs)
        assert set(data) == {"a2a.ucp.checkout"}, data
        body: dict[str, Any] = data["a2a.ucp.checkout"]
        problems = violations(self.version, "checkout", body, CHECKOUT_EXTENSIONS)
        assert not problems, "\n".join(problems)
        return body

    async def error(self, *parts: Any, status: int, **kwargs: Any) -> dict[str, Any]:
        data = await self.send(*parts, **kwargs)
        assert set(data) == {"a2a.ucp.error"}, data
        error: dict[str, Any] = data["a2a.ucp.error"]
        assert error["status"] == status, error
        assert "Traceback" not in json.dumps(error)
        return error


@asynccontextmanager
async def shopper(url: str, profile: dict[str, Any], version: str, profile_url: str,
                  transport: str = "1.0") -> AsyncIterator[Shopper]:
    """An A2A client of the agent the profile names, on A2A ``transport``
    (``1.0``: the SDK's default; ``0.3``: its compat JSON-RPC transport)."""
    endpoint = card_url(profile)
    assert endpoint == f"{url}{CARD}"
    async with httpx.AsyncClient(timeout=10) as http:
        card = await A2ACardResolver(http, endpoint.removesuffix(
            "/.well-known/agent-card.json")).get_agent_card()
        kept = [i for i in card.supported_interfaces if i.protocol_version == transport]
        assert len(kept) == 1, card.supported_interfaces
        del card.supported_interfaces[:]
        card.supported_interfaces.extend(kept)
        client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
        name = type(client._transport).__name__
        assert name == ("JsonRpcTransport" if transport == "1.0" else "CompatJsonRpcTransport")
        yield Shopper(client, version, profile_url)


def payment_part(rest: Platform, token: str = "success_token") -> dict[str, Any]:
    """The second data part of a completion: REST's complete body, renamed."""
    body = rest.payment(token)
    if rest.version == NEW:
        return {"a2a.ucp.checkout.payment": body["payment"],
                "a2a.ucp.checkout.signals": body["signals"]}
    return {"a2a.ucp.checkout.payment_data": body["payment_data"],
            "a2a.ucp.checkout.risk_signals": body["risk_signals"]}


CASES = [
    pytest.param(NEW, NEW, "1.0", id="2026-04-08-a2a-1.0"),
    pytest.param(NEW, NEW, "0.3", id="2026-04-08-a2a-0.3"),
    pytest.param(OLD, OLD, "1.0", id="2026-01-11-a2a-1.0"),
    pytest.param(OLD, OLD, "0.3", id="2026-01-11-a2a-0.3"),
    pytest.param(NEW, OLD, "0.3", id="2026-01-11-platform-at-a-2026-04-08-merchant"),
]


@pytest.mark.parametrize(("serving", "speaking", "transport"), CASES)
async def test_a_checkout_over_a2a_places_an_order(
    platform: str, serving: str, speaking: str, transport: str,  # noqa: F811
) -> None:
    profile_url = f"{platform}/profiles/{speaking}.json"
    async with merchant(serving) as (app, url, profile), \
            httpx.AsyncClient(base_url=url, timeout=10) as http, \
            shopper(url, profile, speaking, profile_url, transport) as buyer:
        rest = Platform(http, speaking, profile_url)
        created = await buyer.checkout({
            "action": "create_checkout",
            "a2a.ucp.checkout": rest.cart(None, fulfillment={"methods": [{"type": "shipping"}]})})
        checkout_id = created["id"]
        assert created["ucp"]["version"] == speaking
        method = created["fulfillment"]["methods"][0]
        chosen = {"methods": [{"id": method["id"], "type": "shipping",
                               "line_item_ids": method["line_item_ids"],
                               "selected_destination_id": method["destinations"][0]["id"]}]}
        step = await buyer.checkout({"action": "update_checkout", "id": checkout_id,
                                     "a2a.ucp.checkout": rest.cart(created, fulfillment=chosen)})
        group = step["fulfillment"]["methods"][0]["groups"][0]
        chosen["methods"][0]["groups"] = [{"id": group["id"],
                                           "selected_option_id": group["options"][0]["id"]}]
        # The context names the checkout: no id needed from here on.
        ready = await buyer.checkout({"action": "update_checkout",
                                      "a2a.ucp.checkout": rest.cart(step, fulfillment=chosen)})
        assert ready["id"] == checkout_id
        assert ready["status"] == "ready_for_complete", ready.get("messages")
        fetched = await buyer.checkout({"action": "get_checkout"})
        assert fetched["id"] == checkout_id and fetched["totals"] == ready["totals"]

        complete = str(uuid.uuid4())
        done = await buyer.checkout({"action": "complete_checkout", "id": checkout_id},
                                    payment_part(rest), message_id=complete)
        assert done["status"] == "completed"
        order_id = done["order"]["id"]
        # The order is there, over REST too.
        order = await http.get(f"/orders/{order_id}", headers=rest.headers())
        assert order.status_code == 200, order.text
        assert order.json()["checkout_id"] == checkout_id
        # A retry (the same messageId and content) gets the first answer; nothing twice.
        again = await buyer.checkout({"action": "complete_checkout", "id": checkout_id},
                                     payment_part(rest), message_id=complete)
        assert again == done
        # The same messageId for something else: REST's idempotency conflict.
        conflict = await buyer.error({"action": "get_checkout", "id": checkout_id},
                                     message_id=complete, status=409)
        assert conflict["code"] == "idempotency_conflict"
        orders = merchant_of(app).orders()
        assert [o.id for o in orders] == [order_id]
        assert orders[0].checkout_id == checkout_id


@pytest.mark.parametrize("version", [NEW, OLD])
async def test_add_to_checkout_fills_the_contexts_checkout(
    platform: str, version: str,  # noqa: F811
) -> None:
    """The spec's example action: it creates the context's checkout, then adds to it."""
    async with merchant(version) as (app, url, profile), \
            shopper(url, profile, version, f"{platform}/profiles/{version}.json") as buyer:
        first = await buyer.checkout({"action": "add_to_checkout",
                                      "product_id": "bouquet_roses", "quantity": 1})
        more = await buyer.checkout({"action": "add_to_checkout",
                                     "product_id": "bouquet_roses", "quantity": 2})
        pots = await buyer.checkout({"action": "add_to_checkout", "product_id": "pot_ceramic"})
        assert first["id"] == more["id"] == pots["id"]
        assert [(li["item"]["id"], li["quantity"]) for li in pots["line_items"]] == [
            ("bouquet_roses", 3), ("pot_ceramic", 1)]
        stored = merchant_of(app).checkout(first["id"])
        assert stored is not None
        assert [(li.item.id, li.quantity) for li in stored.line_items] == [
            ("bouquet_roses", 3), ("pot_ceramic", 1)]

        # Another context has its own checkout; a canceled one is replaced.
        buyer.context_id = str(uuid.uuid4())
        other = await buyer.checkout({"action": "add_to_checkout",
                                      "product_id": "pot_ceramic", "quantity": 1})
        assert other["id"] != first["id"]
        canceled = await buyer.checkout({"action": "cancel_checkout"})
        assert canceled["id"] == other["id"] and canceled["status"] == "canceled"
        fresh = await buyer.checkout({"action": "add_to_checkout",
                                      "product_id": "pot_ceramic", "quantity": 1})
        assert fresh["id"] not in (first["id"], other["id"])
        assert len(merchant_of(app).checkouts()) == 3


async def test_a_replayed_message_creates_nothing_twice(platform: str) -> None:  # noqa: F811
    """The same create sent twice at once, as a retry racing the first: one checkout."""
    async with merchant(NEW) as (app, url, profile), \
            shopper(url, profile, NEW, f"{platform}/profiles/{NEW}.json") as buyer:
        rest = Platform(None, NEW, buyer.profile_url)  # type: ignore[arg-type]  # bodies only
        ask = {"action": "create_checkout", "a2a.ucp.checkout": rest.cart(None)}
        message_id = str(uuid.uuid4())
        first, second = await asyncio.gather(buyer.checkout(ask, message_id=message_id),
                                             buyer.checkout(ask, message_id=message_id))
        assert first == second
        assert [c.id for c in merchant_of(app).checkouts()] == [first["id"]]
        changed = {**ask, "a2a.ucp.checkout": rest.cart(None, buyer={"email": "x@example.com"})}
        await buyer.error(changed, message_id=message_id, status=409)
        assert len(merchant_of(app).checkouts()) == 1


@pytest.mark.parametrize("version", [NEW, OLD])
async def test_refusals_are_a2a_ucp_errors_with_their_status(
    platform: str, version: str,  # noqa: F811
) -> None:
    async with merchant(version) as (app, url, profile), \
            shopper(url, profile, version, f"{platform}/profiles/{version}.json") as buyer:
        ask = {"action": "add_to_checkout", "product_id": "bouquet_roses", "quantity": 1}
        # No UCP extension activated, or one not served: extension_required.
        plain = {"UCP-Agent": f'profile="{buyer.profile_url}"'}
        error = await buyer.error(ask, headers=plain, status=400)
        assert error["code"] == "extension_required"
        assert URI[version] in error["extensions"]
        error = await buyer.error(ask, headers={
            **plain, "X-A2A-Extensions": "https://ucp.dev/2099-01-01/specification/reference"},
            status=400)
        assert error["code"] == "extension_required"
        if version == OLD:  # a 2026-01-11 merchant does not speak 2026-04-08
            error = await buyer.error(ask, headers={**plain, "X-A2A-Extensions": URI[NEW]},
                                      status=400)
            assert error["extensions"] == [URI[OLD]]
        assert merchant_of(app).checkouts() == []

        async def refused(*parts: Any, code: str = "invalid_request") -> None:
            error = await buyer.error(*parts, status=400)
            assert error["code"] == code, error
            assert error["content"]

        await refused({"action": "pay_everything"}, code="unknown_action")
        await refused({"action": 7}, code="unknown_action")
        await refused("please add roses to my checkout")  # no data part
        await refused([1, 2, 3])  # a data part that is not an object
        await refused({"product_id": "bouquet_roses"})  # no action
        await refused(ask, ask)  # two actions
        await refused({"action": "create_checkout", "a2a.ucp.checkout": "roses"})
        await refused({"action": "create_checkout"})
        await refused({**ask, "color": "red"})  # a key the action does not take
        await refused({**ask, "quantity": 0})
        await refused({**ask, "quantity": 1.5})
        await refused({**ask, "product_id": ["bouquet_roses"]})
        await refused({"action": "get_checkout", "id": "../orders/x"})
        await refused({"action": "get_checkout", "id": 12})
        await refused({"action": "get_checkout"})  # no checkout in this context yet
        await refused({"action": "complete_checkout", "id": "x"}, {"id": "y"})  # id twice
        assert merchant_of(app).checkouts() == []

        # REST's own answers: an unknown checkout, a canceled one changed.
        if version == OLD:
            missing = await buyer.error({"action": "get_checkout", "id": "chk_nope"},
                                        status=404)
            assert missing["code"] == "RESOURCE_NOT_FOUND"
        else:  # 2026-04-08 REST answers a business outcome, 200 with ucp.status error
            missing = await buyer.error({"action": "get_checkout", "id": "chk_nope"},
                                        status=200)
            outcome = {k: v for k, v in missing.items() if k != "status"}
            assert violations(NEW, "error", outcome) == []
            assert missing["messages"][0]["code"] == "not_found"
        created = await buyer.checkout(ask)
        await buyer.checkout({"action": "cancel_checkout"})
        finished = await buyer.error({"action": "add_to_checkout", "id": created["id"],
                                      "product_id": "pot_ceramic", "quantity": 1}, status=409)
        assert "canceled" in json.dumps(finished)


async def test_the_spec_s_own_message_send_on_the_wire(platform: str) -> None:  # noqa: F811
    """checkout/a2a.md's request, as JSON (``type`` parts, X-A2A-Extensions),
    answered by a 0.3 message whose numbers are integers, as REST wrote them."""
    async with merchant(NEW) as (app, url, _profile), \
            httpx.AsyncClient(timeout=10) as http:
        response = await http.post(f"{url}/ucp/a2a", headers={
            "UCP-Agent": f'profile="{platform}/profiles/{NEW}.json"',
            "X-A2A-Extensions": URI[NEW]}, json={
            "jsonrpc": "2.0", "id": 2, "method": "message/send", "params": {"message": {
                "role": "user", "kind": "message",
                "messageId": "e94a8c10-69f4-4c4c-b988-21a298302da6",
                "contextId": "aad14abc-4082-4748-84ca-4afff85aedfa",
                "parts": [{"type": "data", "data": {
                    "action": "add_to_checkout", "product_id": "bouquet_roses",
                    "quantity": 1}}]}}})
    assert response.status_code == 200
    answer = response.json()
    assert answer["id"] == 2 and "error" not in answer, answer
    result = answer["result"]
    assert result["kind"] == "message" and result["role"] == "agent"
    assert result["contextId"] == "aad14abc-4082-4748-84ca-4afff85aedfa"
    [part] = result["parts"]
    assert part["kind"] == "data"
    checkout = part["data"]["a2a.ucp.checkout"]
    assert violations(NEW, "checkout", checkout, CHECKOUT_EXTENSIONS) == []
    [line] = checkout["line_items"]
    assert line["quantity"] == 1 and type(line["quantity"]) is int
    assert all(type(t["amount"]) is int for t in checkout["totals"])
    assert [c.id for c in merchant_of(app).checkouts()] == [checkout["id"]]


@pytest.mark.parametrize("version", [NEW, OLD])
async def test_the_profile_lists_the_agent_card(version: str) -> None:
    async with merchant(version) as (_app, url, profile), \
            httpx.AsyncClient(base_url=url, timeout=10) as http:
        card_at = f"{url}{CARD}"
        if version == NEW:
            entries = {e["transport"]: e for e in profile["ucp"]["services"]["dev.ucp.shopping"]}
            assert set(entries) == {"rest", "mcp", "a2a"}
            assert entries["a2a"] == {"version": NEW, "transport": "a2a", "endpoint": card_at,
                                      "spec": f"https://ucp.dev/{NEW}/specification/overview"}
            schema = {"$ref": f"{UCP_DEV}schemas/service.json#/$defs/business_schema"}
            old = (await http.get(f"/.well-known/ucp/{OLD}")).json()
        else:
            schema = {"$ref": f"{UCP_DEV}services/service_schema.json"}
            old = profile
        service = old["ucp"]["services"]["dev.ucp.shopping"]
        assert service["a2a"] == {"endpoint": card_at}  # the 2026-01-11 form
        checked = entries["a2a"] if version == NEW else service
        check = jsonschema_rs.validator_for(schema, registry=_registry(version),
                                            retriever=_refuse)
        assert [e.message for e in check.iter_errors(checked)] == []

        card = (await http.get(CARD)).json()
    interfaces = {i["protocolVersion"]: i for i in card["supportedInterfaces"]}
    assert set(interfaces) == {"1.0", "0.3"}
    assert {i["url"] for i in interfaces.values()} == {f"{url}/ucp/a2a"}
    assert {i["protocolBinding"] for i in interfaces.values()} == {"JSONRPC"}
    assert card["url"] == f"{url}/ucp/a2a"  # the 0.3 card's field
    assert card["capabilities"]["streaming"] is False
    served = [OLD, NEW] if version == NEW else [OLD]
    extensions = {e["uri"]: e for e in card["capabilities"]["extensions"]}
    assert set(extensions) == {URI[v] for v in served}
    for served_version in served:
        listed = extensions[URI[served_version]]["params"]["capabilities"]
        assert listed["dev.ucp.shopping.checkout"] == [{"version": served_version}]
        assert listed["dev.ucp.shopping.fulfillment"] == [
            {"version": served_version, "extends": "dev.ucp.shopping.checkout"}]


def test_without_the_a2a_sdk_the_merchant_serves_no_a2a() -> None:
    """With a2a-sdk absent, ``strabo --help`` works, the merchant serves REST and
    MCP, and its profile lists no A2A."""
    program = """
import asyncio, sys
sys.modules["a2a"] = None  # as if a2a-sdk were not installed
import httpx
from strabo.cli import main
from strabo.merchant import create_app
from strabo.merchant._discovery import a2a_available

assert not a2a_available()

async def check(version):
    app = create_app(ucp_version=version)
    assert not [r for r in app.routes if getattr(r, "path", "").startswith("/ucp/a2a")]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://shop") as client:
        profile = (await client.get("/.well-known/ucp")).json()
        assert "a2a" not in str(profile["ucp"]["services"]), profile
        assert (await client.get("/ucp/a2a/.well-known/agent-card.json")).status_code == 404

for version in ("2026-01-11", "2026-04-08"):
    asyncio.run(check(version))
assert not any(name.startswith("a2a.") for name in sys.modules), "a2a was loaded"
sys.exit(main(["--help"]))
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "usage: strabo" in done.stdout
