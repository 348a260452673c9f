"""UCP checkout over MCP (checkout-mcp.md, 2026-04-08): the MCP SDK's own client
against a merchant serving 2026-04-08 on loopback, over streamable HTTP.

The client finds the endpoint in the merchant's profile, lists the five checkout
tools of mcp.openrpc.json, and checks out the bundled catalog's roses (create,
update the shipping destination and option, complete with the mock payment) as
a platform with a profile of its own (served on loopback, as in
``test_merchant_schemas``). Every checkout answer is validated against the
vendored 2026-04-08 schemas; the order is in the merchant afterwards. Arguments
that break the binding get its JSON-RPC errors, a business outcome is a result.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from mcp import ClientSession, MCPError
from mcp.client.streamable_http import streamable_http_client

from strabo.merchant import create_app, merchant_of
from strabo.serving import free_port, serve

from .conftest import SIMULATION_SECRET
from .test_merchant_schemas import (  # noqa: F401  (platform is a fixture)
    CHECKOUT_EXTENSIONS,
    NEW,
    OLD,
    platform,
    violations,
)

TOOLS = {"create_checkout", "get_checkout", "update_checkout", "complete_checkout",
         "cancel_checkout"}


@asynccontextmanager
async def merchant_mcp(version: str = NEW) -> AsyncIterator[tuple[Any, str, dict[str, Any]]]:
    """A merchant on loopback: its app, its URL and its profile."""
    app = create_app(ucp_version=version, simulation_secret=SIMULATION_SECRET)
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        profile = (await client.get("/.well-known/ucp")).json()
        yield app, url, profile


@asynccontextmanager
async def session_at(endpoint: str) -> AsyncIterator[ClientSession]:
    async with streamable_http_client(endpoint) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


def mcp_endpoint(profile: dict[str, Any]) -> str:
    """``services["dev.ucp.shopping"][transport=mcp].endpoint``, as the openrpc says."""
    [entry] = [e for e in profile["ucp"]["services"]["dev.ucp.shopping"]
               if e["transport"] == "mcp"]
    return str(entry["endpoint"])


def answer(result: Any) -> dict[str, Any]:
    """A tool result's structured content, checked against its text."""
    assert not result.is_error, result
    assert result.structured_content is not None, result
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content  # type: ignore[no-any-return]


def checked(body: dict[str, Any], kind: str = "checkout") -> dict[str, Any]:
    problems = violations(NEW, kind, body, CHECKOUT_EXTENSIONS if kind == "checkout" else ())
    assert not problems, "\n".join(problems)
    return body


def payment(token: str = "success_token") -> dict[str, Any]:
    """The mock payment the REST tests pay with (2026-04-08 shape)."""
    return {"payment": {"instruments": [{
        "id": "instr_1", "handler_id": "mock_payment_handler", "type": "card",
        "selected": True, "credential": {"type": "token", "token": token}}]}}


async def test_the_profile_lists_the_mcp_transport_with_its_endpoint() -> None:
    async with merchant_mcp() as (_, url, profile):
        entries = {e["transport"]: e for e in profile["ucp"]["services"]["dev.ucp.shopping"]}
        assert set(entries) == {"rest", "mcp", "a2a"}
        assert entries["mcp"] == {
            "version": NEW, "transport": "mcp", "endpoint": f"{url}/ucp/mcp",
            "spec": f"https://ucp.dev/{NEW}/specification/overview",
            "schema": f"https://ucp.dev/{NEW}/services/shopping/mcp.openrpc.json"}


async def test_a_merchant_serving_2026_01_11_has_no_mcp() -> None:
    """That version's MCP binding (``_meta.ucp``) is another one: not served."""
    async with merchant_mcp(OLD) as (_, url, profile):
        assert "mcp" not in profile["ucp"]["services"]["dev.ucp.shopping"]
        async with httpx.AsyncClient() as client:
            assert (await client.post(f"{url}/ucp/mcp", json={})).status_code == 404


