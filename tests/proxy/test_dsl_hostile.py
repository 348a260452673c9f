"""The proxy DSL under a careless or hostile user: route declarations that cannot
work are refused when declared, naming the route and the field; answers, hooks
and listeners that misbehave at run time end in the route's failure policy (a
failure action or on_error), never in a raw traceback, a wedged adapter or a
request to another resource.

The service is a real HTTP server on a loopback port that answers from a script
(tests/proxy/test_policy.py's), the MAS a real in-process SyncServer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from langshaw import ActionInstance, LangshawProtocol
from peach import LocalExecutor, PeachAdapter
from strabo import serve
from strabo.proxy import (
    HTTPEvent,
    ProxyAdapter,
    ProxyAnswerError,
    ProxyError,
    ProxyHTTPError,
    ProxyRequest,
    ProxyRequestError,
    RouteError,
)
from syncserver import SyncServer
from tests.conftest import load
from tests.peach.test_http1 import raw_server
from tests.proxy.test_policy import MAS, SIMPLE, Scripted, answer, create
from tests.proxy.test_routes import make_proxy

TYPED = load("atomic-ucp.lsh")  # make_proxy's protocol: the typed SimpleUCP


@pytest.fixture
async def service() -> AsyncIterator[tuple[Scripted, str]]:
    script = Scripted(answer(503))
    async with serve(script, lifespan="off") as url:
        yield script, url


async def created(mas: MAS, checkout_id: Any = "chk") -> ActionInstance:
    """A checkout up to Created (said by the proxy, without HTTP)."""
    made = await create(mas)
    await mas.proxy.attempt(
        [mas.proxy.build_action("Created", {**made.bindings, "id": checkout_id})]
    )
    return made


# Declarations that cannot work: refused at once, naming the route and the field --------

COMPLETE = ("Complete->>Completed", "POST-/c/{id}/complete")


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        # A response the protocol never lets follow the trigger.
        (
            ("Complete->>Failed", "POST-/c/{id}"),
            {},
            "response action Failed can never follow Complete: Complete depends on "
            "Created, and Created excludes Failed (nono)",
        ),
        (
            ("Complete->>Created", "POST-/c/{id}"),
            {},
            "response action Created can never follow Complete: Complete depends on "
            "Created, so Created has happened by then",
        ),
        (("Created->>Created", "POST-/c/{id}"), {}, "Created cannot be its own answer"),
        (
            COMPLETE,
            {"failure": "Created"},
            "failure action Created can never follow Complete: Complete depends on "
            "Created, so Created has happened by then; route the failure to on_error",
        ),
        # A request mapping that no body can carry.
        (
            ("Complete->>Completed", "GET-/c/{id}"),
            {"request": {"payment_data": "$.p"}},
            "a GET sends no body, so request= maps nothing",
        ),
        *(
            (
                COMPLETE,
                {"request": {"payment_data": path}},
                f"request['payment_data']: {path!r} names no one place to write the value to",
            )
            for path in ("$..p", "$", "$.a[*]", "$[0]", "$.a[-1]", "$.a[0,1]",
                         "$.a[?(@.x == 1)]")
        ),
        (
            COMPLETE,
            {"request": {"payment_data": "$.a", "risk_signals": "$.a"}},
            "request= writes 'payment_data' at $.a and 'risk_signals' at the same place",
        ),
        (
            COMPLETE,
            {"request": {"payment_data": "$.a", "risk_signals": "$.a.b"}},
            "request= writes 'payment_data' at $.a and 'risk_signals' inside it",
        ),
        (
            COMPLETE,
            {"request": {"payment_data": "$.risk_signals"}},  # which goes by its own name
            "request= writes 'payment_data' at $.risk_signals and 'risk_signals' at the "
            "same place",
        ),
        (
            COMPLETE,
            {"request": {"payment_data": "$.a[0]", "risk_signals": "$.a.b"}},
            "request= writes 'payment_data' and 'risk_signals' into $.a as a list and as "
            "an object",
        ),
        # A dependency: the state binds it, the wire never carries it.
        *(
            (
                COMPLETE,
                {kind: {"Created" if kind == "request" else "Complete": "$.x"}},
                f"{kind}= maps '{'Created' if kind == 'request' else 'Complete'}', which names "
                "an action: its value only records that",
            )
            for kind in ("request", "response")
        ),
        # A name that is no string, on a route of request() only (no action to check).
        (("Put", "PUT-/p"), {"request": {1: "$.a"}}, "request= maps 1: attribute names are"),
        # A path the request line cannot carry.
        (
            ("Complete->>Completed", "POST-/café/{id}"),
            {},
            "the path holds 'é', which a request line cannot carry: percent-encode it "
            "('%C3%A9')",
        ),
        (
            ("Complete->>Completed", "POST-/c/{id}/\u202ecomplete"),
            {},
            "the path holds '\\u202e', which a request line cannot carry",
        ),
        (
            ("Complete->>Completed", "POST-/c/{id}/complete#now"),
            {},
            "the path holds '#', which a request line cannot carry: percent-encode it ('%23')",
        ),
    ],
)
def test_a_route_that_cannot_work_is_refused_when_declared(
    args: tuple[str, str], kwargs: dict[str, Any], message: str
) -> None:
    proxy = make_proxy()
    with pytest.raises(RouteError) as caught:
        proxy.route(*args, **kwargs)
    assert str(caught.value).startswith(f"route({args[0]!r}, {args[1]!r}): ")
    assert message in str(caught.value)
    assert proxy.routes == {}


def test_a_route_that_can_work_is_still_declared() -> None:
    """The checks refuse no mapping that builds a body: nested fields, indexes,
    fields side by side, and one kept off the wire."""
    proxy = make_proxy()
    route = proxy.route(
        *COMPLETE,
        request={"payment_data": "$.pay.items[1].data", "risk_signals": "$.pay.items[0].risk"},
    )
    body = route.body({"id": "c", "payment_data": 1, "risk_signals": 2}, frozenset({"id"}))
    assert body == {"pay": {"items": [{"risk": 2}, {"data": 1}]}}
    proxy.route("Create->>Created", "POST-/c", request={"buyer": None, "currency": "$.money"})


QUOTES = LangshawProtocol.parse(
    """
