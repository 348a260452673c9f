"""Where finalized instances are kept: the interface, and the store in memory.

The durable stores implement it: SQLite (``syncserver.sqlite``) and PostgreSQL
(``syncserver._pgstore``).

The log is append-only. A batch is written in one transaction, and the server
acknowledges an attempt only after the transaction holding it has committed, so
an acknowledged action survives ``kill -9``. Concurrent attempts share a
transaction (group commit): the cost of a commit is paid once per batch of
attempts, not once per action.

Several SyncServers may share one log in PostgreSQL (``syncserver._pgstore``):
such a store is ``shared``, and the ledger then finalizes inside
:meth:`SharedStore.turn`, which serializes finalization across the servers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote

from langshaw import ActionInstance, LangshawProtocol
from syncserver.batch import Batch, Entry


def root_text(values: tuple[Any, ...]) -> str:
    """The root key values as canonical JSON, the form the log indexes them by
    (one plain string, the usual root, written without the encoder: the same
    text, made on every finalized action)."""
    if len(values) == 1:
        value = values[0]
        if (type(value) is str and value.isascii() and value.isprintable()
                and '"' not in value and "\\" not in value):
            return f'["{value}"]'
    return json.dumps(list(values), separators=(",", ":"))


def root_of(protocol: LangshawProtocol, instance: ActionInstance) -> tuple[Any, ...]:
    return tuple(instance.bindings[k] for k in protocol.root_keys)


class StoreError(Exception):
    """The store failed, or holds a log that does not fit the protocol."""


class Store:
    """The interface both stores implement; batches go in and come out whole."""

    #: True when append() is instantaneous and needs no writer task (memory).
    inline: bool = False
    #: True when append_now() writes durably without waiting on the disk.
    synchronous_append: bool = False
    #: True when several servers write the log at once (a :class:`SharedStore`).
    shared: bool = False

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def append(self, mas: str, protocol: LangshawProtocol, batches: Sequence[Batch]) -> None:
        """Write batches in one transaction."""
        raise NotImplementedError

    async def load(self, mas: str, protocol: LangshawProtocol) -> list[Batch]:
        """Every batch of one ledger, in order (used once, at start-up)."""
        raise NotImplementedError

    async def read(
        self, mas: str, protocol: LangshawProtocol, after: int, until: int
    ) -> list[Batch]:
        """The batches ``after < seq <= until``, in order."""
        raise NotImplementedError

    async def by_root(
        self, mas: str, protocol: LangshawProtocol, root: tuple[Any, ...]
    ) -> list[Batch]:
        """The batches touching one enactment, holding only its entries."""
        raise NotImplementedError

    async def enactment_page(
        self, mas: str, protocol: LangshawProtocol, root: tuple[Any, ...], after: int, limit: int
    ) -> tuple[list[Batch], bool]:
        """The batches touching one enactment after batch ``after`` (only its
        entries), whole, holding at most ``limit`` entries in all (unless the
        first alone holds more); and whether more follow."""
        return page_of(await self.by_root(mas, protocol, root), after, limit)

    async def find_attempt(
        self,
        mas: str,
        protocol: LangshawProtocol,
        attempt_id: str,
        performer: str,
        root: tuple[Any, ...],
    ) -> Batch | None:
        """The batch holding an agent's attempt, with only that attempt's entries
        (attempt ids are the agent's own: two agents may use the same one). ``root``
        is the enactment of the attempt's first instance: the log is indexed by it."""
        raise NotImplementedError

    async def record_protocol(
        self, mas: str, protocol: str, fingerprint: str, meaning: str
    ) -> tuple[str, str]:
        """Record which protocol a ledger's log is written with (its meaning and
        that meaning's digest: ``langshaw.identity``), unless the log already
        says; the ``(fingerprint, meaning)`` recorded. A store that keeps
        nothing across runs (memory) records nothing: it returns its arguments."""
        return fingerprint, meaning


class Turn:
    """One ledger's exclusive turn at a shared log: no other server appends to
    the ledger until the turn ends (committed, or rolled back on an exception).

    ``missed`` holds the batches other servers committed after the seq the turn
    was asked for, in order; ``last_seq`` is the last committed batch. Batches
    given to :meth:`append` must follow ``last_seq`` densely; they are written
    and published to every server when the turn commits."""

    def __init__(self, last_seq: int, missed: list[Batch]) -> None:
        self.last_seq = last_seq
        self.missed = missed
        self.batches: list[Batch] = []

    def append(self, batches: Sequence[Batch]) -> None:
        expected = self.last_seq + len(self.batches) + 1
        for batch in batches:
            if batch.seq != expected:
                raise StoreError(f"batch {batch.seq} appended where batch {expected} belongs")
            expected += 1
        self.batches.extend(batches)


class Carried(Protocol):
    """The batches a commit's notification carried: ``first`` on, decoded on
    demand (a follower that cannot apply them now reads the log later)."""

    first: int

    def batches(self, protocol: LangshawProtocol) -> list[Batch]: ...


class Hearing(Protocol):
    """What :meth:`SharedStore.watch` calls: told of a commit up to ``seq``."""

    def __call__(self, seq: int, carried: Carried | None = None, /) -> None: ...


class SharedStore(Store):
    """A log that several SyncServers write at once (PostgreSQL).

    Each server keeps its own replica of the social state, which other servers'
    commits make stale. So a ledger finalizes only inside a :meth:`turn`: the
    turn serializes the ledger's writers across servers, hands over what the
    replica missed, and commits the new batches with the next sequence numbers.
    Servers hear of each other's commits through :meth:`watch`."""

    shared = True

    def turn(
        self, mas: str, protocol: LangshawProtocol, after: int
    ) -> AbstractAsyncContextManager[Turn]:
        """An exclusive turn at the ledger; ``after`` is the last batch the caller holds."""
        raise NotImplementedError

    async def watch(self, mas: str, protocol: str, callback: Hearing) -> None:
        """Call ``callback(seq, carried)`` when some server may have committed
        batches up to ``seq`` (hints: notifications, and polls in case one was
        missed); ``carried``, when not None, holds the batches of that commit."""
        raise NotImplementedError

    def unwatch(self, mas: str, protocol: str) -> None:
        raise NotImplementedError

    async def last_seq(self, mas: str, protocol: str) -> int:
        """The ledger's last committed batch, as the log says now."""
        raise NotImplementedError


class MemoryStore(Store):
    """Keeps the log in memory: fast and ephemeral (``--db :memory:``).

    Only the attempt ids are indexed; reading one enactment scans the log, which
    is fine for the tests and small systems a memory store is for.
    """

    inline = True
    synchronous_append = True

    def __init__(self) -> None:
        self._logs: dict[tuple[str, str], list[Batch]] = {}
        self._attempts: dict[tuple[str, str, str, str], Batch] = {}

    async def append(self, mas: str, protocol: LangshawProtocol, batches: Sequence[Batch]) -> None:
        self.append_now(mas, protocol, batches)

    def append_now(self, mas: str, protocol: LangshawProtocol, batches: Sequence[Batch]) -> None:
        name = protocol.name
        self._logs.setdefault((mas, name), []).extend(batches)
        attempts = self._attempts
        for batch in batches:
            for entry in batch.entries:
                if entry.attempt_id is not None:
                    attempts.setdefault((mas, name, entry.performer, entry.attempt_id), batch)

    async def load(self, mas: str, protocol: LangshawProtocol) -> list[Batch]:
        return list(self._logs.get((mas, protocol.name), ()))

    async def read(
        self, mas: str, protocol: LangshawProtocol, after: int, until: int
    ) -> list[Batch]:
        log = self._logs.get((mas, protocol.name), [])
        # Batches are numbered from 1 without gaps: seq n is at index n - 1.
        return log[max(after, 0) : max(until, 0)]

    async def by_root(
        self, mas: str, protocol: LangshawProtocol, root: tuple[Any, ...]
    ) -> list[Batch]:
        def mine(entry: Entry) -> bool:
            return root_of(protocol, entry.instance) == root

        return [
            batch.only(mine)
            for batch in self._logs.get((mas, protocol.name), ())
            if any(mine(e) for e in batch.entries)
        ]

    async def find_attempt(
        self,
        mas: str,
        protocol: LangshawProtocol,
        attempt_id: str,
        performer: str,
        root: tuple[Any, ...],
    ) -> Batch | None:
        batch = self._attempts.get((mas, protocol.name, performer, attempt_id))
        if batch is None:
            return None
        return batch.only(lambda e: e.attempt_id == attempt_id and e.performer == performer)


def page_of(batches: Sequence[Batch], after: int, limit: int) -> tuple[list[Batch], bool]:
    """Whole batches after ``after``, at most ``limit`` entries in all (the first
    always: a batch is never cut), and whether more follow."""
    page: list[Batch] = []
    count = 0
    for batch in batches:
        if batch.seq <= after:
            continue
        if page and count + len(batch.entries) > limit:
            return page, True
        page.append(batch)
        count += len(batch.entries)
    return page, False


def rows_of(protocol: LangshawProtocol, batches: Sequence[Batch]) -> list[tuple[Any, ...]]:
    """The log's rows for ``batches``: (seq, idx, root, action, performer, bindings,
    attempt_id), the bindings and the root as canonical JSON text (both stores
    keep the text, so a value reads back exactly as it was written)."""
    roots = protocol.root_keys
    return [
        (
            batch.seq,
            index,
            root_text(tuple(entry.instance.bindings[k] for k in roots)),
            entry.instance.action.name,
            entry.performer,
            entry.bindings_json,
            entry.attempt_id,
        )
        for batch in batches
        for index, entry in enumerate(batch.entries)
    ]


def batches_of(protocol: LangshawProtocol, rows: Iterable[Sequence[Any]]) -> list[Batch]:
    """Batches from rows ``(seq, idx, action, performer, bindings, attempt_id)``
    ordered by seq and idx."""
    batches: list[Batch] = []
    entries: list[Entry] = []
    seq = None
    for row_seq, _idx, action, performer, bindings, attempt in rows:
        if row_seq != seq and entries:
            batches.append(Batch(protocol.name, seq, tuple(entries)))  # type: ignore[arg-type]
            entries = []
        seq = row_seq
        entries.append(
            Entry(_decode(protocol, action, json.loads(bindings), row_seq), performer, attempt)
        )
    if entries:
        batches.append(Batch(protocol.name, seq, tuple(entries)))  # type: ignore[arg-type]
    return batches


def _decode(
    protocol: LangshawProtocol, name: str, bindings: dict[str, Any], seq: int
) -> ActionInstance:
    action = protocol.actions.get(name)
    if action is None or not (
        set(action.attributes) - protocol.optional <= set(bindings) <= set(action.attributes)
    ):
        raise StoreError(
            f"the stored log holds {name!r} (batch {seq}) that does not fit "
            f"{protocol.source}: the protocol changed since this log was written; use a new --db"
        )
    return ActionInstance(action, bindings)


def redact(url: str) -> str:
    """``url`` without its password, to print or log (a path is returned as it is).

    Done on the text rather than through ``urlsplit``, which raises on a
    malformed URL (an unclosed ``[``; ``.port`` on a port that is no number):
    the message saying the URL is wrong must neither crash nor show the password.
    The credentials end at the last ``@`` before the query (or, if there is
    none, the last at all), so a password with an unencoded ``/``, ``?`` or
    ``#`` is hidden whole; a ``password=`` query parameter, which libpq also
    reads, is hidden too."""
    if not is_url(url):
        return url
    scheme, _, rest = url.partition("://")
    userinfo, password = _credentials(rest)
    if password is not None:
        user = userinfo.partition(":")[0]
        rest = f"{user}:***" + rest[len(userinfo) :]
    return f"{scheme}://{_QUERY_PASSWORD.sub(_hidden, rest)}"


def password_of(url: str) -> str | None:
    """The password in a PostgreSQL URL's credentials (as written), if any."""
    if not is_url(url):
        return None
    return _credentials(url.partition("://")[2])[1]


def scrub(text: str, url: str) -> str:
    """``text`` (an error about ``url``) with the URL's passwords hidden: the
    driver's complaint about a malformed URL may quote a piece of it."""
    password = password_of(url)
    secrets = {m.group(2) for m in _QUERY_PASSWORD.finditer(url)} if is_url(url) else set()
    if password:
        secrets |= {password, unquote(password)}
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        # Whole words only: "p" is not to be hidden in "port" (what a password
        # matches inside other words of the URL, the redacted URL shows anyway).
        text = re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", "***", text)
    return text


def _credentials(rest: str) -> tuple[str, str | None]:
    """The user information of a URL's part after ``://``, and its password."""
    query = min((i for i in map(rest.find, "?#") if i >= 0), default=len(rest))
    userinfo, at, _ = rest[:query].rpartition("@")
    if not at:  # none before the query: a "?" or "#" in the password, unencoded?
        userinfo, at, _ = rest.rpartition("@")
    _user, colon, password = userinfo.partition(":")
    return userinfo, password if at and colon else None


_QUERY_PASSWORD = re.compile(r"([?&]password=)([^&#]*)", re.IGNORECASE)


def _hidden(match: re.Match[str]) -> str:
    return match.group(1) + "***"


def is_url(spec: str | Path) -> bool:
    """Whether ``spec`` names a PostgreSQL database rather than a file."""
    return str(spec).startswith(("postgresql://", "postgres://"))