async def test_the_tools_and_their_input_schemas_are_the_bindings() -> None:
    async with merchant_mcp() as (_, _url, profile), \
            session_at(mcp_endpoint(profile)) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
    assert set(tools) == TOOLS
    required = {name: set(tool.input_schema["required"]) for name, tool in tools.items()}
    assert required == {"create_checkout": {"meta", "checkout"},
                        "get_checkout": {"meta", "id"},
                        "update_checkout": {"meta", "id", "checkout"},
                        "complete_checkout": {"meta", "id", "checkout"},
                        "cancel_checkout": {"meta", "id"}}
    for name, tool in tools.items():
        meta = tool.input_schema["properties"]["meta"]
        assert meta["properties"]["ucp-agent"]["required"] == ["profile"]
        keyed = {"ucp-agent", "idempotency-key"}
        assert set(meta["required"]) == (keyed if name in ("complete_checkout",
                                                           "cancel_checkout")
                                         else {"ucp-agent"})


async def test_a_checkout_over_mcp_places_an_order(platform: str) -> None:  # noqa: F811
    meta = {"ucp-agent": {"profile": f"{platform}/profiles/{NEW}.json"}}
    async with merchant_mcp() as (app, _url, profile), \
            session_at(mcp_endpoint(profile)) as session:
        created = checked(answer(await session.call_tool("create_checkout", {
            "meta": meta, "checkout": {
                "line_items": [{"item": {"id": "bouquet_roses"}, "quantity": 1}],
                "buyer": {"first_name": "John", "last_name": "Doe",
                          "email": "john.doe@example.com"},
                "context": {"currency": "USD"},
                "fulfillment": {"methods": [{"type": "shipping"}]}}})))
        assert created["ucp"]["version"] == NEW
        assert "dev.ucp.shopping.checkout" in created["ucp"]["capabilities"]
        checkout_id = created["id"]
        items = [{"id": li["id"], "item": {"id": li["item"]["id"]}, "quantity": li["quantity"]}
                 for li in created["line_items"]]
        method = created["fulfillment"]["methods"][0]
        chosen = {"methods": [{"id": method["id"], "type": "shipping",
                               "line_item_ids": method["line_item_ids"],
                               "selected_destination_id": method["destinations"][0]["id"]}]}
        step = checked(answer(await session.call_tool("update_checkout", {
            "meta": meta, "id": checkout_id,
            "checkout": {"line_items": items, "fulfillment": chosen}})))
        group = step["fulfillment"]["methods"][0]["groups"][0]
        chosen["methods"][0]["groups"] = [{"id": group["id"],
                                           "selected_option_id": group["options"][0]["id"]}]
        ready = checked(answer(await session.call_tool("update_checkout", {
            "meta": meta, "id": checkout_id,
            "checkout": {"line_items": items, "fulfillment": chosen}})))
        assert ready["status"] == "ready_for_complete", ready.get("messages")

        fetched = checked(answer(await session.call_tool(
            "get_checkout", {"meta": meta, "id": checkout_id})))
        assert fetched["id"] == checkout_id and fetched["totals"] == ready["totals"]

        keyed = {**meta, "idempotency-key": str(uuid.uuid4())}
        done = checked(answer(await session.call_tool("complete_checkout", {
            "meta": keyed, "id": checkout_id, "checkout": payment()})))
        assert done["status"] == "completed"
        # Retried with the same key, the same answer, and still one order.
        again = answer(await session.call_tool("complete_checkout", {
            "meta": keyed, "id": checkout_id, "checkout": payment()}))
        assert again["order"] == done["order"]

        orders = merchant_of(app).orders()
        assert [o.id for o in orders] == [done["order"]["id"]]
        assert orders[0].checkout_id == checkout_id


