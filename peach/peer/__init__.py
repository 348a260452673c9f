"""Peer to peer: agents enact protocols with no SyncServer.

A :class:`PeerExecutor` runs one agent's adapters on the agent's own state,
kept in its own log; a :class:`Directory` says who the peers are; a
transport carries messages between them (HTTP by default, or a
:class:`MemoryNetwork` in one process). Importing this package loads no web
server, and starting an agent neither: its endpoint is a small HTTP/1.1 server
of its own (``peach.peer._app``), started when the agent starts.
"""

from peach.peer._store import PeerStore, PeerStoreError, Refusal, SQLitePeerStore, Verdict
from peach.peer.directory import Directory, Peer
from peach.peer.executor import PeerExecutor
from peach.peer.transport import Faults, HTTPTransport, MemoryNetwork, Transport, Unreachable

__all__ = [
    "Directory",
    "Faults",
    "HTTPTransport",
    "MemoryNetwork",
    "Peer",
    "PeerExecutor",
    "PeerStore",
    "PeerStoreError",
    "Refusal",
    "SQLitePeerStore",
    "Transport",
    "Unreachable",
    "Verdict",
]
