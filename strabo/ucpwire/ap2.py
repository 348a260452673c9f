"""UCP's AP2 mandates extension: the signatures both sides of the wire make and check.

The merchant (``strabo.merchant._ap2``) signs every checkout it answers and
verifies the mandate a Platform presents on complete; the Business proxies
(``strabo.ucp.ap2``) verify the merchant's signature and sign the mandate for
their principal. Both need the same bytes, so the primitives sit here, below
both (the merchant may import nothing of the agents).

What the spec fixes (ap2-mandates.md, the same in 2026-01-11 and 2026-04-08):

* ``ap2.merchant_authorization``: a JWS with detached content (RFC 7515
  appendix F), ``<header>..<signature>``, over the JCS (RFC 8785) bytes of the
  checkout without its ``ap2`` field; header ``alg`` (ES256, ES384, ES512) and
  ``kid`` (a key of the business's profile ``signing_keys``).
* ``ap2.checkout_mandate``: an SD-JWT the Platform signs (the *platform
  provider* flow: its key is in its profile's ``signing_keys``), holding the
  full checkout as answered, ``ap2.merchant_authorization`` included.

What the spec leaves to AP2, and how this module fills it in: the mandate's
issuer-signed JWT (header ``alg``, ``kid``, ``typ: dc+sd-jwt``) carries AP2's
closed checkout mandate claims (``vct: mandate.checkout.1``, ``checkout_hash``,
``iat``, ``exp``) plus ``aud``, the merchant it is for; the checkout itself is
one selectively disclosed claim, ``checkout``, whose digest is in ``_sd``. It
is serialized ``<jwt>~<disclosure>``, without the trailing ``~`` of RFC 9901,
because the UCP schema's pattern for ``checkout_mandate`` does not allow one
(a trailing ``~`` is accepted when reading). Key binding (the user credential
flow, a KB-JWT) is not supported: a mandate carrying one is refused.

Cryptography is the ``cryptography`` package's ECDSA; canonical JSON is
``rfc8785``. The JWS compact form around them is a few lines, kept here so
that both the attached (mandate) and detached (authorization) forms share one
signing input.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

CAPABILITY = "dev.ucp.shopping.ap2_mandate"
"""The extension's name in profiles."""
MANDATE_VCT = "mandate.checkout.1"
"""AP2's type of a closed checkout mandate."""
MANDATE_TYP = "dc+sd-jwt"
"""The mandate JWT's ``typ``; ``vc+sd-jwt`` (the older name) is read too."""
VP_FORMATS: dict[str, Any] = {"dc+sd-jwt": {}}
"""The merchant capability's ``config.vp_formats_supported``."""
ERROR_CODES = frozenset({
    "mandate_required", "agent_missing_key", "mandate_invalid_signature", "mandate_expired",
    "mandate_scope_mismatch", "merchant_authorization_invalid",
    "merchant_authorization_missing"})
"""ap2_mandate.json#/$defs/error_code."""

# JWS alg -> (curve, hash, bytes per signature half).
_ALGORITHMS: dict[str, tuple[type[ec.EllipticCurve], type[hashes.HashAlgorithm], int]] = {
    "ES256": (ec.SECP256R1, hashes.SHA256, 32),
    "ES384": (ec.SECP384R1, hashes.SHA384, 48),
    "ES512": (ec.SECP521R1, hashes.SHA512, 66),
}
_CURVES = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}

PublicKey = ec.EllipticCurvePublicKey
PrivateKey = ec.EllipticCurvePrivateKey

__all__ = [
    "CAPABILITY", "ERROR_CODES", "MANDATE_TYP", "MANDATE_VCT", "VP_FORMATS",
    "Ap2Error", "Mandate", "Terms", "advertised", "canonical", "create_mandate",
    "generate_key", "key_from_jwk", "public_jwk", "read_mandate", "sign_checkout",
    "signing_keys", "terms", "verify_checkout",
]


