"""The AP2 mandates extension on the merchant's side (ap2-mandates.md).

A merchant made with ``create_app(ap2=...)`` advertises
``dev.ucp.shopping.ap2_mandate`` and its public key in ``signing_keys``. The
extension is *negotiated* for a request when the platform's profile (its
UCP-Agent ``profile``) declares the capability too; then, and only then:

* every checkout answered with success carries ``ap2.merchant_authorization``, the
  merchant's signature over the body as sent (after any translation to
  2026-04-08, so the platform can check what it got): :meth:`Ap2.wrap`;
* a complete must present ``ap2.checkout_mandate``, verified before payment
  (:meth:`Ap2.verifier`): signed by the platform (a key of its profile's
  ``signing_keys``, or one configured here), not expired, for this merchant
  (``aud``), disclosing a checkout this merchant signed whose id, currency,
  amount and items are the session's now. Each failure is a business error
  with the spec's code (``mandate_required``, ``agent_missing_key``,
  ``mandate_invalid_signature``, ``mandate_expired``,
  ``mandate_scope_mismatch``, ``merchant_authorization_invalid``); the
  session stays open, so the platform may present a good mandate.

Without it negotiated nothing changes: ``ap2`` in a complete is accepted and
ignored, as the reference merchant does (and the conformance suite's
``ap2_test.py`` expects, its agent profile declaring no AP2).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from strabo.ucpwire import ap2 as jose

from ._errors import UcpError
from ._intake import agent_parameters
from ._webhooks import AgentProfiles
from .wire import Checkout, dump

Endpoint = Callable[[Request], Awaitable[Response]]

# Status of each refusal: the request lacks what it must carry (400), or what it
# carries cannot be trusted (403). A 2026-04-08 answer turns both into a
# business error (HTTP 200, ``messages``), as for any other refusal.
_STATUS = {"mandate_required": 400, "mandate_scope_mismatch": 400, "mandate_expired": 400}

__all__ = ["Ap2", "Ap2Settings"]


@dataclass(frozen=True)
class Ap2Settings:
    """How the merchant takes part in AP2.

    ``key`` signs its ``merchant_authorization`` (a fresh P-256 key when None),
    published under ``kid``. ``platform_keys`` are public JWKs (with ``kid``)
    trusted to sign mandates besides those a platform's profile lists: for a
    platform known by configuration. ``leeway`` is the clock skew allowed on a
    mandate's ``exp``, in seconds."""

    key: jose.PrivateKey | None = None
    kid: str = "merchant-ap2"
    platform_keys: tuple[Mapping[str, Any], ...] = ()
    leeway: int = 30


@dataclass
class _Verifier:
    """The mandate checks of one complete request, keys already gathered."""

    settings: Ap2Settings
    key: jose.PrivateKey
    platform_keys: dict[str, Any]
    audience: str

    def __call__(self, ap2: Any, current: Checkout) -> None:
        mandate = ap2.get("checkout_mandate") if isinstance(ap2, dict) else None
        if mandate is None:
            raise _refuse("mandate_required",
                          "AP2 was negotiated: a complete must carry ap2.checkout_mandate")
        try:
            verified = jose.read_mandate(mandate, self._platform_key,
                                         leeway=self.settings.leeway)
            if str(verified.claims.get("aud", "")).rstrip("/") != self.audience:
                raise jose.Ap2Error("mandate_scope_mismatch",
                                    f"the mandate is for {verified.claims.get('aud')!r}, "
                                    f"not this merchant ({self.audience})")
            jose.verify_checkout(verified.checkout, self._own_key)
        except jose.Ap2Error as exc:
            if exc.code == "merchant_authorization_missing":
                # The embedded checkout is not one we signed: its authorization is bad.
                raise _refuse("merchant_authorization_invalid", exc.message) from None
            raise _refuse(exc.code, exc.message) from None
        differences = jose.terms(verified.checkout).differences(jose.terms(dump(current)))
        if differences:
            raise _refuse("mandate_scope_mismatch",
                          "the mandate is for another checkout: " + "; ".join(differences))

    def _platform_key(self, kid: str) -> jose.PublicKey | None:
        return _usable(self.platform_keys.get(kid))

    def _own_key(self, kid: str) -> jose.PublicKey | None:
        return self.key.public_key() if kid == self.settings.kid else None


def _usable(jwk: Any) -> jose.PublicKey | None:
    try:
        return jose.key_from_jwk(jwk) if jwk is not None else None
    except ValueError:
        return None


def _refuse(code: str, message: str) -> UcpError:
    return UcpError(_STATUS.get(code, 403), code, message)


class Ap2:
    """The extension for one merchant: its key, its profile entries, the
    negotiation per request, the signing of answers and the mandate checks."""

    def __init__(self, settings: Ap2Settings, profiles: AgentProfiles) -> None:
        self.settings = settings
        self.key = settings.key if settings.key is not None else jose.generate_key()
        self.profiles = profiles
        self._configured = {k["kid"]: dict(k) for k in settings.platform_keys
                            if isinstance(k.get("kid"), str)}

    def public_jwk(self) -> dict[str, Any]:
        """The merchant's key as its profile's ``signing_keys`` lists it."""
        return jose.public_jwk(self.key, self.settings.kid)

    async def _platform(self, request: Request) -> Any:
        """The platform's profile if it declares AP2 (negotiated), else None."""
        params = agent_parameters(request.headers.get("ucp-agent", ""))
        profile = await self.profiles.profile(params.get("profile"))
        return profile if jose.advertised(profile) is not None else None

    async def verifier(self, request: Request, *, audience: str
                       ) -> Callable[[Any, Checkout], None] | None:
        """The check a complete must pass, ``check(ap2, session)``, raising
        :class:`UcpError`; None when AP2 is not negotiated for ``request``."""
        profile = await self._platform(request)
        if profile is None:
            return None
        keys = {**self._configured, **jose.signing_keys(profile)}
        return _Verifier(self.settings, self.key, keys, audience.rstrip("/"))

    def wrap(self, endpoint: Endpoint) -> Endpoint:
        """``endpoint`` with ``ap2.merchant_authorization`` in each checkout it
        answers with success (200, 201 on create), when AP2 is negotiated for
        the request."""

        async def signed(request: Request) -> Response:
            response = await endpoint(request)
            status = response.status_code
            if status not in (200, 201) or await self._platform(request) is None:
                return response
            try:
                body = json.loads(bytes(response.body))
            except ValueError:
                return response
            if not _is_checkout(body):
                return response
            body["ap2"] = {"merchant_authorization":
                           jose.sign_checkout(body, self.key, self.settings.kid)}
            headers = {k: v for k, v in response.headers.items()
                       if k.lower() not in ("content-length", "content-type")}
            return JSONResponse(body, status_code=status, headers=headers)

        return signed


def _is_checkout(body: Any) -> bool:
    """A checkout session, not a 2026-04-08 error envelope (also HTTP 200)."""
    if not isinstance(body, dict) or not isinstance(body.get("id"), str):
        return False
    ucp = body.get("ucp")
    return not (isinstance(ucp, dict) and ucp.get("status") == "error")
