"""What a review of this round's changes found: untrusted input that gave a
traceback or a 500, or slipped past a check. Each test failed before its fix."""

from __future__ import annotations

import base64
import hashlib
import json
import math
from typing import Any

import pytest

from langshaw import ActionInstance, SocialState
from strabo.merchant._negotiation import negotiated
from strabo.ucp.shipping import price
from strabo.ucpwire import ap2 as jose
from syncserver.config import ConfigError, build_config
from syncserver.mandate import Mandate
from tests.conftest import PAYMENT_DATA, SIMPLE_CREATE, load

SIMPLE = load("atomic-ucp.lsh")


def test_an_integer_too_large_for_a_float_in_a_mandate_is_a_located_error() -> None:
    data = {"mas": {"default": {"protocols": ["atomic-ucp.lsh"], "agents": {"p": {
        "roles": ["Platform"], "token": "t",
        "mandate": {"ceiling": {"attribute": "totals", "max": 10**400, "on": ["Complete"]}},
    }}}}}
    with pytest.raises(ConfigError) as error:
        build_config(data, source="mas.toml")
    assert "mas.default.agents.p.mandate.ceiling.max: must be a number" in str(error.value)


def test_a_ceiling_is_not_hidden_by_a_part_that_is_no_number() -> None:
    """The counterpart binds totals: a readable small total beside an unreadable
    real one must not pass."""
    problems: list[str] = []
    mandate = Mandate.parse(
        {"ceiling": {"attribute": "totals", "path": "$[*].amount", "max": 5000,
                     "on": ["Complete"]}},
        [SIMPLE], "m", lambda where, message: problems.append(message),
    )
    assert not problems
    state = SocialState(SIMPLE)
    create = ActionInstance(SIMPLE.action("Create"), {**SIMPLE_CREATE, "cid": "c1"})
    totals = [{"type": "subtotal", "amount": 100}, {"type": "total", "amount": "9,000.00"}]
    created = ActionInstance(SIMPLE.action("Created"), {
        "cid": "c1", "Create": True, "id": "k", "totals": totals, "payment": {}})
    assert state.attempt([create], {"Platform"}) is None
    state.apply([created])
    complete = ActionInstance(SIMPLE.action("Complete"), {
        "cid": "c1", "Created": True, "id": "k", "payment_data": PAYMENT_DATA,
        "risk_signals": {}})
    refused = mandate.check_ceiling([complete], state)
    assert refused is not None and "a part that is no number" in refused.message


def test_a_shipping_price_too_large_for_a_float_is_never_the_cheapest() -> None:
    assert price({"totals": [{"type": "total", "amount": 10**400}]}) == math.inf


def test_a_capability_version_that_is_no_string_names_nothing() -> None:
    business = {"dev.ucp.shopping.checkout": [{"version": "2026-04-08"}]}
    platform = {"dev.ucp.shopping.checkout": [{"version": []}, {"version": {"a": 1}}]}
    assert negotiated(business, platform) == {}


def _mandate_with(disclosure: str, key: Any) -> str:
    """A mandate whose one disclosure is ``disclosure``, signed by ``key``."""
    digest = base64.urlsafe_b64encode(
        hashlib.sha256(disclosure.encode()).digest()).rstrip(b"=").decode()
    header = {"alg": "ES256", "typ": jose.MANDATE_TYP, "kid": "k1"}
    claims = {"vct": jose.MANDATE_VCT, "exp": 2**31, "_sd": [digest], "_sd_alg": "sha-256"}
    signing = (
        f"{jose.b64url(json.dumps(header).encode())}."
        f"{jose.b64url(json.dumps(claims).encode())}"
    )
    _, signature = jose._sign(signing.encode("ascii"), key)
    return f"{signing}.{signature}~{disclosure}"


def test_a_mandate_with_a_disclosure_that_is_not_ascii_is_refused_not_a_crash() -> None:
    key = jose.generate_key()
    mandate = _mandate_with("é", key)
    with pytest.raises(jose.Ap2Error) as refused:
        jose.read_mandate(mandate, lambda kid: key.public_key(), now=0)
    assert refused.value.code == "mandate_invalid_signature"
