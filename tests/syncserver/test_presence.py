"""The connection table behind the agents listing and the per-agent stream bound."""

from __future__ import annotations

from syncserver._presence import Presence


def test_streams_are_counted_per_agent_and_protocol_and_forgotten_when_closed() -> None:
    presence = Presence()
    presence.opened("m", "a", "P")
    presence.opened("m", "a", "P")
    presence.opened("m", "a", "Q")
    presence.opened("other", "a", "P")
    assert presence.streams("m", "a") == 3 and presence.total == 4
    assert presence.describe("m", "a")["streams"] == {"P": 2, "Q": 1}
    presence.closed("m", "a", "P")
    assert presence.describe("m", "a")["streams"] == {"P": 1, "Q": 1}
    presence.closed("m", "a", "P")
    presence.closed("m", "a", "Q")
    assert presence.streams("m", "a") == 0
    assert presence.describe("m", "a")["connected"] is False
    presence.closed("m", "a", "Q")  # a close too many (a race at shutdown) is harmless
    assert presence.total == 1


def test_attempts_are_remembered_apart_from_streams() -> None:
    presence = Presence()
    presence.attempted("m", "a")
    described = presence.describe("m", "a")
    assert described["connected"] is False
    assert isinstance(described["last_attempt"], str) and described["last_attempt"].endswith("Z")
