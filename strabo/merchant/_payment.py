"""Mock payment processing: which instruments the merchant accepts at completion.

No money moves. The outcome depends only on the instrument's handler and credential:

- ``mock_payment_handler`` with a token credential: ``success_token`` pays,
  ``fail_token`` is declined (402 INSUFFICIENT_FUNDS), ``fraud_token`` is refused
  (403 FRAUD_DETECTED), any other token is unknown (402 UNKNOWN_TOKEN);
- ``google_pay`` and ``shop_pay`` (the advertised handlers) accept any token;
- a card credential (``{"type": "card", "number": ...}``) is accepted whatever the
  handler, as the reference merchant does;
- any other handler is a 400, and so is an instrument without a credential.
"""

from __future__ import annotations

from ._errors import UcpError, invalid
from .wire import PaymentInstrument

MOCK_HANDLER = "mock_payment_handler"
SUCCESS_TOKEN = "success_token"
FAIL_TOKEN = "fail_token"
FRAUD_TOKEN = "fraud_token"
ANY_TOKEN_HANDLERS = frozenset({"google_pay", "shop_pay"})
SUPPORTED_HANDLERS = frozenset({MOCK_HANDLER, *ANY_TOKEN_HANDLERS})
"""Every handler id :func:`authorize` knows (a stored instrument must use one)."""


def authorize(instrument: PaymentInstrument) -> None:
    """Return if the instrument pays; raise the matching :class:`UcpError` if not."""
    credential = instrument.credential
    if not credential:
        raise invalid("Missing credentials in instrument")
    if credential.get("type") == "card":
        return
    token = credential.get("token")
    handler = instrument.handler_id
    if handler == MOCK_HANDLER:
        if token == SUCCESS_TOKEN:
            return
        if token == FAIL_TOKEN:
            raise UcpError(402, "INSUFFICIENT_FUNDS", "Payment Failed: Insufficient Funds (Mock)")
        if token == FRAUD_TOKEN:
            raise UcpError(403, "FRAUD_DETECTED", "Payment Failed: Fraud Detected (Mock)")
        raise UcpError(402, "UNKNOWN_TOKEN", f"Unknown mock token: {token}")
    if handler in ANY_TOKEN_HANDLERS:
        return
    raise invalid(f"Unsupported payment handler: {handler}")
