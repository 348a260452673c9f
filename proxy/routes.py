"""Routes: a Langshaw round trip mapped onto one HTTP call.

``route("Complete->>Completed", "POST-/checkout-sessions/{id}/complete",
request={...}, response={...})`` says: when ``Complete`` happens, send this
request built from its bindings; the answer gives the bindings of ``Completed``.
Mappings are identity by default (an attribute is the top-level JSON field of
the same name) and JSONPath where names or places differ. A route also carries
its failure policy (proxy/policy.py): retry settings that override the
adapter's, and the action, if any, that says the round trip failed. Everything
about a route that can be checked is checked when it is declared.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any
from urllib.parse import quote

from jsonpath_ng import JSONPath
from jsonpath_ng.exceptions import JsonPathParserError
from jsonpath_ng.ext import parse as parse_jsonpath  # type: ignore[attr-defined]
from jsonpath_ng.jsonpath import Child, Fields, Index, Root

from langshaw import ActionInstance, LangshawProtocol
from strabo.proxy.errors import ProxyAnswerError, ProxyError, ProxyRequestError, RouteError
from strabo.proxy.policy import FailureFunction, overrides, unreachable_failure

log = logging.getLogger("strabo.proxy")
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SPEC = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:->>\s*([A-Za-z_][A-Za-z0-9_]*))?\s*$")
_TARGET = re.compile(r"^\s*([A-Za-z]+)\s*[-\s]\s*(/\S*)\s*$")


def _compile(path: str, where: str) -> JSONPath:
    if not isinstance(path, str) or not path.startswith("$"):
        raise RouteError(f"{where}: {path!r} is not a JSONPath (it must start with '$')")
    try:
        return parse_jsonpath(path)
    except (JsonPathParserError, Exception) as exc:  # jsonpath-ng raises several kinds
        raise RouteError(f"{where}: {path!r} is not a valid JSONPath: {exc}") from None


@dataclass(frozen=True)
class Route:
    """One declared round trip. ``trigger`` and ``response`` are action names;
    either may be outside the protocol (then the route is used only through
    ``ProxyAdapter.request``, or its answer is only logged)."""

    trigger: str
    response: str | None
    method: str
    path: str
    request_map: Mapping[str, JSONPath | None] = field(default_factory=dict)
    response_map: Mapping[str, JSONPath] = field(default_factory=dict)
    failure: str | None = None
    failure_map: Mapping[str, JSONPath] = field(default_factory=dict)
    params: tuple[str, ...] = ()
    failure_function: FailureFunction | None = None
    retry: Mapping[str, Any] = field(default_factory=dict)  # overrides of the adapter's policy
    #: The request mappings that name one top-level field (``$.name``): that name.
    request_fields: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.trigger

    def __str__(self) -> str:
        arrow = f"->>{self.response}" if self.response else ""
        return f"{self.trigger}{arrow} {self.method} {self.path}"

    # Building the request ---------------------------------------------------------

    def url_path(self, bindings: Mapping[str, Any]) -> str:
        """The path with its parameters filled from ``bindings``. A parameter bound
        to null (or to an object) makes no request: ProxyRequestError, which the
        route's failure policy handles like any other failure."""

        def fill(match: re.Match[str]) -> str:
            name = match.group(1)
            value = bindings.get(name)
            if value is None:
                raise ProxyRequestError(
                    f"{self}: no value for path parameter {{{name}}}",
                    attribute=name,
                    route=self.name,
                )
            if isinstance(value, Mapping | list | bool):
                raise ProxyRequestError(
                    f"{self}: path parameter {{{name}}} is bound to a {type(value).__name__}, "
                    "not a string or a number",
                    attribute=name,
                    route=self.name,
                )
            text = quote(str(value), safe="")
            if text in ("", ".", ".."):  # /c//complete, /c/../complete: another resource
                raise ProxyRequestError(
                    f"{self}: path parameter {{{name}}} is bound to {value!r}, which names "
                    "no resource of its own in a path",
                    attribute=name,
                    route=self.name,
                )
            return text

        return _PARAM.sub(fill, self.path)

    def body(
        self,
        bindings: Mapping[str, Any],
        skip: frozenset[str],
        typed: frozenset[str] = frozenset(),
    ) -> dict[str, Any] | None:
        """The JSON body: each binding (but those in ``skip``) at its mapped place.
        An absent optional attribute is not in ``bindings``, so it is left out.
        Null is left out too for an attribute without a declared type (the
        convention of untyped protocols); for one in ``typed``, null is a value
        its type admitted, and is sent. None for a GET or DELETE."""
        if self.method in ("GET", "DELETE"):
            return None
        body: dict[str, Any] = {}
        mapped = self.request_map
        for attribute, value in bindings.items():
            if attribute in skip or (value is None and attribute not in typed):
                continue
            if attribute in mapped:
                path = mapped[attribute]
                if path is None:
                    continue  # mapped to nothing: kept off the wire
                name = self.request_fields.get(attribute)
                if name is not None:
                    body[name] = value  # what update_or_create does, without its walk
                else:
                    path.update_or_create(body, value)
            else:
                body[attribute] = value
        return body

    # Reading the answer -----------------------------------------------------------

    def extract(self, answer: Any, mapping: Mapping[str, JSONPath]) -> dict[str, Any]:
        """The bindings an answer gives: mapped attributes through their JSONPath,
        every other top-level field by its name."""
        found: dict[str, Any] = dict(answer) if isinstance(answer, Mapping) else {}
        for attribute, path in mapping.items():
            try:  # an extension may meet a value of another type, a regex may not compile
                matches = path.find(answer)
            except Exception as exc:
                raise self._misfit(attribute, path, f"{type(exc).__name__}: {exc}") from None
            if len(matches) > 1:  # which one is meant? Guessing could bind the wrong one
                raise self._misfit(attribute, path, f"it selects {len(matches)} values, not one")
            if matches:
                found[attribute] = matches[0].value
            else:
                found.pop(attribute, None)
        return found

    def _misfit(self, attribute: str, path: JSONPath, why: str) -> ProxyAnswerError:
        return ProxyAnswerError(
            f"{self}: {attribute} cannot be read from the answer at {path}: {why}",
            attribute=attribute,
            route=self.name,
        )


