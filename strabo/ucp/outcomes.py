"""How a UCP merchant's answers end a ResilientUCP checkout.

The merchant says how a checkout ended in three ways: the session's ``status``
in a successful answer (``completed``, ``requires_escalation``, ``canceled``),
an error answer (402 for a declined payment, 409 for stock gone or a session no
longer open...), or no answer at all. ResilientUCP has an action for each
ending, so the mapping is data, kept here as pure functions: the proxy
(:mod:`strabo.ucp.resilient_proxy`) sends and says, these decide what.

Errors become UCP messages (``{"type": "error", "code", "content",
"severity"}``, the shape a session's ``messages`` use), with UCP's codes where
the merchant's code has a UCP meaning (``payment_declined``, ``out_of_stock``,
``invalid``) and the merchant's own code and status kept in ``content``.
"""

from __future__ import annotations

from typing import Any

from strabo.proxy import ProxyError, ProxyHTTPError, ProxyRequestError, ProxyUnreachable
from strabo.ucp.ap2 import MandateRefused
from strabo.ucpwire.ap2 import ERROR_CODES as AP2_CODES

__all__ = [
    "PAYMENT_CODES",
    "completion",
    "error_messages",
    "failed_completion",
    "settled",
    "unknown",
]

# Codes merchants use for a payment that did not go through; UCP calls them all
# payment_declined. (The bundled and reference merchants use the first three.)
PAYMENT_CODES = frozenset({
    "INSUFFICIENT_FUNDS", "UNKNOWN_TOKEN", "FRAUD_DETECTED", "PAYMENT_DECLINED",
    "PAYMENT_FAILED", "CARD_DECLINED"})
NOT_MODIFIABLE = "CHECKOUT_NOT_MODIFIABLE"
IN_PROGRESS = "complete_in_progress"
OUTCOME_UNKNOWN = "outcome_unknown"
"""The code of a Complete that may have run, not resent (a tool-style A2A agent
left it unanswered: strabo.ucp.a2a_transport): a 4xx that is no refusal."""
Outcome = tuple[str, dict[str, Any]]


def error_messages(error: ProxyError) -> list[dict[str, Any]]:
    """The merchant's failure as UCP messages. A merchant that answers an error
    in UCP's own shape (``{"messages": [...]}``, as the REST binding's error
    example has it) is taken at its word; otherwise one message is made."""
    if isinstance(error, ProxyHTTPError) and isinstance(error.body, dict):
        given = error.body.get("messages")
        if isinstance(given, list) and given and all(_is_message(m) for m in given):
            return [dict(m) for m in given]
    summary = error.summary()
    status, code = summary.get("status"), summary.get("code")
    ucp_code, severity = _classify(error, status, code)
    said = ", ".join(str(x) for x in (code, f"HTTP {status}" if status else None) if x)
    content = f"{summary['message']} ({said})" if said else str(summary["message"])
    return [{"type": "error", "code": ucp_code, "content": content, "severity": severity}]


def _classify(error: ProxyError, status: Any, code: Any) -> tuple[str, str]:
    """UCP's code and who resolves it. Declines, stock and bad requests are the
    agent's to fix (another instrument, another cart): ``recoverable``. A
    merchant that did not say (no answer, a 5xx) leaves the outcome unknown:
    only the buyer, with the merchant, can review it."""
    if isinstance(error, ProxyUnreachable):
        return "unreachable", "requires_buyer_review"
    if isinstance(error, MandateRefused):  # AP2: refused here, before sending
        return str(error.code), error.severity
    if code in AP2_CODES:  # AP2: the merchant refused the mandate; a new one may do
        return str(code), "recoverable"
    if isinstance(error, ProxyRequestError):
        return "invalid", "recoverable"
    if code in PAYMENT_CODES or status == 402:
        return "payment_declined", "recoverable"
    if code == "OUT_OF_STOCK":
        return "out_of_stock", "recoverable"
    if isinstance(status, int) and status >= 500:
        return (code or f"http_{status}").lower(), "requires_buyer_review"
    if code in (None, "INVALID_REQUEST", "validation") or status in (400, 422):
        return "invalid", "recoverable"
    return str(code).lower(), "recoverable"


