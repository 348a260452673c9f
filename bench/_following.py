"""What following costs a SyncServer over PostgreSQL: the model's *f*.

Run by ``bench/syncserver.py --db URL --follow`` (``--db postgres`` for a
throwaway server). Two ``strabo syncserver`` processes share the log; every
agent sends to the first (the writer) and the second only follows, as every
server does for the commits of the others. During each load (one sequential
agent, then 32 concurrent ones) the CPU time of both processes is read from
``/proc/PID/stat`` and divided by the actions finalized: the writer's is the
model's *c* (docs/performance.md, "What N servers give on N cores"), the
follower's its *f*.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from bench._checkout import body, client, process, steps
from bench._scaleout import _config, _syncserver, cpu_seconds

PATH = "/mas/{mas}/protocols/SimpleUCP/attempts"


async def _load(host: str, port: int, mas: str, agents: int, seconds: float, tag: str) -> int:
    """Actions finalized by ``agents`` agents, each running checkouts one step
    after the other for ``seconds``."""
    deadline = time.perf_counter() + seconds
    path = PATH.format(mas=mas)

    async def agent(i: int) -> int:
        http = client(host, port, f"a{i}")
        done, checkout = 0, 0
        try:
            while time.perf_counter() < deadline:
                for _, action, bindings in steps(f"{tag}{i}-{checkout}"):
                    answer = await http.request("POST", path, body((action, bindings)))
                    if answer.status_code != 200:
                        raise RuntimeError(f"{action}: {answer.status_code} {answer.text}")
                    done += 1
                checkout += 1
        finally:
            await http.aclose()
        return done

    return sum(await asyncio.gather(*(agent(i) for i in range(agents))))


async def follower(url: str, quick: bool) -> None:
    import tempfile

    seconds = 2.0 if quick else 5.0
    mas = "follow"
    print("7. following over PostgreSQL: a writer takes every attempt, a second server")
    print("   only follows; CPU per finalized action of each (the model's c and f)")
    with tempfile.TemporaryDirectory() as tmp:
        command = _syncserver(_config(Path(tmp), mas, 32), url)
        async with contextlib.AsyncExitStack() as stack:
            host, port, writer = await stack.enter_async_context(process(*command))
            *_, following = await stack.enter_async_context(process(*command))
            await _load(host, port, mas, 4, 0.5, "warm")
            for name, agents in (("1 sequential agent", 1), ("32 concurrent agents", 32)):
                before = cpu_seconds(writer), cpu_seconds(following)
                actions = await _load(host, port, mas, agents, seconds, f"x{agents}-")
                c = (cpu_seconds(writer) - before[0]) / actions
                f = (cpu_seconds(following) - before[1]) / actions
                print(
                    f"   {name:22} {actions:6d} actions   writer (c) {c * 1e6:5.0f} us   "
                    f"follower (f) {f * 1e6:5.0f} us   f/c {f / c:.2f}"
                )
