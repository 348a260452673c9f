"""AP2 mandates on the Platform's side: the proxy presents what its principal signed.

A principal (the buyer, or the platform provider acting for them) gives the
Business proxy an :class:`Ap2Signer`: its private key, the ``kid`` under which
its public key is published, the URL of the Platform profile that publishes it
(:meth:`Ap2Signer.profile` builds that document), and its limits. With it
(``business_proxy(..., ap2=signer)``, likewise the other proxies), a Complete
to a merchant that advertises ``dev.ucp.shopping.ap2_mandate``:

1. reads the session as the merchant answers it now, and checks the merchant's
   ``ap2.merchant_authorization`` with a key of the merchant's ``signing_keys``
   (the spec's "the platform MUST verify the business's signature");
2. checks the session against the principal's limits: its currency, its total
   at most ``max_amount``, the merchant among ``merchants`` if any are named;
3. signs the checkout mandate over that session (``strabo.ucpwire.ap2``) and
   sends it as ``ap2.checkout_mandate``.

A check that fails sends nothing: the Complete fails with a
:class:`MandateRefused`, a ProxyRequestError, which each proxy answers as it
answers its other failures (ResilientUCP: ``Declined`` with the reason as a UCP
message; IncrementalUCP: ``StatusChange``; SimpleUCP, which has no action for
it: an escalation). A merchant that does not advertise the extension gets the
Complete as before, with no mandate.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from strabo.proxy import ProxyAdapter, ProxyRequest, ProxyRequestError, Route
from strabo.ucp import versions
from strabo.ucp.negotiation import VersionedProxy
from strabo.ucpwire import ap2 as jose

log = logging.getLogger("strabo.ucp")
HeaderHook = Callable[[ProxyRequest], dict[str, str]]

__all__ = ["Ap2Signer", "Limits", "MandateRefused", "PresentsMandates"]


class MandateRefused(ProxyRequestError):
    """A Complete the proxy will not present a mandate for: over the
    principal's limits (``mandate_limit_exceeded``), or a merchant checkout
    whose signature does not hold (the spec's ``merchant_authorization_*``).
    Nothing was sent. ``severity`` is the UCP message severity it becomes."""

    default_code = "mandate_limit_exceeded"
    severity = "requires_buyer_input"


@dataclass(frozen=True)
class Limits:
    """What the principal allows a mandate for: one currency, a total of at
    most ``max_amount`` (minor units, as UCP totals are), and, when
    ``merchants`` is given, only those merchants (their base URLs)."""

    max_amount: int
    currency: str = "USD"
    merchants: frozenset[str] | None = None

    def breaches(self, checkout: Mapping[str, Any], merchant: str) -> list[str]:
        """Why ``checkout`` at ``merchant`` is beyond these limits (empty if it is not)."""
        terms = jose.terms(checkout)
        problems = []
        if self.merchants is not None and merchant.rstrip("/") not in {
                m.rstrip("/") for m in self.merchants}:
            problems.append(f"the merchant {merchant} is not one the principal allows")
        if terms.currency != self.currency:
            problems.append(f"the currency {terms.currency!r} is not {self.currency}")
        if not isinstance(terms.total, int) or isinstance(terms.total, bool):
            problems.append("the checkout has no total")
        elif terms.total > self.max_amount:
            problems.append(f"the total {terms.total} {terms.currency} is over the "
                            f"principal's limit of {self.max_amount} {self.currency}")
        return problems


class Ap2Signer:
    """A principal's signing key and limits, for a Business proxy's ``ap2=``.

    ``key`` is an EC private key (P-256 for ES256, the spec's required
    algorithm; P-384 and P-521 work too), ``kid`` the id its public key has in
    the Platform profile at ``profile_url``, which the proxy names in its
    UCP-Agent header so that the merchant finds the key (publish
    :meth:`profile` there). ``max_amount``, ``currency`` and ``merchants`` are
    the :class:`Limits`; ``lifetime`` is how long a mandate is valid, in seconds.
    """

    def __init__(self, key: ec.EllipticCurvePrivateKey, *, kid: str, profile_url: str,
                 max_amount: int, currency: str = "USD",
                 merchants: Iterable[str] | None = None, lifetime: int = 300) -> None:
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise TypeError("key must be an EC private key (P-256, P-384 or P-521)")
        jose.algorithm_of(key)  # a curve JWS can name, or ValueError now
        if max_amount < 0 or lifetime <= 0:
            raise ValueError("max_amount must be >= 0 and lifetime > 0")
        self._key = key
        self.kid = kid
        self.profile_url = profile_url
        self.limits = Limits(max_amount, currency,
                             frozenset(merchants) if merchants is not None else None)
        self.lifetime = lifetime

    @classmethod
    def from_pem(cls, pem: bytes, *, password: bytes | None = None, **options: Any) -> Ap2Signer:
        """A signer from a PEM private key (PKCS#8 or SEC1); ``options`` as
        for the constructor."""
        key = serialization.load_pem_private_key(pem, password=password)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise TypeError("the PEM key is not an EC private key")
        return cls(key, **options)

    def __repr__(self) -> str:  # never the key
        return (f"Ap2Signer(kid={self.kid!r}, max_amount={self.limits.max_amount}, "
                f"currency={self.limits.currency!r})")

    def public_jwk(self) -> dict[str, Any]:
        """The public key as the profile's ``signing_keys`` lists it."""
        return jose.public_jwk(self._key, self.kid)

    def profile(self, version: str = versions.OLD) -> dict[str, Any]:
        """The Platform profile to publish at ``profile_url``: it declares the
        AP2 extension and the signing key, in ``version``'s shape. Declare the
        version the proxy speaks: a merchant serving 2026-04-08 answers in the
        version the profile names."""
        capability = {"version": version,
                      "spec": "https://ucp.dev/specification/ap2-mandates",
                      "schema": "https://ucp.dev/schemas/shopping/ap2_mandate.json",
                      "extends": "dev.ucp.shopping.checkout"}
        capabilities: Any = (
            [{"name": jose.CAPABILITY, **capability}] if version == versions.OLD
            else {jose.CAPABILITY: [capability]})
        return {"ucp": {"version": version, "capabilities": capabilities},
                "signing_keys": [self.public_jwk()]}

    def header_hook(self, hook: HeaderHook | None) -> HeaderHook:
        """``hook`` with the UCP-Agent header naming :attr:`profile_url`."""
        url = self.profile_url

        def with_profile(request: ProxyRequest) -> dict[str, str]:
            headers = dict(hook(request)) if hook is not None else {}
            agent = next((k for k in headers if k.lower() == "ucp-agent"), "UCP-Agent")
            rest = [p for p in headers.get(agent, "").split(";")
                    if p.strip() and not p.strip().startswith("profile=")]
            headers[agent] = "; ".join([f'profile="{url}"', *(p.strip() for p in rest)])
            return headers

        return with_profile

    def present(self, session: Any, merchant_profile: Any, *, merchant: str) -> str:
        """The checkout mandate for ``session`` (the merchant's answer, as sent)
        at ``merchant`` (its base URL, the mandate's audience). Raises
        :class:`MandateRefused` when the merchant's signature does not hold or
        the session is beyond the limits: then no mandate exists."""
        keys = jose.signing_keys(merchant_profile)

        def merchant_key(kid: str) -> jose.PublicKey | None:
            try:
                return jose.key_from_jwk(keys[kid]) if kid in keys else None
            except ValueError:
                return None

        if not isinstance(session, dict):
            raise MandateRefused("AP2: the merchant's session is not a checkout; "
                                 "no mandate presented", code="merchant_authorization_missing")
        try:
            jose.verify_checkout(session, merchant_key)
        except jose.Ap2Error as exc:
            raise MandateRefused(
                f"AP2: the merchant's checkout {session.get('id')} cannot be trusted "
                f"({exc.message}); no mandate presented", code=exc.code) from None
        problems = self.limits.breaches(session, merchant)
        if problems:
            raise MandateRefused(
                f"AP2: the principal did not allow checkout {session.get('id')}: "
                + "; ".join(problems) + "; no mandate presented, nothing sent")
        return jose.create_mandate(session, self._key, self.kid, audience=merchant.rstrip("/"),
                                   lifetime=self.lifetime)


class PresentsMandates(VersionedProxy):
    """A UCP proxy that, given ``ap2=`` (an :class:`Ap2Signer`), presents its
    principal's checkout mandate on each Complete to a merchant that advertises
    the extension; its UCP-Agent header names the signer's profile."""

    def __init__(self, *args: Any, ap2: Ap2Signer | None = None, **options: Any) -> None:
        if ap2 is not None:
            options["header_hook"] = ap2.header_hook(options.get("header_hook"))
        super().__init__(*args, **options)
        self.ap2 = ap2
        self._merchant_profile: Any = None
        if ap2 is not None:
            self.route("AP2Session", "GET-/checkout-sessions/{id}")

    async def _send(self, route: Route, path: str, body: Any, idempotency_key: str) -> Any:
        """Send, a Complete with the principal's mandate when AP2 is in play;
        the retries of ``super()._send`` resend that same mandate."""
        if self.ap2 is not None and route.name == "Complete" and isinstance(body, dict):
            body = await self._with_mandate(path, body)
        return await super()._send(route, path, body, idempotency_key)

    async def _with_mandate(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` with ``ap2.checkout_mandate`` for the session as the merchant
        answers it now, read in the version spoken but not translated (the
        mandate carries what the merchant signed). Unchanged when the merchant
        does not advertise AP2; MandateRefused (nothing sent) when the principal
        would not sign it."""
        assert self.ap2 is not None
        if self._merchant_profile is None:
            self._merchant_profile = await super()._send(
                self.routes["Discover"], "/.well-known/ucp", None, "discovery")
        if jose.advertised(self._merchant_profile) is None:
            return body
        await self.negotiate()  # the headers of the version spoken
        session_path = path.rstrip("/").rsplit("/", 1)[0]  # /checkout-sessions/{id}
        session = await ProxyAdapter._send(self, self.routes["AP2Session"], session_path,
                                           None, "ap2-read")
        mandate = self.ap2.present(session, self._merchant_profile, merchant=self.base_url)
        log.info("%s: presenting the AP2 checkout mandate of %s for %s", self.name,
                 self.ap2.kid, session_path)
        return {**body, "ap2": {"checkout_mandate": mandate}}