def _top_field(path: JSONPath) -> str | None:
    """The field name of a path that names one top-level field (``$.name``),
    else None: setting such a path is setting a key."""
    if type(path) is not Child or type(path.left) is not Root:
        return None
    fields = path.right
    if type(fields) is not Fields or len(fields.fields) != 1 or fields.fields[0] == "*":
        return None
    return str(fields.fields[0])


def parse_route(
    spec: str,
    target: str,
    protocol: LangshawProtocol,
    role: str,
    internal: frozenset[str],
    request: Mapping[str, str | None] | None = None,
    response: Mapping[str, str] | None = None,
    failure: str | None = None,
    failure_response: Mapping[str, str] | FailureFunction | None = None,
    retry: Mapping[str, Any] | None = None,
) -> Route:
    """Check a route declaration against the protocol and compile it."""
    where = f"route({spec!r}, {target!r})"
    match = _SPEC.match(spec) if isinstance(spec, str) else None
    if not match:
        raise RouteError(f"{where}: the first argument must be 'Trigger->>Response' or 'Trigger'")
    trigger, answer = match.group(1), match.group(2)
    found = _TARGET.match(target) if isinstance(target, str) else None
    if not found:
        raise RouteError(
            f"{where}: the second argument must be 'METHOD-/path', e.g. 'POST-/orders'"
        )
    method, path = found.group(1).upper(), found.group(2)
    if method not in METHODS:
        raise RouteError(f"{where}: unknown HTTP method {found.group(1)!r} ({', '.join(METHODS)})")
    if "#" in path or not path.isascii() or not path.isprintable():  # sent as is
        odd = next(c for c in path if c == "#" or not c.isascii() or not c.isprintable())
        raise RouteError(
            f"{where}: the path holds {odd!r}, which a request line cannot carry: "
            f"percent-encode it ({quote(odd)!r})"
        )
    params = tuple(_PARAM.findall(path))
    if "{" in _PARAM.sub("", path) or "}" in _PARAM.sub("", path):
        raise RouteError(f"{where}: malformed path parameter in {path!r}")
    actions = protocol.actions
    if trigger in actions:
        attributes = set(actions[trigger].attributes)
        for param in params:
            if param not in attributes:
                raise RouteError(
                    f"{where}: path parameter {{{param}}} is not an attribute of {trigger} "
                    f"({', '.join(actions[trigger].attributes)})"
                )
    for param in params:
        if param in internal:
            raise RouteError(
                f"{where}: path parameter {{{param}}} is internal: it never goes on the wire"
            )
    if request and method in ("GET", "DELETE"):
        raise RouteError(f"{where}: a {method} sends no body, so request= maps nothing")
    request_map = _mapping(request, where, "request", trigger, protocol, internal, allow_none=True)
    _check_places(where, trigger, request or {}, request_map, protocol, internal)
    response_map = _mapping(response, where, "response", answer, protocol, internal)
    failure_function = _check_failure(
        where, trigger, answer, failure, failure_response, protocol, role
    )
    failure_map = (
        {}
        if failure_function is not None
        else _mapping(failure_response, where, "failure_response", failure, protocol, internal)  # type: ignore[arg-type]
    )
    retry_overrides = overrides(where, retry or {})
    if answer is not None and answer in actions and actions[answer].actor != role:
        raise RouteError(
            f"{where}: {answer} is performed by {actions[answer].actor}, not by the proxy's "
            f"role {role}: the proxy cannot answer with it"
        )
    if answer == trigger:
        raise RouteError(f"{where}: {trigger} cannot be its own answer")
    if answer is not None and answer in actions:
        unreachable_failure(protocol, trigger, answer, where, kind="response")
    for action in (answer, failure):
        _check_bindable(where, trigger, action, protocol, internal)
    return Route(
        trigger=trigger,
        response=answer,
        method=method,
        path=path,
        request_map=request_map,
        response_map=response_map,  # type: ignore[arg-type]
        failure=failure,
        failure_map=failure_map,  # type: ignore[arg-type]
        params=params,
        failure_function=failure_function,
        retry=retry_overrides,
        request_fields={
            attribute: name
            for attribute, path in request_map.items()
            if path is not None and (name := _top_field(path)) is not None
        },
    )


