"""UCP message signatures on a request: what a webhook's sender signs and its receiver checks.

UCP signs the order webhooks a business POSTs to a platform (order.md "Webhook
Signature Verification"), and each version says how differently:

* 2026-04-08 (signatures.md, "REST Request Signing"): RFC 9421 HTTP Message
  Signatures. ``Content-Digest`` (RFC 9530, ``sha-256``) hashes the raw body;
  ``Signature-Input`` names the signed components and the ``keyid``;
  ``Signature`` holds the ECDSA signature in raw ``r||s`` form (not DER). The
  key is the JWK with that ``kid`` in the signer's profile ``signing_keys``.
* 2026-01-11: a detached JWS (RFC 7797, the payload unencoded) over the body,
  in ``Request-Signature``, its header naming the ``kid``.

The merchant signs with both (``strabo.merchant._webhooks``) so that a platform
of either version can check; the order proxy (``strabo.ucp.order_proxy``)
verifies. Both need the same bytes, so the primitives sit here, below both.
Only what webhooks use is supported: one signature per message (the first
label of ``Signature-Input``), components ``@method``, ``@authority``,
``@path``, ``@query`` and header fields, parameters ``created``, ``expires``
and ``keyid``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

from strabo.ucpwire import ap2 as jose

__all__ = [
    "SignatureError", "Signed", "content_digest", "profile_url", "sign_request",
    "verify_detached", "verify_request",
]

LABEL = "sig1"
SKEW = 300
"""Seconds a signer's clock may run ahead of the verifier's (``created``), or
behind it (``expires``)."""
_ALGORITHMS = {"ES256": 32, "ES384": 48}  # bytes per signature half
_HASHES: dict[str, type[hashes.HashAlgorithm]] = {"ES256": hashes.SHA256,
                                                  "ES384": hashes.SHA384}
_INPUT = re.compile(r'^\s*([a-z*][a-z0-9_.*-]*)=\(([^)]*)\)((?:;[a-z][a-z0-9_.*-]*=[^;,]*)*)'
                    r'\s*(?:,.*)?$')
_SIGNATURE = re.compile(r'^\s*([a-z*][a-z0-9_.*-]*)=:([A-Za-z0-9+/=]*):\s*(?:,.*)?$')


class SignatureError(Exception):
    """A message whose signature does not hold. ``code`` is the spec's error code
    (signatures.md "Error Handling": ``signature_missing``, ``signature_invalid``,
    ``key_not_found``, ``digest_mismatch``, ``algorithm_unsupported``,
    ``invalid_profile_url``), ``status`` its HTTP status."""

    STATUS = {"digest_mismatch": 400, "algorithm_unsupported": 400, "invalid_profile_url": 400,
              "invalid_body": 400, "profile_not_trusted": 403, "body_too_large": 413,
              "body_timeout": 408}

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = self.STATUS.get(code, 401)


@dataclass(frozen=True)
class Signed:
    """What verification established: the key that signed and what it covered."""

    kid: str
    components: tuple[str, ...]


def content_digest(body: bytes) -> str:
    """RFC 9530 ``Content-Digest`` of the raw body, ``sha-256=:<base64>:``."""
    return "sha-256=:" + base64.b64encode(hashlib.sha256(body).digest()).decode() + ":"


def profile_url(ucp_agent: str) -> str | None:
    """The ``profile`` of a ``UCP-Agent`` header (an RFC 8941 dictionary), or None."""
    match = re.search(r'(?:^|[;,]\s*)profile="([^"\\]*)"', ucp_agent or "")
    return match.group(1) if match else None


def _component(name: str, method: str, url: str, headers: Mapping[str, str]) -> str:
    parts = urlsplit(url)
    if name == "@method":
        return method.upper()
    if name == "@authority":
        return parts.netloc.lower()
    if name == "@path":
        return parts.path or "/"
    if name == "@query":
        return "?" + parts.query
    if name.startswith("@"):
        raise SignatureError("signature_invalid", f"component {name} is not supported")
    value = headers.get(name)
    if value is None:
        raise SignatureError("signature_invalid", f"the signed header {name} is missing")
    return value.strip()


def _base(components: list[str], params: str, method: str, url: str,
          headers: Mapping[str, str]) -> bytes:
    lines = [f'"{name}": {_component(name, method, url, headers)}' for name in components]
    listed = " ".join(f'"{name}"' for name in components)
    lines.append(f'"@signature-params": ({listed}){params}')
    return "\n".join(lines).encode()


def sign_request(method: str, url: str, headers: Mapping[str, str], body: bytes,
                 key: jose.PrivateKey, kid: str, *, created: int) -> dict[str, str]:
    """The headers that sign a request: ``Content-Digest``, ``Signature-Input``,
    ``Signature`` (RFC 9421) and ``Request-Signature`` (2026-01-11's detached JWS).

    ``headers`` are the request's other headers (lower-case names); every one of
    them is signed, after ``@method``, ``@authority`` and ``@path``, with the body's
    digest and type."""
    lowered = {k.lower(): v for k, v in headers.items()}
    lowered["content-digest"] = content_digest(body)
    components = ["@method", "@authority", "@path",
                  *(["@query"] if urlsplit(url).query else []), *sorted(lowered)]
    params = f';created={created};keyid="{kid}"'
    alg, raw = _sign(_base(components, params, method, url, lowered), key)
    listed = " ".join(f'"{name}"' for name in components)
    header = jose.b64url(json.dumps({"alg": alg, "kid": kid, "b64": False, "crit": ["b64"]},
                                    separators=(",", ":")).encode())
    _, detached = _sign(header.encode() + b"." + body, key)
    return {
        "Content-Digest": lowered["content-digest"],
        "Signature-Input": f"{LABEL}=({listed}){params}",
        "Signature": f"{LABEL}=:{base64.b64encode(raw).decode()}:",
        "Request-Signature": f"{header}..{jose.b64url(detached)}",
    }


def verify_request(method: str, url: str, headers: Mapping[str, str], body: bytes,
                   key_for: Callable[[str], jose.PublicKey | None],
                   *, required: tuple[str, ...] = ("@method", "@authority", "@path",
                                                   "content-digest", "content-type"),
                   now: float | None = None) -> Signed:
    """Check a request's RFC 9421 signature (signatures.md "REST Request
    Verification"); ``key_for(kid)`` is the signer's public key, or None.

    ``headers`` has lower-case names; ``url`` is the request's URL as the receiver
    sees it. The signature must cover ``required`` and the ``UCP-Agent`` header
    when there is one, so that no unsigned part can be changed. A signature
    ``created`` later than ``now`` (the verifier's clock) plus :data:`SKEW`, or
    whose ``expires`` has passed by more than that, is refused: a signature
    from the future or one its signer said to drop is no evidence (replays
    within its life are the idempotency key's business, signatures.md). Raises
    :class:`SignatureError`; returns what was verified."""
    given_input, given = headers.get("signature-input"), headers.get("signature")
    if not given_input or not given:
        raise SignatureError("signature_missing",
                             "the request has no Signature-Input and Signature headers")
    parsed = _INPUT.match(given_input)
    signature = _SIGNATURE.match(given)
    if parsed is None or signature is None or parsed.group(1) != signature.group(1):
        raise SignatureError("signature_invalid", "Signature-Input or Signature is malformed")
    components = re.findall(r'"([^"]+)"', parsed.group(2))
    params = dict(re.findall(r';([a-z][a-z0-9_.*-]*)=("[^"]*"|[^;]*)', parsed.group(3)))
    kid = params.get("keyid", "").strip('"')
    if not kid:
        raise SignatureError("signature_invalid", "Signature-Input names no keyid")
    _check_times(params, time.time() if now is None else now)
    wanted = set(required) | ({"ucp-agent"} if "ucp-agent" in headers else set())
    missing = sorted(wanted - set(components))
    if missing:
        raise SignatureError("signature_invalid",
                             f"the signature does not cover {', '.join(missing)}")
    expected = content_digest(body)
    if "content-digest" in components and headers.get("content-digest", "").strip() != expected:
        raise SignatureError("digest_mismatch", "Content-Digest is not the body's SHA-256")
    key = key_for(kid)
    if key is None:
        raise SignatureError("key_not_found", f"no signing key kid={kid} for the signer")
    try:
        raw = base64.b64decode(signature.group(2), validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError("signature_invalid", "the signature is not base64") from None
    base = _base(components, parsed.group(3), method, url, headers)
    if not _verify(base, raw, key):
        raise SignatureError("signature_invalid",
                             f"request signature verification failed for key kid={kid}")
    return Signed(kid=kid, components=tuple(components))


def _check_times(params: Mapping[str, str], now: float) -> None:
    times: dict[str, int] = {}
    for name in ("created", "expires"):
        if name in params:
            text = params[name].strip()
            if not (text.isascii() and text.isdigit()) or len(text) > 12:
                raise SignatureError("signature_invalid",
                                     f"Signature-Input's {name} is not a time: {text[:20]!r}")
            times[name] = int(text)
    if "created" in times and times["created"] > now + SKEW:
        raise SignatureError("signature_invalid",
                             f"the signature was created {times['created'] - int(now)} s "
                             "in the future")
    if "expires" in times and times["expires"] < now - SKEW:
        raise SignatureError("signature_invalid",
                             f"the signature expired {int(now) - times['expires']} s ago")


def verify_detached(token: str, body: bytes,
                    key_for: Callable[[str], jose.PublicKey | None]) -> Signed:
    """Check 2026-01-11's ``Request-Signature``: a JWS with detached, unencoded
    content (RFC 7797, ``b64: false``) over the raw body, ``<header>..<signature>``."""
    header_part, _, signature = (token or "").partition("..")
    if not header_part or not signature or "." in signature:
        raise SignatureError("signature_missing" if not token else "signature_invalid",
                             "Request-Signature is not a detached JWS")
    try:
        header = json.loads(jose.b64url_decode(header_part))
        raw = jose.b64url_decode(signature)
    except ValueError:
        raise SignatureError("signature_invalid", "Request-Signature is malformed") from None
    kid = header.get("kid") if isinstance(header, dict) else None
    if not isinstance(kid, str) or not kid:
        raise SignatureError("signature_invalid", "the JWS header names no kid")
    if header.get("alg") not in _ALGORITHMS:
        raise SignatureError("algorithm_unsupported", f"alg {header.get('alg')!r}")
    unencoded = header.get("b64") is False
    payload = body if unencoded else jose.b64url(body).encode()
    key = key_for(kid)
    if key is None:
        raise SignatureError("key_not_found", f"no signing key kid={kid} for the signer")
    if not _verify(header_part.encode() + b"." + payload, raw, key):
        raise SignatureError("signature_invalid",
                             f"request signature verification failed for key kid={kid}")
    return Signed(kid=kid, components=("body",))


def _sign(data: bytes, key: jose.PrivateKey) -> tuple[str, bytes]:
    alg = jose.algorithm_of(key)
    if alg not in _ALGORITHMS:
        raise ValueError(f"UCP signs with ES256 or ES384, not {alg}")
    size = _ALGORITHMS[alg]
    r, s = decode_dss_signature(key.sign(data, ec.ECDSA(_HASHES[alg]())))
    return alg, r.to_bytes(size, "big") + s.to_bytes(size, "big")


def _verify(data: bytes, raw: bytes, key: jose.PublicKey) -> bool:
    try:
        alg = jose.algorithm_of(key)
    except ValueError:
        return False
    if alg not in _ALGORITHMS:
        raise SignatureError("algorithm_unsupported", f"{alg} keys are not supported")
    size = _ALGORITHMS[alg]
    if len(raw) != 2 * size:
        return False
    der = encode_dss_signature(int.from_bytes(raw[:size], "big"),
                               int.from_bytes(raw[size:], "big"))
    try:
        key.verify(der, data, ec.ECDSA(_HASHES[alg]()))
    except InvalidSignature:
        return False
    return True
