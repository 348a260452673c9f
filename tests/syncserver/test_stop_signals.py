"""SIGTERM and SIGINT stop ``strabo syncserver`` cleanly: the store is closed
and its WAL checkpointed (none left, or empty), whatever stopped it."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from tests.processes import LISTENING, ROOT, syncserver

CONFIG = ROOT / "samples" / "purchase" / "mas.toml"


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
async def test_a_stopped_server_leaves_its_sqlite_log_checkpointed(
    tmp_path: Path, sig: int, status: int
) -> None:
    db = tmp_path / "log.db"
    async with await syncserver(CONFIG, db) as server:
        url = (await server.line_matching(LISTENING)).group(1)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            for i in range(20):  # something in the WAL
                bindings = {"ID": f"q{i}", "item": "fig", "budget": 5}
                rfq = {"instances": [{"action": "RFQ", "bindings": bindings}]}
                answer = await client.post(
                    "/mas/purchase/protocols/Purchase/attempts", json=rfq,
                    headers={"Authorization": "Bearer buyer-secret"},
                )
                assert answer.status_code == 200, answer.text
        wal = Path(f"{db}-wal")
        assert _size(wal) > 0  # written, not yet checkpointed
        server.kill(sig)
        code, _, err = await server.finish()
    assert code == status, err
    assert err.rstrip().endswith("strabo syncserver: stopped")
    assert _size(wal) == 0  # gone, or empty


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0
