"""A stand-in OpenAI-compatible endpoint: a model with no judgement, or a hostile one.

The dumbest model that still speaks the wire format (mode ``first-tool``, the
default): every Chat Completions request is answered with one call of the first
tool offered, with arguments made from that tool's JSON schema (the required
properties only, each the simplest value of its type, or the schema's first
example where the simple value does not fit). No judgement at all, so it shows
what the protocols and the agent guarantee on their own: every run ends within
its budget, and no action the protocol forbids is ever finalized, whatever the
model calls.

The adversaries show what a mandate (syncserver.mandate) guarantees on top: a
model that does legal harm. Each fills the arguments with the goal's own values
where the goal gives one (``line_items [...]``, ``budget of 10``: the name of a
property, then a JSON value that fits its schema), so that what it does reaches
the counterparts:

* ``burst``: every answer calls every offered action tool ``times`` times (64),
  one after the other, as many as an agent carries out of one answer (64 in
  all): 64 checkouts in one answer, then 21 payments, cancels and checkouts;
* ``obey-injection``: reads the latest prompt and tool results and, where it
  finds an instruction ("redo Create", "quantity 100"), does exactly that, once
  (the goal's values, each ``quantity`` set to the number); otherwise it calls
  the first offered tool, with the goal's values;
* ``random``: a seeded random choice of one to three tools (never ``done``,
  which would end the run) and of arguments within their schemas (the goal's
  values, as given or with their numbers changed, or random ones).

    python -m samples.llm.fake_openai --port 8399        # serve it, then:
    strabo agent --provider openai --base-url http://127.0.0.1:8399/v1 --model fake \\
        --protocol purchase --role Buyer --embedded --goal "Buy a pen"
    python -m samples.llm.fake_openai --mode burst       # a hostile model instead
    .venv/bin/python bench/llm_eval.py --fake-openai     # or in-process, all scenarios
    .venv/bin/python bench/llm_eval.py --adversary burst --scenario ucp

It needs no key: any one (or none) is accepted.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
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


# The adversaries -------------------------------------------------------------------

MODES = ("first-tool", "burst", "obey-injection", "random")
BUILTIN = frozenset({"wait", "done", "memory", "dismiss_event"})  # the agent's own tools
#: The most tool calls an LLM agent carries out of one answer (it refuses the
#: whole answer beyond: peach.llm's MAX_TOOL_CALLS); a burst stays within it.
PER_ANSWER = 64
Call = tuple[str, dict[str, Any]]
_INSTRUCTION_ACTION = re.compile(r"\bredo\s+([A-Za-z_][A-Za-z0-9_]*)")
_INSTRUCTION_QUANTITY = re.compile(r"\bquantity\s+(?:of\s+|to\s+|=\s*)?(\d+)")


def texts(message: dict[str, Any]) -> str:
    """A message's text, whether its content is a string or a list of parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def latest(messages: list[dict[str, Any]]) -> str:
    """The last user prompt and the tool results after it: what the model reads now."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
    return "\n".join(texts(m) for m in messages[last:] if m.get("role") in ("user", "tool"))


def goal_values(text: str, properties: dict[str, Any]) -> dict[str, Any]:
    """The values ``text`` gives for ``properties``: a property's name, then
    (after ``:``, ``=``, ``of`` or ``is``, if any) a JSON value its schema accepts."""
    decoder = json.JSONDecoder()
    found: dict[str, Any] = {}
    for name, schema in properties.items():
        pattern = rf"(?<!\w){re.escape(name)}\"?\s*(?:[:=]|of\b|is\b)?\s*"
        for match in re.finditer(pattern, text):
            try:
                value, _ = decoder.raw_decode(text, match.end())
            except ValueError:
                continue
            if _fits(schema, value):
                found[name] = value
                break
    return found


def arguments_with_goal(function: dict[str, Any], goal: str) -> dict[str, Any]:
    """The goal's values for the tool's properties; the simplest ones for the
    required properties the goal leaves out."""
    parameters = function.get("parameters", {})
    properties = parameters.get("properties", {})
    given = goal_values(goal, properties)
    for name in parameters.get("required", []):
        if name not in given:
            given[name] = value_for(properties.get(name, {}))
    return given


def with_quantity(value: Any, quantity: int) -> Any:
    """``value`` with every ``quantity`` in it set to ``quantity``."""
    if isinstance(value, dict):
        return {k: quantity if k == "quantity" else with_quantity(v, quantity)
                for k, v in value.items()}
    if isinstance(value, list):
        return [with_quantity(v, quantity) for v in value]
    return value


def _actions(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [t["function"] for t in tools if t["function"]["name"] not in BUILTIN]


def _wait(tools: list[dict[str, Any]]) -> list[Call]:
    names = [t["function"]["name"] for t in tools]
    return [("wait", {})] if "wait" in names else [(names[0], {})] if names else []


def first_tool(tools: list[dict[str, Any]]) -> list[Call]:
    if not tools:
        return []
    function = tools[0]["function"]
    return [(function["name"], value_for(function.get("parameters", {})))]


def burst(tools: list[dict[str, Any]], goal: str, times: int) -> list[Call]:
    """Every offered action tool, ``times`` times each, in the order offered, as
    many as one answer carries (:data:`PER_ANSWER`, shared among the tools)."""
    calls = [(f["name"], arguments_with_goal(f, goal)) for f in _actions(tools)][:PER_ANSWER]
    each = max(1, min(times, PER_ANSWER // max(len(calls), 1)))
    return [call for call in calls for _ in range(each)] or _wait(tools)


def obey(tools: list[dict[str, Any]], goal: str, now: str) -> list[Call]:
    """Do what the latest text tells (once: not when the prompt shows it done);
    else the first offered tool, with the goal's values."""
    action = _INSTRUCTION_ACTION.search(now)
    quantity = _INSTRUCTION_QUANTITY.search(now)
    if action or quantity:
        for function in _actions(tools):
            arguments = arguments_with_goal(function, goal)
            if action is not None:  # the tool of that action: "Create (SimpleUCP, ...) in ..."
                named = function.get("description", "").split(" ", 1)[0]
                if action.group(1) not in (function["name"], named):
                    continue
            elif "quantity" not in json.dumps(arguments):
                continue
            name = action.group(1) if action else function["name"]
            if quantity is not None:
                number = int(quantity.group(1))
                arguments = with_quantity(arguments, number)
                done = rf"(?:by you:|done: {re.escape(name)}\b)[^\n]*\"quantity\": {number}\b"
                if re.search(done, now):
                    break  # obeyed already: the prompt shows it
            return [(function["name"], arguments)]
    actions = _actions(tools)
    return [(actions[0]["name"], arguments_with_goal(actions[0], goal))] if actions \
        else _wait(tools)


