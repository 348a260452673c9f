"""The proxy's lean HTTP client, sending requests: error answers through the
failure policy, requests that cannot be sent (a header hook or a body that would
break the wire), and where requests go (base_url, TLS, environment proxies).
Against real servers on loopback: see tests/hostile/_proxy_wire.py."""

from __future__ import annotations

import asyncio
import base64
import datetime
import gzip
import ipaddress
import json
import logging
import ssl
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route as StarletteRoute

from strabo.proxy import (
    ProxyHTTPError,
    ProxyRequest,
    ProxyRequestError,
)
from syncserver.client import HttpxClient, LeanClient
from syncserver.serving import free_port, serve
from tests.hostile._proxy_wire import (
    WAIT,
    Conn,
    RawServer,
    bridged,
    http,
    keep_alive,
    no_proxy_environment,  # noqa: F401 (autouse)
    once,
    unreachable,
)

# A connection dropped without being closed is a failure, not a warning. Only
# sockets and transports: a file another test of the same worker left open may
# be collected during any test, and is not this test's failure.
pytestmark = [
    pytest.mark.filterwarnings("error:unclosed <socket:ResourceWarning"),
    pytest.mark.filterwarnings("error:unclosed transport:ResourceWarning"),
]


# Error answers through the failure policy -------------------------------------------------


async def test_error_answers_are_http_errors_retried_under_one_key() -> None:
    detail = json.dumps({"detail": [{"loc": ["body", "currency"], "msg": "bad"}]}).encode()
    answers = (
        http("503 Service Unavailable", b"busy", "Retry-After: 0"),
        http("422 Unprocessable Entity", gzip.compress(detail), "Content-Encoding: gzip",
             "Content-Type: application/json"),
    )
    async with RawServer(keep_alive(*answers)) as raw, bridged(raw.url, retries=3) as bridge:
        with pytest.raises(ProxyHTTPError) as caught:
            await bridge.create("k")
    error = caught.value
    assert (error.status, error.code, error.detail) == (422, "validation", "body.currency: bad")
    assert error.attempts == 2 and raw.keys() == ["k", "k"] and raw.connections == 1


async def test_a_garbled_answer_becomes_the_failure_action(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[Any] = []
    async with (
        RawServer(once(b"HTTP/1.1 OK\r\n\r\n", close=True)) as raw,
        bridged(raw.url, retries=1) as bridge,
    ):
        bridge.proxy.http_listeners.append(events.append)
        failed = await bridge.round_trip()
    assert failed.name == "Failed"
    reason = failed["reason"]
    assert reason["status"] is None and reason["code"] == "unreachable"
    assert reason["message"].startswith(f"POST {raw.url}/c: no answer (")
    assert len(raw.requests) == 2 and len(set(raw.keys())) == 1
    assert [e.status for e in events] == [None, None] and all(e.error for e in events)
    assert not [r for r in caplog.records if r.exc_info and r.levelno >= logging.ERROR]


# Requests that cannot be sent -------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [{"X-Sig": "v\r\nX-Injected: 1"}, {"X-Sig": "v\nX-Injected: 1"}, {"X-Sig": "v\rX-Injected: 1"},
     {"X-Sig\r\nX-Injected": "1"}, {"X-Sig: x": "1"}, {"": "1"}],
    ids=["crlf", "lf", "cr", "in the name", "colon in the name", "empty name"],
)
async def test_a_header_hook_cannot_smuggle_a_header(headers: dict[str, str]) -> None:
    async with (
        RawServer(keep_alive(http())) as raw,
        bridged(raw.url, header_hook=lambda request: headers) as bridge,
    ):
        with pytest.raises(ProxyRequestError) as caught:
            await bridge.create()
    assert "cannot send the request: invalid header" in str(caught.value)
    assert raw.connections == 0 and raw.requests == []  # nothing went on the wire


