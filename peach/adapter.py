"""PeachAdapter: one role of one protocol, as an agent plays it.

The adapter keeps a replica of the protocol's social state, fed by its executor
in sequence order, and asks ``langshaw.semantics`` which actions the role may
perform. Agent code picks among them, binds values and attempts them; it never
encodes protocol rules itself.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from langshaw import ABSENT, ActionInstance, Enablement, LangshawProtocol, SocialState, json_equal
from peach._breaches import check_always
from peach._handlers import HandlerErrors, Handlers, add, checked, named, notify
from peach._mandate import APPROVE_TIMEOUT, Approver, MandateGuard, MandateRefused
from peach.errors import ActionRejected, BindError
from peach.executor import Executor
from peach.feasible import FeasibleAction, not_enabled
from peach.keys import new_key
from peach.roles import ConstraintRefused, MustAlways, RoleSpec
from peach.view import View, root_of
from syncserver.acts_for import ActsFor
from syncserver.mandate import Mandate

if TYPE_CHECKING:
    from syncserver.batch import Batch

log = logging.getLogger("strabo.peach")

ObservationHandler = Callable[[ActionInstance, str], Awaitable[Any]]
EnabledHandler = Callable[[FeasibleAction], Awaitable[Any]]
CompletionHandler = Callable[[dict[str, Any], str], Awaitable[Any]]

_ALL = "*"
_MISSING = object()


class PeachAdapter:
    """Plays ``role`` in ``protocol`` as the agent ``name``, through ``executor``.

    Handlers are coroutines registered with the decorators :meth:`observation`,
    :meth:`on_enabled` and :meth:`on_completion`; each call runs as its own task,
    and an exception in one is that handler's failure (:attr:`handler_errors`).
    """

    def __init__(
        self,
        name: str,
        protocol: LangshawProtocol,
        role: str,
        executor: Executor,
        *,
        mandate: Mandate | None = None,
        approve: Approver | None = None,
        approve_timeout: float = APPROVE_TIMEOUT,
    ) -> None:
        if role not in protocol.roles:
            raise ValueError(
                f"{protocol.name} has no role {role!r} (roles: {', '.join(protocol.roles)})"
            )
        self.name = name
        self.protocol = protocol
        self.role = role
        self.executor = executor
        self._view = View(protocol)  # replaced by the executor's shared view on start
        self.new_key: Callable[[], str] = new_key
        self._observers: dict[str, list[ObservationHandler]] = {}
        self._enabled_handlers: dict[str, list[EnabledHandler]] = {}
        self._completion_handlers: list[CompletionHandler] = []
        self._enabled_cache: dict[tuple[Any, ...], list[FeasibleAction]] = {}
        self._acts_for = ActsFor()  # what the executor says the agent is held to
        self._fired: dict[tuple[Any, ...], set[tuple[Any, ...]]] = {}
        self._fired_initiating: set[tuple[Any, ...]] = set()
        self._live = False
        self._running = False
        self._starting = asyncio.Lock()
        self._stopped = asyncio.Event()
        self._stopped.set()  # not running
        self.listeners: list[Callable[[Batch, list[tuple[Any, ...]]], None]] = []
        # The role as the agent plays it (adopt), and what inspect() reports.
        self.spec: RoleSpec | None = None
        self.counters: Counter[str] = Counter()
        self._handler_tasks = Handlers(
            lambda: f"{self.name} ({self.role} in {self.protocol.name})", self.counters
        )
        self.breaches: deque[dict[str, Any]] = deque(maxlen=100)  # newest last
        self.breach_listeners: list[Callable[[MustAlways], None]] = []
        self._breaching: set[str] = set()
        self._check_failing: set[str] = set()
        self.approve = approve  # asked where the mandate wants a human's approval
        self.approve_timeout = approve_timeout  # seconds it has to answer, then refused
        self.mandate = mandate

    @property
    def mandate(self) -> Mandate | None:
        """The principal's bounds on this agent (syncserver.mandate), checked
        before each attempt leaves the agent; None for none."""
        return self._guard.mandate if self._guard else None

    @mandate.setter
    def mandate(self, mandate: Mandate | None) -> None:
        self._guard = MandateGuard(self, mandate) if mandate else None

    # Registration ---------------------------------------------------------------

    def observation(self, *actions: str) -> Callable[[ObservationHandler], ObservationHandler]:
        """Register ``handler(instance, performer)`` for every finalized instance of
        ``actions`` (every action when none is named), the agent's own included."""
        named(actions, "observation")
        self._check_names(actions)

        def register(handler: ObservationHandler) -> ObservationHandler:
            checked(handler, "observation")
            add(self._observers, actions or (_ALL,), handler)
            return handler

        return register

    def on_enabled(self, *actions: str) -> Callable[[EnabledHandler], EnabledHandler]:
        """Register ``handler(feasible_action)``, called once each time one of
        ``actions`` becomes enabled for this role in a scope, and at start-up for
        every action already enabled (initiating actions included)."""
        named(actions, "on_enabled")
        self._check_names(actions)
        for name in actions:
            if self.protocol.actions[name].actor != self.role:
                raise ValueError(
                    f"{name} is performed by {self.protocol.actions[name].actor}, not "
                    f"{self.role}: it is never enabled for this adapter"
                )

        def register(handler: EnabledHandler) -> EnabledHandler:
            checked(handler, "on_enabled")
            add(self._enabled_handlers, actions or (_ALL,), handler)
            return handler

        return register

    def on_completion(self, handler: CompletionHandler) -> CompletionHandler:
        """Register ``handler(keys, mas_id)``, called when a root enactment completes."""
        checked(handler, "on_completion")
        if handler not in self._completion_handlers:
            self._completion_handlers.append(handler)
        return handler

    def adopt(self, spec: RoleSpec) -> RoleSpec:
        """Play the role as ``spec`` declares it: its coded actions run when they
        are enabled (as ``on_enabled`` handlers), its must-never constraints guard
        every :meth:`attempt`, its must-always ones are checked after each batch,
        and :meth:`inspect` shows all of it."""
        if spec.role != self.role:
            raise ValueError(f"the spec is for {spec.role}, and this adapter plays {self.role}")
        if self.spec is not None:
            raise ValueError(f"{self!r} has adopted a spec already")
        if spec.adopted_by is not None:
            raise ValueError(f"the spec of {spec.role} was adopted by {spec.adopted_by} already")
        if self._running or self._live:
            raise ValueError(
                f"{self!r} is started: adopt the spec before start(), so that its coded "
                "actions hear of every action enabled from the start"
            )
        # Everything is checked before anything is registered: a refused spec
        # leaves the adapter as it was.
        self._check_names(spec.named_actions())
        coded = {name: a.run for name, a in spec.actions.items() if a.run is not None}
        for name in coded:
            if self.protocol.actions[name].actor != self.role:
                raise ValueError(
                    f"the spec codes {name}, which {self.protocol.actions[name].actor} "
                    f"performs, not {self.role}"
                )
        for name, run in coded.items():
            self.on_enabled(name)(run)
        spec.adopted_by = self.name
        self.spec = spec
        return spec

    def inspect(self) -> dict[str, Any]:
        """What this adapter is and does now, as JSON-able data (peach.inspection)."""
        from peach.inspection import describe_adapter

        return describe_adapter(self)

    def activity(self) -> dict[str, Any]:
        """For inspect(): whether it runs, its pending handler tasks, its handlers."""
        return {"running": self._running,
                "pending": self._handler_tasks.pending(),
                "handlers": (self._observers, self._enabled_handlers, self._completion_handlers)}

    def _check_names(self, actions: Iterable[str]) -> None:
        for name in actions:
            if name not in self.protocol.actions:
                raise ValueError(
                    f"{self.protocol.name} has no action {name!r} "
                    f"(actions: {', '.join(self.protocol.actions)})"
                )

    # Reading --------------------------------------------------------------------

    @property
    def state(self) -> SocialState:
        """The replicated social state of the protocol (read it, never change it)."""
        return self._view.state

    @property
    def mas_id(self) -> str:
        return self.executor.mas

    def enabled(
        self, enactment: Mapping[str, Any] | tuple[Any, ...] | None = None
    ) -> list[FeasibleAction]:
        """The actions this role may perform now: in one enactment (given by its
        root keys), or in every enactment plus the initiating actions."""
        if enactment is not None:
            return list(self._enabled_in(root_of(self.protocol, enactment)))
        result: list[FeasibleAction] = []
        for root in self.state.roots():
            result.extend(self._enabled_in(root))
        result.extend(self.initiating())
        return result

    def initiating(self) -> list[FeasibleAction]:
        """The actions that open a new enactment."""
        return self._offer(self.state.initiating(self.role))

    def _enabled_in(self, root: tuple[Any, ...]) -> list[FeasibleAction]:
        cached = self._enabled_cache.get(root)
        if cached is None and self.state.enactment(root) is None:
            return []  # no such enactment (yet): nothing to cache, however many are asked
        if cached is None:
            cached = self._offer(self.state.enabled(self.role, root), root)
            self._enabled_cache[root] = cached
        return cached

    def _offer(
        self, enablements: Iterable[Enablement], root: tuple[Any, ...] | None = None
    ) -> list[FeasibleAction]:
        """Feasible actions of ``enablements``, as far as what the agent acts for
        allows (another seller's price is not this agent's to set)."""
        acts_for = self._acts_for
        if not acts_for:
            return [self._feasible(e) for e in enablements]
        enactment = self.state.enactment(root) if root is not None else None
        used = enactment.values_of if enactment is not None else None
        narrowed = (acts_for.narrow(e, used) for e in enablements)
        return [self._feasible(e) for e in narrowed if e is not None]

    def _feasible(self, enablement: Any) -> FeasibleAction:
        return FeasibleAction(enablement, self.role, self.new_key, self.state)

    def history(
        self, enactment: Mapping[str, Any] | tuple[Any, ...]
    ) -> list[tuple[int, ActionInstance, str]]:
        """The finalized instances of one enactment: ``(seq, instance, performer)``."""
        return list(self._view.history.get(root_of(self.protocol, enactment), ()))

    def enactments(self) -> list[tuple[Any, ...]]:
        return list(self.state.roots())

    def is_complete(self, enactment: Mapping[str, Any] | tuple[Any, ...]) -> bool:
        return self.state.is_complete(root_of(self.protocol, enactment))

    def keys_of(self, root: tuple[Any, ...]) -> dict[str, Any]:
        return dict(zip(self.protocol.root_keys, root, strict=True))

    # Acting ---------------------------------------------------------------------

    def build_action(
        self, name: str, bindings: Mapping[str, Any], *, default: Any = _MISSING
    ) -> ActionInstance:
        """Build an instance of ``name`` from a dict: the enactment is found from
        the keys in ``bindings``, fixed attributes come from the state (a
        conflicting value in ``bindings`` is an error), the attributes to bind are
        taken from ``bindings`` (missing ones get ``default`` if given, except
        optional ones, which stay absent), and other entries of the dict are
        ignored."""
        if not isinstance(bindings, Mapping):
            raise TypeError(f"build_action takes a dict of bindings, not {type(bindings).__name__}")
        action = self.protocol.actions.get(name)
        if action is None:
            raise BindError(
                f"{self.protocol.name} has no action {name!r} "
                f"(actions: {', '.join(self.protocol.actions)})"
            )
        if action.actor != self.role:
            raise BindError(f"{name} is performed by {action.actor}, not {self.role}")
        for key in action.keys:  # a key names a scope: a list or an object cannot
            if isinstance(bindings.get(key), (list, dict, set)):
                raise BindError(
                    f"{name}: the key {key!r} must be a string or a number, not "
                    f"{type(bindings[key]).__name__}",
                    key,
                    rule="type",
                )
        if self._acts_for:  # a pinned key given another value names another's scope
            refused = self._acts_for.refuses(self.name, ActionInstance(action, dict(bindings)))
            if refused is not None:
                raise BindError(refused.message, refused.attribute, rule=refused.rule)
        feasible = self._find(action.name, bindings)
        values: dict[str, Any] = {}
        optional = self.protocol.optional
        for attribute in feasible.to_bind:
            if attribute in bindings:
                values[attribute] = bindings[attribute]
            elif default is not _MISSING and attribute not in optional:
                values[attribute] = default
        for key in feasible.new_keys:
            if key in bindings:
                values[key] = bindings[key]
        for attribute, value in feasible.enablement.fixed.items():
            if attribute in bindings and attribute not in action.keys:
                if value is ABSENT:
                    raise BindError(
                        f"{name}: {attribute!r} was left absent in this enactment, so it "
                        f"cannot be bound to {bindings[attribute]!r}",
                        attribute,
                    )
                if attribute not in action.dependencies and not json_equal(
                    bindings[attribute], value
                ):
                    raise BindError(
                        f"{name}: {attribute!r} is bound to {value!r} in this enactment, "
                        f"not {bindings[attribute]!r}",
                        attribute,
                    )
        return feasible.bind_from(values)

    def _find(self, name: str, bindings: Mapping[str, Any]) -> FeasibleAction:
        """The enablement an instance built from ``bindings`` would perform."""
        action = self.protocol.actions[name]
        given = {k: bindings[k] for k in action.keys if k in bindings}
        roots = self.protocol.root_keys
        enactment = None
        if all(k in given for k in roots):
            enactment = self.state.enactment(tuple(given[k] for k in roots))
        candidates = (
            self._enabled_in(enactment.root) if enactment is not None else self.initiating()
        )
        for feasible in candidates:
            if feasible.name != name:
                continue
            known = feasible.enablement.keys
            if any(k not in given or given[k] != v for k, v in known.items()):
                continue
            # A new key is generated, or given a value no scope of the enactment uses.
            if all(
                k not in given
                or enactment is None
                or given[k] not in enactment.values_of(k)
                for k in feasible.new_keys
            ):
                return feasible
        message, rule = not_enabled(self.state, self.role, action, bindings, given, self.new_key)
        raise BindError(message, rule=rule)

    async def attempt(self, instances: Iterable[ActionInstance]) -> list[ActionInstance]:
        """Finalize an atomic list of instances; returns them once finalized (and
        already reflected in :meth:`enabled`), raises ActionRejected otherwise."""
        if not isinstance(instances, Iterable):  # an instance is not a list of one
            raise TypeError(
                f"attempt() takes a list of action instances (attempt([instance])), not "
                f"{type(instances).__name__}"
            )
        items = list(instances)
        if not items:
            raise ValueError("attempt() needs at least one instance")
        for item in items:
            if not isinstance(item, ActionInstance) or not isinstance(item.bindings, Mapping):
                kind = type(getattr(item, "bindings", None)).__name__  # one built by hand
                raise TypeError(
                    f"attempt() takes action instances (from FeasibleAction.bind or "
                    f"build_action), not {type(item).__name__}"
                    + (f" with bindings of type {kind}" if isinstance(item, ActionInstance) else "")
                )
        self.counters["attempts"] += 1
        try:
            if self.spec is not None:
                self.spec.refusal(items, self)
            if self._guard is None:
                done = await self.executor.attempt(self, items)
            else:
                async with self._guard.admit(items):
                    done = await self.executor.attempt(self, items)
        except MandateRefused:
            self.counters["refused by mandate"] += 1
            raise
        except ConstraintRefused as exc:
            self.counters["refused by constraints"] += 1
            if exc.check_error is not None:
                self.counters["constraint check errors"] += 1
                log.error("%s: %s", self.name, exc.message)
            raise
        except ActionRejected:
            self.counters["rejected"] += 1
            raise
        self.counters["finalized"] += 1
        return done

    async def sync(self) -> None:
        """Catch up with everything finalized so far (handlers run as usual).

        The live stream delivers batches soon after they are finalized; ``sync``
        is for when an agent must act on the latest state right now.
        """
        await self.executor.sync(self)

    # Life cycle -----------------------------------------------------------------

    async def start(self) -> None:
        """Connect, catch up with everything finalized so far, then go live."""
        async with self._starting:  # a second start() waits for the first to join
            if self._running:
                return
            self._running = True
            self._stopped.clear()
            self._handler_tasks.watch(None)  # __aenter__ watches its block's task
            try:
                await self.executor.join(self)
            except BaseException:
                self._running = False
                self._stopped.set()
                raise

    async def stop(self, grace: float = 5.0) -> None:
        """Stop receiving, and wait for running handlers, cancelling those still
        running after ``grace`` seconds."""
        if not self._running:
            # A handler stopped it (or is stopping it): wait for that stop, then for
            # the handler itself, unless this is that handler.
            if asyncio.current_task() not in self._handler_tasks.tasks:
                await self._stopped.wait()
                await self.drain(grace=grace)
            return
        self._running = False
        self._handler_tasks.stopping()
        try:
            await self.executor.leave(self)
            await self.drain(grace=grace)
        finally:
            self._stopped.set()

    async def drain(self, grace: float | None = None) -> None:
        """Wait until no handler task is running (with ``grace``, cancel those still
        running after that many seconds)."""
        await self._handler_tasks.drain(grace)

    @property
    def running(self) -> bool:
        """Started and not stopped."""
        return self._running

    @property
    def handler_errors(self) -> HandlerErrors:
        """What a handler that raises does: ``"stop"`` (the default) ends ``async
        with adapter:`` and ``run()`` with HandlerError; ``"log"`` logs it and goes on."""
        return self._handler_tasks.policy

    @handler_errors.setter
    def handler_errors(self, policy: HandlerErrors) -> None:
        if policy not in ("stop", "log"):
            raise ValueError(f"handler_errors is 'stop' or 'log', not {policy!r}")
        self._handler_tasks.policy = policy

    async def run(self) -> None:
        """Start, then run until :meth:`stop` is called (or the task is cancelled,
        or a handler fails: HandlerError)."""
        await self.__aenter__()
        try:
            await self._stopped.wait()
        except asyncio.CancelledError:
            await self.__aexit__(asyncio.CancelledError)
            raise
        await self.__aexit__(None)

    async def __aenter__(self) -> PeachAdapter:
        await self.start()
        self._handler_tasks.watch(asyncio.current_task())
        return self

    async def __aexit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        # Left because the run was cancelled (Ctrl-C, or a handler failed): the
        # other handlers are cancelled at once, and a handler's failure is raised.
        await self.stop(grace=0 if kind and issubclass(kind, asyncio.CancelledError) else 5.0)
        failure = self._handler_tasks.ended_by_failure()
        if failure is not None:
            raise failure

    # Fed by the executor ----------------------------------------------------------

    def attach_view(self, view: View) -> None:
        """Share the executor's view of the protocol (at start)."""
        self._view = view
        self._enabled_cache.clear()
        self._fired.clear()  # a restarted adapter announces what is enabled again
        self._fired_initiating.clear()
        self._acts_for = self.executor.acts_for(self)
        if self._guard is None:  # the MAS's mandate, unless the agent was given its own
            self.mandate = self.executor.mandate(self)

    def batch_applied(
        self,
        batch: Batch,
        completed: list[tuple[Any, ...]],
        touched: list[tuple[Any, ...]],
        live: bool,
    ) -> None:
        """A batch was applied to the view: refresh caches and, when live, run handlers."""
        cache = self._enabled_cache
        for root in touched:
            cache.pop(root, None)
        if self._guard is not None:  # its counts follow the view, batch by batch
            self._guard.counts.applied(batch)
        if not live:
            return
        self.counters["batches observed"] += 1
        if self.spec is not None and self.spec.must_always:
            check_always(self, batch.seq)
        if self._observers:
            for entry in batch.entries:
                instance = entry.instance
                for handler in self._handlers(self._observers, instance.action.name):
                    self._call(handler, (instance, entry.performer), instance.name, instance)
        for root in completed:
            keys = self.keys_of(root)
            for handler in self._completion_handlers:
                self._call(handler, (dict(keys), self.mas_id), "completion")
        if self._enabled_handlers or self.listeners:
            newly: list[tuple[Any, ...]] = []
            for root in touched:
                newly.extend(self._newly_enabled(root))
            for listener in tuple(self.listeners):  # one that adds itself runs next time
                notify(listener, (batch, newly), self.name, self.counters)

    def go_live(self) -> None:
        """Start-up: everything enabled now counts as newly enabled."""
        self._live = True
        newly: list[tuple[Any, ...]] = []
        for root in self.state.roots():
            newly.extend(self._newly_enabled(root))
        for feasible in self.initiating():
            ident = feasible.enablement.ident
            if ident not in self._fired_initiating:
                self._fired_initiating.add(ident)
                newly.append(("initiating", feasible))
                self._fire_enabled(feasible)

    def _newly_enabled(self, root: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        fired = self._fired.setdefault(root, set())
        newly = []
        for feasible in self._enabled_in(root):
            ident = feasible.enablement.ident
            if ident in fired:
                continue
            fired.add(ident)
            newly.append((root, feasible))
            self._fire_enabled(feasible)
        return newly

    def _fire_enabled(self, feasible: FeasibleAction) -> None:
        for handler in self._handlers(self._enabled_handlers, feasible.name):
            self._call(handler, (feasible,), feasible.name, feasible)

    @staticmethod
    def _handlers(table: Mapping[str, list[Any]], name: str) -> list[Any]:
        """The handlers of ``name``, each once (one registered for it and for all)."""
        own, every = table.get(name, []), table.get(_ALL, [])
        return [*own, *(h for h in every if h not in own)] if own and every else own or every

    def _handler_context(self, trigger: Any) -> contextvars.Context | None:
        """The context a handler runs in (subclasses put what they need in it)."""
        return None

    def _spawn(
        self, coroutine: Awaitable[Any], handler: Any, what: str, trigger: Any = None
    ) -> None:
        context = self._handler_context(trigger) if trigger is not None else None
        self._handler_tasks.spawn(coroutine, handler, what, context)

    def _call(self, handler: Any, args: tuple[Any, ...], what: str, trigger: Any = None) -> None:
        """Run ``handler(*args)`` as its own task: what it raises, even at once, is
        its own failure (handler_errors), never the batch's."""
        context = self._handler_context(trigger) if trigger is not None else None
        self._handler_tasks.call(handler, args, what, context)

    def __repr__(self) -> str:
        return f"<PeachAdapter {self.name!r} as {self.role} in {self.protocol.name}>"
