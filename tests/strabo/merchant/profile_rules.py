"""The UCP 2026-01-11 discovery profile rules, as a checker for tests.

Written from the spec's schemas (``discovery/profile_schema.json``, ``ucp.json``,
``capability.json``, ``services/service_schema.json``, ``types/payment_handler.json``)
so that tests can tell whether a profile is valid without network or a JSON Schema
library: required keys, no ``null`` where the schema wants a string or an object,
version dates, reverse-domain names and absolute URLs.
"""

from __future__ import annotations

import re
from typing import Any

VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}$")
NAME = re.compile(r"^[a-z][a-z0-9]*(?:\.[a-z][a-z0-9_]*)+$")
URL = re.compile(r"^https?://[^\s/]+")


def _required(where: str, value: Any, keys: list[str]) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: expected an object, got {value!r}"]
    missing = [key for key in keys if key not in value]
    return [f"{where}: missing keys {missing}"] if missing else []


def _nulls(where: str, value: Any) -> list[str]:
    if value is None:
        return [f"{where}: null (the schema wants a value or no key)"]
    if isinstance(value, dict):
        return [line for k, v in value.items() for line in _nulls(f"{where}.{k}", v)]
    if isinstance(value, list):
        return [line for i, v in enumerate(value) for line in _nulls(f"{where}[{i}]", v)]
    return []


def _url(where: str, value: Any) -> list[str]:
    return [] if isinstance(value, str) and URL.match(value) else [f"{where}: not a URL: {value!r}"]


def profile_problems(profile: Any) -> list[str]:
    """Why ``profile`` is not a valid 2026-01-11 discovery profile (empty if it is)."""
    problems = _required("$", profile, ["ucp"])
    if problems:
        return problems
    problems += _nulls("$", profile)
    ucp = profile["ucp"]
    shape = _required("$.ucp", ucp, ["version", "services", "capabilities"])
    if shape:
        return problems + shape
    if not VERSION.match(str(ucp["version"])):
        problems.append(f"$.ucp.version: not a date: {ucp['version']!r}")
    for name, service in ucp["services"].items():
        where = f"$.ucp.services.{name}"
        problems += _required(where, service, ["version", "spec"])
        problems += _url(f"{where}.spec", service.get("spec"))
        if "rest" in service:
            problems += _required(f"{where}.rest", service["rest"], ["schema", "endpoint"])
            problems += _url(f"{where}.rest.endpoint", service["rest"].get("endpoint"))
    for index, capability in enumerate(ucp["capabilities"]):
        where = f"$.ucp.capabilities[{index}]"
        problems += _required(where, capability, ["name", "version", "spec", "schema"])
        if not NAME.match(str(capability.get("name"))):
            problems.append(f"{where}.name: not a reverse-domain name")
        if str(capability.get("name", "")).startswith("dev.ucp."):
            for key in ("spec", "schema"):
                if not str(capability.get(key, "")).startswith("https://ucp.dev/"):
                    problems.append(f"{where}.{key}: dev.ucp.* URLs must be on https://ucp.dev/")
        if "extends" in capability and not NAME.match(str(capability["extends"])):
            problems.append(f"{where}.extends: not a reverse-domain name")
    handler_keys = [
        "id", "name", "version", "spec", "config_schema", "instrument_schemas", "config"
    ]
    for index, handler in enumerate((profile.get("payment") or {}).get("handlers", [])):
        where = f"$.payment.handlers[{index}]"
        problems += _required(where, handler, handler_keys)
        for key in ("spec", "config_schema"):
            problems += _url(f"{where}.{key}", handler.get(key))
        for position, url in enumerate(handler.get("instrument_schemas") or []):
            problems += _url(f"{where}.instrument_schemas[{position}]", url)
    return problems