def _check_failure(
    where: str,
    trigger: str,
    answer: str | None,
    failure: str | None,
    failure_response: Any,
    protocol: LangshawProtocol,
    role: str,
) -> FailureFunction | None:
    """Check ``failure=`` and ``failure_response=``; the function, if one is given."""
    actions = protocol.actions
    if failure is None:
        if failure_response is not None:
            raise RouteError(f"{where}: failure_response= needs failure=, the action it binds")
        return None
    if not isinstance(failure, str):
        raise RouteError(f"{where}: failure= must name an action, not {failure!r}")
    if failure not in actions:
        raise RouteError(f"{where}: failure action {failure!r} is not in {protocol.name}")
    if actions[failure].actor != role:
        raise RouteError(
            f"{where}: failure action {failure} is performed by {actions[failure].actor}, "
            f"not by the proxy's role {role}"
        )
    if failure in (trigger, answer):
        own = "trigger" if failure == trigger else "answer"
        raise RouteError(f"{where}: failure action {failure} is the route's own {own}")
    unreachable_failure(protocol, trigger, failure, where)
    if failure_response is None or isinstance(failure_response, Mapping):
        return None
    if isinstance(failure_response, Callable):  # type: ignore[arg-type]
        if inspect.iscoroutinefunction(failure_response):
            raise RouteError(
                f"{where}: failure_response= must be a plain function (error, trigger) -> "
                "bindings: an async one gives a coroutine, never bindings"
            )
        return failure_response  # type: ignore[no-any-return]
    raise RouteError(
        f"{where}: failure_response= must map {failure}'s attributes to JSONPaths, or be a "
        f"function (error, trigger) -> bindings, not {type(failure_response).__name__}"
    )


def _mapping(
    given: Mapping[str, str | None] | None,
    where: str,
    kind: str,
    action: str | None,
    protocol: LangshawProtocol,
    internal: frozenset[str],
    allow_none: bool = False,
) -> dict[str, JSONPath | None]:
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise RouteError(f"{where}: {kind}= must map attribute names to JSONPaths")
    compiled: dict[str, JSONPath | None] = {}
    known = (
        protocol.actions[action].attributes
        if action is not None and action in protocol.actions
        else None
    )
    for attribute, path in given.items():
        if not isinstance(attribute, str):
            raise RouteError(f"{where}: {kind}= maps {attribute!r}: attribute names are strings")
        if attribute in internal:
            raise RouteError(
                f"{where}: {kind}= maps {attribute!r}, which is internal and never goes on the wire"
            )
        if known is not None and attribute not in known:
            raise RouteError(
                f"{where}: {kind}= maps {attribute!r}, which is not an attribute of {action} "
                f"({', '.join(known)})"
            )
        if attribute in protocol.actions:  # a dependency: the state binds it, never the wire
            raise RouteError(
                f"{where}: {kind}= maps {attribute!r}, which names an action: its value only "
                f"records that {attribute} occurred, and never goes on the wire"
            )
        if path is None and allow_none:
            compiled[attribute] = None
            continue
        compiled[attribute] = _compile(path, f"{where}: {kind}[{attribute!r}]")  # type: ignore[arg-type]
    return compiled


