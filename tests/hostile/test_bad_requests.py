"""Hostile inputs get a precise 4xx, never a 500 nor a traceback in the log."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest

from tests.hostile._support import SIMPLE, create, guarded, raw

AGENTS = {"p1": ["Platform"]}
PATH = "/mas/default/protocols/SimpleUCP"
HEADERS = {"Authorization": "Bearer p1-token"}


@pytest.fixture
async def client():
    async with (
        guarded([SIMPLE], AGENTS) as (_, url),
        httpx.AsyncClient(base_url=url, headers=HEADERS) as client,
    ):
        yield client


async def test_a_huge_key_value_is_a_bad_request(client: httpx.AsyncClient) -> None:
    response = await client.get(f"{PATH}/enactment", params={"cid": "7" * 5000})
    assert response.status_code == 400
    assert "at most" in response.json()["error"]["message"]
    # Long digit strings that fit are still looked up (and not found).
    response = await client.get(f"{PATH}/enactment", params={"cid": "7" * 1500})
    assert response.status_code == 404


async def test_numbers_json_cannot_carry_are_refused(client: httpx.AsyncClient) -> None:
    for literal in ("NaN", "Infinity", "-Infinity", "1e400"):
        body = (
            '{"instances": [{"action": "Create", "bindings": {"cid": "c", "line_items": [], '
            f'"currency": "USD", "buyer": null, "payment_pref": {{"x": {literal}}}, '
            '"discount_codes": null, "fulfillment_pref": null}}]}'
        )
        response = await client.post(
            f"{PATH}/attempts", content=body, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 400, literal
        error = response.json()["error"]
        assert error["code"] == "bad-json"
        assert "instances[0].bindings.payment_pref.x" in error["message"]
    log = (await client.get(f"{PATH}/log")).json()
    assert log["events"] == []


async def test_a_body_that_is_not_labelled_json_is_refused(client: httpx.AsyncClient) -> None:
    import json

    body = json.dumps({"instances": [create("c")]})
    response = await client.post(
        f"{PATH}/attempts", content=body, headers={"Content-Type": "text/plain"}
    )
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported-media-type"
    fine = await client.post(
        f"{PATH}/attempts",
        content=body,
        headers={"Content-Type": "application/json; charset=utf-8"},
    )
    assert fine.status_code == 200


@pytest.mark.parametrize("param", ["after", "limit"])
async def test_numbers_beyond_64_bits_are_bad_requests(client: httpx.AsyncClient, param) -> None:
    response = await client.get(f"{PATH}/log", params={param: str(2**70)})
    assert response.status_code == 400


class Records(logging.Handler):
    """Collects records and wakes a waiter on each."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.event = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.event.set()


async def test_a_client_leaving_mid_body_is_one_line_at_info() -> None:
    records = Records()
    loggers = [logging.getLogger(n) for n in ("strabo.syncserver", "uvicorn.error")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(records)
        logger.setLevel(logging.DEBUG)
    try:
        async with guarded([SIMPLE], AGENTS) as (_, url):
            _reader, writer = await raw(url)
            writer.write(
                f"POST {PATH}/attempts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer p1-token\r\n"
                "Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"inst".encode()
            )
            await writer.drain()
            writer.close()

            async def logged() -> None:
                while not any("left before" in r.getMessage() for r in records.records):
                    records.event.clear()
                    await records.event.wait()

            await asyncio.wait_for(logged(), 5)
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(records)
            logger.setLevel(level)
    assert [r.levelno for r in records.records if r.levelno >= logging.WARNING] == []
    assert all(r.exc_info is None for r in records.records)
    [line] = [r for r in records.records if "left before" in r.getMessage()]
    assert line.levelno == logging.INFO