Quotes
who Client , Service
what rid key , qid key , Quote
do
  Client : Ask(rid , q)
  Service : Quote(rid , qid , Ask , price)
sayso
  Client : q
  Service : price
"""
)


def test_a_response_whose_key_nothing_can_bind_is_refused_when_declared() -> None:
    """Quote's key qid comes from the answer; made internal, it never can."""
    server = SyncServer.embedded([QUOTES], {"service": ["Service"]})

    def proxy(internal: list[str]) -> ProxyAdapter:
        executor = LocalExecutor(server)
        return ProxyAdapter(
            "service", QUOTES, "Service", executor, base_url="http://x.test", internal=internal
        )

    with pytest.raises(RouteError) as caught:
        proxy(["rid", "qid"]).route("Ask->>Quote", "POST-/quotes")
    assert str(caught.value) == (
        "route('Ask->>Quote', 'POST-/quotes'): Quote needs the key qid, which Ask lacks and "
        "which, internal, is never read from the answer: nothing can bind it"
    )
    assert proxy(["rid"]).route("Ask->>Quote", "POST-/quotes").response == "Quote"


def test_an_async_failure_function_is_refused_when_declared() -> None:
    async def reason(error: ProxyError, trigger: ActionInstance) -> dict[str, Any]:
        return {"reason": error.code}

    proxy = make_proxy()
    with pytest.raises(RouteError, match="failure_response= must be a plain function"):
        proxy.route("Create->>Created", "POST-/c", failure="Failed", failure_response=reason)


def test_careless_adapter_options_are_refused_when_made() -> None:
    def make(**options: Any) -> ProxyAdapter:
        server = SyncServer.embedded([TYPED], {"business": ["Business"]})
        given = {"base_url": "http://merchant.test", **options}
        return ProxyAdapter("business", TYPED, "Business", LocalExecutor(server), **given)

    async def hook(request: ProxyRequest) -> dict[str, str]:
        return {}

    # A lone string read as a list of names: c, i, d.
    with pytest.raises(RouteError, match="internal must be a list of names, not 'cid'"):
        make(internal="cid")
    with pytest.raises(RouteError, match="exclude must be a list of names, not 'Create'"):
        make(exclude="Create")
    with pytest.raises(RouteError, match="internal holds 1: names are strings"):
        make(internal=["cid", 1])
    for url in (None, "merchant.test:8182", "ftp://merchant.test", "http://"):
        with pytest.raises(RouteError, match="base_url must be an http\\(s\\) URL"):
            make(base_url=url)
    with pytest.raises(RouteError, match="header_hook must be a function"):
        make(header_hook={"UCP-Agent": "x"})
    with pytest.raises(RouteError, match="header_hook must be a plain function"):
        make(header_hook=hook)
    proxy = make(internal=["cid"])
    with pytest.raises(TypeError, match="on_error registers a function"):
        proxy.on_error("Create")  # type: ignore[arg-type]
    assert proxy.base_url == "http://merchant.test"


