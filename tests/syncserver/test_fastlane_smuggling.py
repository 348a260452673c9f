"""The fast lane (syncserver/_fastlane.py) against request smuggling.

The lane reads the heads of ``POST .../attempts`` itself and hands the rest to
h11; a head it read differently from h11 (a length, where the head ends, which
request follows) would let a request hide in a body on one path and not on the
other. Each case here is a smuggling shape that test_fastlane_hostile.py does
not send: the same bytes go to a server with the lane and to one without it,
and everything each sends until it closes the connection must be the same
(Date and Server aside). The statuses each case gets are checked too, so that a
case that stopped meaning what it says fails.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator

import pytest

from strabo.serving import serve
from syncserver import SyncServer, create_app, uvicorn_options
from syncserver.limits import Limits
from tests.syncserver.test_fastlane import AGENTS, HEALTH, PURCHASE, SIMPLE, create, post
from tests.syncserver.test_fastlane_hostile import (
    LAST,
    LIMITS,
    served,
    to_the_end,
    with_length,
)


def statuses(data: bytes) -> list[int]:
    return [int(status) for status in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)]


def add_header(request: bytes, header: bytes) -> bytes:
    return request.replace(b"Host: x\r\n", b"Host: x\r\n" + header + b"\r\n", 1)


def shapes() -> dict[str, tuple[bytes, list[int]]]:
    """Each case: its bytes (LAST follows them) and the statuses they get."""
    body = create("s1")
    plain = post(body)
    length = str(len(body)).encode()
    cut = plain.split(b"\r\n\r\n")[0] + b"\r\n\r\n"  # the head alone
    cases: dict[str, tuple[bytes, list[int]]] = {}

    def case(name: str, data: bytes, *answers: int) -> None:
        cases[name] = (data, list(answers))

    # Lengths: h11 reads these; the lane hands them over whole.
    case("two equal lengths", add_header(plain, b"Content-Length: " + length), 200, 200)
    twice = with_length(plain, length + b", " + length)
    case("a length and its copy in one field", twice, 409, 200)
    case("a hex length", with_length(plain, b"0x" + length), 400)
    case("a length with a tab around it", with_length(plain, b"\t" + length + b"\t"), 409, 200)
    case("a length of 20 digits", with_length(plain, b"9" * 20), 413)
    # (A length of zero: the bytes after the head are the next request.)
    case("a length of zero, a request after it", with_length(post(HEALTH), b"0"), 400, 200, 200)
    case("a length of 00", with_length(post(b""), b"00"), 400, 200)
    case("a name like a length's", add_header(plain, b"Content-Length2: 5"), 409, 200)
    # Line ends and characters h11 refuses or takes.
    case("a CR before a CRLF", plain.replace(b"Host: x\r\n", b"Host: x\r\r\n"), 400)
    case("a VT in a value", plain.replace(b"Host: x", b"Host: x\x0b"), 400)
    # h11 takes these; the app refuses them (400 bad-header), the connection goes on.
    case("a control character in a value", plain.replace(b"Host: x", b"Host: x\x01y"), 400, 200)
    case("a DEL in a value", plain.replace(b"Host: x", b"Host: x\x7fy"), 400, 200)
    case("a non-ASCII name", add_header(plain, b"X\xe9: 1"), 400)
    case("an empty name", add_header(plain, b": v"), 400)
    case("a line without a colon", add_header(plain, b"X-Odd"), 400)
    case("thousands of tiny headers", add_header(plain, b"a:\r\n" * 1899 + b"a:"), 409, 200)
    case("1500 names", add_header(plain, b"\r\n".join(b"h%d:" % i for i in range(1500))), 409, 200)
    # Request lines.
    case("a lower-case version", plain.replace(b"HTTP/1.1", b"http/1.1", 1), 400)
    case("a space after the version", plain.replace(b"HTTP/1.1", b"HTTP/1.1 ", 1), 400)
    case("HTTP/0.9", b"POST /mas/default/protocols/SimpleUCP/attempts\r\n\r\n", 400)
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # h11 reads HTTP/2.0 (Starlette: 404)
    case("HTTP/2's preface after an attempt", plain + preface, 409, 404, 400)
    # Targets h11 and Starlette read as paths.
    for name, old, new in [
        ("a NUL in the MAS", b"/default/", b"/de%00fault/"),
        ("a CRLF after the path", b"/attempts", b"/attempts%0D%0A"),
        ("a slash after the path", b"/attempts", b"/attempts/"),
        ("dot segments", b"/default/", b"/x/../default/"),
        ("encoded dot segments", b"/default/", b"/x/%2e%2e/default/"),
        ("a bad UTF-8 escape", b"/default/", b"/de%FFfault/"),
        ("a bad escape", b"/default/", b"/de%zzfault/"),
    ]:
        expected = [307, 200] if "slash" in name else [404, 200]
        case(name, plain.replace(old, new, 1), *expected)
    # Starlette's route ends in $, which allows a newline before it: an attempt.
    case("a LF after the path", plain.replace(b"/attempts", b"/attempts%0A", 1), 409, 200)
    # Headers that change what uvicorn does; the lane hands them over.
    h2c = b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__"
    case("Upgrade: h2c", add_header(plain, h2c), 409, 200)
    case("Connection: Upgrade", add_header(plain, b"Connection: Upgrade"), 409, 200)
    case("Connection: TE", add_header(plain, b"Connection: TE\r\nTE: trailers"), 409, 200)
    case("an unknown expectation", add_header(plain, b"Expect: 200-ok"), 409, 200)
    case("X-Forwarded-*", add_header(plain, b"X-Forwarded-For: 1.2.3.4"), 409, 200)
    case("two Content-Types", add_header(plain, b"Content-Type: text/plain"), 409, 200)
    odd = plain.replace(b"application/json", b"Application/JSON ; x=1")
    case("a Content-Type in odd case", odd, 409, 200)
    # 100-continue for a body past the limit: 413 and no 100, then the close
    # (h11 keeps no connection whose client waited for a 100 it did not get).
    over = with_length(add_header(cut, b"Expect: 100-continue"), b"99999")
    case("100-continue past the limit", over, 413)
    # Pipelines mixing the lanes.
    mix = post(create("s2")) + post(create("s3")) + HEALTH + post(create("s4"))
    case("lane, lane, h11, lane", mix, 200, 200, 200, 200, 200)
    bad = with_length(post(create("s6")), b"+1")
    case("an attempt, then a bad length", post(create("s5")) + bad, 200, 400)
    chunky = add_header(post(create("s8")), b"Transfer-Encoding: chunked")
    case("an attempt, then a length and chunked", post(create("s7")) + chunky, 200, 400)
    return cases


async def test_smuggling_shapes_are_read_alike() -> None:
    """Each shape, then /health and the end: the same bytes from both lanes."""
    async with served(True) as (fast, _), served(False) as (slow, _):
        for name, (data, expected) in shapes().items():
            got = await to_the_end(fast, data + LAST)
            assert got == await to_the_end(slow, data + LAST), name
            assert statuses(got) == expected, (name, got)


@contextlib.asynccontextmanager
async def batched(lane: bool) -> AsyncIterator[str]:
    """A server whose attempts take a batch window to answer (50 ms)."""
    server = SyncServer.embedded(
        [SIMPLE, PURCHASE],
        AGENTS,
        tokens={a: f"{a}-token" for a in AGENTS},
        policy="batched",
        batch_window_ms=50,
    )
    app = create_app(server, limits=LIMITS, fast_lane=lane)
    async with serve(app, **uvicorn_options(LIMITS)) as url:
        yield url


@pytest.mark.parametrize("lane", [True, False], ids=["lane", "h11"])
async def test_an_attempt_then_a_half_close_is_answered(lane: bool) -> None:
    """One attempt, then ``shutdown(SHUT_WR)`` (``nc -N``, a script): the
    answer must still come. Answered within the loop step that read it (the
    instant policy), it did; a batch window later, the connection was gone
    (uvicorn closed it at the end of input: syncserver/_guard.py keeps it)."""
    async with batched(lane) as url:
        got = await to_the_end(url, post(create("h1")), half_close=True)
    assert statuses(got) == [200], got


async def test_a_request_with_a_length_and_chunked_closes_the_connection() -> None:
    """The length covers an empty chunked body and a request after it: a front
    end that reads the length sees one request; h11 (the lane leaves it such
    requests) reads the chunks, and then the hidden request, /health, as the
    next one, and answers it: 400, 200, then LAST's 200. The connection must
    end after the first answer, in either lane."""
    data = add_header(post(b"0\r\n\r\n" + HEALTH), b"Transfer-Encoding: chunked")
    async with served(True) as (fast, _), served(False) as (slow, _):
        got = await to_the_end(fast, data + LAST)
        assert got == await to_the_end(slow, data + LAST)
    assert statuses(got) == [400], got


@pytest.mark.parametrize("lane", [True, False], ids=["lane", "h11"])
async def test_a_100_continue_answered_413_closes_at_once(lane: bool) -> None:
    """``Expect: 100-continue`` with a length past the limit: 413, and no 100,
    so the client may never send its body; the connection closes after the 413
    rather than wait for the body (with a body timeout of 30 s here, reading to
    the end within to_the_end's 10 s shows it is not the timer), and what came
    next is not taken for the body."""
    cut = post(create("e1")).split(b"\r\n\r\n")[0] + b"\r\n\r\n"
    over = with_length(add_header(cut, b"Expect: 100-continue"), b"99999")
    limits = Limits(max_body=4096, header_timeout=30, body_timeout=30)
    async with served(lane, limits) as (url, _):
        got = await to_the_end(url, over + LAST)
    assert statuses(got) == [413], got
