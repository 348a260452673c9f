"""Outcomes: whether an LLM agent reached its goal, judged on the protocols' log.

A model that calls ``done`` says the goal is reached; the log says what
happened. So the goal names the actions that count as success (``success=
("Completed",)``), and at the end of a run each enactment the agent took part in
is read from its adapter's history: which terminal actions occurred in it (those
its protocol's completion condition names, and the success actions), with what
they bound. The goal is reached when every enactment the agent took part in, of
a protocol that has a success action, saw one: a checkout that ``Failed``, a
purchase ``Reject`` ed or left open is no success, whatever the model's summary
says.

Conservative on purpose, since the point is never to report a failure as a
success: an agent that retried after a failure (``Failed`` in E1, ``Completed``
in E2) has not reached its goal by this measure; its outcome names both.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

#: The agent's name for an enactment (E1, E2...), as its prompts use it.
Label = Callable[[Any, tuple[Any, ...]], str]
#: Replaces secret values in bindings before they are shown.
Hide = Callable[[Mapping[str, Any]], Mapping[str, Any]]

#: Enactments listed in an outcome, and terminal actions listed per enactment:
#: the outcome goes on one line (the CLI prints it on stderr).
MAX_ENACTMENTS = 6
MAX_ENDINGS = 3
MAX_VALUE = 100


def success_names(
    success: str | Iterable[str] | None, adapters: Sequence[Any]
) -> tuple[str, ...] | None:
    """The actions that count as success, checked against the agent's protocols:
    None when none is named; a single string is one name. A name no protocol of
    the agent has is a ValueError naming the actions there are (a typo would
    otherwise make every run a failure)."""
    if success is None:
        return None
    names = (success,) if isinstance(success, str) else tuple(success)
    if not names:
        return None
    actions = sorted({a for adapter in adapters for a in adapter.protocol.actions})
    unknown = [n for n in names if not isinstance(n, str) or n not in actions]
    if unknown:
        raise ValueError(
            f"success names {', '.join(map(repr, unknown))}, which no protocol of this "
            f"agent has as an action (actions: {', '.join(actions)})"
        )
    return tuple(dict.fromkeys(names))


def judge(
    adapters: Sequence[Any],
    mine: Iterable[tuple[int, tuple[Any, ...]]],
    label: Label,
    success: Sequence[str] | None,
    hide: Hide | None = None,
) -> tuple[bool | None, str]:
    """Whether the goal was reached (None when no success action is named) and
    the outcome in words: the terminal actions that occurred in each enactment
    the agent took part in (``mine``: adapter index and root), or that none did.
    """
    several = len({a.protocol.name for a in adapters}) > 1
    seen: list[tuple[str, str, bool | None]] = []  # (label, text, reached there)
    for index, root in mine:
        adapter = adapters[index]
        name = label(adapter, root)
        where = f"{adapter.protocol.name} {name}" if several else name
        wanted = [s for s in success or () if s in adapter.protocol.actions]
        text, reached = _enactment(adapter, root, where, wanted, hide)
        seen.append((name, text, reached if wanted else None))
    seen.sort(key=lambda item: (len(item[0]), item[0]))  # E2 before E10
    if success is None:
        return None, _joined([text for _, text, _ in seen]) or "the agent performed no action"
    judged = [(text, reached) for _, text, reached in seen if reached is not None]
    if not judged:
        return False, (
            f"the agent took part in no enactment that can end in {' or '.join(success)}"
            + ("" if seen else " (it performed no action)")
        )
    if all(reached for _, reached in judged):
        return True, _joined([text for text, _ in judged])
    # Why not: the enactments that missed first, then those that made it.
    missed = [text for text, reached in judged if not reached]
    made = [text for text, reached in judged if reached]
    return False, _joined(missed + made)


def _enactment(
    adapter: Any, root: tuple[Any, ...], where: str, wanted: Sequence[str], hide: Hide | None
) -> tuple[str, bool]:
    protocol = adapter.protocol
    terminal = {n for clause in protocol.completion for n in clause if n in protocol.actions}
    terminal.update(wanted)
    history = sorted(adapter.history(root), key=lambda entry: entry[0])
    bound: set[str] = set()
    endings: list[str] = []
    reached = False
    for _, instance, _performer in history:
        action = instance.action
        if instance.name in terminal:
            reached = reached or instance.name in wanted
            fresh = {
                k: v for k, v in instance.bindings.items()
                if k not in action.keys and k not in action.dependencies and k not in bound
            }
            shown = dict(hide(fresh)) if hide is not None else fresh
            detail = ", ".join(f"{k}: {_value(v)}" for k, v in shown.items())
            endings.append(f"{instance.name} in {where}" + (f" ({detail})" if detail else ""))
        bound.update(instance.bindings)
    if not endings:
        if not history:
            return f"{where} has no outcome yet", False
        _, last, performer = history[-1]
        return f"{where} has no outcome yet (last: {last.name} by {performer})", False
    more = len(endings) - MAX_ENDINGS
    text = "; ".join(endings[:MAX_ENDINGS]) + (f"; {more} more in {where}" if more > 0 else "")
    return text, reached


def _joined(texts: list[str]) -> str:
    more = len(texts) - MAX_ENACTMENTS
    return "; ".join(texts[:MAX_ENACTMENTS]) + (f"; and {more} more" if more > 0 else "")


def _value(value: Any) -> str:
    """A bound value on one line: text as is, anything else as compact JSON."""
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    text = " ".join(value.split())
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 3] + "..."
