"""A stand-in for the Gemini API: a scripted model that does what the data parts say.

Google's UCP A2A business agent (the UCP samples, ``a2a/business_agent``) is an
ADK agent: each A2A message becomes one user turn for Gemini (the message's
text, then the JSON of each of its data parts, one a line), and Gemini decides
which of the agent's tools to call. To drive that agent from a test or a
demo, with no key and the same answer every time, this server answers the
``generateContent`` wire format (and ``streamGenerateContent`` with
``alt=sse``, one chunk) with no judgement at all:

* the latest turn is the user's text: every JSON object in it with a string
  ``"action"`` becomes one ``functionCall`` of the tool of that name, its
  arguments the object's other members (those the tool declares; an
  ``id``, say, is dropped), in the order they come. ``{"action":
  "add_to_checkout", "product_id": "BISC-001", "quantity": 2}`` calls
  ``add_to_checkout(product_id="BISC-001", quantity=2)``;
* the latest turn holds tool results (``functionResponse``): a short text,
  ``<tool>: <status>`` for each (and the message of an error);
* anything else (no action, or none the agent declares): a short text saying so.

    python samples/a2a/fake_gemini.py --port 8398     # serve it, then start the agent with
    GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8398 GOOGLE_API_KEY=fake uv run business_agent
    scripts/google_a2a_agent.sh                       # or both at once, installed if need be

google-genai reads ``GOOGLE_GEMINI_BASE_URL`` (unless ``GOOGLE_GENAI_USE_VERTEXAI``
is set) and sends the key as ``x-goog-api-key``: any key is accepted. It needs
only starlette and uvicorn, so it runs in the agent's own virtualenv.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

Part = dict[str, Any]


def declared_tools(body: dict[str, Any]) -> dict[str, set[str] | None]:
    """The tools the request offers, each with the names of its parameters
    (``None`` where the declaration gives no schema we can read)."""
    tools: dict[str, set[str] | None] = {}
    for tool in body.get("tools") or []:
        for function in tool.get("functionDeclarations") or []:
            schema = function.get("parameters") or function.get("parametersJsonSchema")
            properties = schema.get("properties") if isinstance(schema, dict) else None
            tools[function["name"]] = set(properties) if properties is not None else None
    return tools


def actions_in(text: str) -> list[dict[str, Any]]:
    """Every JSON object in ``text`` (outermost ones only) that has a string ``action``."""
    decoder = json.JSONDecoder()
    found, start = [], text.find("{")
    while start != -1:
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict) and isinstance(value.get("action"), str):
            found.append(value)
        start = text.find("{", end)
    return found


def summary(response: dict[str, Any]) -> str:
    """``<tool>: <status>`` for one tool result (ADK wraps a non-dict result
    in ``{"result": ...}``, and answers ``{"error": ...}`` for a call that lacks
    a mandatory argument), with the message of one that is not a success."""
    result = response.get("response") or {}
    if isinstance(result.get("result"), dict):
        result = result["result"]
    status = result.get("status") or ("error" if "error" in result else "done")
    message = result.get("message") or result.get("error")  # ADK's: a missing argument
    text = f"{response.get('name', 'tool')}: {status}"
    return f"{text} ({message})" if message and status != "success" else text


def answer(body: dict[str, Any]) -> list[Part]:
    """The parts of the model's answer to one ``generateContent`` request."""
    contents = body.get("contents") or []
    parts: list[Part] = (contents[-1].get("parts") or []) if contents else []
    results = [p["functionResponse"] for p in parts if "functionResponse" in p]
    if results:
        return [{"text": "; ".join(summary(r) for r in results) + "."}]
    tools = declared_tools(body)
    text = "\n".join(p["text"] for p in parts if isinstance(p.get("text"), str))
    calls: list[Part] = []
    unknown: list[str] = []
    for wanted in actions_in(text):
        name = wanted["action"]
        if name not in tools:
            unknown.append(name)
            continue
        accepted = tools[name]
        args = {k: v for k, v in wanted.items()
                if k != "action" and (accepted is None or k in accepted)}
        calls.append({"functionCall": {"name": name, "args": args}})
    if calls:
        return calls
    if unknown:
        return [{"text": f"No tool named {', '.join(unknown)}; "
                         f"the tools are {', '.join(sorted(tools))}."}]
    return [{"text": 'I act on structured requests only: send a data part '
                     '{"action": "<tool>", ...the tool\'s arguments}.'}]


def envelope(parts: list[Part], body: dict[str, Any], model: str) -> dict[str, Any]:
    """A ``GenerateContentResponse`` holding ``parts``, with rough token counts."""
    prompt = len(json.dumps(body)) // 4  # about a token per four characters
    output = len(json.dumps(parts)) // 4 + 1
    return {
        "candidates": [{"content": {"role": "model", "parts": parts},
                        "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": output,
                          "totalTokenCount": prompt + output},
        "modelVersion": model,
    }


def app(verbose: bool = False) -> Starlette:
    """``POST /{version}/models/{model}:generateContent`` (and
    ``:streamGenerateContent``), any API version; ``GET /`` says what it is."""

    async def generate(request: Request) -> Response:
        path = request.path_params["path"]
        model_path, _, method = path.rpartition(":")
        if not model_path or method not in ("generateContent", "streamGenerateContent"):
            return JSONResponse({"error": {"code": 404, "status": "NOT_FOUND",
                                           "message": f"no method {path!r} here"}}, 404)
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": {"code": 400, "status": "INVALID_ARGUMENT",
                                           "message": "the body is not JSON"}}, 400)
        try:
            parts = answer(body)
        except (AttributeError, KeyError, TypeError) as exc:  # JSON, not generateContent's
            return JSONResponse({"error": {"code": 400, "status": "INVALID_ARGUMENT",
                                           "message": "the body is not a generateContent "
                                           f"request ({type(exc).__name__}: {exc})"}}, 400)
        if verbose:
            print(f"{model_path}:{method} -> {json.dumps(parts)}", flush=True)
        result = envelope(parts, body, model_path.rsplit("/", 1)[-1])
        if method == "generateContent":
            return JSONResponse(result)
        return Response(f"data: {json.dumps(result)}\r\n\r\n", media_type="text/event-stream")

    async def about(request: Request) -> JSONResponse:
        return JSONResponse({"service": "fake Gemini (scripted: data-part actions)"})

    return Starlette(routes=[
        Route("/", about, methods=["GET"]),
        Route("/{path:path}", generate, methods=["POST"]),
    ])


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8398)
    parser.add_argument("--verbose", action="store_true",
                        help="print each request's answer (the calls it makes)")
    args = parser.parse_args()
    print(f"fake Gemini at http://{args.host}:{args.port} "
          f"(GOOGLE_GEMINI_BASE_URL=http://{args.host}:{args.port})", flush=True)
    uvicorn.run(app(args.verbose), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
