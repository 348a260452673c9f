"""A small UCP client for the merchant tests: the calls an agent makes, with headers."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

AGENT = 'profile="https://agent.example/profile"'
JOHN = {"full_name": "John Doe", "email": "john.doe@example.com"}


def headers(*, key: str | None = None, agent: str = AGENT, **extra: str) -> dict[str, str]:
    """The UCP headers of a mutating call (a fresh Idempotency-Key unless ``key``)."""
    return {
        "UCP-Agent": agent,
        "Request-Signature": "test",
        "Request-Id": str(uuid.uuid4()),
        "Idempotency-Key": key or str(uuid.uuid4()),
        **extra,
    }


def line(item_id: str, quantity: int = 1, *, line_id: str | None = None) -> dict[str, Any]:
    """A line item request (with a title, which the merchant needs)."""
    entry: dict[str, Any] = {"item": {"id": item_id, "title": item_id}, "quantity": quantity}
    if line_id:
        entry["id"] = line_id
    return entry


def instrument(token: str = "success_token", handler: str = "mock_payment_handler") -> dict:
    """A complete request body paying with a token credential."""
    return {
        "payment_data": {
            "id": "instr_1",
            "handler_id": handler,
            "type": "card",
            "brand": "Visa",
            "last_digits": "1234",
            "credential": {"type": "token", "token": token},
        },
        "risk_signals": {},
    }


class Shopper:
    """Calls one merchant the way an agent does; every call returns the raw response."""

    def __init__(self, client: httpx.AsyncClient, *, agent: str = AGENT) -> None:
        self.client = client
        self.agent = agent

    async def create(self, *items: dict[str, Any], key: str | None = None, **fields: Any):
        body = {
            "line_items": list(items) or [line("bouquet_roses")],
            "currency": "USD",
            "buyer": JOHN,
            "payment": {},
            **fields,
        }
        return await self.client.post(
            "/checkout-sessions", json=body, headers=headers(key=key, agent=self.agent)
        )

    async def update(self, checkout: dict[str, Any], *, key: str | None = None, **fields: Any):
        """PUT the checkout back with its line items, changed by ``fields``."""
        body = {
            "id": checkout["id"],
            "line_items": [
                line(li["item"]["id"], li["quantity"], line_id=li["id"])
                for li in checkout["line_items"]
            ],
            "currency": checkout["currency"],
            "payment": {},
            **fields,
        }
        return await self.client.put(
            f"/checkout-sessions/{checkout['id']}",
            json=body,
            headers=headers(key=key, agent=self.agent),
        )

    async def get(self, checkout_id: str):
        return await self.client.get(
            f"/checkout-sessions/{checkout_id}", headers=headers(agent=self.agent)
        )

    async def complete(self, checkout_id: str, body: dict | None = None, *, key: str | None = None):
        return await self.client.post(
            f"/checkout-sessions/{checkout_id}/complete",
            json=instrument() if body is None else body,
            headers=headers(key=key, agent=self.agent),
        )

    async def cancel(self, checkout_id: str, *, key: str | None = None):
        return await self.client.post(
            f"/checkout-sessions/{checkout_id}/cancel", headers=headers(key=key, agent=self.agent)
        )

    async def ship_ready(self, *items: dict[str, Any], option: str = "std-ship", **fields: Any):
        """A session taken through the three shipping steps; returns its JSON."""
        created = (await self.create(*items, **fields)).json()
        shipping = {"methods": [{"type": "shipping"}]}
        step = (await self.update(created, fulfillment=shipping)).json()
        destination = step["fulfillment"]["methods"][0]["destinations"][0]["id"]
        chosen = {"methods": [{"type": "shipping", "selected_destination_id": destination}]}
        step = (await self.update(step, fulfillment=chosen)).json()
        chosen["methods"][0]["groups"] = [{"selected_option_id": option}]
        response = await self.update(step, fulfillment=chosen)
        assert response.status_code == 200, response.text
        return response.json()
