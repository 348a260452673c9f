"""A throwaway PostgreSQL server for the tests and the benchmarks.

    .venv/bin/python -m bench._pgcluster     # prints its URL; Ctrl-C stops and deletes it

``initdb`` makes a cluster in a new temporary directory, ``postgres`` serves it
on a free loopback port (its socket directory inside the temporary directory),
and :meth:`Cluster.stop` shuts it down and deletes the directory. The binaries
are looked for in ``$STRABO_PG_BIN``, on ``PATH``, in the distribution's
directories (``/usr/lib/postgresql/*/bin``, ...), and last in the ``pgserver``
package, a dev dependency that ships them, so that ``make test`` needs nothing
installed beforehand where pgserver has wheels (CPython 3.9-3.12 on x86_64, and
macOS arm64); elsewhere the system's server package is needed, and when nothing
is found the error names the command that installs it. PostgreSQL refuses to
run as root: as root, the server runs as ``nobody``, and the temporary directory
belongs to it.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import importlib.util
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import Any

_DISTRIBUTION_DIRS = (
    "/usr/lib/postgresql/*/bin",  # Debian, Ubuntu
    "/usr/pgsql-*/bin",  # RHEL, Fedora (PGDG)
    "/usr/local/pgsql/bin",
    "/opt/homebrew/opt/postgresql@*/bin",
    "/usr/local/opt/postgresql@*/bin",
)
READY = "database system is ready to accept connections"


def find_binaries() -> Path:
    """A directory holding ``initdb`` and ``postgres``."""
    candidates: list[Path] = []
    if os.environ.get("STRABO_PG_BIN"):
        candidates.append(Path(os.environ["STRABO_PG_BIN"]))
    on_path = shutil.which("postgres")
    if on_path:
        candidates.append(Path(on_path).parent)
    for pattern in _DISTRIBUTION_DIRS:
        found = glob.glob(pattern)
        # The newest version first: postgresql/16 before postgresql/15.
        found.sort(key=lambda p: [int(n) for n in re.findall(r"\d+", p)] or [0], reverse=True)
        candidates.extend(Path(p) for p in found)
    spec = importlib.util.find_spec("pgserver")
    if spec is not None and spec.submodule_search_locations:
        candidates.append(Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin")
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "postgres").is_file():
            return directory
    raise RuntimeError(
        "no PostgreSQL server binaries (initdb, postgres) in $STRABO_PG_BIN, on PATH, in "
        f"{', '.join(_DISTRIBUTION_DIRS)} or in the pgserver package: {install_hint()}"
    )


def install_hint(
    os_release: str | None = None, platform: str = sys.platform, pgserver: bool | None = None
) -> str:
    """What to install for :func:`find_binaries` to succeed here, as a command:
    the distribution's server package, or pgserver where it has wheels (the dev
    extras bring it there, so its absence means they were not installed)."""
    if os_release is None:
        with contextlib.suppress(OSError):
            os_release = Path("/etc/os-release").read_text()
    if pgserver is None:
        pgserver = pgserver_has_wheels()
    ids = set()
    for line in (os_release or "").splitlines():
        key, _, value = line.partition("=")
        if key in ("ID", "ID_LIKE"):
            ids |= set(value.strip().strip("\"'").split())
    if ids & {"debian", "ubuntu"}:
        command = "run sudo apt-get install postgresql (the Debian package)"
    elif ids & {"fedora", "rhel", "centos"}:
        command = "run sudo dnf install postgresql-server"
    elif "alpine" in ids:
        command = "run sudo apk add postgresql"
    elif platform == "darwin":
        command = "run brew install postgresql@16"
    else:
        command = "install the system's PostgreSQL server package"
    extras = ", or pip install -e '.[dev]' (pgserver ships them)" if pgserver else ""
    return f"{command}{extras}, or set STRABO_PG_BIN to the directory holding them"


def pgserver_has_wheels(version: tuple[int, int] | None = None, machine: str = "") -> bool:
    """Whether pgserver can be installed here (the marker of its line in
    pyproject.toml: it has wheels for CPython 3.9-3.12 on x86_64 and macOS arm64)."""
    import platform

    version = version or (sys.version_info.major, sys.version_info.minor)
    return version < (3, 13) and (machine or platform.machine()) in ("x86_64", "AMD64", "arm64")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:
    """In the server's process before exec: get SIGQUIT (PostgreSQL's immediate
    shutdown) if the process that started it dies, so that no server outlives a
    killed test run. Linux only; elsewhere the server is stopped by stop()."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGQUIT)  # PR_SET_PDEATHSIG


