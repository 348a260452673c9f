"""An agent's SQLite log has one writer: the store that opened it holds its lock.

Two processes enacting as the same agent on one file would interleave their
messages under the same sequence numbers; the second is refused when it opens
the file, at once and in one sentence, and the file opens again as soon as the
first lets it go (closed, or its process killed: the lock dies with it).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from peach.peer import SQLitePeerStore
from peach.peer._store import PeerStoreError, Record

HOLD = textwrap.dedent(
    """
    import sys
    from peach.peer import SQLitePeerStore
    store = SQLitePeerStore(sys.argv[1])
    store.open("buyer")
    print("open", flush=True)
    sys.stdin.read()  # held until the test closes our stdin, or kills us
    """
)


def test_a_second_store_on_an_open_log_is_refused_in_one_sentence(tmp_path: Path) -> None:
    path = tmp_path / "buyer.db"
    first = SQLitePeerStore(path)
    first.open("buyer")
    first.append(Record("P", 1, "buyer", [{"action": "A", "bindings": {}}], []), ["seller"])
    second = SQLitePeerStore(path)
    with pytest.raises(PeerStoreError, match="open in another agent process") as refused:
        second.open("buyer")
    assert str(refused.value).startswith(str(path))
    # Nothing of the first store's changed, and it goes on writing.
    first.append(Record("P", 2, "buyer", [{"action": "A", "bindings": {}}], []), ["seller"])
    first.close()
    again = SQLitePeerStore(path)
    again.open("buyer")
    assert [r.seq for r in again.load()] == [1, 2]
    assert again.outbox() == [("P", 1, "seller"), ("P", 2, "seller")]
    again.close()


def test_another_process_holding_the_log_keeps_this_one_out_until_it_dies(
    tmp_path: Path,
) -> None:
    path = tmp_path / "buyer.db"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "open"
        store = SQLitePeerStore(path)
        with pytest.raises(PeerStoreError, match="one writer; stop the other first"):
            store.open("buyer")
        holder.kill()  # kill -9: no close, the lock goes with the process
        holder.wait(30)
        store.open("buyer")
        assert store.load() == []
        store.close()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(30)