async def test_cancel_and_business_outcomes_are_results(platform: str) -> None:  # noqa: F811
    meta = {"ucp-agent": {"profile": f"{platform}/profiles/{NEW}.json"}}
    async with merchant_mcp() as (app, _url, profile), \
            session_at(mcp_endpoint(profile)) as session:
        created = answer(await session.call_tool("create_checkout", {"meta": meta, "checkout": {
            "line_items": [{"item": {"id": "bouquet_roses"}, "quantity": 1}],
            "context": {"currency": "USD"}}}))
        canceled = checked(answer(await session.call_tool("cancel_checkout", {
            "meta": {**meta, "idempotency-key": str(uuid.uuid4())}, "id": created["id"]})))
        assert canceled["status"] == "canceled"
        stored = merchant_of(app).checkout(created["id"])
        assert stored is not None and stored.status == "canceled"

        missing = checked(answer(await session.call_tool(
            "get_checkout", {"meta": meta, "id": "chk_nope"})), kind="error")
        assert missing["ucp"]["status"] == "error"
        assert missing["messages"][0]["type"] == "error"

        unknown = checked(answer(await session.call_tool("create_checkout", {
            "meta": meta, "checkout": {
                "line_items": [{"item": {"id": "pink_wumpus", "title": "Wumpus"}, "quantity": 1}],
                "context": {"currency": "USD"}}})), kind="error")
        assert unknown["messages"][0]["type"] == "error"

        # A canceled checkout cannot change: REST's 409, a protocol error.
        with pytest.raises(MCPError) as caught:
            await session.call_tool("update_checkout", {
                "meta": meta, "id": created["id"], "checkout": {"line_items": []}})
        assert caught.value.code == -32000
        assert caught.value.data["status"] == 409


async def test_bad_arguments_get_the_bindings_errors(platform: str) -> None:  # noqa: F811
    meta = {"ucp-agent": {"profile": f"{platform}/profiles/{NEW}.json"}}
    cart = {"line_items": [{"item": {"id": "bouquet_roses"}, "quantity": 1}],
            "context": {"currency": "USD"}}
    async with merchant_mcp() as (app, _url, profile), \
            session_at(mcp_endpoint(profile)) as session:

        async def refused(tool: str, arguments: dict[str, Any], code: int) -> MCPError:
            with pytest.raises(MCPError) as caught:
                await session.call_tool(tool, arguments)
            assert caught.value.code == code, caught.value
            return caught.value

        await refused("create_checkout", {"checkout": cart}, -32602)  # no meta
        await refused("create_checkout", {"meta": {}, "checkout": cart}, -32602)
        await refused("create_checkout", {"meta": meta, "checkout": "roses"}, -32602)
        await refused("create_checkout", {"meta": meta, "checkout": cart, "x": 1}, -32602)
        created = answer(await session.call_tool(
            "create_checkout", {"meta": meta, "checkout": cart}))
        error = await refused("complete_checkout", {  # no idempotency key
            "meta": meta, "id": created["id"], "checkout": payment()}, -32602)
        assert "idempotency-key" in error.message
        await refused("update_checkout", {  # the id belongs outside the checkout
            "meta": meta, "id": created["id"], "checkout": {**cart, "id": created["id"]}},
            -32602)
        await refused("get_checkout", {"meta": meta, "id": "../orders/x"}, -32602)
        # A body the REST side refuses as invalid.
        await refused("create_checkout", {"meta": meta, "checkout": {
            "line_items": [{"item": {"id": "bouquet_roses"}, "quantity": "many"}],
            "context": {"currency": "USD"}}}, -32602)
        # A profile nobody serves: the discovery error, with its code.
        gone = {"ucp-agent": {"profile": f"http://127.0.0.1:{free_port()}/profile.json"}}
        error = await refused("create_checkout", {"meta": gone, "checkout": cart}, -32001)
        assert error.data["code"] == "profile_unreachable"
        assert error.data["continue_url"]
        # The same key for another payload: a protocol error.
        keyed = {**meta, "idempotency-key": str(uuid.uuid4())}
        await session.call_tool("cancel_checkout", {"meta": keyed, "id": created["id"]})
        other = answer(await session.call_tool(
            "create_checkout", {"meta": meta, "checkout": cart}))
        error = await refused("cancel_checkout", {"meta": keyed, "id": other["id"]}, -32000)
        assert error.data["status"] == 409
        await refused("no_such_tool", {"meta": meta}, -32602)
        # Nothing broke: the session still works, and no order was placed.
        assert answer(await session.call_tool("get_checkout", {"meta": meta, "id": other["id"]}))
    assert merchant_of(app).orders() == []
