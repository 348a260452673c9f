"""Route declarations: what can be checked is checked when a route is declared."""

from __future__ import annotations

import pytest

from peach import LocalExecutor
from strabo.proxy import ProxyAdapter, RouteError
from syncserver import SyncServer
from tests.conftest import load

SIMPLE = load("atomic-ucp.lsh")


def make_proxy(**options: object) -> ProxyAdapter:
    server = SyncServer.embedded([SIMPLE], {"business": ["Business"]})
    return ProxyAdapter(
        "business",
        SIMPLE,
        "Business",
        LocalExecutor(server),
        base_url="http://merchant.test",
        internal=["cid"],
        **options,
    )  # type: ignore[arg-type]


def test_a_route_reads_its_spec() -> None:
    proxy = make_proxy()
    route = proxy.route(
        "Complete->>Completed",
        "POST-/checkout-sessions/{id}/complete",
        response={"order": "$.order"},
    )
    assert (route.trigger, route.response, route.method, route.path) == (
        "Complete",
        "Completed",
        "POST",
        "/checkout-sessions/{id}/complete",
    )
    assert route.params == ("id",)
    assert str(route) == "Complete->>Completed POST /checkout-sessions/{id}/complete"
    # Spaces are allowed, and the method may be lower case.
    assert proxy.route("Cancel->>Cancelled", "post /checkout-sessions/{id}/cancel").method == "POST"
    # A route may name actions outside the protocol: it is then for request() only.
    update = proxy.route(
        "Update->>Updated", "PUT-/checkout-sessions/{id}", request={"discount_codes": "$.discounts"}
    )
    assert update.response == "Updated"


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("Complete->>", "POST-/x"), {}, "must be 'Trigger->>Response' or 'Trigger'"),
        (("Complete->>Completed", "/checkout"), {}, "must be 'METHOD-/path'"),
        (("Complete->>Completed", "FETCH-/checkout"), {}, "unknown HTTP method 'FETCH'"),
        (
            ("Complete->>Completed", "POST-/c/{session}/complete"),
            {},
            "path parameter {session} is not an attribute of Complete (cid, Created, id, "
            "payment_data, risk_signals)",
        ),
        (("Complete->>Completed", "POST-/c/{cid}"), {}, "path parameter {cid} is internal"),
        (("Complete->>Completed", "POST-/c/{id"), {}, "malformed path parameter"),
        (
            ("Complete->>Completed", "POST-/c/{id}/complete"),
            {"response": {"order": "order.id"}},
            "'order.id' is not a JSONPath (it must start with '$')",
        ),
        (
            ("Complete->>Completed", "POST-/c/{id}/complete"),
            {"response": {"order": "$.[["}},
            "'$.[[' is not a valid JSONPath",
        ),
        (
            ("Complete->>Completed", "POST-/c/{id}/complete"),
            {"request": {"total": "$.t"}},
            "request= maps 'total', which is not an attribute of Complete",
        ),
        (
            ("Complete->>Completed", "POST-/c/{id}/complete"),
            {"request": {"cid": "$.c"}},
            "maps 'cid', which is internal and never goes on the wire",
        ),
        (
            ("Create->>Complete", "POST-/c"),
            {},
            "Complete is performed by Platform, not by the proxy's role Business",
        ),
        (
            ("Create->>Created", "POST-/c"),
            {"failure": "Oops"},
            "failure action 'Oops' is not in SimpleUCP",
        ),
        (
            ("Create->>Created", "POST-/c"),
            {"failure": "Cancel"},
            "failure action Cancel is performed by Platform",
        ),
    ],
)
def test_bad_routes_fail_at_declaration(args: tuple, kwargs: dict, message: str) -> None:
    proxy = make_proxy()
    with pytest.raises(RouteError) as caught:
        proxy.route(*args, **kwargs)
    assert message in str(caught.value)
    assert proxy.routes == {}


def test_one_route_per_trigger() -> None:
    proxy = make_proxy()
    proxy.route("Cancel->>Cancelled", "POST-/c/{id}/cancel")
    with pytest.raises(RouteError, match="a route for Cancel is already declared"):
        proxy.route("Cancel", "POST-/c/{id}/cancel")


def test_adapter_options_are_checked() -> None:
    with pytest.raises(RouteError, match="exclude names 'Creat', which is not an action"):
        make_proxy(exclude=["Creat"])
    server = SyncServer.embedded([SIMPLE], {"business": ["Business"]})
    with pytest.raises(RouteError, match="internal names cdi, not attributes of SimpleUCP"):
        ProxyAdapter(
            "business",
            SIMPLE,
            "Business",
            LocalExecutor(server),
            base_url="http://merchant.test",
            internal=["cdi"],
        )


async def test_request_needs_a_declared_route() -> None:
    proxy = make_proxy()
    with pytest.raises(RouteError, match=r"no route for 'Get' \(routes: none\)"):
        await proxy.request("Get", {"id": "x"})
