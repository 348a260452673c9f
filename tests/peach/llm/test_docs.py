"""The complete Python examples of docs/llm-agents.md and docs/mcp.md run as
written: each is saved as a script at a temporary path and run with the
repository on the path (as when saved at its root), the model being the
scripted one of tests/peach/llm/fake.py. A fragment that continues an example says
so in the docs and is not run; a complete example ends in ``asyncio.run(main())``."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.peach.llm.fake import FakeModel

# (doc, a line that picks the example) -> what it prints, and the fake model's script.
EXAMPLES = {
    ("llm-agents.md", "agent = LLMAgent([buyer], goal, budget="):
        ("done: bought a pen from cheap for 4", "purchase"),
    ("llm-agents.md", "mandate=MANDATE,"):
        ("1 action; 127 refused by the mandate", None),
    ("mcp.md", 'role = RoleServer(buyer, hooks=hooks, secrets=["address"])'):
        ("'chosen': 'seller-pen', 'price': 4, 'address': '[secret]'}", None),
    ("mcp.md", 'async with MCPTools("weather", command, hooks=hooks) as weather:'):
        ("{'city': 'Paris', 'forecast': 'sunny'}", None),
}
# Needs `strabo mcp --transport http --port 8765` and the sample agents running.
NEEDS_A_SERVER = 'Client("http://127.0.0.1:8765/mcp")'


def complete_examples(doc: str) -> list[str]:
    text = (ROOT / "docs" / doc).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    return [b for b in blocks if "asyncio.run(main())" in b]


def test_every_complete_example_is_run_here():
    for doc in ("llm-agents.md", "mcp.md"):
        for block in complete_examples(doc):
            picked = [key for key in EXAMPLES if key[0] == doc and key[1] in block]
            assert picked or NEEDS_A_SERVER in block, f"{doc}: an example no test runs:\n{block}"


@pytest.mark.parametrize(("doc", "marker"), list(EXAMPLES))
async def test_the_example_runs_as_written(tmp_path: Path, doc: str, marker: str):
    [code] = [b for b in complete_examples(doc) if marker in b]
    expected, script = EXAMPLES[(doc, marker)]
    (tmp_path / "example.py").write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    env["PYTHONPATH"] = str(ROOT)
    fake = FakeModel([], "anthropic")
    async with fake.serving():
        if script:
            fake.script(script)
            env.update(ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=fake.url)
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(tmp_path / "example.py"), cwd=ROOT, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = (s.decode() for s in await asyncio.wait_for(process.communicate(), 120))
    assert process.returncode == 0, err
    assert expected in out, out + err
    assert not fake.unanswered