async def test_a_smuggling_hook_fails_the_route_without_a_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def hook(request: ProxyRequest) -> dict[str, str]:
        return {"Authorization": "Bearer t\r\nContent-Length: 0\r\n\r\nGET /admin HTTP/1.1"}

    async with (
        RawServer(keep_alive(http())) as raw,
        bridged(raw.url, header_hook=hook, retries=2) as bridge,
    ):
        failed = await bridge.round_trip()
    assert failed.name == "Failed" and failed["reason"]["code"] == "invalid_binding"
    assert "cannot send the request" in failed["reason"]["message"]
    assert raw.requests == []
    assert not [r for r in caplog.records if r.exc_info and r.levelno >= logging.ERROR]


async def test_a_path_parameter_cannot_smuggle_either() -> None:
    async with RawServer(keep_alive(http("200 OK", b"{}"))) as raw, bridged(raw.url) as bridge:
        bindings = {"cid": "c-1", "id": "x HTTP/1.1\r\nX-Injected: 1\r\n\r\nGET /admin"}
        assert await bridge.proxy.request("Complete", bindings, idempotency_key="k") == {}
    [req] = raw.requests
    assert req.target == (
        "/c/x%20HTTP%2F1.1%0D%0AX-Injected%3A%201%0D%0A%0D%0AGET%20%2Fadmin/complete"
    )
    assert req.header("x-injected") == []


@pytest.mark.parametrize("value", [float("nan"), float("inf"), {1, 2}], ids=["nan", "inf", "set"])
async def test_a_body_json_refuses_is_unsendable(value: Any) -> None:
    async with RawServer(keep_alive(http())) as raw, bridged(raw.url) as bridge:
        with pytest.raises(ProxyRequestError, match="cannot send the request"):
            await bridge.create(currency=value)
    assert raw.connections == 0


# A header from the hook replaces the client's own of the same name, as httpx did.
@pytest.mark.parametrize("name", ["User-Agent", "accept"])
async def test_a_hook_header_replaces_the_clients_own(name: str) -> None:
    async with (
        RawServer(keep_alive(http())) as raw,
        bridged(raw.url, header_hook=lambda request: {name: "mine/1"}) as bridge,
    ):
        await bridge.create()
    assert raw.requests[0].header(name) == ["mine/1"]


# Where the requests go: base_url, TLS, environment proxies --------------------------------


async def seen_paths(request: Request) -> JSONResponse:
    assert request.client is not None
    return JSONResponse({"path": request.url.path, "host": request.headers["host"],
                         "port": request.client.port}, status_code=201)


UVICORN_APP = Starlette(routes=[StarletteRoute("/{rest:path}", seen_paths, methods=["POST"])])


async def test_a_base_url_with_a_path_prefix_on_uvicorn() -> None:
    async with serve(UVICORN_APP, lifespan="off") as url, bridged(url + "/api/v2/") as bridge:
        first = await bridge.create("a")
        second = await bridge.create("b")
    assert first["path"] == "/api/v2/c" and first["host"] == url.removeprefix("http://")
    assert first["port"] == second["port"]  # kept alive by uvicorn too


# Credentials in base_url go as Basic auth (through httpx), as before the lean client.
async def test_credentials_in_the_base_url_are_sent() -> None:
    async with RawServer(keep_alive(http())) as raw:
        url = raw.url.replace("http://", "http://shop:s3cret@")
        async with bridged(url) as bridge:
            await bridge.create()
    expected = "Basic " + base64.b64encode(b"shop:s3cret").decode()
    assert raw.requests[0].header("authorization") == [expected]


async def test_changing_base_url_after_start_reopens_the_client() -> None:
    async with (
        RawServer(keep_alive(http("201 Created", b'{"id": "A"}'))) as a,
        RawServer(keep_alive(http("201 Created", b'{"id": "B"}'))) as b,
        bridged(a.url) as bridge,
    ):
        assert await bridge.create("1") == {"id": "A"}
        bridge.proxy.base_url = b.url
        assert await bridge.create("2") == {"id": "B"}
        await a.wait(lambda: a.open == 0, "the old service's connection closed")
        assert await bridge.create("3") == {"id": "B"}
    assert a.keys() == ["1"] and b.keys() == ["2", "3"] and b.connections == 1


