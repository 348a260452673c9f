"""A header value holding a control character is refused, in either lane.

RFC 9110 (5.5) has a recipient refuse such a field value, or replace each
control character by a space; h11 refuses CR, LF and NUL only. The fast lane
hands such a head to h11, and the app refuses it (``400 bad-header``) before
it reaches a route: the attempt is not finalized. A tab is a header's own
whitespace and passes.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.syncserver.test_fastlane import HEALTH, create, post, read_answer, served

LANES = pytest.mark.parametrize("lane", [True, False], ids=["lane", "h11"])


async def answers(url: str, *requests: bytes) -> list[tuple[int, Any]]:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        got = []
        for request in requests:
            writer.write(request)
            status_line, _, body = await asyncio.wait_for(read_answer(reader, False), 10)
            got.append((int(status_line.split(b" ")[1]), json.loads(body or b"{}")))
        return got
    finally:
        writer.close()


@LANES
async def test_a_control_character_in_a_header_value_is_refused(lane: bool) -> None:
    async with served("instant", lane) as (url, _):
        bad = post(create("c1"), headers="X-Request-Id: a\x1b[31mb\r\n")
        tabbed = post(create("c2"), headers="X-Request-Id: a\tb\r\n")
        (refused, error), (taken, _), (health, _) = await answers(url, bad, tabbed, HEALTH)
        assert (refused, error["error"]["code"]) == (400, "bad-header")
        assert "'x-request-id'" in error["error"]["message"]
        assert taken == 200 and health == 200  # the connection goes on
        control = HEALTH.replace(b"Host: x\r\n", b"Host: x\r\nX-Note: \x7f\r\n")
        [(status, _)] = await answers(url, control)
        assert status == 400  # every route, not the attempts alone
        log = (
            b"GET /mas/default/protocols/SimpleUCP/log HTTP/1.1\r\nHost: x\r\n"
            b"Authorization: Bearer platform-token\r\n\r\n"
        )
        [(_, page)] = await answers(url, log)
        cids = [i["bindings"]["cid"] for e in page["events"] for i in e["instances"]]
        assert cids == ["c2"]  # the refused attempt was not finalized
