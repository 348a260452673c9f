"""Build strabo's wheel and sdist, install each into a fresh venv, and use it from
an unrelated directory as a new user would: every command README.md and docs/
show. `.ci/run` runs this after `make test`; `make package-check` too.

    python scripts/check_package.py [--keep DIR]

Prints one line per step and exits 1 at the first failure, with the command's
output. Needs network access to the package index (for the dependencies) only
the first time: pip's cache serves later runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = [p.stem for p in sorted((ROOT / "protocols").glob("*.lsh"))]
PATTERN_NAMES = [
    f"patterns/{p.stem}" for p in sorted((ROOT / "protocols" / "patterns").glob("*.lsh"))
]
SCHEMAS = sorted(p.name for p in (ROOT / "protocols").glob("*/*.json"))
# The pattern protocols and their scenarios (strabo simulate NAME finds them).
PATTERNS = sorted(p.name for p in (ROOT / "protocols" / "patterns").glob("*.*"))
# The dashboard's page (syncserver/ui/: package data, not a package).
UI = sorted(p.name for p in (ROOT / "syncserver" / "ui").iterdir() if p.is_file())


# Folders installed under another name (pyproject.toml's package-dir).
INSTALLED_AS = {"proxy": "strabo/proxy"}


def source_packages() -> list[str]:
    """Every package of the checkout, as ``a/b/__init__.py`` paths where the
    wheel puts them (proxy/ as strabo/proxy/): each must be in the wheel."""
    found = []
    for top in ("langshaw", "peach", "syncserver", "strabo", "proxy"):
        for folder, dirs, files in os.walk(ROOT / top):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            if "__init__.py" in files:
                where = str(Path(folder).relative_to(ROOT))
                head, _, tail = where.partition("/")
                where = INSTALLED_AS.get(head, head) + (f"/{tail}" if tail else "")
                found.append(f"{where}/__init__.py")
    return sorted(found)


class Failed(Exception):
    pass


def run(cmd: list[str], cwd: Path, timeout: float = 600, env: dict[str, str] | None = None) -> str:
    started = time.monotonic()
    result = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )
    took = time.monotonic() - started
    shown = " ".join(Path(c).name if os.sep in c and c.endswith(("python", "strabo")) else c
                     for c in cmd)
    if result.returncode != 0:
        raise Failed(f"{shown} exited {result.returncode} after {took:.1f} s\n"
                     f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}")
    print(f"  ok  {shown}  ({took:.1f} s)", flush=True)
    return result.stdout


@contextlib.contextmanager
def served(cmd: list[str], cwd: Path) -> Iterator[str]:
    """A server command on port 0, running until the block ends; yields its URL."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        url = None
        while time.monotonic() < deadline and url is None:
            line = proc.stdout.readline()
            if not line:
                break
            match = re.search(r"(http://[\d.]+:\d+)", line)
            url = match.group(1) if match else None
        if url is None:
            proc.kill()
            raise Failed(f"{' '.join(cmd[1:])} did not start:\n{proc.stderr.read()[-4000:]}")
        yield url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def probe(url: str, path: str, headers: dict[str, str] | None = None) -> None:
    request = urllib.request.Request(url + path, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        body = json.loads(response.read())
    print(f"  ok  GET {path} -> {str(body)[:60]}", flush=True)


def probe_ui(url: str) -> None:
    """The dashboard's files, served from the installed package with their
    policy, and the viewer token reading the API."""
    for name in ("", *UI):
        path = "/ui" + (f"/{name}" if name and name != "index.html" else "")
        with urllib.request.urlopen(url + path, timeout=10) as response:
            body = response.read()
            csp = response.headers.get("Content-Security-Policy", "")
            if "default-src 'self'" not in csp or not body:
                raise Failed(f"GET {path}: {len(body)} bytes, policy {csp!r}")
            if response.headers.get("X-Content-Type-Options") != "nosniff":
                raise Failed(f"GET {path} lacks X-Content-Type-Options: nosniff")
    print(f"  ok  GET /ui and its files {UI} from the installed package", flush=True)
    probe(url, "/mas", {"Authorization": "Bearer viewer-secret"})
    probe(url, "/mas/purchase/stats", {"Authorization": "Bearer viewer-secret"})


def use(venv: Path, work: Path) -> None:
    """Every command the docs show, from a directory that is not the checkout."""
    strabo = str(venv / "bin" / "strabo")
    run([strabo, "--version"], work)
    listing = run([strabo, "protocols"], work)
    names = sorted(BUNDLED + PATTERN_NAMES)
    if sorted(line.split()[0] for line in listing.splitlines()) != names:
        raise Failed(f"strabo protocols lists {listing!r}, not {names}")
    run([strabo, "check", *BUNDLED, *PATTERN_NAMES, "market"], work)
    run([strabo, "check", "--verify", *PATTERN_NAMES], work)
    run([strabo, "check", "--verify", "--semantics", "shared", *BUNDLED], work)
    run([strabo, "protocols", "purchase"], work)
    diagrams(strabo, names, work)
    for protocol in ("atomic", "incremental"):
        for policy in ("instant", "batched"):
            run([strabo, "demo", "--protocol", protocol, "--policy", policy], work, timeout=120)
    run([strabo, "demo", "--protocol", "resilient", "--outcome", "declined"], work, timeout=120)
    run([strabo, "demo", "--executor", "peer"], work, timeout=120)
    run([strabo, "simulate", "market", "-q", "--out", str(work / "market-report")], work,
        timeout=300)
    if not (work / "market-report" / "chart.png").is_file():
        raise Failed("strabo simulate market wrote no chart.png")
    for verb in ("check", "protocols", "syncserver", "merchant", "demo", "agent", "simulate",
                 "inspect", "mcp"):
        run([strabo, verb, "--help"], work)
    with served([strabo, "merchant", "--port", "0"], work) as merchant:
        probe(merchant, "/.well-known/ucp")
        run([strabo, "demo", "--merchant", merchant, "--timeout", "30"], work, timeout=120)
    config = work / "mas.toml"
    config.write_text(
        '[server]\ndashboard = true\nviewer_token = "viewer-secret"\n'
        '[mas.purchase]\nprotocols = ["purchase"]\n'
        '[mas.purchase.agents.buyer]\nroles = ["Buyer"]\ntoken = "buyer-secret"\n'
        '[mas.purchase.agents.seller]\nroles = ["Seller"]\ntoken = "seller-secret"\n'
    )
    command = [strabo, "syncserver", "--config", str(config), "--db", str(work / "p.db"),
               "--port", "0"]
    with served(command, work) as syncserver:
        probe(syncserver, "/mas/purchase", {"Authorization": "Bearer buyer-secret"})
        probe_ui(syncserver)


def diagrams(strabo: str, names: list[str], work: Path) -> None:
    """`strabo check --diagram` of every bundled protocol, from the installed
    wheel: each an SVG that XML can read (and a Mermaid flowchart for one)."""
    import xml.etree.ElementTree as ET

    out = work / "diagrams"
    out.mkdir(exist_ok=True)
    for name in names:
        target = out / (name.replace("/", "-") + ".svg")
        run([strabo, "check", "-q", "--diagram", str(target), name], work)
        try:
            root = ET.parse(target).getroot()
        except (OSError, ET.ParseError) as exc:
            raise Failed(f"the diagram of {name} is not valid SVG: {exc}") from None
        if root.tag != "{http://www.w3.org/2000/svg}svg":
            raise Failed(f"the diagram of {name} is a <{root.tag}>, not an SVG")
    run([strabo, "check", "-q", "--diagram", str(out / "purchase.mmd"), "purchase"], work)
    if not (out / "purchase.mmd").read_text().startswith("%% Purchase: protocol diagram\n"):
        raise Failed("strabo check --diagram purchase.mmd wrote no Mermaid flowchart")
    print(f"  ok  {len(names)} protocol diagrams are valid SVG", flush=True)


def installed_files(venv: Path, work: Path) -> list[str]:
    python = str(venv / "bin" / "python")
    shown = run([python, "-m", "pip", "show", "-f", "strabo"], work)
    return [line.strip() for line in shown.split("Files:", 1)[1].splitlines() if line.strip()]


def check_layout(files: list[str]) -> None:
    tops = sorted({f.split("/")[0] for f in files if not f.startswith(("..", "strabo-"))})
    allowed = {"langshaw", "peach", "strabo", "syncserver"}
    extra = [t for t in tops if t not in allowed and not t.endswith(".dist-info")]
    if extra:
        raise Failed(f"the wheel installs top-level names {extra}; only {sorted(allowed)} belong")
    missing = [p for p in source_packages() if p not in files]
    if missing:
        raise Failed(f"the wheel lacks the packages {missing}: list them in pyproject.toml")
    lsh = [f for f in files if f.endswith(".lsh") and "/patterns/" not in f]
    if len(lsh) != len(BUNDLED):
        raise Failed(f"the wheel holds {len(lsh)} protocol files, not {len(BUNDLED)}: {lsh}")
    schemas = sorted(f.rsplit("/", 1)[-1] for f in files
                     if f.startswith("syncserver/protocols/") and f.endswith(".json"))
    if schemas != SCHEMAS:
        raise Failed(f"the wheel holds the schema files {schemas}, not {SCHEMAS}")
    patterns = sorted(f.rsplit("/", 1)[-1] for f in files
                      if f.startswith("syncserver/protocols/patterns/"))
    if patterns != PATTERNS:
        raise Failed(f"the wheel holds the pattern files {patterns}, not {PATTERNS}")
    ui = sorted(f.rsplit("/", 1)[-1] for f in files if f.startswith("syncserver/ui/"))
    if ui != UI:
        raise Failed(f"the wheel holds the dashboard files {ui}, not {UI}: see package-data")
    print(f"  ok  top-level packages {[t for t in tops if '.' not in t]}; "
          f"{len(lsh)} bundled protocols, {len(schemas)} schema files", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", metavar="DIR", help="build and install in DIR, and keep it")
    args = parser.parse_args()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="strabo-package-"))
    base.mkdir(parents=True, exist_ok=True)
    try:
        dist, work = base / "dist", base / "elsewhere"
        shutil.rmtree(dist, ignore_errors=True)
        work.mkdir(exist_ok=True)
        print(f"building into {dist}", flush=True)
        run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], base)
        [wheel] = dist.glob("*.whl")
        [sdist] = dist.glob("*.tar.gz")
        for label, artifact in (("wheel", wheel), ("sdist", sdist)):
            venv = base / f"venv-{label}"
            shutil.rmtree(venv, ignore_errors=True)
            print(f"{label}: {artifact.name} into a fresh venv", flush=True)
            run([sys.executable, "-m", "venv", str(venv)], base)
            run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(artifact)],
                base)
            check_layout(installed_files(venv, work))
            use(venv, work)
    except Failed as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print("package check: the wheel and the sdist install and run from anywhere")
    return 0


if __name__ == "__main__":
    sys.exit(main())
