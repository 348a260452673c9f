"""Run the public UCP conformance suite against strabo's bundled merchant.

The suite (github.com/Universal-Commerce-Protocol/conformance) is a set of
``*_test.py`` files that talk to a merchant over HTTP. This script:

1. gets the suite at a pinned commit into a cache directory: from a local git
   mirror when one is given (or found at the default path), else with
   ``git clone https://github.com/Universal-Commerce-Protocol/conformance``;
2. makes a virtualenv for it under the cache directory (absl-py, httpx,
   pydantic, fastapi, uvicorn and ucp-sdk), once;
3. starts ``strabo merchant --data-dir <suite>/test_data/flower_shop`` on a free
   loopback port, with a simulation secret it passes to the suite;
4. runs every ``*_test.py`` (or the ones named) from the suite's directory, and
5. prints a pass/fail table per file, the failed tests, and the total.

It is not part of ``make test`` (it needs the suite, its dependencies and, for
``protocol_test.py``'s URL check, internet access) and nothing of the suite is
copied into the project. Exit status: 0 when every test passed, 1 otherwise, 2
when the suite or its environment could not be set up.

    python scripts/ucp_conformance.py                 # everything
    python scripts/ucp_conformance.py order_test.py   # one file
    python scripts/ucp_conformance.py --suite-venv /tmp/ucp-ref-venv -v
"""

from __future__ import annotations

import argparse
import io
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE_URL = "https://github.com/Universal-Commerce-Protocol/conformance"
SUITE_COMMIT = "fdced3ad4d92637a55de8f4b71a6dead5a2621c0"
"""The suite version this merchant is known to pass (59 tests)."""
DEFAULT_MIRROR = Path("/work/.mirror/Universal-Commerce-Protocol+conformance/repo")
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "strabo-ucp"
SUITE_DEPS = [
    "absl-py>=1.0.0",
    "httpx>=0.26.0",
    "pydantic>=2.12.0",
    "fastapi>=0.109.0",
    "uvicorn>=0.38.0",
    "ucp-sdk==0.1.0",  # the SDK version the pinned suite's imports were written for
]
DATA = "test_data/flower_shop"


class SetupError(Exception):
    """The suite or its environment could not be prepared (exit status 2)."""