class Cluster:
    """One PostgreSQL server in a temporary directory, until :meth:`stop`."""

    def __init__(self, *, durable: bool = False, settings: dict[str, str] | None = None) -> None:
        """``durable``: PostgreSQL's defaults (``fsync``, ``synchronous_commit``);
        otherwise commits are not flushed, which a test does not need."""
        self.bin = find_binaries()
        self.durable = durable
        self.settings = settings or {}
        self.directory: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.log: deque[str] = deque(maxlen=200)
        self._ready = threading.Event()
        self._user: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            self._user = pwd.getpwnam("nobody")

    @property
    def url(self) -> str:
        return f"postgresql://strabo@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        result = subprocess.run(
            args, capture_output=True, text=True, timeout=120, **self._as_user()
        )
        if result.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({result.returncode}): {result.stderr[-2000:]}")

    def _reachable(self) -> None:
        """The binaries may sit where ``nobody`` cannot go (a checkout in root's
        home): then a self-contained installation (pgserver's: bin, lib, share
        side by side) is copied into the temporary directory."""
        assert self.directory is not None and self._user is not None
        try:
            self._run(str(self.bin / "initdb"), "--version")
            return
        except (OSError, RuntimeError):
            if not (self.bin.parent / "share").is_dir():
                raise
        # pgserver/pginstall/bin finds its libraries at ../../../pgserver.libs.
        package = self.bin.parent.parent
        site = self.directory / "site"
        copy = site / package.name / self.bin.parent.name
        shutil.copytree(self.bin.parent, copy, symlinks=True)
        libs = package.parent / f"{package.name}.libs"
        if libs.is_dir():
            shutil.copytree(libs, site / libs.name, symlinks=True)
        for path in [site, *site.rglob("*")]:
            os.lchown(path, self._user.pw_uid, self._user.pw_gid)
        self.bin = copy / "bin"

    def _as_user(self) -> dict[str, Any]:
        if self._user is None:
            return {}
        return {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}

    def start(self, seconds: float = 60) -> str:
        """Make and start the cluster; returns its URL (user ``strabo``, who may
        create databases, and the database ``postgres``)."""
        try:
            return self._start(seconds)
        except BaseException:
            self.stop()  # nothing left behind: no server, no directory
            raise

    def _start(self, seconds: float) -> str:
        self.directory = Path(tempfile.mkdtemp(prefix="strabo-pg-"))
        if self._user is not None:
            os.chown(self.directory, self._user.pw_uid, self._user.pw_gid)
            self._reachable()
        data = self.directory / "data"
        self._run(
            str(self.bin / "initdb"), "-D", str(data), "-U", "strabo", "--auth=trust",
            "-E", "UTF8", "--locale=C", "--no-sync",
        )
        for _ in range(5):  # a free port can be taken before the server binds it
            self.port = _free_port()
            if self._start_server(data, seconds):
                break
        else:
            raise RuntimeError("PostgreSQL did not start:\n" + "\n".join(self.log))
        return self.url

    def _start_server(self, data: Path, seconds: float) -> bool:
        assert self.directory is not None
        options = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.directory),
            "max_connections": "200",
            "shared_buffers": "64MB",
            **({} if self.durable else {"fsync": "off", "synchronous_commit": "off",
                                         "full_page_writes": "off"}),
            **self.settings,
        }
        args = [str(self.bin / "postgres"), "-D", str(data)]
        for name, value in options.items():
            args += ["-c", f"{name}={value}"]
        self._ready.clear()
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            **self._as_user(),
        )
        threading.Thread(target=self._drain, args=(self.process,), daemon=True).start()
        self._ready.wait(seconds)
        if self._ready.is_set() and self.process.poll() is None:
            return True
        self._terminate()
        return False

    def _drain(self, process: subprocess.Popen[bytes]) -> None:
        """Read the server's log (a full pipe would block it); note readiness."""
        assert process.stderr is not None
        for raw in process.stderr:
            line = raw.decode(errors="replace").rstrip()
            self.log.append(line)
            if READY in line:
                self._ready.set()
        self._ready.set()  # it exited: whoever waits, stop waiting

    def _terminate(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGINT)  # fast shutdown: clients are disconnected
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)

    def stop(self) -> None:
        self._terminate()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    durable = "--durable" in sys.argv
    with Cluster(durable=durable) as cluster:
        print(cluster.url, flush=True)
        print(f"(binaries: {cluster.bin}; durable: {durable}; Ctrl-C stops)", flush=True)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