async def test_request_with_bindings_that_are_no_dict_says_so() -> None:
    proxy = make_proxy()
    proxy.route("Get", "GET-/c/{id}")
    with pytest.raises(TypeError, match=r"request\('Get'\): bindings must be a dict, not None"):
        await proxy.request("Get", None)  # type: ignore[arg-type]


async def test_a_base_url_set_to_nonsense_after_the_start_fails_the_request(
    service: tuple[Scripted, str],
) -> None:
    script, url = service
    script.answers = [answer(200, b'{"ok": true}')]
    mas = MAS(SIMPLE, url, retries=0)
    mas.proxy.route("Put", "PUT-/c")
    async with mas.server, mas.proxy:
        mas.proxy.base_url = "merchant.test"  # no scheme
        with pytest.raises(ProxyRequestError, match="base_url must be an http\\(s\\) URL"):
            await mas.proxy.request("Put", {}, idempotency_key="k1")
        mas.proxy.base_url = url  # and the adapter goes on
        assert await mas.proxy.request("Put", {}, idempotency_key="k2") == {"ok": True}
    assert len(script.requests) == 1


# Bindings that would reach another resource ----------------------------------------------


@pytest.mark.parametrize("checkout_id", ["", ".", ".."])
async def test_a_path_parameter_naming_no_resource_sends_nothing(
    service: tuple[Scripted, str], checkout_id: str
) -> None:
    """``/c//complete`` or ``/c/../complete`` is another resource (a server or a
    proxy on the way folds the dots): the Platform's binding must not choose it."""
    script, url = service
    mas = MAS(SIMPLE, url, retries=0)
    mas.proxy.route("Complete->>Completed", "POST-/c/{id}/complete")
    async with mas.server, mas.proxy, mas.platform:
        made = await created(mas, checkout_id)
        complete = next(f for f in mas.platform.enabled(made.keys) if f.name == "Complete")
        await mas.platform.attempt([complete.bind(payment_data={}, risk_signals={})])
        error = await mas.error()
    assert isinstance(error, ProxyRequestError) and error.attribute == "id"
    assert "names no resource of its own" in str(error)
    assert script.requests == []


# Answers the mapping cannot read ---------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "why"),
    [
        # A filter whose regular expression does not compile when it is used.
        ("$.t[?(@.x =~ '(')]", b'{"t": [{"x": "a"}]}', "error: missing ), unterminated"),
        # An extension applied to a value of another type.
        ("$.t.`sub(/x/, y)`", b'{"t": 5}', "TypeError: expected string"),
        # Several values where one is bound: which one?
        ("$.t[*]", b'{"t": [{"amount": 1}, {"amount": 2}]}', "it selects 2 values, not one"),
    ],
)
async def test_an_answer_a_response_path_cannot_read_is_the_routes_failure(
    service: tuple[Scripted, str], path: str, body: bytes, why: str
) -> None:
    script, url = service
    script.answers = [answer(201, body)]
    mas = MAS(SIMPLE, url, retries=0)
    mas.proxy.route(
        "Create->>Created",
        "POST-/c",
        response={"totals": path},
        failure="Failed",
        failure_response={"reason": "$.message"},
    )
    async with mas.server, mas.proxy, mas.platform:
        await create(mas)
        failed = await mas.wait_for("Failed")
        assert "Created" not in mas.names() and mas.errors == []
        assert failed["reason"].startswith("Create->>Created POST /c: totals cannot be read ")
        assert why in failed["reason"]
        # The adapter is not wedged: the next checkout, answered well, is Created.
        script.answers = [answer(201, b'{"id": "chk"}')]  # no t: nothing to read
        await create(mas)
        done = await mas.wait_for("Created")
    assert done["id"] == "chk" and done["totals"] is None and len(script.requests) == 2


