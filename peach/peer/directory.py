"""Who the peers are: each agent's roles, address and secret.

A directory is the SyncServer's configuration read the other way round: the
same ``[mas.NAME]`` TOML, where each agent also gives the ``url`` it listens
on, and its ``token`` is the secret that signs what it sends. Every agent of
the system loads the same directory.

```toml
[mas.purchase]
protocols = ["purchase"]

[mas.purchase.agents.buyer]
roles = ["Buyer"]
token_env = "BUYER_SECRET"
url = "http://127.0.0.1:8401"
```

Messages are signed with HMAC-SHA256 under the sender's secret: a receiver
refuses a message from an agent it does not know, or whose signature does not
verify. Whoever holds the directory holds every secret, so it authenticates
the members of one system to each other, not agents that distrust the system.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langshaw import LangshawProtocol
from peach.errors import ExecutorError
from syncserver.acts_for import ActsFor
from syncserver.config import ConfigError, MASConfig, build_config, load_config

AGENT_HEADER = "x-strabo-agent"
SIGNATURE_HEADER = "x-strabo-signature"


@dataclass(frozen=True)
class Peer:
    """One agent of the system, as its peers know it."""

    name: str
    secret: str
    roles: Mapping[str, frozenset[str]]  # protocol name -> roles it plays
    url: str | None = None
    acts_for: ActsFor = field(default_factory=ActsFor)  # bindings it is held to

    def plays(self, protocol: str) -> frozenset[str]:
        return self.roles.get(protocol, frozenset())


def sign(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class Directory:
    """The agents of one multiagent system and the protocols they enact."""

    def __init__(
        self,
        mas: str,
        protocols: Iterable[LangshawProtocol],
        peers: Iterable[Peer],
    ) -> None:
        self.mas = mas
        self.protocols = {p.name: p for p in protocols}
        self.peers = {p.name: p for p in peers}

    @classmethod
    def load(cls, path: str | Path, mas: str | None = None) -> Directory:
        """Read a TOML directory (the SyncServer's configuration format, with a
        ``url`` per agent); ``mas`` picks a system when the file has several."""
        try:
            config = load_config(path)
        except ConfigError as exc:
            raise ExecutorError(str(exc)) from None
        return cls._pick(config.mas, mas, str(path))

    @classmethod
    def of(
        cls,
        protocols: Sequence[LangshawProtocol],
        agents: Mapping[str, Mapping[str, Any]],
        mas: str = "default",
    ) -> Directory:
        """A directory given in code: ``agents`` maps each name to a table like the
        TOML one (``roles``, ``token`` or ``token_env``, ``url``)."""
        try:
            config = build_config(
                {"mas": {mas: {"protocols": list(protocols), "agents": dict(agents)}}},
                source="<directory>",
            )
        except ConfigError as exc:
            raise ExecutorError(str(exc)) from None
        return cls._pick(config.mas, mas, "<directory>")

    @classmethod
    def _pick(cls, systems: Mapping[str, MASConfig], mas: str | None, source: str) -> Directory:
        if mas is None:
            if len(systems) != 1:
                raise ExecutorError(
                    f"{source} describes {len(systems)} systems ({', '.join(systems)}): "
                    "say which one"
                )
            mas = next(iter(systems))
        chosen = systems.get(mas)
        if chosen is None:
            raise ExecutorError(
                f"{source} has no system {mas!r} (it has {', '.join(systems) or 'none'})"
            )
        peers = [Peer(a.name, a.token, a.roles, a.url, a.acts_for) for a in chosen.agents.values()]
        return cls(mas, chosen.protocols.values(), peers)

    def peer(self, name: str) -> Peer:
        found = self.peers.get(name)
        if found is None:
            raise ExecutorError(
                f"the directory of {self.mas!r} has no agent {name!r} "
                f"(agents: {', '.join(self.peers) or 'none'})",
                status=401,
                code="unknown-peer",
            )
        return found

    def recipients(self, protocol: str, sender: str) -> list[str]:
        """Who hears of what ``sender`` performs in ``protocol``: every other agent
        that plays a role in it (the rule that lets any agent check a context)."""
        return [p.name for p in self.peers.values() if p.name != sender and p.plays(protocol)]

    def authentic(self, sender: str, body: bytes, signature: str) -> bool:
        peer = self.peers.get(sender)
        return peer is not None and hmac.compare_digest(sign(peer.secret, body), signature)