class Ap2Error(Exception):
    """A mandate or authorization that does not hold: ``code`` is the spec's
    error code (:data:`ERROR_CODES`), ``message`` says what failed."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


# ----------------------------------------------------------------- encodings


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Strict base64url without padding; ValueError for anything else."""
    if not isinstance(text, str) or not text.isascii() or "=" in text:
        raise ValueError("not base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("not base64url") from None


def canonical(value: Any) -> bytes:
    """The JCS (RFC 8785) bytes of a JSON value."""
    return rfc8785.dumps(value)


def _hash(data: bytes) -> str:
    return b64url(hashlib.sha256(data).digest())


# ---------------------------------------------------------------------- keys


def generate_key(algorithm: str = "ES256") -> PrivateKey:
    """A fresh EC private key for ``algorithm`` (ES256 unless told)."""
    curve, _, _ = _ALGORITHMS[algorithm]
    return ec.generate_private_key(curve())


def algorithm_of(key: PrivateKey | PublicKey) -> str:
    """The JWS ``alg`` of an EC key, from its curve."""
    for alg, (curve, _, _) in _ALGORITHMS.items():
        if isinstance(key.curve, curve):
            return alg
    raise ValueError(f"unsupported curve {key.curve.name}: use P-256, P-384 or P-521")


def public_jwk(key: PrivateKey | PublicKey, kid: str) -> dict[str, Any]:
    """The public JWK of ``key`` as a profile's ``signing_keys`` lists it."""
    public = key.public_key() if isinstance(key, ec.EllipticCurvePrivateKey) else key
    alg = algorithm_of(public)
    size = _ALGORITHMS[alg][2]
    numbers = public.public_numbers()
    crv = next(c for c, a in _CURVES.items() if a == alg)
    return {"kid": kid, "kty": "EC", "crv": crv,
            "x": b64url(numbers.x.to_bytes(size, "big")),
            "y": b64url(numbers.y.to_bytes(size, "big")), "use": "sig", "alg": alg}


def key_from_jwk(jwk: Any) -> PublicKey:
    """The EC public key of a JWK; ValueError if it is not one we can use."""
    if not isinstance(jwk, Mapping) or jwk.get("kty") != "EC":
        raise ValueError("not an EC JWK")
    alg = _CURVES.get(str(jwk.get("crv")))
    if alg is None:
        raise ValueError(f"unsupported curve {jwk.get('crv')!r}")
    curve, _, size = _ALGORITHMS[alg]
    try:
        x, y = (b64url_decode(str(jwk.get(c))) for c in ("x", "y"))
    except ValueError:
        raise ValueError("malformed coordinates") from None
    if len(x) != size or len(y) != size:
        raise ValueError("coordinates of the wrong length")
    numbers = ec.EllipticCurvePublicNumbers(
        int.from_bytes(x, "big"), int.from_bytes(y, "big"), curve())
    return numbers.public_key()  # ValueError for a point off the curve


def signing_keys(profile: Any) -> dict[str, dict[str, Any]]:
    """A profile's ``signing_keys`` by ``kid`` (entries without one are skipped)."""
    keys = profile.get("signing_keys") if isinstance(profile, Mapping) else None
    return {k["kid"]: dict(k) for k in keys if isinstance(k, Mapping)
            and isinstance(k.get("kid"), str)} if isinstance(keys, list) else {}


def advertised(profile: Any) -> dict[str, Any] | None:
    """The AP2 capability a profile declares, in either version's shape (a
    2026-01-11 list of capabilities with ``name``, a 2026-04-08 registry of
    lists by name); None when it declares none."""
    ucp = profile.get("ucp") if isinstance(profile, Mapping) else None
    capabilities = ucp.get("capabilities") if isinstance(ucp, Mapping) else None
    if isinstance(capabilities, Mapping):
        entries = capabilities.get(CAPABILITY)
        first = entries[0] if isinstance(entries, list) and entries else None
        return dict(first) if isinstance(first, Mapping) else None
    for capability in capabilities if isinstance(capabilities, list) else []:
        if isinstance(capability, Mapping) and capability.get("name") == CAPABILITY:
            return dict(capability)
    return None


# ----------------------------------------------------------------------- JWS


def _sign(signing_input: bytes, key: PrivateKey) -> tuple[str, str]:
    alg = algorithm_of(key)
    _, digest, size = _ALGORITHMS[alg]
    r, s = decode_dss_signature(key.sign(signing_input, ec.ECDSA(digest())))
    return alg, b64url(r.to_bytes(size, "big") + s.to_bytes(size, "big"))


def _header(alg: str, kid: str, typ: str | None = None) -> str:
    header = {"alg": alg, "kid": kid, **({"typ": typ} if typ else {})}
    return b64url(json.dumps(header, separators=(",", ":")).encode())


def _verify(signing_input: bytes, signature: str, key: PublicKey, alg: str) -> bool:
    if alg not in _ALGORITHMS or algorithm_of(key) != alg:
        return False
    _, digest, size = _ALGORITHMS[alg]
    try:
        raw = b64url_decode(signature)
    except ValueError:
        return False
    if len(raw) != 2 * size:
        return False
    der = encode_dss_signature(int.from_bytes(raw[:size], "big"), int.from_bytes(raw[size:], "big"))
    try:
        key.verify(der, signing_input, ec.ECDSA(digest()))
    except InvalidSignature:
        return False
    return True


def _read_header(encoded: str) -> dict[str, Any]:
    try:
        header = json.loads(b64url_decode(encoded))
    except ValueError:
        raise ValueError("the header is not base64url JSON") from None
    if not isinstance(header, dict):
        raise ValueError("the header is not a JSON object")
    return header


# ------------------------------------------------------ merchant authorization


def _unsigned(checkout: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in checkout.items() if k != "ap2"}


def sign_checkout(checkout: Mapping[str, Any], key: PrivateKey, kid: str) -> str:
    """``ap2.merchant_authorization`` for ``checkout``: a detached JWS over the
    JCS bytes of the checkout without ``ap2``."""
    header = _header(algorithm_of(key), kid)
    payload = b64url(canonical(_unsigned(checkout)))
    _, signature = _sign(f"{header}.{payload}".encode("ascii"), key)
    return f"{header}..{signature}"


def verify_checkout(checkout: Any, key_for: Callable[[str], PublicKey | None]) -> str:
    """Check ``checkout``'s ``ap2.merchant_authorization`` with the key
    ``key_for(kid)`` gives; its ``kid``. Raises :class:`Ap2Error`
    ``merchant_authorization_missing`` or ``merchant_authorization_invalid``."""
    ap2 = checkout.get("ap2") if isinstance(checkout, Mapping) else None
    jws = ap2.get("merchant_authorization") if isinstance(ap2, Mapping) else None
    if not isinstance(jws, str):
        raise Ap2Error("merchant_authorization_missing",
                       "the checkout has no ap2.merchant_authorization")
    invalid = "merchant_authorization_invalid"
    parts = jws.split(".")
    if len(parts) != 3 or parts[1] != "":
        raise Ap2Error(invalid, "not a detached JWS (<header>..<signature>)")
    try:
        header = _read_header(parts[0])
    except ValueError as exc:
        raise Ap2Error(invalid, str(exc)) from None
    kid, alg = header.get("kid"), header.get("alg")
    key = key_for(kid) if isinstance(kid, str) else None
    if key is None or not isinstance(kid, str):
        raise Ap2Error(invalid, f"no signing key {kid!r} for the business")
    try:  # NaN, or an integer past 2**53, has no canonical form: no signature holds
        payload = b64url(canonical(_unsigned(checkout)))
    except ValueError as exc:
        raise Ap2Error(invalid, f"the checkout has no canonical JSON: {exc}") from None
    if not _verify(f"{parts[0]}.{payload}".encode("ascii"), parts[2], key, str(alg)):
        raise Ap2Error(invalid, "the signature does not verify")
    return kid


# ------------------------------------------------------------------ mandates


@dataclass(frozen=True)
class Mandate:
    """A verified checkout mandate: who signed it (``kid``), its claims, and
    the checkout it discloses."""

    kid: str
    claims: dict[str, Any]
    checkout: dict[str, Any]


def create_mandate(checkout: Mapping[str, Any], key: PrivateKey, kid: str, *,
                   audience: str, lifetime: int = 300, now: float | None = None) -> str:
    """The ``ap2.checkout_mandate`` for ``checkout`` (as the merchant answered
    it, ``ap2.merchant_authorization`` included), for the merchant ``audience``,
    valid ``lifetime`` seconds."""
    issued = int(time.time() if now is None else now)
    disclosure = b64url(json.dumps([b64url(secrets.token_bytes(16)), "checkout", checkout],
                                   separators=(",", ":"), ensure_ascii=False).encode())
    claims = {"vct": MANDATE_VCT, "aud": audience, "iat": issued, "exp": issued + lifetime,
              "checkout_hash": _hash(canonical(dict(checkout))), "_sd_alg": "sha-256",
              "_sd": [_hash(disclosure.encode("ascii"))]}
    header = _header(algorithm_of(key), kid, MANDATE_TYP)
    payload = b64url(canonical(claims))
    _, signature = _sign(f"{header}.{payload}".encode("ascii"), key)
    return f"{header}.{payload}.{signature}~{disclosure}"


def read_mandate(mandate: Any, key_for: Callable[[str], PublicKey | None], *,
                 now: float | None = None, leeway: int = 30) -> Mandate:
    """Verify ``mandate`` with the Platform key ``key_for(kid)`` gives and
    return it. Raises :class:`Ap2Error`: ``agent_missing_key`` (no key for its
    ``kid``), ``mandate_invalid_signature`` (malformed, or the signature or a
    disclosure does not verify), ``mandate_expired`` (``exp`` passed, give or
    take ``leeway`` seconds), ``mandate_scope_mismatch`` (no checkout in it)."""
    bad = "mandate_invalid_signature"
    if not isinstance(mandate, str) or not mandate:
        raise Ap2Error(bad, "the mandate is not a string")
    jwt, *disclosures = mandate.split("~")
    if disclosures and disclosures[-1] == "":
        disclosures.pop()  # RFC 9901's trailing "~"
    if any("." in d for d in disclosures):
        raise Ap2Error(bad, "key binding (a KB-JWT) is not supported: sign as the platform")
    parts = jwt.split(".")
    if len(parts) != 3 or not all(parts) or not all(disclosures):
        raise Ap2Error(bad, "not an SD-JWT (<jwt>~<disclosure>...)")
    try:
        header = _read_header(parts[0])
        claims = json.loads(b64url_decode(parts[1]))
    except ValueError as exc:
        raise Ap2Error(bad, f"malformed: {exc}") from None
    if not isinstance(claims, dict):
        raise Ap2Error(bad, "the payload is not a JSON object")
    if header.get("typ") not in (MANDATE_TYP, "vc+sd-jwt"):
        raise Ap2Error(bad, f"typ {header.get('typ')!r} is not {MANDATE_TYP}")
    kid = header.get("kid")
    key = key_for(kid) if isinstance(kid, str) else None
    if key is None:
        raise Ap2Error("agent_missing_key", f"no signing key {kid!r} for the platform")
    assert isinstance(kid, str)
    if not _verify(f"{parts[0]}.{parts[1]}".encode("ascii"), parts[2], key,
                   str(header.get("alg"))):
        raise Ap2Error(bad, "the signature does not verify")
    if claims.get("vct") != MANDATE_VCT:
        raise Ap2Error(bad, f"vct {claims.get('vct')!r} is not {MANDATE_VCT}")
    expires = claims.get("exp")
    if not isinstance(expires, int) or isinstance(expires, bool):
        raise Ap2Error(bad, "no exp")
    if (time.time() if now is None else now) > expires + leeway:
        raise Ap2Error("mandate_expired", f"the mandate expired at {expires}")
    try:  # a non-ASCII disclosure, a checkout with no canonical JSON (NaN, 2**60)
        disclosed = _disclosed(claims, disclosures)
        checkout = disclosed.get("checkout")
        if not isinstance(checkout, dict):
            raise Ap2Error("mandate_scope_mismatch", "the mandate discloses no checkout")
        if claims.get("checkout_hash") != _hash(canonical(checkout)):
            raise Ap2Error(bad, "checkout_hash does not match the disclosed checkout")
    except Ap2Error:
        raise
    except ValueError as exc:
        raise Ap2Error(bad, f"malformed: {exc}") from None
    return Mandate(kid, claims, checkout)


def _disclosed(claims: Mapping[str, Any], disclosures: list[str]) -> dict[str, Any]:
    """The claims the disclosures reveal, each checked against ``_sd``."""
    if disclosures and claims.get("_sd_alg", "sha-256") != "sha-256":
        raise Ap2Error("mandate_invalid_signature", "only _sd_alg sha-256 is supported")
    digests = claims.get("_sd")
    digests = set(digests) if isinstance(digests, list) else set()
    out: dict[str, Any] = {}
    for disclosure in disclosures:
        if _hash(disclosure.encode("ascii")) not in digests:
            raise Ap2Error("mandate_invalid_signature", "a disclosure is not in _sd")
        try:
            decoded = json.loads(b64url_decode(disclosure))
        except ValueError:
            raise Ap2Error("mandate_invalid_signature", "a malformed disclosure") from None
        if not (isinstance(decoded, list) and len(decoded) == 3
                and isinstance(decoded[1], str)):
            raise Ap2Error("mandate_invalid_signature", "a disclosure is not [salt, name, value]")
        out[decoded[1]] = decoded[2]
    return out


# --------------------------------------------------------------------- terms


@dataclass(frozen=True)
class Terms:
    """What a mandate binds in a checkout: the session, its currency, its
    grand total (minor units) and its items with their quantities. The same in
    2026-01-11 and 2026-04-08 checkouts, so either shape compares with the other."""

    id: Any
    currency: Any
    total: Any
    items: tuple[tuple[str, int], ...]

    def differences(self, other: Terms) -> list[str]:
        """What differs from ``other``, in words (empty when nothing does)."""
        said = {"id": "checkout id", "currency": "currency", "total": "amount",
                "items": "items"}
        return [f"{said[name]} {getattr(self, name)!r} is not {getattr(other, name)!r}"
                for name in ("id", "currency", "total", "items")
                if getattr(self, name) != getattr(other, name)]


def terms(checkout: Mapping[str, Any]) -> Terms:
    """The :class:`Terms` of a checkout as the wire has it."""
    totals = checkout.get("totals")
    total = next((t.get("amount") for t in totals if isinstance(t, Mapping)
                  and t.get("type") == "total"), None) if isinstance(totals, list) else None
    counted: dict[str, int] = {}
    lines = checkout.get("line_items")
    for line in lines if isinstance(lines, list) else []:
        item = line.get("item") if isinstance(line, Mapping) else None
        item_id = item.get("id") if isinstance(item, Mapping) else None
        quantity = line.get("quantity") if isinstance(line, Mapping) else None
        if isinstance(item_id, str) and isinstance(quantity, int):
            counted[item_id] = counted.get(item_id, 0) + quantity
    return Terms(checkout.get("id"), checkout.get("currency"), total,
                 tuple(sorted(counted.items())))
