"""SyncExecutor: adapters talking to a SyncServer over HTTP.

Each protocol's finalized batches arrive as server-sent events on a channel
(``GET .../channel``, upgraded), on which the agent also sends its attempts and
reads their answers: one connection, no request per attempt. A server without
channels gets the same over plain HTTP: attempts POSTed, batches on
``.../events``. After a dropped connection the stream resumes from the last
applied batch, and an attempt whose answer was lost is retried under the same
attempt id (by POST while no channel is open), which the server recognizes,
so nothing is lost or finalized twice.

Requests go through a lean keep-alive HTTP/1.1 client (``syncserver.http1``; httpx
cost an agent more CPU per attempt than the server spends on it), or through
httpx when a ``transport`` is given.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import httpx

from langshaw import ActionInstance, LangshawProtocol, Violation
from langshaw.values import json_problem
from peach._channel import UNSUPPORTED, UPGRADE, Line
from peach._sse import Decoder
from peach.errors import ActionRejected, ExecutorError
from peach.executor import Executor, Member
from syncserver.acts_for import ActsFor
from syncserver.batch import Batch, Entry
from syncserver.client import Answer, Client, LeanClient, NoAnswer, Unsendable, open_client
from syncserver.http1 import Response, TransportError
from syncserver.mandate import Mandate
from syncserver.retry import RETRY_STATUS

log = logging.getLogger("strabo.peach")

#: What this client reads of one answer or event from its SyncServer: more
#: than a third-party service gets (64 MiB): a batch holds at most 4 MiB of
#: events (a batched window is cut into such parts, ``syncserver._window``),
#: but one attempt alone may be larger (up to the server's ``max_body``, which
#: its operator may raise), and a batch no agent could read would stop every
#: agent's feed at it.
SERVER_ANSWERS = 1024 * 1024 * 1024



def parse_batch(protocol: LangshawProtocol, data: Mapping[str, Any]) -> Batch:
    entries = []
    for item in data["instances"]:
        action = protocol.actions.get(item["action"])
        if action is None:
            raise ExecutorError(
                f"the server finalized {item['action']!r}, which {protocol.name} "
                f"({protocol.source}) does not have: agent and server load different protocols"
            )
        entries.append(Entry(ActionInstance(action, item["bindings"]), item["performer"]))
    return Batch(protocol.name, int(data["seq"]), tuple(entries))


def _not_json(instances: Sequence[ActionInstance]) -> ExecutorError | None:
    """``bad-json`` for the first value of ``instances`` JSON cannot carry (NaN,
    an infinity: bind() refuses them, a hand-built instance may hold one), found
    once the encoder refused the attempt (on a channel or a POST); None if none."""
    for n, instance in enumerate(instances):
        problem = json_problem(instance.bindings, f"instances[{n}].bindings")
        if problem is not None:
            return ExecutorError(
                f"the attempt cannot be sent: it is not valid JSON: {problem}",
                status=400,
                code="bad-json",
            )
    return None


class SyncExecutor(Executor):
    """Connects adapters to the SyncServer at ``url`` as the agent ``token`` names.

    ``retries`` bounds how often an attempt is resent after a connection error, a
    timeout or an answer a retry may fix (``syncserver.retry``; always with the
    same attempt id, which the server recognizes, so a resent attempt is never
    finalized twice). ``channel=False``
    keeps to plain HTTP (POSTed attempts, ``.../events``) even where the server
    offers channels; with a ``transport`` (httpx) it always does.
    """

    def __init__(
        self,
        url: str,
        token: str,
        mas: str = "default",
        *,
        timeout: float = 30.0,
        retries: int = 3,
        transport: httpx.AsyncBaseTransport | None = None,
        channel: bool = True,
    ) -> None:
        super().__init__(mas, retries=retries)
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._transport = transport
        #: Whether streams are asked for as channels (off once a server says it has none).
        self.channel = channel and transport is None
        self._lines: dict[str, Line] = {}  # protocol name -> its open channel
        self._client: Client | None = None
        self.agent: str | None = None
        self.roles: dict[str, list[str]] = {}
        self._acts_for = ActsFor()
        self._mandate: dict[str, Any] | None = None

    def _path(self, adapter: Member, tail: str) -> str:
        return (
            f"/mas/{quote(self.mas, safe='')}/protocols/"
            f"{quote(adapter.protocol.name, safe='')}/{tail}"
        )

    async def _connect(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        client = open_client(
            self.url, self.timeout, self._transport, headers=headers, connect_timeout=10.0,
            max_body=SERVER_ANSWERS,
        )
        self._client = client
        try:
            response = await client.request("GET", f"/mas/{quote(self.mas, safe='')}")
        except NoAnswer as exc:
            await client.aclose()
            raise ExecutorError(f"cannot reach the SyncServer at {self.url}: {exc}") from None
        if response.status_code != 200:
            await client.aclose()
            raise _error(response, f"the SyncServer at {self.url} refused to connect")
        info = response.json()
        self.agent = info["agent"]
        self.roles = info["roles"]
        self._acts_for = ActsFor.of(info.get("acts_for") or {})  # older servers: none
        self._mandate = info.get("mandate") or None

    async def _disconnect(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def acts_for(self, adapter: Member) -> ActsFor:
        return self._acts_for

    def mandate(self, adapter: Member) -> Mandate | None:
        # Checked by the server against all the agent's protocols: the clauses
        # that name another protocol's actions are that protocol's adapters' to keep.
        if not self._mandate:
            return None
        return Mandate.parse(self._mandate, [adapter.protocol], (), lambda *_: None) or None

    async def _admit(self, adapter: Member) -> None:
        if adapter.name != self.agent:
            raise ExecutorError(
                f"the adapter is named {adapter.name!r} but the token authenticates agent "
                f"{self.agent!r}: name the adapter after the agent it speaks for"
            )
        played = self.roles.get(adapter.protocol.name)
        if played is None:
            raise ExecutorError(
                f"agent {self.agent!r} plays no role in {adapter.protocol.name} on this server "
                f"(it plays in: {', '.join(self.roles) or 'nothing'})"
            )
        if adapter.role not in played:
            raise ExecutorError(
                f"agent {self.agent!r} does not play {adapter.role} in "
                f"{adapter.protocol.name} (it plays {', '.join(played)})"
            )

    @property
    def client(self) -> Client:
        if self._client is None:
            raise ExecutorError("the executor is not connected: start an adapter first")
        return self._client

    async def _send(
        self, adapter: Member, instances: Sequence[ActionInstance], attempt_id: str
    ) -> tuple[Batch | int, list[int]]:
        body = {
            "instances": [
                {"action": i.action.name, "bindings": dict(i.bindings)} for i in instances
            ],
            "attempt_id": attempt_id,
        }
        line = self._lines.get(adapter.protocol.name)
        if line is not None and line.usable():
            try:
                async with asyncio.timeout(self.timeout):
                    data, batch = await line.attempt(
                        body, lambda data: _whole(adapter, instances, data)
                    )
            except TimeoutError:
                raise ExecutorError(
                    f"no answer from the SyncServer at {self.url} within {self.timeout}s",
                    retryable=True,
                ) from None
            except TransportError as exc:
                raise ExecutorError(
                    f"no answer from the SyncServer at {self.url}: {exc}", retryable=True
                ) from None
            except ValueError:  # the line's encoder: NaN, an infinity
                problem = _not_json(instances)
                if problem is None:
                    raise
                raise problem from None
            status = data.get("status")
            if status == 200:
                whole = batch if batch is not None else _finalized(adapter, instances, data)
                return whole, list(data["attempt"])
            status = status if isinstance(status, int) else 502
            rejection = _rejection(Response(status, "", {}, json.dumps(data).encode()), instances)
            if isinstance(rejection, ExecutorError) and rejection.code == "too-many-in-flight":
                # The line keeps within the bound, but attempts it gave up waiting
                # for (timed out) may still be in flight on the server: wait, resend.
                rejection.retryable = True
            raise rejection
        try:
            response = await self.client.request("POST", self._path(adapter, "attempts"), body)
        except NoAnswer as exc:
            raise ExecutorError(
                f"no answer from the SyncServer at {self.url}: {exc}", retryable=True
            ) from None
        except Unsendable as exc:  # bindings that are not JSON (bind() refuses them)
            raise _not_json(instances) or ExecutorError(
                f"the attempt cannot be sent: {exc}"
            ) from None
        if response.status_code == 200:
            data = response.json()
            return _finalized(adapter, instances, data), list(data["attempt"])
        raise _rejection(response, instances)

    async def _read(self, adapter: Member, after: int, limit: int) -> list[Batch]:
        try:
            response = await self.client.request(
                "GET", self._path(adapter, "log"), params={"after": after, "limit": limit}
            )
        except NoAnswer as exc:
            raise ExecutorError(f"cannot read the log from {self.url}: {exc}") from None
        if response.status_code != 200:
            raise _error(response, "cannot read the log")
        return [parse_batch(adapter.protocol, e) for e in response.json()["events"]]

    async def _stream(self, adapter: Member, after: int) -> AsyncIterator[Batch]:
        read_timeout = max(self.timeout, 60.0)
        client = self.client
        if self.channel and isinstance(client, LeanClient):
            name = adapter.protocol.name
            async with client.http.upgrade(
                self._path(adapter, "channel"),
                UPGRADE,
                params={"after": after},
                read_timeout=read_timeout,
            ) as (response, connection, body):
                if connection is not None:
                    line = self._lines[name] = Line(connection)
                    self._opened(name)
                    try:
                        async for batch in self._batches(adapter, body, line):
                            yield batch
                    finally:
                        if self._lines.get(name) is line:
                            del self._lines[name]
                        line.close("the channel closed before the answer came")
                    return
                if response.status not in UNSUPPORTED:
                    raise _error(response, "the channel was refused")
                log.info(
                    "the SyncServer at %s has no channels (%s): using its event stream",
                    self.url,
                    response.status,
                )
                self.channel = False
        async with self.client.stream(
            "GET",
            self._path(adapter, "events"),
            params={"after": after},
            read_timeout=read_timeout,
        ) as (response, chunks):
            if response.status != 200:
                response.body = b"".join([chunk async for chunk in chunks])
                raise _error(response, "the event stream was refused")
            self._opened(adapter.protocol.name)
            async for batch in self._batches(adapter, chunks):
                yield batch

    def _opened(self, protocol: str) -> None:
        feed = self._feeds.get(protocol)
        if feed is not None:
            feed.connected.set()

    async def _batches(
        self, adapter: Member, chunks: AsyncIterator[bytes], line: Line | None = None
    ) -> AsyncIterator[Batch]:
        """The batches of an event stream (a channel's answers go to ``line``)."""
        feed = self._feeds.get(adapter.protocol.name)
        name = adapter.protocol.name
        decoder = Decoder()
        async for chunk in chunks:
            for event in decoder.feed(chunk):
                if event.event == "answer" and line is not None:
                    # The answer to an attempt of ours carries its batch, which
                    # the stream leaves out: applied here, in its place.
                    answered = line.answered(json.loads(event.data))
                    if answered is not None:
                        yield answered
                    continue
                if event.event != "batch":
                    continue
                seq = event.id
                # Applied already (an attempt's answer brought it)? Then the
                # feed skips it by its number: no need to parse it.
                if seq is not None and seq.isdigit() and feed and int(seq) <= feed.applied:
                    yield Batch(name, int(seq), ())
                    continue
                yield parse_batch(adapter.protocol, json.loads(event.data))


def _finalized(
    adapter: Member, instances: Sequence[ActionInstance], data: Mapping[str, Any]
) -> Batch | int:
    """The batch an attempt's answer describes: our instances at their positions,
    and the entries of other attempts finalized in the same batch, as sent (a
    channel's answer). A POST's answer sends only the batch's size: when the
    batch holds others, their entries come on the stream, and only the batch's
    number is returned."""
    size = len(data["attempt"]) + len(data["others"]) if "others" in data else data["size"]
    if "others" not in data and size != len(data["attempt"]):
        return int(data["seq"])
    entries: list[Entry | None] = [None] * size
    for position, instance in zip(data["attempt"], instances, strict=True):
        entries[position] = Entry(instance, adapter.name)
    if "others" in data:
        others = parse_batch(adapter.protocol, {"seq": 0, "instances": data["others"]})
        for other, entry in zip(data["others"], others.entries, strict=True):
            entries[other["index"]] = entry
    return Batch(adapter.protocol.name, int(data["seq"]), tuple(entries))  # type: ignore[arg-type]


def _whole(
    adapter: Member, instances: Sequence[ActionInstance], data: Mapping[str, Any]
) -> Batch:
    """The batch a channel's answer holds whole (it takes the batch event's place)."""
    batch = _finalized(adapter, instances, data)
    if isinstance(batch, int):
        raise ValueError("the answer of a channel lacks the batch's other entries")
    return batch


def _error_body(response: Answer) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


def _error(response: Answer, context: str) -> ExecutorError:
    error = _error_body(response)
    message = error.get("message") or response.text[:200] or response.reason_phrase
    return ExecutorError(
        f"{context}: {response.status_code} {message}",
        status=response.status_code,
        code=error.get("code"),
        retryable=response.status_code in RETRY_STATUS,
    )


def _rejection(response: Answer, instances: Sequence[ActionInstance]) -> Exception:
    error = _error_body(response)
    if "rule" in error:
        violation = Violation(
            error["rule"],
            error.get("message", ""),
            action=error.get("action"),
            attribute=error.get("attribute"),
            index=error.get("index", 0),
            path=error.get("path"),
        )
        return ActionRejected(violation, list(instances))
    return _error(response, "the attempt failed")
