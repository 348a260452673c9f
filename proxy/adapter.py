"""ProxyAdapter: a Peach agent that speaks HTTP to a service on the protocol's behalf.

It plays a role (say, UCP's Business) by forwarding what other roles do to an
HTTP service (a UCP merchant) and turning the answers into protocol actions.
Routes declare the mapping; for each route whose trigger another role performs,
the proxy does the round trip by itself. Custom orchestration (one action that
needs several calls) uses :meth:`ProxyAdapter.request` in ordinary handlers.

Every request carries an idempotency key derived from the MAS, the enactment
scope, the triggering action, the route and its rank in the handling of that
trigger, so a retry (after a timeout, a 5xx, a lost answer, or a restart of the
proxy, which resumes unanswered triggers) is recognized by the service and done
only once.

Each route has a failure policy (proxy/policy.py): bounded retries, then its
failure action or the ``on_error`` handlers. A trigger the service cannot
answer never goes silent: the other agents see the failure action, or the
application hears of it, and the proxy logs it in one line.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import httpx

from langshaw import ActionInstance, LangshawProtocol
from peach import ActionRejected, BindError, Executor, FeasibleAction, PeachAdapter
from strabo.proxy._exchange import (
    ErrorHandler,
    HeaderHook,
    HTTPEvent,
    Orchestration,
    ProxyRequest,
    current,
    digest_key,
    hook_headers,
    read_json,
    settled,
    where,
)
from strabo.proxy._options import check_base_url, check_function, check_names, names
from strabo.proxy.errors import (
    ProxyAnswerError,
    ProxyError,
    ProxyRequestError,
    ProxyUnreachable,
    RouteError,
    http_error,
)
from strabo.proxy.policy import (
    FailureFunction,
    RetryPolicy,
    check_timeout,
    overrides,
    retry_after,
)
from strabo.proxy.routes import Route, failure_data, parse_route
from syncserver.client import Client, NoAnswer, TooLarge, Unsendable, open_client
from syncserver.retry import RETRY_STATUS

log = logging.getLogger("strabo.proxy")


class ProxyAdapter(PeachAdapter):
    """A PeachAdapter with an HTTP client and routes (see :meth:`route`).

    ``internal`` attributes never go on the wire (``cid``, a protocol key the
    service knows nothing of). ``exclude`` names trigger actions the proxy must
    not handle automatically (custom handlers do). ``header_hook`` builds the
    headers of each request; what it adds is never logged nor bound.
    ``retries``, ``backoff``, ``max_delay`` and ``retry_budget`` are the default
    failure policy of the routes (:class:`RetryPolicy`); a route may override
    each of them.
    """

    def __init__(
        self,
        name: str,
        protocol: LangshawProtocol,
        role: str,
        executor: Executor,
        *,
        base_url: str,
        internal: Iterable[str] = (),
        header_hook: HeaderHook | None = None,
        exclude: Iterable[str] = (),
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.1,
        max_delay: float = 10.0,
        retry_budget: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(name, protocol, role, executor)
        self.base_url = check_base_url(base_url)
        self.internal = names(internal, "internal")
        self._unsent_cache: tuple[frozenset[str], frozenset[str]] | None = None
        self._typed_cache: frozenset[str] | None = None
        self.exclude = names(exclude, "exclude")
        check_names(protocol, self.internal, self.exclude)
        check_function(header_hook, "header_hook", "(request) -> headers")
        self.header_hook = header_hook
        self.timeout = check_timeout(timeout)
        given = {"retries": retries, "backoff": backoff, "max_delay": max_delay}
        self.retry_policy = RetryPolicy(
            **overrides("ProxyAdapter", {**given, "budget": retry_budget})
        )
        self._transport = transport
        self._client: Client | None = None
        self.routes: dict[str, Route] = {}
        self._error_handlers: list[ErrorHandler] = []
        self.http_listeners: list[Callable[[HTTPEvent], None]] = []

    # The default failure policy, settable one field at a time (checked when set).

    @property
    def retries(self) -> int:
        return self.retry_policy.retries

    @retries.setter
    def retries(self, value: int) -> None:
        self.retry_policy = self.retry_policy.with_overrides(
            overrides("ProxyAdapter", {"retries": value})
        )

    @property
    def backoff(self) -> float:
        return self.retry_policy.backoff

    @backoff.setter
    def backoff(self, value: float) -> None:
        self.retry_policy = self.retry_policy.with_overrides(
            overrides("ProxyAdapter", {"backoff": value})
        )

    def policy(self, name: str) -> RetryPolicy:
        """The retry policy the route for ``name`` uses now: the adapter's, with
        the route's own settings over it."""
        route = self.routes.get(name)
        return self.retry_policy.with_overrides(route.retry if route is not None else {})

    # Declaring ----------------------------------------------------------------------

    def route(
        self,
        spec: str,
        target: str,
        request: Mapping[str, str | None] | None = None,
        response: Mapping[str, str] | None = None,
        *,
        failure: str | None = None,
        failure_response: Mapping[str, str] | FailureFunction | None = None,
        retries: int | None = None,
        backoff: float | None = None,
        max_delay: float | None = None,
        retry_budget: float | None = None,
    ) -> Route:
        """Declare ``"Trigger->>Response"`` as ``"METHOD-/path/{param}"``.

        ``request`` maps trigger attributes to JSONPaths in the body (``None``
        keeps one off the wire); ``response`` maps response attributes to JSONPaths
        in the answer.

        The failure policy: a failure a retry may fix is retried (``retries``,
        ``backoff``, ``max_delay``, ``retry_budget``; None takes the adapter's).
        Then ``failure`` names the action to perform, an action of the proxy's
        role that can still happen after the trigger; ``failure_response`` maps
        its attributes into ``{"status", "code", "message"}`` (unmapped attributes
        get that whole object), or is a function ``(error, trigger) -> bindings``
        (None: no failure action for this error). Without a failure action, or
        when it cannot be performed, the error goes to the ``on_error`` handlers.
        Raises RouteError at once for anything that cannot work.
        """
        route = parse_route(
            spec,
            target,
            self.protocol,
            self.role,
            self.internal,
            request=request,
            response=response,
            failure=failure,
            failure_response=failure_response,
            retry={
                "retries": retries,
                "backoff": backoff,
                "max_delay": max_delay,
                "budget": retry_budget,
            },
        )
        if route.trigger in self.routes:
            raise RouteError(
                f"a route for {route.trigger} is already declared: {self.routes[route.trigger]}"
            )
        self.routes[route.trigger] = route
        if self._automatic(route):
            self.observation(route.trigger)(self._auto_handler(route))
        return route

    def _automatic(self, route: Route) -> bool:
        action = self.protocol.actions.get(route.trigger)
        return (
            action is not None and action.actor != self.role and route.trigger not in self.exclude
        )

    def _auto_handler(self, route: Route) -> Callable[[ActionInstance, str], Awaitable[None]]:
        async def handle(instance: ActionInstance, performer: str) -> None:
            await self._round_trip(route, instance)

        handle.__qualname__ = f"route {route}"
        return handle

    def on_error(self, handler: ErrorHandler) -> ErrorHandler:
        """Register ``handler(error, route, trigger)`` for failures that become no
        protocol action: the route has no failure action, or it cannot be
        performed. They are logged too. Without a handler such a failure reaches
        nobody but the log, and the agents waiting for an answer wait. A plain
        function is called as it is; an async one is awaited."""
        if not callable(handler):  # @proxy.on_error("Create"), say
            raise TypeError(f"on_error registers a function (error, route, trigger): {handler!r}")
        self._error_handlers.append(handler)
        return handler

    # Requesting ---------------------------------------------------------------------

    async def request(
        self, name: str, bindings: Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> Any:
        """Send the request of the route for ``name``, built from ``bindings``; return
        the parsed JSON answer. Raises ProxyHTTPError (status, code, message) for an
        error answer, ProxyUnreachable when there is no answer after the retries, and
        ProxyRequestError when ``bindings`` cannot make the request (a path
        parameter bound to null): all ProxyErrors, for :meth:`fail`."""
        route = self.routes.get(name)
        if route is None:
            known = ", ".join(self.routes) or "none"
            raise RouteError(f"no route for {name!r} (routes: {known})")
        if not isinstance(bindings, Mapping):
            raise TypeError(f"request({name!r}): bindings must be a dict, not {bindings!r}")
        if idempotency_key is None:
            idempotency_key = self._idempotency_key(route, bindings)
        skip, typed = self._unsent, self._typed
        body = route.body(bindings, skip, typed)
        path = route.url_path(bindings)
        return await self._send(route, path, body, idempotency_key)

    @property
    def _unsent(self) -> frozenset[str]:
        """What never goes on the wire: internal attributes and dependencies."""
        cached = self._unsent_cache
        if cached is None or cached[0] is not self.internal:
            cached = self._unsent_cache = (
                self.internal,
                self.internal | frozenset(self.protocol.actions),
            )
        return cached[1]

    @property
    def _typed(self) -> frozenset[str]:
        """The attributes with a declared type (null is a value of theirs)."""
        if self._typed_cache is None:
            types = self.protocol.types.items()
            self._typed_cache = frozenset(a for a, t in types if t.type is not None)
        return self._typed_cache

    def _idempotency_key(self, route: Route, bindings: Mapping[str, Any]) -> str:
        orchestration = current.get()
        if orchestration is not None:
            return orchestration.key(route.name)
        scope = {k: bindings[k] for k in self.protocol.keys if k in bindings}
        if not scope:
            raise RouteError(
                f"request({route.name!r}) outside a handler needs the enactment's keys in its "
                "bindings, or an explicit idempotency_key, to derive a stable idempotency key"
            )
        return digest_key(f"{self._seed(route.name, scope)}|{route.name}|direct")

    def _seed(self, trigger: str, scope: Mapping[str, Any]) -> str:
        keys = json.dumps(scope, sort_keys=True, separators=(",", ":"))
        return f"{self.mas_id}|{self.protocol.name}|{keys}|{trigger}"

    async def _send(self, route: Route, path: str, body: Any, idempotency_key: str) -> Any:
        """Send until an answer that is not worth retrying, or the policy gives up."""
        policy = self.policy(route.name)
        first = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            client = await self._http(route)  # each try: the service may have moved
            url = self.base_url + path
            headers = {"Idempotency-Key": idempotency_key}
            if self.header_hook is not None:
                info = ProxyRequest(route.name, route.method, url, body, idempotency_key, attempt)
                headers.update(hook_headers(self.header_hook, info))
            started = time.perf_counter()
            wait: float | None = None
            error: ProxyError
            try:
                response = await client.request(route.method, path, body, headers)
            except Unsendable as exc:
                raise ProxyRequestError(f"{route.method} {url}: cannot send the request: {exc}",
                                        route=route.name) from None
            except TooLarge as exc:  # an answer came, longer than is read: no retry reads it
                self._notify(route, path, None, started, attempt, str(exc))
                misfit = ProxyAnswerError(f"{route.method} {url}: {exc}", route=route.name)
                raise settled(misfit, attempt, first, None) from None
            except NoAnswer as exc:  # timeouts included
                reason = str(exc)
                self._notify(route, path, None, started, attempt, reason)
                error = ProxyUnreachable(
                    f"{route.method} {url}: no answer ({reason})", route=route.name
                )
            else:
                self._notify(route, path, response.status_code, started, attempt)
                if response.status_code < 400:
                    return read_json(response)
                error = http_error(response, route=route.name)
                if response.status_code not in RETRY_STATUS:
                    raise settled(error, attempt, first, None)
                wait = retry_after(response)
            delay, stop = policy.next_delay(attempt, time.monotonic() - first, wait)
            if stop is not None:
                raise settled(error, attempt, first, stop)
            log.info("%s: retrying %s %s in %.2fs (%s)",
                     self.name, route.method, path, delay, error)
            await asyncio.sleep(delay)  # retry back-off, not a race fix

    async def _http(self, route: Route) -> Client:
        """The client, opened again for the service if ``base_url`` changed."""
        client = self._client
        if client is None:
            raise ProxyError(f"{self!r} is not started", route=route.name)
        if client.base_url != self.base_url:
            try:  # set after the start: checked when first used
                check_base_url(self.base_url)
            except RouteError as exc:
                raise ProxyRequestError(str(exc), route=route.name) from None
            old, client = client, open_client(self.base_url, self.timeout, self._transport)
            self._client = client
            await old.aclose()  # what it has in flight still finishes (lean client)
        return client

    def _notify(
        self,
        route: Route,
        path: str,
        status: int | None,
        started: float,
        attempt: int,
        error: str | None = None,
    ) -> None:
        event = HTTPEvent(
            route.name, route.method, path, status, time.perf_counter() - started, attempt, error
        )
        log.debug("%s: %s %s -> %s (%.1f ms)", self.name, route.method, path,
                  status or error, event.seconds * 1000)
        for listener in self.http_listeners:
            try:  # a listener watches: its bug must not turn an answer into a failure
                listener(event)
            except Exception as exc:
                log.warning("%s: http listener %r raised %s: %s", self.name, listener,
                            type(exc).__name__, exc)

    # Handling triggers --------------------------------------------------------------

    async def _round_trip(self, route: Route, trigger: ActionInstance) -> None:
        """Send the route's request for ``trigger`` and act on the answer. Whatever
        goes wrong ends in the failure policy, never in a silent, unanswered trigger."""
        try:
            answer = await self.request(route.trigger, trigger.bindings)
        except ProxyError as error:
            await self.fail(route, trigger, error)
            return
        except Exception as exc:  # a header hook's bug, say: still the trigger's answer
            log.debug("%s: %s raised", self.name, route, exc_info=True)
            bug = ProxyError(f"{type(exc).__name__}: {exc}", route=route.name)
            await self.fail(route, trigger, bug)
            return
        if route.response is None or route.response not in self.protocol.actions:
            log.info(
                "%s: %s done; %s is not in %s, nothing to attempt",
                self.name,
                route,
                route.response or "the answer",
                self.protocol.name,
            )
            return
        # Internal attributes never come from the wire either: an answer carrying a
        # `cid` must not move the response to another enactment.
        try:
            found = route.extract(answer, route.response_map)
        except ProxyAnswerError as misfit:  # a path the answer cannot be read along
            await self.fail(route, trigger, misfit)
            return
        data = {**trigger.bindings, **{k: v for k, v in found.items() if k not in self.internal}}
        await self.reply(route, trigger, data)

    async def reply(
        self, route: Route | str, trigger: ActionInstance, data: Mapping[str, Any]
    ) -> ActionInstance | None:
        """Perform ``route``'s response action with ``data`` (what the service
        answered, over the trigger's bindings) and return it. An answer that does
        not fit the protocol's types (or lacks a required attribute) is a
        :class:`ProxyAnswerError` handled by the route's failure policy, as a
        failed request would be: custom orchestrations answer through here so a
        bad answer never crashes their handler. None when no response was said."""
        route = self._route(route, trigger)
        if route.response is None:
            raise RouteError(f"{route} has no response action to reply with")
        try:
            instance = self.build_action(route.response, data)
        except BindError as exc:
            if exc.path is not None or exc.missing:
                misfit = ProxyAnswerError(
                    f"{route.response}: the answer does not fit: {exc}",
                    attribute=exc.attribute,
                    path=exc.path,
                    route=route.name,
                )
                await self.fail(route, trigger, misfit)
                return None
            problem = f"cannot be performed: {exc}"
        else:
            try:
                [done] = await self.attempt([instance])
                return done
            except ActionRejected as exc:
                problem = f"was rejected: {exc}"
        # The service acted, the protocol cannot say so: tell.
        unsaid = ProxyError(f"{route.response} {problem}", route=route.name, code="unsaid")
        await self.report(unsaid, route, trigger, why="its answer cannot be said")
        return None

    def _route(self, route: Route | str, trigger: Any) -> Route:
        if not isinstance(trigger, ActionInstance):  # a FeasibleAction, from on_enabled
            raise TypeError(f"the trigger is the ActionInstance observed, not {trigger!r}")
        if isinstance(route, str):
            if route not in self.routes:
                raise RouteError(f"no route for {route!r} (routes: {', '.join(self.routes)})")
            return self.routes[route]
        return route

    async def fail(
        self, route: Route | str, trigger: ActionInstance, error: ProxyError
    ) -> ActionInstance | None:
        """Apply ``route``'s failure policy to ``error``, met handling ``trigger``:
        perform its failure action and return it, or, when it has none or that
        action cannot be performed, log the error and tell the ``on_error``
        handlers (None). Automatic round trips end here; custom orchestrations
        call it so that their failures follow the policy their routes declare."""
        route = self._route(route, trigger)
        if not isinstance(error, ProxyError):
            raise TypeError(f"fail() takes a ProxyError (say why as one), not {error!r}")
        data, why = failure_data(self.protocol, route, trigger, error)
        if data is not None and route.failure is not None:
            instance, problem = await self._perform(route.failure, data)
            if instance is not None:
                log.warning("%s: %s failed: %s; answered with %s%s",
                            self.name, route, error, route.failure, where(trigger))
                return instance
            why = f"its failure action {route.failure} {problem}"
        await self.report(error, route, trigger, why=why)
        return None

    async def report(
        self,
        error: ProxyError,
        route: Route,
        trigger: ActionInstance | None,
        *,
        why: str | None = None,
    ) -> None:
        """A failure that becomes no protocol action: log it (one line) and tell
        the error handlers. ``why`` says why no action (by default: the protocol
        has none for it)."""
        log.error(
            "%s: %s failed and %s: %s%s",
            self.name,
            route,
            why or f"{self.protocol.name} has no action to say so",
            error,
            where(trigger),
        )
        for handler in self._error_handlers:
            try:
                result = handler(error, route, trigger)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("%s: error handler %s failed", self.name, handler)

    async def _perform(
        self, action: str, data: Mapping[str, Any]
    ) -> tuple[ActionInstance | None, str | None]:
        """Build and attempt ``action``; the instance, or why it could not be."""
        try:
            [done] = await self.attempt([self.build_action(action, data)])
        except BindError as exc:
            return None, f"cannot be performed: {exc}"
        except ActionRejected as exc:
            return None, f"was rejected: {exc}"
        return done, None

    def build_action(
        self, name: str, bindings: Mapping[str, Any], *, default: Any = None
    ) -> ActionInstance:
        """PeachAdapter.build_action for data read off the wire: an optional
        attribute the data lacks stays absent, and so does one the data holds as
        null when its type does not admit null (JSON APIs write "none" either
        way). A required attribute the data lacks is bound to ``default``, null:
        the convention of untyped protocols; a typed one then fails its type."""
        types = self.protocol.types
        cleaned = {
            k: v
            for k, v in bindings.items()
            if not (v is None and k in types and types[k].optional and not types[k].fits(None))
        }
        return super().build_action(name, cleaned, default=default)

    # Contexts, start, resumption ----------------------------------------------------

    def _handler_context(self, trigger: Any) -> contextvars.Context | None:
        if isinstance(trigger, ActionInstance):
            seed = self._seed(trigger.name, trigger.keys)
        elif isinstance(trigger, FeasibleAction):
            seed = self._seed(f"enabled:{trigger.name}", trigger.keys)
        else:
            return None
        context = contextvars.copy_context()
        context.run(current.set, Orchestration(seed))
        return context

    async def start(self) -> None:
        if self._client is None:
            self._client = open_client(self.base_url, self.timeout, self._transport)
        try:
            await super().start()
        except BaseException:
            await self._close_client()
            raise

    async def stop(self, grace: float = 5.0) -> None:
        await super().stop(grace)
        await self._close_client()

    async def _close_client(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def go_live(self) -> None:
        super().go_live()
        self._resume()

    def _resume(self) -> None:
        """Handle again every trigger still waiting for its answer (after a restart,
        or triggers that came before the proxy started). Their idempotency keys are
        the ones of the first handling, so the service does nothing twice."""
        answers: dict[str, dict[str, Route]] = {}  # response -> trigger -> route
        for r in self.routes.values():
            if r.response is not None and r.response in self.protocol.actions:
                answers.setdefault(r.response, {})[r.trigger] = r
        if not answers:
            return
        for root in self.state.roots():
            for feasible in self._enabled_in(root):
                routes = answers.get(feasible.name)
                found = self._pending_trigger(routes, feasible, root) if routes else None
                if found is None:
                    continue
                route, instance, performer = found
                log.info("%s: resuming %s for %s", self.name, route, instance.keys)
                for handler in self._handlers(self._observers, route.trigger):
                    # As any observer: what it raises, even before its first
                    # await, is its failure (handler_errors), not start-up's.
                    self._call(handler, (instance, performer), route.trigger, instance)

    def _pending_trigger(
        self, routes: Mapping[str, Route], feasible: FeasibleAction, root: tuple[Any, ...]
    ) -> tuple[Route, ActionInstance, str] | None:
        """The latest trigger of the routes answered by ``feasible``, with its route:
        several routes may answer with one action, from different triggers."""
        keys = feasible.keys
        for _, instance, performer in reversed(self.history(root)):
            if instance.name in routes and all(
                keys.get(k, v) == v for k, v in instance.keys.items()
            ):
                return routes[instance.name], instance, performer
        return None
