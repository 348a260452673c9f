"""Reading a request's UCP headers and JSON body, with the reference's error order.

The reference merchant is FastAPI, and agents see FastAPI's validation behaviour:
the body is parsed first (bad JSON is a 422 on its own), then the agent headers are
checked (all present: the UCP-Agent version is negotiated at once, a newer version
being a 400 that wins over every other problem), then the Idempotency-Key, then the
body's fields; all missing headers and bad fields come back together in one 422.
This module reproduces that order without FastAPI.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from ._errors import RequestInvalid, VersionUnsupported
from .wire import UCP_VERSION

AGENT_HEADERS = ("ucp-agent", "request-signature", "request-id")
"""Headers every checkout and order call must carry (any value is accepted)."""

UNSIGNED_HEADERS = ("ucp-agent", "request-id")
"""The same for a 2026-04-08 request, which has no ``Request-Signature``."""

IDEMPOTENCY_HEADER = "idempotency-key"
"""Header every mutating call must carry."""

Model = TypeVar("Model", bound=BaseModel)


@dataclass(frozen=True)
class AgentHeaders:
    """The UCP headers of a request that passed the header checks."""

    ucp_agent: str
    request_id: str
    idempotency_key: str | None

    @property
    def profile_url(self) -> str | None:
        """The agent profile URL named in UCP-Agent (``profile="..."``), if any."""
        return agent_parameters(self.ucp_agent).get("profile")


def agent_parameters(ucp_agent: str) -> dict[str, str]:
    """The ``key=value`` parameters of a UCP-Agent header, quotes removed, keys lowercased.

    ``profile="https://agent.example/profile"; version="2026-01-11"`` gives
    ``{"profile": "https://agent.example/profile", "version": "2026-01-11"}``;
    a header without parameters (``foo``) gives ``{}``.
    """
    params: dict[str, str] = {}
    for part in ucp_agent.split(";"):
        key, sep, value = part.partition("=")
        if sep:
            params.setdefault(key.strip().lower(), value.strip().strip('"'))
    return params


def missing(loc: list[str | int]) -> dict[str, Any]:
    """A FastAPI "Field required" entry for a missing header or body field."""
    return {"type": "missing", "loc": loc, "msg": "Field required", "input": None}


def check_headers(
    request: Request, *, idempotent: bool, errors: list[dict[str, Any]],
    version: str | None = None,
) -> AgentHeaders:
    """Check the UCP headers, appending a 422 entry to ``errors`` for each missing one.

    Raises :class:`VersionUnsupported` straight away when the agent headers are all
    there and UCP-Agent asks for a version newer than :data:`UCP_VERSION` (dates in
    ISO form compare as strings). Older or absent versions are accepted.

    ``version`` is the protocol version a merchant serving 2026-04-08 already
    accepted for this request (``_versioning``): it replaces the check above, and
    a 2026-04-08 request needs no ``Request-Signature`` (that header is gone from
    its REST binding). None, the 2026-01-11 merchant's case, changes nothing.
    """
    headers = request.headers
    required = AGENT_HEADERS if version in (None, UCP_VERSION) else UNSIGNED_HEADERS
    absent = [name for name in required if name not in headers]
    errors.extend(missing(["header", name]) for name in absent)
    if not absent and version is None:
        asked = agent_parameters(headers["ucp-agent"]).get("version")
        if asked and asked > UCP_VERSION:
            raise VersionUnsupported(asked)
    if idempotent and IDEMPOTENCY_HEADER not in headers:
        errors.append(missing(["header", IDEMPOTENCY_HEADER]))
    return AgentHeaders(
        ucp_agent=headers.get("ucp-agent", ""),
        request_id=headers.get("request-id", ""),
        idempotency_key=headers.get(IDEMPOTENCY_HEADER),
    )


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    main, _, sub = media.partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


async def read_body(request: Request) -> Any:
    """The request body: None when empty, parsed JSON, or the raw text.

    JSON is parsed when there is no Content-Type or a JSON one; any other type
    (say a form post) leaves the text as is, which then fails model validation
    with "Input should be a valid dictionary", as it does for the reference.
    """
    raw = await request.body()
    if not raw:
        return None
    content_type = request.headers.get("content-type")
    if content_type is not None and not _is_json(content_type):
        return raw.decode("utf-8", errors="replace")
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        error, position = exc.msg, exc.pos
    except UnicodeDecodeError:
        error, position = "Invalid UTF-8", 0
    raise RequestInvalid(
        [
            {
                "type": "json_invalid",
                "loc": ["body", position],
                "msg": "JSON decode error",
                "input": {},
                "ctx": {"error": error},
            }
        ]
    )


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)


def validation_entries(
    exc: ValidationError, *, prefix: list[str | int], embedded: bool = False
) -> list[dict[str, Any]]:
    """FastAPI-style 422 entries for a pydantic error, located under ``prefix``."""
    entries = []
    for error in exc.errors(include_url=False):
        entry: dict[str, Any] = {
            "type": error["type"],
            "loc": [*prefix, *error["loc"]],
            "msg": error["msg"],
            "input": _jsonable(error["input"]),
        }
        if embedded and error["type"] == "missing" and len(error["loc"]) == 1:
            entry["input"] = None  # FastAPI names no input for a missing embedded field
        if "ctx" in error:
            entry["ctx"] = _jsonable(error["ctx"])
        entries.append(entry)
    return entries


def parse_body(
    model: type[Model], body: Any, errors: list[dict[str, Any]], *, embedded: bool = False
) -> Model | None:
    """Validate ``body`` against ``model``, appending 422 entries to ``errors`` on failure.

    ``embedded`` models are bodies of several named fields (the complete request):
    a body that is not an object, or a field that is null, counts as missing, the way
    FastAPI treats ``Body(embed)`` parameters. Other models need an object body.
    """
    if body is None and not embedded:
        errors.append(missing(["body"]))
        return None
    if embedded:
        fields = body if isinstance(body, dict) else {}
        body = {name: value for name, value in fields.items() if value is not None}
    try:
        return model.model_validate(body, from_attributes=True)
    except ValidationError as exc:
        errors.extend(validation_entries(exc, prefix=["body"], embedded=embedded))
        return None