async def test_a_failure_path_the_error_cannot_fill_goes_to_on_error(
    service: tuple[Scripted, str], caplog: pytest.LogCaptureFixture
) -> None:
    _, url = service  # 503, with no code: `sub` meets None
    mas = MAS(SIMPLE, url, retries=0)
    mas.proxy.route(
        "Create->>Created",
        "POST-/c",
        failure="Failed",
        failure_response={"reason": "$.code.`sub(/x/, y)`"},
    )
    async with mas.server, mas.proxy, mas.platform:
        await create(mas)
        error = await mas.error()
    assert isinstance(error, ProxyHTTPError) and error.status == 503
    assert "Failed" not in mas.names()
    [line] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "failed and its failure_response cannot be read: " in line
    assert not [r for r in caplog.records if r.exc_info]


async def test_json_nested_past_reading_is_a_proxy_error(service: tuple[Scripted, str]) -> None:
    script, url = service
    deep = b"[" * 100_000 + b"]" * 100_000
    script.answers = [answer(200, deep), answer(400, deep)]
    mas = MAS(SIMPLE, url, retries=0)
    mas.proxy.route("Put", "PUT-/c")
    async with mas.server, mas.proxy:
        with pytest.raises(ProxyAnswerError, match="nested too deeply to be read"):
            await mas.proxy.request("Put", {}, idempotency_key="k1")
        with pytest.raises(ProxyHTTPError) as caught:
            await mas.proxy.request("Put", {}, idempotency_key="k2")
    assert caught.value.status == 400 and caught.value.detail.startswith("[[[[")


async def test_a_body_that_is_not_json_is_never_sent(service: tuple[Scripted, str]) -> None:
    """docs/proxy.md: a body that is not JSON is never sent (ProxyRequestError)."""
    script, url = service
    loop: dict[str, Any] = {}
    loop["self"] = loop
    mas = MAS(SIMPLE, url, retries=0)
    mas.proxy.route("Put", "PUT-/c")
    async with mas.server, mas.proxy:
        for value in (float("nan"), loop, {1, 2}):
            with pytest.raises(ProxyRequestError, match="the body is not JSON"):
                await mas.proxy.request("Put", {"x": value}, idempotency_key="k")
    assert script.requests == []


# Hooks, listeners and handlers that misbehave ---------------------------------------------


def raises(request: ProxyRequest) -> Mapping[str, str]:
    raise KeyError("UCP_SIGNING_KEY")


@pytest.mark.parametrize(
    ("hook", "kind", "message"),
    [
        (lambda request: None, ProxyRequestError, "header_hook gave 'None', not a dict"),
        (lambda request: {"X-Try": 1}, ProxyRequestError, "not a dict of header names to str"),
        (lambda request: {7: "x"}, ProxyRequestError, "not a dict of header names to strings"),
        (raises, ProxyError, "KeyError: 'UCP_SIGNING_KEY'"),
        # Framing is the client's: a second Content-Length, or a Transfer-Encoding
        # over a Content-Length, desyncs the connection (request smuggling).
        *(
            (
                lambda request, h=h, v=v: {h: v},
                ProxyRequestError,
                f"gave {h}: {v!r}, which is not sent",
            )
            for h, v in [
                ("Content-Length", "0"),
                ("Transfer-Encoding", "chunked"),
                ("content-type", "text/plain"),
            ]
        ),
        # The lean client would send UTF-8, httpx refuses: neither, and a clear word.
        (lambda request: {"X-Buyer": "Zoë"}, ProxyRequestError, "headers are ASCII"),
    ],
)
async def test_a_header_hook_that_misbehaves_makes_request_raise_a_proxy_error(
    service: tuple[Scripted, str], hook: Any, kind: type[ProxyError], message: str
) -> None:
    """request() raises ProxyErrors only, for fail(): a custom orchestration's
    ``except ProxyError`` must catch a broken hook too."""
    script, url = service
    mas = MAS(SIMPLE, url, retries=0, header_hook=hook)
    mas.proxy.route("Put", "PUT-/c")
    async with mas.server, mas.proxy:
        with pytest.raises(kind, match=message) as caught:
            await mas.proxy.request("Put", {}, idempotency_key="k")
    assert type(caught.value) is kind and caught.value.route == "Put"
    assert script.requests == []