def _run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    result = subprocess.run(command, capture_output=True, check=False, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        output = (result.stdout + result.stderr).decode(errors="replace").strip()
        raise SetupError(f"{' '.join(command)} failed ({result.returncode}):\n{output[-2000:]}")
    return result  # type: ignore[no-any-return]


def fetch_suite(cache: Path, commit: str, mirror: Path | None, *, log: bool) -> Path:
    """The suite's files at ``commit``, extracted under ``cache`` (reused if present)."""
    target = cache / f"conformance-{commit[:12]}"
    if (target / "integration_test_utils.py").exists():
        return target
    staging = cache / f"conformance-{commit[:12]}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    if mirror is not None and mirror.exists():
        if log:
            print(f"extracting the suite at {commit[:12]} from {mirror}", flush=True)
        archive = _run(["git", "-C", str(mirror), "archive", "--format=tar", commit]).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(staging, filter="data")
    else:
        if log:
            print(f"cloning {SUITE_URL} at {commit[:12]}", flush=True)
        clone = cache / "conformance.git"
        if not clone.exists():
            _run(["git", "clone", "--quiet", "--bare", SUITE_URL, str(clone)])
        else:
            _run(["git", "-C", str(clone), "fetch", "--quiet", "origin"])
        archive = _run(["git", "-C", str(clone), "archive", "--format=tar", commit]).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(staging, filter="data")
    staging.rename(target)
    return target


def suite_python(cache: Path, given: Path | None, *, log: bool) -> Path:
    """The python of a virtualenv holding the suite's dependencies (made once)."""
    if given is not None:
        python = given / "bin" / "python"
        if not python.exists():
            raise SetupError(f"{given} is not a virtualenv (no bin/python)")
        return python
    venv = cache / "venv"
    python = venv / "bin" / "python"
    stamp = venv / ".strabo-deps"
    wanted = "\n".join(SUITE_DEPS)
    if stamp.exists() and stamp.read_text() == wanted:
        return python
    if log:
        print(f"installing the suite's dependencies into {venv}", flush=True)
    _run([sys.executable, "-m", "venv", str(venv)])
    _run([str(python), "-m", "pip", "install", "--quiet", *SUITE_DEPS])
    stamp.write_text(wanted)
    return python


@dataclass
class Merchant:
    """A ``strabo merchant`` process started by this script."""

    process: subprocess.Popen[bytes]
    url: str

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_merchant(data_dir: Path, secret: str) -> Merchant:
    """``strabo merchant`` on a free port; returns once it prints the URL it serves."""
    command = [
        sys.executable, "-m", "strabo.cli", "merchant", "--port", "0", "--log-level", "warning",
        "--data-dir", str(data_dir), "--simulation-secret", secret,
    ]
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline().decode()
    match = re.search(r"listening on (http://\S+)", first)
    if match is None:
        process.wait(timeout=15)
        error = process.stderr.read().decode(errors="replace").strip()
        raise SetupError(f"strabo merchant did not start: {error or first}")
    return Merchant(process, match.group(1))


@dataclass
class FileResult:
    """What one ``*_test.py`` reported."""

    name: str
    ran: int = 0
    failed: list[str] = field(default_factory=list)
    output: str = ""
    crashed: bool = False

    @property
    def passed(self) -> int:
        return self.ran - len(self.failed)


def run_file(python: Path, suite: Path, name: str, url: str, secret: str) -> FileResult:
    """Run one test file of the suite against ``url``."""
    command = [
        str(python), name, f"--server_url={url}", f"--simulation_secret={secret}",
        f"--conformance_input={DATA}/conformance_input.json", f"--test_data_dir={DATA}",
    ]
    try:
        done = subprocess.run(
            command, cwd=suite, capture_output=True, timeout=600, check=False
        )
        output = (done.stdout + done.stderr).decode(errors="replace")
    except subprocess.TimeoutExpired as exc:
        output = (exc.output or b"").decode(errors="replace") + "\n(timed out after 600 s)"
        return FileResult(name, output=output, crashed=True)
    result = FileResult(name, output=output)
    ran = re.search(r"^Ran (\d+) tests?", output, re.MULTILINE)
    result.ran = int(ran.group(1)) if ran else 0
    result.failed = re.findall(r"^\[\s+FAILED\s+\]\s+(\S+)", output, re.MULTILINE)
    result.failed = list(dict.fromkeys(result.failed))
    result.crashed = ran is None or (done.returncode != 0 and not result.failed)
    return result


def report(results: list[FileResult], *, verbose: bool) -> bool:
    """Print the table and the total; True when everything passed."""
    width = max(len(r.name) for r in results)
    print(f"\n{'file':<{width}}  passed  failed  result")
    for r in results:
        verdict = "CRASHED" if r.crashed else ("ok" if not r.failed else "FAIL")
        print(f"{r.name:<{width}}  {r.passed:>6}  {len(r.failed):>6}  {verdict}")
    total = sum(r.ran for r in results)
    passed = sum(r.passed for r in results)
    for r in results:
        for test in r.failed:
            print(f"  failed: {r.name} {test}")
        if (r.crashed or (verbose and r.failed)) and r.output:
            print(f"--- output of {r.name} ---\n{r.output[-4000:]}")
    print(f"\n{passed} of {total} passed")
    return passed == total and not any(r.crashed for r in results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="See docs/merchant.md (Conformance).",
    )
    parser.add_argument("files", nargs="*", help="test files to run (default: every *_test.py)")
    parser.add_argument("--commit", default=SUITE_COMMIT, help="suite commit (%(default)s)")
    parser.add_argument(
        "--mirror", type=Path, default=DEFAULT_MIRROR,
        help="local git mirror of the suite, used instead of cloning when it exists "
        "(%(default)s)",
    )
    parser.add_argument(
        "--cache-dir", type=Path, default=DEFAULT_CACHE,
        help="where the suite and its virtualenv are kept (%(default)s)",
    )
    parser.add_argument(
        "--suite-venv", type=Path,
        help="an existing virtualenv with the suite's dependencies (default: make one)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show failing output")
    args = parser.parse_args(argv)

    secret = secrets.token_urlsafe(12)
    merchant: Merchant | None = None
    try:
        args.cache_dir.mkdir(parents=True, exist_ok=True)
        suite = fetch_suite(args.cache_dir, args.commit, args.mirror, log=True)
        python = suite_python(args.cache_dir, args.suite_venv, log=True)
        files = args.files or sorted(p.name for p in suite.glob("*_test.py"))
        unknown = [name for name in files if not (suite / name).exists()]
        if unknown:
            raise SetupError(f"no such test file in the suite: {', '.join(unknown)}")
        merchant = start_merchant(suite / DATA, secret)
        print(f"merchant: {merchant.url} (data: {suite / DATA})", flush=True)
        results = []
        for name in files:
            result = run_file(python, suite, name, merchant.url, secret)
            print(f"  {name}: {result.passed}/{result.ran}", flush=True)
            results.append(result)
    except SetupError as exc:
        print(f"ucp_conformance: {exc}", file=sys.stderr)
        return 2
    finally:
        if merchant is not None:
            merchant.stop()
    return 0 if report(results, verbose=args.verbose) else 1


if __name__ == "__main__":
    sys.exit(main())
