"""A stand-in OpenAI-compatible endpoint: it always calls the first offered tool.

The dumbest model that still speaks the wire format: every Chat Completions
request is answered with one call of the first tool offered, with arguments
made from that tool's JSON schema (the required properties only, each the
simplest value of its type, or the schema's first example where the simple
value does not fit). No judgement at all, so it shows what the protocols and
the agent guarantee on their own: every run ends within its budget, and no
action the protocol forbids is ever finalized, whatever the model calls.

    python -m samples.llm.fake_openai --port 8399        # serve it, then:
    strabo agent --provider openai --base-url http://127.0.0.1:8399/v1 --model fake \\
        --protocol purchase --role Buyer --embedded --goal "Buy a pen"
    .venv/bin/python bench/llm_eval.py --fake-openai     # or in-process, all scenarios

It needs no key: any one (or none) is accepted.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

FORMATS = {
    "email": "buyer@example.com",
    "uri": "https://example.com/",
    "date-time": "2026-01-01T00:00:00Z",
    "date": "2026-01-01",
}


def value_for(schema: Any) -> Any:
    """A value that fits ``schema`` (self-contained: no ``$ref``), the simplest
    one of its type; the schema's first example when that one does not fit."""
    simple = _simple(schema)
    if not isinstance(schema, dict) or not schema.get("examples") or _fits(schema, simple):
        return simple
    return schema["examples"][0]


def _fits(schema: dict[str, Any], value: Any) -> bool:
    import jsonschema_rs

    try:
        return bool(jsonschema_rs.validator_for(schema).is_valid(value))
    except Exception:  # a schema the validator cannot compile: trust the simple value
        return True


def _simple(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return "x"
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        options = [o for o in schema.get(key, []) if o.get("type") != "null"]
        if options:
            return value_for(options[0])
    if schema.get("allOf"):
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        for part in schema["allOf"]:
            merged.update(part)
        return value_for(merged)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string" if "pattern" in schema else None
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: value_for(properties.get(name, {})) for name in schema.get("required", [])}
    if kind == "array":
        return [value_for(schema.get("items", {})) for _ in range(schema.get("minItems", 0))]
    if kind in ("integer", "number"):
        if "minimum" in schema:
            value = schema["minimum"]
        elif "exclusiveMinimum" in schema:
            value = schema["exclusiveMinimum"] + 1
        else:
            value = 1  # a quantity, a price: 0 is rarely what a field means
        value = min(value, schema.get("maximum", value))
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    if kind == "string":
        if schema.get("format") in FORMATS:
            return FORMATS[schema["format"]]
        if "pattern" in schema:
            return _matching(schema["pattern"])
        text = "x" * max(schema.get("minLength", 1), 1)
        return text[: schema.get("maxLength", len(text))]
    return "x"  # any value


_TOKEN = re.compile(r"\\[dws.\\-]|\[[^\]]+\]|[^\\\[\]{}()*+?^$|]")
_COUNT = re.compile(r"\{(\d+)(?:,(\d*))?\}|[*+?]")


def _matching(pattern: str) -> str:
    """A string the simple regular expressions of schemas match (``^[A-Z]{3}$``):
    literals, ``\\d \\w``, classes and counts. Anything richer gives ``x``."""
    out = []
    rest = pattern.removeprefix("^").removesuffix("$")
    while rest:
        token = _TOKEN.match(rest)
        if token is None:
            return "x"
        rest = rest[token.end():]
        count = _COUNT.match(rest)
        times = 1
        if count:
            rest = rest[count.end():]
            text = count.group(0)
            times = int(count.group(1)) if count.group(1) else (0 if text in "*?" else 1)
        out.append(_one(token.group(0)) * times)
    return "".join(out)


def _one(token: str) -> str:
    if token in (r"\d",):
        return "1"
    if token in (r"\w", "."):
        return "a"
    if token == r"\s":
        return " "
    if token.startswith("\\"):
        return token[1]
    if token.startswith("["):
        inner = token[1:-1]
        return inner[0] if inner and inner[0] != "^" else "x"
    return token


def app(model: str = "fake") -> Starlette:
    """The endpoint: ``POST /v1/chat/completions`` and ``GET /v1/models``."""
    ids = itertools.count(1)

    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        tools = body.get("tools") or []
        message: dict[str, Any] = {"role": "assistant", "content": None}
        arguments = ""
        if tools:
            function = tools[0]["function"]
            arguments = json.dumps(value_for(function.get("parameters", {})))
            message["tool_calls"] = [{
                "id": f"call_{next(ids)}",
                "type": "function",
                "function": {"name": function["name"], "arguments": arguments},
            }]
        else:
            message["content"] = "No tool was offered."
        prompt = len(json.dumps(body)) // 4  # about a token per four characters
        return JSONResponse({
            "id": f"chatcmpl-{next(ids)}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", model),
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if tools else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": len(arguments) // 4 + 5,
                      "total_tokens": prompt + len(arguments) // 4 + 5},
        })

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [
            {"id": model, "object": "model", "created": 0, "owned_by": "strabo"}]})

    return Starlette(routes=[
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
    ])


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8399)
    args = parser.parse_args()
    print(f"fake OpenAI-compatible endpoint at http://{args.host}:{args.port}/v1", flush=True)
    uvicorn.run(app(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
