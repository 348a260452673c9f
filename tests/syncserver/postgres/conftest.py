"""A real PostgreSQL server for the tests of this folder.

One throwaway cluster for the session (``bench/_pgcluster.py``: initdb in a
temporary directory, a free loopback port, stopped and deleted at the end), and
a database of its own for each test, so that tests share no log. The binaries
come from pgserver (a dev dependency where it has wheels) or the system's
PostgreSQL (``bench._pgcluster.find_binaries``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from bench._pgcluster import Cluster

_databases = itertools.count(1)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """The session's cluster. Without PostgreSQL's binaries the tests that need
    it fail (never skip: a CI machine missing them must not pass unnoticed),
    with one line saying what to install."""
    try:
        cluster = Cluster()
    except RuntimeError as exc:
        missing = str(exc)
    else:
        missing = ""
    if missing:  # failed outside the handler: one line, not a chain of tracebacks
        pytest.fail(f"the PostgreSQL tests need a server: {missing}", pytrace=False)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


async def create_database(cluster: Cluster, name: str) -> str:
    import asyncpg

    conn = await asyncpg.connect(cluster.url)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return cluster.url.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture
def pg_url(pg_cluster: Cluster) -> str:
    """A new, empty database in the session's cluster (made on a thread of its
    own: the test's event loop is not to be touched by a synchronous fixture)."""
    name = f"t{next(_databases)}"
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, create_database(pg_cluster, name)).result(60)