def _is_message(value: Any) -> bool:
    return (isinstance(value, dict) and value.get("type") in ("error", "warning", "info")
            and isinstance(value.get("content"), str))


def _errors(session: dict[str, Any]) -> list[dict[str, Any]]:
    messages = session.get("messages")
    if not isinstance(messages, list):
        return []
    return [dict(m) for m in messages if _is_message(m) and m.get("type") == "error"]


def settled(session: dict[str, Any]) -> Outcome | None:
    """The ending a session's status says, if it has ended (or needs the buyer):
    ``Completed`` with its order, ``Escalated`` with its messages and
    ``continue_url``, ``Revoked`` for a session the merchant canceled."""
    status = session.get("status")
    if status == "completed":
        return "Completed", {"order": session.get("order")}
    if status == "requires_escalation":
        messages = _errors(session) or [{
            "type": "error", "code": "requires_escalation", "severity": "requires_buyer_input",
            "content": "the merchant needs the buyer to go on at its continue_url"}]
        url = session.get("continue_url")
        return "Escalated", {"messages": messages, **({"continue_url": url} if url else {})}
    if status == "canceled":
        return "Revoked", {"messages": _errors(session) or [{
            "type": "error", "code": "canceled", "severity": "requires_buyer_input",
            "content": f"the merchant canceled checkout {session.get('id')}"}]}
    return None


def completion(session: dict[str, Any]) -> Outcome:
    """The ending of a Complete the merchant answered with a session: what its
    status says, or ``Declined`` when it left the session open (its error
    messages say why, if it gave any). ``complete_in_progress`` is not open:
    the outcome is unknown, ``Escalated`` (it was ``Declined``, which tells the
    Platform no order was placed when one may yet be)."""
    ended = settled(session)
    if ended is not None:
        return ended
    if session.get("status") == IN_PROGRESS:
        # The merchant is still completing: the order may yet be placed, so
        # Declined (no order, pay again) would be wrong. As for a failed complete
        # whose session says so (unknown), the outcome is unknown: Escalated.
        messages = _errors(session) or [{
            "type": "error", "code": IN_PROGRESS, "severity": "requires_buyer_review",
            "content": f"the merchant is still completing checkout {session.get('id')}"}]
        for message in messages:
            message["severity"] = "requires_buyer_review"
        url = session.get("continue_url")
        return "Escalated", {"messages": messages, **({"continue_url": url} if url else {})}
    return "Declined", {"messages": _errors(session) or [{
        "type": "error", "code": "not_completed", "severity": "recoverable",
        "content": f"the merchant left the checkout {session.get('status')!r}"}]}


def failed_completion(error: ProxyError) -> Outcome | None:
    """The ending of a Complete the merchant refused, when its answer alone says
    it: any 4xx but ``CHECKOUT_NOT_MODIFIABLE`` (the session has ended some
    other way: read it) and ``outcome_unknown`` (the order may exist). None
    when only the session can tell."""
    if isinstance(error, ProxyRequestError):
        return "Declined", {"messages": error_messages(error)}
    if (isinstance(error, ProxyHTTPError) and 400 <= error.status < 500
            and (error.code or "").upper() != NOT_MODIFIABLE
            and error.code != OUTCOME_UNKNOWN):
        return "Declined", {"messages": error_messages(error)}
    return None


def unknown(error: ProxyError, session: dict[str, Any] | None) -> Outcome:
    """The ending of a Complete when neither the merchant's answer nor its
    session's status said one. A session still open (read after the retries
    gave up) means no order was placed: ``Declined``. A session that cannot be
    read, or one the merchant is still completing, leaves the outcome unknown:
    ``Escalated`` with no ``continue_url`` unless the session has one, since
    only the buyer, with the merchant, can find out whether it went through."""
    messages = error_messages(error)
    if session is not None and session.get("status") != IN_PROGRESS:
        return "Declined", {"messages": messages}
    for message in messages:
        message["severity"] = "requires_buyer_review"
    url = (session or {}).get("continue_url")
    return "Escalated", {"messages": messages, **({"continue_url": url} if url else {})}