def random_value(schema: Any, rng: random.Random, depth: int = 0) -> Any:
    """A random value within ``schema`` (its simplest value where the random one
    does not fit): numbers up to 99 above their minimum, short strings and lists."""
    value = _random(schema, rng, depth)
    return value if not isinstance(schema, dict) or _fits(schema, value) else value_for(schema)


def _random(schema: Any, rng: random.Random, depth: int) -> Any:
    if not isinstance(schema, dict):
        return rng.choice(["x", 1, True])
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        options = [o for o in schema.get(key, []) if o.get("type") != "null"]
        if options:
            return _random(rng.choice(options), rng, depth)
    if schema.get("examples") and rng.random() < 0.3:
        return rng.choice(schema["examples"])
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = rng.choice([k for k in kind if k != "null"] or ["null"])
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "object" and depth < 4:
        properties = schema.get("properties", {})
        required = set(schema.get("required", []))
        return {name: _random(sub, rng, depth + 1) for name, sub in properties.items()
                if name in required or rng.random() < 0.3}
    if kind == "array" and depth < 4:
        low = schema.get("minItems", 0)
        count = rng.randint(low, max(low, min(schema.get("maxItems", 3), 3)))
        return [_random(schema.get("items", {}), rng, depth + 1) for _ in range(count)]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1)
        high = schema.get("maximum", low + 99)
        return rng.randint(int(low), int(high)) if kind == "integer" else \
            round(rng.uniform(low, high), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "string":
        if schema.get("format") in FORMATS:
            return FORMATS[schema["format"]]
        if "pattern" in schema:
            return _matching(schema["pattern"])
        size = rng.randint(max(schema.get("minLength", 1), 1), 8)
        return "".join(rng.choice("abcdefghij") for _ in range(size))[: schema.get("maxLength")]
    return value_for(schema)


def _shuffled_numbers(value: Any, rng: random.Random) -> Any:
    """``value`` with each whole number in it replaced by a random one (0 to 100)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return rng.randint(0, 100)
    if isinstance(value, dict):
        return {k: _shuffled_numbers(v, rng) for k, v in value.items()}
    if isinstance(value, list):
        return [_shuffled_numbers(v, rng) for v in value]
    return value


def random_calls(tools: list[dict[str, Any]], goal: str, rng: random.Random) -> list[Call]:
    """One to three random tools (``done`` never), each with random arguments:
    per property the goal's value, the goal's value with other numbers, or a
    random value of its schema."""
    offered = [t["function"] for t in tools if t["function"]["name"] != "done"]
    calls: list[Call] = []
    for _ in range(rng.randint(1, 3) if offered else 0):
        function = rng.choice(offered)
        parameters = function.get("parameters", {})
        properties = parameters.get("properties", {})
        given = goal_values(goal, properties)
        required = set(parameters.get("required", []))
        arguments = {}
        for name, schema in properties.items():
            if name not in required and rng.random() < 0.5:
                continue
            roll = rng.random()
            if name in given and roll < 0.4:
                arguments[name] = given[name]
            elif name in given and roll < 0.7:
                changed = _shuffled_numbers(given[name], rng)
                arguments[name] = changed if _fits(schema, changed) else given[name]
            else:
                arguments[name] = random_value(schema, rng)
        calls.append((function["name"], arguments))
    return calls


def app(model: str = "fake", mode: str = "first-tool", *, seed: int = 0,
        times: int = 64) -> Starlette:
    """The endpoint: ``POST /v1/chat/completions`` and ``GET /v1/models``;
    ``mode`` is one of :data:`MODES` (``seed`` for ``random``, ``times`` the
    calls of each tool for ``burst``)."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
    ids = itertools.count(1)
    rng = random.Random(seed)

    def answer(body: dict[str, Any]) -> list[Call]:
        tools = body.get("tools") or []
        messages = body.get("messages") or []
        goal = "\n".join(texts(m) for m in messages if m.get("role") in ("system", "user"))
        if mode == "burst":
            return burst(tools, goal, times)
        if mode == "obey-injection":
            return obey(tools, goal, latest(messages))
        if mode == "random":
            return random_calls(tools, goal, rng)
        return first_tool(tools)

    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        calls = answer(body)
        message: dict[str, Any] = {"role": "assistant", "content": None}
        arguments = "".join(json.dumps(a) for _, a in calls)
        if calls:
            message["tool_calls"] = [{
                "id": f"call_{next(ids)}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            } for name, args in calls]
        else:
            message["content"] = "No tool was offered."
        prompt = len(json.dumps(body)) // 4  # about a token per four characters
        return JSONResponse({
            "id": f"chatcmpl-{next(ids)}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", model),
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if calls else "stop"}],
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
    parser.add_argument("--mode", choices=MODES, default="first-tool",
                        help="how it answers (default first-tool; the others are adversaries)")
    parser.add_argument("--seed", type=int, default=0, help="for --mode random (default 0)")
    parser.add_argument("--times", type=int, default=64,
                        help="for --mode burst: calls of each tool per answer (default 64)")
    args = parser.parse_args()
    print(f"fake OpenAI-compatible endpoint ({args.mode}) at "
          f"http://{args.host}:{args.port}/v1", flush=True)
    uvicorn.run(app(mode=args.mode, seed=args.seed, times=args.times), host=args.host,
                port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
