"""A base URL that cannot be a model endpoint is refused up front: by
``strabo agent`` as a usage error before its embedded SyncServer starts, and by
:class:`LLMAgent` as a ``ValueError``, instead of a first request to
'not-a-url/chat/completions' once everything is running."""

from __future__ import annotations

import pytest

from langshaw import LangshawProtocol
from peach import LocalExecutor, PeachAdapter
from peach.llm import LLMAgent
from peach.llm._base_url import check_base_url
from syncserver import SyncServer
from tests.conftest import PROTOCOLS
from tests.peach.llm.test_cli import PURCHASE, strabo_agent

BAD = [
    ("not-a-url", "is not an http(s) URL with a host"),
    ("ftp://127.0.0.1/v1", "is not an http(s) URL with a host"),
    ("http://", "is not an http(s) URL with a host"),
    ("localhost:11434/v1", "write http://localhost:11434/v1"),
    ("http://127.0.0.1:99999/v1", "has no valid port"),
]


@pytest.mark.parametrize("url", ["http://127.0.0.1:11434/v1", "https://api.example.com",
                                 "http://[::1]:8000/v1"])
def test_http_urls_with_a_host_pass(url):
    check_base_url(url)


@pytest.mark.parametrize(("url", "says"), BAD)
def test_the_python_api_raises_a_precise_value_error(url, says):
    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    server = SyncServer.embedded([protocol], {"buyer": ["Buyer"]})
    adapter = PeachAdapter("buyer", protocol, "Buyer", LocalExecutor(server))
    with pytest.raises(ValueError, match=f"^base_url {url!r} ") as caught:
        LLMAgent([adapter], "goal", provider="openai", model="m", base_url=url)
    assert says in str(caught.value)


def test_a_bad_base_url_variable_is_named(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "not-a-url")
    protocol = LangshawProtocol.load(PROTOCOLS / "purchase.lsh")
    server = SyncServer.embedded([protocol], {"buyer": ["Buyer"]})
    adapter = PeachAdapter("buyer", protocol, "Buyer", LocalExecutor(server))
    with pytest.raises(ValueError, match=r"^OPENAI_BASE_URL 'not-a-url' is not an http"):
        LLMAgent([adapter], "goal", provider="openai", model="m")


@pytest.mark.parametrize(("url", "says"), BAD[:1] + BAD[3:4])
def test_strabo_agent_refuses_it_before_the_embedded_server_starts(url, says):
    result = strabo_agent("--protocol", PURCHASE, "--role", "Buyer", "--goal", "x",
                          "--embedded", "--provider", "openai", "--model", "m",
                          "--base-url", url, key=None)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(f"strabo agent: --base-url {url!r} ")
    assert says in result.stderr
    assert result.stderr.count("\n") == 1  # one line
    assert "SyncServer at" not in result.stdout  # nothing was started
