"""The docs are executable: every fenced block of README.md and docs/*.md is run
or checked here, so that a doc cannot drift from the code (issue 30).

What a block is, its fence's info string says:

- ``sh``, ``bash``, ``shell``: commands, run as a bash script (``set -e``);
  ``console``: commands on ``$ `` lines, each followed by the output the doc
  shows, which must match (``...`` stands for any text, within a line or across
  lines). Each test runs in a fresh temporary directory that mirrors the
  repository's root (a link to each of its entries, so what a command writes
  stays there), from which every command and example in the docs runs, with the
  venv's ``bin`` first on ``PATH``, no API keys, no proxies, no ``PYTHONPATH``,
  and a time limit; it must exit 0 and print no traceback.
- ``python``: examples, each run as ``python example.py`` from that root (the
  script itself saved elsewhere), except that top-level ``await`` and ``async
  with`` work, as in ``python -m asyncio``.
- ``langshaw`` (or ``lsh``): a protocol, which must be valid (and equal to the
  shipped file of the same name), a fragment starting with a clause (which must
  parse), or an excerpt (``# excerpt of FILE``: lines of FILE, in order).
- ``toml``: valid TOML; a scenario must pass ``parse_scenario``, a SyncServer
  configuration whose MASes name their protocols ``build_config``.
- ``json``: valid JSON; an attempt (``{"instances": ...}``) must be legal.
- no info string, or ``text``: output samples and diagrams, counted, not run.

Markers, comment lines at the top of a block, visible to every reader, change
what is done with it:

- ``# needs: WHAT`` (a key, a network, a server the test cannot provide),
  ``# slow: WHY`` (it runs in the benchmarks, or in ``make test`` itself) and
  ``# outline: WHAT`` (signatures, not code): the test is skipped with that
  reason, after checking the block's syntax (Python, or bash) and that every
  option it gives a command of this repository is in that command's ``--help``;
- ``# synopsis``: a usage line, whose options are checked against ``--help``;
- ``# runs until Ctrl-C``: a server. Each of its commands is started (as in a
  shell of its own), and is ready once it has printed a line and the loopback
  ports it names (``--port N``, a URL in its command or output) answer; at the
  end of the test it gets SIGINT and must exit cleanly (0 or 130);
- ``# exits with status N``: the status the last command must end with;
- ``# env: NAME=VALUE``: what the doc tells the reader to set (``PYTHONPATH=.``);
- ``# session: NAME``: blocks of one doc run together, as one test named after
  the first: the TOML files (``# file: NAME`` writes the block there), then the
  servers (``runs until Ctrl-C``, in order), then the rest in order, adjacent
  Python blocks joined into one program; ``# continues the example above``
  puts a Python block in the session of the doc's previous Python block.

Each test runs in a network namespace of its own when the machine allows it
(``unshare``), so that the docs' fixed ports (8300, 8182, 8765...) collide with
nothing; otherwise the tests using them take turns. A block that fails because
of a bug in the code, not in the doc, is in XFAIL, with the failure, until the
code is fixed. ``.venv/bin/python -m tests._docs`` lists every unit and what is
done with it, and counts the blocks; ``.venv/bin/python -m tests._docs
docs/peach.md:13`` runs one and prints everything it does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import _docs

BLOCKS = _docs.all_blocks()
UNITS = _docs.units(BLOCKS)

# Blocks that fail because of a bug in the code, not in the doc: (doc, a line of the
# block) -> the failure, as ("docs/peach.md", "async with adapter:"): "issue 30: ...".
# Strict: the fix makes the test fail until its entry is removed.
XFAIL: dict[tuple[str, str], str] = {}

CHECKS = {
    "langshaw": _docs.check_langshaw,
    "toml": _docs.check_toml,
    "json": _docs.check_json,
    "command": _docs.check_options,  # a synopsis
}


def _unit(unit: _docs.Unit) -> Any:
    marks = [
        pytest.mark.xfail(strict=True, reason=reason)
        for (doc, line), reason in XFAIL.items()
        if unit.blocks[0].doc == doc and any(line in block.text for block in unit.blocks)
    ]
    return pytest.param(unit, id=unit.id, marks=marks)


@pytest.mark.parametrize("unit", [_unit(u) for u in UNITS if not u.skip])
def test_runs(unit: _docs.Unit, tmp_path: Path) -> None:
    result = _docs.run_isolated(unit, tmp_path)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("unit", [pytest.param(u, id=u.id) for u in UNITS if u.skip])
def test_marked_not_to_run(unit: _docs.Unit) -> None:
    for block in unit.blocks:
        _docs.check_syntax(block)
        if block.kind == "command":
            _docs.check_options(block)
    pytest.skip(f"{unit.id}: {unit.skip}")


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(b, id=b.id)
        for b in BLOCKS
        if b.kind in ("langshaw", "toml", "json") or b.marker("synopsis") is not None
    ],
)
def test_checked(block: _docs.Block) -> None:
    CHECKS[block.kind](block)


def test_every_block_is_run_checked_or_an_output_sample() -> None:
    in_units = {block.id for unit in UNITS for block in unit.blocks}
    problems = []
    for block in BLOCKS:
        keys = {key for key, _ in block.markers}
        if block.kind == "unknown":
            problems.append(f"{block.id}: the info string {block.info!r} is none of "
                            f"{', '.join(sorted(k for k in _docs.KINDS if k))} (or none)")
        if _docs.runnable(block) and block.id not in in_units:
            problems.append(f"{block.id}: runnable, but in no test")
        allowed = {
            "command": {"needs", "slow", "session", "runs until Ctrl-C", "exits with status",
                        "env", "synopsis"},
            "python": {"needs", "slow", "outline", "session", "runs until Ctrl-C", "env",
                       "continues the example above"},
            "toml": {"session", "file"},
            "langshaw": {"excerpt of"},
        }.get(block.kind, set())
        if keys - allowed:
            problems.append(f"{block.id}: {', '.join(sorted(keys - allowed))} on a "
                            f"{block.kind} block")
        if "file" in keys and "session" not in keys:
            problems.append(f"{block.id}: a # file: outside a session is never written")
    assert not problems, "\n".join(problems)


def test_a_marker_is_seen_only_at_the_top_of_a_block() -> None:
    text = "```python\n# needs: a key\n# env: A=1 (why)\nx = 1  # needs: nothing\n```\n"
    [block] = _docs.blocks_of("doc.md", text)
    assert block.markers == (("needs", "a key"), ("env", "A=1 (why)"))
    assert block.skip == "needs: a key"
    assert _docs.env_marker(block) == {"A": "1"}
    assert block.body == ["x = 1  # needs: nothing"]


def test_output_matches_with_ellipses() -> None:
    assert _docs.matches("a ... c\n...\nz", "a b c\nmore\nlines\nz  \n")
    assert not _docs.matches("a ... c", "a b d")
    assert _docs.matches("listening on ...", "listening on 1\nINFO: more", whole=False)
    assert not _docs.matches("listening on ...", "listening on 1\nINFO: more".replace(
        "listening", "waiting"), whole=False)