async def test_a_listener_that_raises_does_not_turn_an_answer_into_a_failure(
    service: tuple[Scripted, str], caplog: pytest.LogCaptureFixture
) -> None:
    """The service created the checkout: a listener's bug (it only watches) must
    not make the proxy say it failed, or fail it at all."""
    script, url = service
    script.answers = [answer(201, b'{"id": "chk_1"}')]
    mas = MAS(SIMPLE, url, retries=0)

    def broken(event: HTTPEvent) -> None:
        raise RuntimeError("dashboard down")

    mas.proxy.http_listeners.append(broken)
    mas.proxy.route("Create->>Created", "POST-/c", failure="Failed")
    async with mas.server, mas.proxy, mas.platform:
        await create(mas)
        made = await mas.wait_for("Created")
    assert made["id"] == "chk_1" and "Failed" not in mas.names() and mas.errors == []
    assert "http listener" in caplog.text and "RuntimeError: dashboard down" in caplog.text
    assert len(script.requests) == 1


async def test_a_plain_on_error_function_is_called(
    service: tuple[Scripted, str], caplog: pytest.LogCaptureFixture
) -> None:
    script, url = service
    script.answers = [answer(409)]
    mas = MAS(SIMPLE, url, retries=0)
    heard: list[ProxyError] = []
    mas.proxy.on_error(lambda error, route, trigger: heard.append(error))
    mas.proxy.route("Create->>Created", "POST-/c")
    async with mas.server, mas.proxy, mas.platform:
        await create(mas)
        error = await mas.error()  # the async handler heard it; the plain one before it
    assert heard == [error]
    assert "error handler" not in caplog.text and not [r for r in caplog.records if r.exc_info]


# Two routes answering with one action ----------------------------------------------------

RELAY = LangshawProtocol.parse(
    """
Relay
who Client , Service
what rid key , Done
do
  Client : Ask(rid , q)
  Client : Nudge(rid , Ask , n)
  Service : Done(rid , Ask , a)
sayso
  Client : q , n
  Service : a
"""
)


async def test_a_trigger_left_unanswered_is_resumed_when_two_routes_share_its_answer(
    service: tuple[Scripted, str],
) -> None:
    """Done answers Ask and Nudge alike: an Ask made while the proxy was down is
    handled when it starts, whichever route was declared last."""
    script, url = service
    script.answers = [answer(200, b'{"a": 1}')]
    server = SyncServer.embedded([RELAY], {"client": ["Client"], "service": ["Service"]})
    executor = LocalExecutor(server)
    client = PeachAdapter("client", RELAY, "Client", executor)
    proxy = ProxyAdapter("service", RELAY, "Service", executor, base_url=url, internal=["rid"])
    proxy.route("Ask->>Done", "POST-/ask")
    proxy.route("Nudge->>Done", "POST-/nudge")
    done = asyncio.Event()

    @client.observation("Done")
    async def answered(action: ActionInstance, performer: str) -> None:
        done.set()

    async with server, client:
        await client.attempt([client.initiating()[0].bind(q="?")])
        async with proxy:
            await asyncio.wait_for(done.wait(), 5)
    assert [path for path, _, _ in script.requests] == ["/ask"]



async def test_reply_and_fail_say_what_they_take() -> None:
    # A FeasibleAction from on_enabled, or an error that is no ProxyError, raised
    # an AttributeError from inside; each is now a TypeError that says why.
    proxy = make_proxy()
    route = proxy.route("Create->>Created", "POST /checkout-sessions")
    with pytest.raises(TypeError, match="the ActionInstance observed"):
        await proxy.reply(route, object(), {})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="the ActionInstance observed"):
        await proxy.fail(route.name, "Create", ProxyError("x"))  # type: ignore[arg-type]
    trigger = ActionInstance(TYPED.action("Create"), {})
    with pytest.raises(TypeError, match="takes a ProxyError"):
        await proxy.fail(route, trigger, ValueError("no"))  # type: ignore[arg-type]


async def test_an_answer_longer_than_is_read_is_an_answer_error_not_retried() -> None:
    # A service that says it sends 1 GB: the client refuses it from its head,
    # and the proxy settles it as an answer it cannot read, not as no answer
    # (retried, it would come again as long).
    heads = 0

    async def claim(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal heads
        heads += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000000000\r\n\r\n{")
        await writer.drain()
        await reader.read()  # until the client goes away

    async with raw_server(claim) as url:
        mas = MAS(SIMPLE, url, retries=3, backoff=0.01)
        mas.proxy.route("Put", "PUT-/c")
        async with mas.server, mas.proxy:
            with pytest.raises(ProxyAnswerError, match="exceeds 64 MiB"):
                await asyncio.wait_for(mas.proxy.request("Put", {}, idempotency_key="k"), 10)
    assert heads == 1