# Each try takes the proxy's current client: a retry in flight while base_url
# changes reaches the new service.
async def test_a_retry_in_flight_when_base_url_changes_still_reaches_a_service() -> None:
    async def busy_then_fine(conn: Conn) -> None:
        while await conn.request() is not None:
            if len(conn.server.requests) == 1:
                await conn.server.release.wait()
                conn.send(http("503 Service Unavailable", b"busy"))
            else:
                conn.send(http("201 Created", b'{"id": "A"}'))

    async with (
        RawServer(busy_then_fine) as a,
        RawServer(keep_alive(http("201 Created", b'{"id": "B"}'))) as b,
        bridged(a.url, retries=1) as bridge,
    ):
        first = asyncio.create_task(bridge.create("1"))
        await a.wait(lambda: len(a.requests) == 1, "the first request")
        bridge.proxy.base_url = b.url
        assert await bridge.create("2") == {"id": "B"}
        a.release.set()
        assert await asyncio.wait_for(first, WAIT) in ({"id": "A"}, {"id": "B"})


async def test_an_https_base_url_speaks_tls() -> None:
    first: list[bytes] = []

    async def record_hello(conn: Conn) -> None:
        first.append(await conn.reader.read(3))
        await conn.close()

    async with (
        RawServer(record_hello) as raw,
        bridged(raw.url.replace("http://", "https://")) as bridge,
    ):
        error = await unreachable(bridge)
    assert first == [b"\x16\x03\x01"]  # a TLS handshake record, not "POST /c"
    assert "cannot connect to 127.0.0.1" in str(error)


def self_signed(directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "strabo test merchant")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return cert_file, key_file


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted", "untrusted"])
async def test_tls_certificates_are_verified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trusted: bool
) -> None:
    cert_file, key_file = self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    if trusted:  # ssl.create_default_context() reads it
        monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
    async with RawServer(keep_alive(http()), tls=context) as raw, bridged(raw.url) as bridge:
        assert isinstance(bridge.client, LeanClient)
        if trusted:
            assert await bridge.create("a") == {"id": "chk_1"}
            assert await bridge.create("b") == {"id": "chk_1"}
        else:
            error = await unreachable(bridge)
            assert "CERTIFICATE_VERIFY_FAILED" in str(error)
    assert len(raw.requests) == (2 if trusted else 0)
    if trusted:
        assert raw.connections == 1


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
async def test_an_environment_proxy_makes_the_proxy_use_httpx(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    async with RawServer(keep_alive(http())) as forward:
        monkeypatch.setenv(variable, forward.url)
        async with bridged("http://merchant.invalid:8080/api") as bridge:
            assert isinstance(bridge.client, HttpxClient)
            assert await bridge.create() == {"id": "chk_1"}
    [req] = forward.requests
    assert req.target == "http://merchant.invalid:8080/api/c"  # absolute form: via the proxy
    assert req.key == "key-1"


@pytest.mark.parametrize(
    ("variables", "lean"),
    [({"HTTP_PROXY": "dead", "NO_PROXY": "127.0.0.1"}, True),
     ({"http_proxy": "dead", "no_proxy": "localhost,.example.com,127.0.0.1"}, True),
     ({"HTTP_PROXY": "dead", "NO_PROXY": "*"}, True),
     ({"HTTPS_PROXY": "dead"}, True)],
    ids=["NO_PROXY", "no_proxy list", "NO_PROXY=*", "HTTPS_PROXY only"],
)
async def test_no_proxy_keeps_the_lean_client_direct(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], lean: bool
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    for name, value in variables.items():
        monkeypatch.setenv(name, dead if value == "dead" else value)
    async with RawServer(keep_alive(http())) as raw, bridged(raw.url) as bridge:
        assert isinstance(bridge.client, LeanClient) is lean
        assert await bridge.create() == {"id": "chk_1"}
    assert [r.target for r in raw.requests] == ["/c"]


async def test_a_refused_connection_is_unreachable() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with bridged(url, retries=1) as bridge:
        error = await unreachable(bridge)
    assert "cannot connect to 127.0.0.1" in str(error) and error.attempts == 2