def _check_bindable(
    where: str,
    trigger: str,
    action: str | None,
    protocol: LangshawProtocol,
    internal: frozenset[str],
) -> None:
    """The keys of the response (or failure) action say its enactment, so they
    come from the trigger or the answer: an internal one is never read off the
    wire, and unless the trigger has it, nothing can ever bind it."""
    actions = protocol.actions
    if action is None or action not in actions or trigger not in actions:
        return
    lacking = [
        k for k in actions[action].keys if k in internal and k not in actions[trigger].attributes
    ]
    if lacking:
        raise RouteError(
            f"{where}: {action} needs the key {', '.join(lacking)}, which {trigger} lacks and "
            "which, internal, is never read from the answer: nothing can bind it"
        )


def _place(path: JSONPath) -> tuple[str | int, ...] | None:
    """Where a request path writes, as keys and indexes from the body's top
    (``$.a.b[0]``: ``("a", "b", 0)``); None for a path that names no one place
    (``$``, ``..``, wildcards, filters, slices, unions), which a body cannot be
    built along."""
    if type(path) is Root:
        return ()
    if type(path) is not Child:
        return None
    left = _place(path.left)
    right = path.right
    if left is None:
        return None
    if type(right) is Fields and len(right.fields) == 1 and right.fields[0] != "*":
        return (*left, str(right.fields[0]))
    if type(right) is Index and len(right.indices) == 1 and right.indices[0] >= 0:
        return (*left, right.indices[0])
    return None


def _check_places(
    where: str,
    trigger: str,
    given: Mapping[str, str | None],
    request_map: Mapping[str, JSONPath | None],
    protocol: LangshawProtocol,
    internal: frozenset[str],
) -> None:
    """Each request path names one place, and no two attributes write the same
    place or one inside the other (which one wins would depend on the order of
    the bindings). An attribute that goes by its own name holds that place."""
    places: list[tuple[tuple[str | int, ...], str]] = []
    for attribute, path in request_map.items():
        if path is None:
            continue
        place = _place(path)
        if not place or not isinstance(place[0], str):  # the body is an object
            raise RouteError(
                f"{where}: request[{attribute!r}]: {given[attribute]!r} names no one place to "
                "write the value to: use fields and indexes only, such as "
                "'$.payment.instruments[0]'"
            )
        places.append((place, attribute))
    if trigger in protocol.actions:
        for attribute in protocol.actions[trigger].attributes:
            unsent = attribute in internal or attribute in protocol.actions
            if attribute not in request_map and not unsent:
                places.append(((attribute,), attribute))
    # In this order a place comes just before the places inside it, and places
    # under one parent sort indexes before names: neighbours tell every clash.
    ordered = sorted(places, key=lambda item: [(type(k) is str, k) for k in item[0]])
    for (place, attribute), (other, name) in pairwise(ordered):
        pairs = enumerate(zip(place, other, strict=False))
        split = next((j for j, (a, b) in pairs if a != b), None)
        if split is not None and type(place[split]) is not type(other[split]):
            raise RouteError(
                f"{where}: request= writes {attribute!r} and {name!r} into "
                f"$.{'.'.join(map(str, place[:split]))} as a list and as an object"
            )
        if other[: len(place)] == place:
            at = "$." + ".".join(map(str, place))
            clash = "at the same place" if other == place else "inside it"
            raise RouteError(
                f"{where}: request= writes {attribute!r} at {at} and {name!r} {clash}: "
                "each attribute needs a place of its own"
            )


def failure_data(
    protocol: LangshawProtocol, route: Route, trigger: ActionInstance, error: ProxyError
) -> tuple[dict[str, Any] | None, str | None]:
    """The data of the failure action for ``error``, or why there is none."""
    if route.failure is None:
        return None, None
    if route.failure_function is not None:
        try:
            given = route.failure_function(error, trigger)
        except Exception as exc:
            log.debug("failure_response of %s raised", route, exc_info=True)
            return None, f"its failure_response raised {type(exc).__name__}: {exc}"
        if given is None:
            return None, f"its failure_response chose no {route.failure} for it"
        if not isinstance(given, Mapping):
            kind = type(given).__name__
            return None, f"its failure_response gave a {kind}, not {route.failure}'s bindings"
        return {**trigger.bindings, **given}, None
    # Mapped attributes take their JSONPath into {status, code, message}; the
    # others take the field of their name, or else that whole object.
    summary = error.summary()
    try:
        found = route.extract(summary, route.failure_map)
    except ProxyAnswerError as exc:
        return None, f"its failure_response cannot be read: {exc}"
    data = dict(trigger.bindings)
    for attribute in protocol.actions[route.failure].attributes:
        if attribute in route.failure_map:
            data[attribute] = found.get(attribute)
        elif attribute not in data:
            data[attribute] = found.get(attribute, summary)
    return data, None
