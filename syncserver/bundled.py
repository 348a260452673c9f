"""The protocols that ship with strabo, reachable by name wherever it is installed.

In a checkout they are the files of ``protocols/``; in an installed wheel the
same files sit in the package (``syncserver/protocols/``). Either way, a name such as
``atomic-ucp`` (the file name without ``.lsh``) finds one.

The pattern protocols sit one folder down (``protocols/patterns/market.lsh``),
next to their simulation scenarios; their name is ``patterns/market``. The
folder may be left out (``market``) when no other bundled protocol has that
name: the top-level protocols came first and keep their names, so a pattern
whose name one of them has, or that two folders share, needs its folder.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["describe", "directory", "find", "names", "path", "scenario_names"]


def directory() -> Path:
    """The folder holding the bundled ``.lsh`` files."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "protocols", here.parent / "protocols"):
        if candidate.is_dir() and any(candidate.glob("*.lsh")):
            return candidate
    raise FileNotFoundError(
        f"no bundled protocols next to {here}: this strabo installation is incomplete"
    )


def _files() -> dict[str, Path]:
    """Every bundled protocol by its full name: ``purchase``, ``patterns/market``."""
    root = directory()
    found = {p.stem: p for p in root.glob("*.lsh")}
    for p in root.glob("*/*.lsh"):
        found[f"{p.parent.name}/{p.stem}"] = p
    return found


def names() -> list[str]:
    """Every bundled protocol's full name, sorted: the top-level ones, then those
    in folders (``patterns/market``)."""
    return sorted(_files(), key=lambda n: ("/" in n, n))


def path(name: str) -> Path:
    """The file of the bundled protocol ``name`` (with or without ``.lsh``): a
    full name, or a folder's protocol without its folder when that is unambiguous.
    Only names the bundle holds are looked up, so ``../x`` finds nothing."""
    stem = name.removesuffix(".lsh")
    files = _files()
    if stem in files:
        return files[stem]
    short = [full for full in files if "/" in full and full.rsplit("/", 1)[1] == stem]
    if len(short) == 1:
        return files[short[0]]
    if short:
        raise KeyError(f"{name!r} is ambiguous: say which, {' or '.join(sorted(short))}")
    raise KeyError(f"no bundled protocol named {name!r} (bundled: {', '.join(names())})")


def find(name: str, base: Path | None = None) -> Path | None:
    """What ``name`` means where a protocol file is expected: the file (relative
    to ``base``) if it exists, else the bundled protocol of that name
    (``purchase``, ``patterns/market``, ``market``), else None. A file always
    wins, so a project's own ``patterns/market.lsh`` is the one it means."""
    file = (base or Path()) / name
    if file.is_file():
        return file
    if "\\" in name:
        return None
    try:
        return path(name)
    except (KeyError, FileNotFoundError):
        return None


def scenario_names() -> list[str]:
    """The simulation scenarios shipped with the pattern protocols (``market``
    for ``patterns/market.toml``), sorted; none if the folder is missing."""
    try:
        folder = directory() / "patterns"
    except FileNotFoundError:
        return []
    return sorted(p.stem for p in folder.glob("*.toml"))


def describe(name: str) -> str:
    """What a bundled protocol is about, in one line: its first comment's first
    sentence, or its roles if it has no comment (the paper's listings have none)."""
    from langshaw import LangshawProtocol

    file = path(name)
    protocol = LangshawProtocol.load(file)
    comment: list[str] = []
    for line in file.read_text(encoding="utf-8").splitlines()[1:]:
        text = line.strip()
        if text.startswith("#"):
            comment.append(text.lstrip("#").strip())
        elif comment:
            break
    first = " ".join(comment).split(". ")[0].rstrip(".")
    if len(first) > 90:
        first = first[:87].rsplit(" ", 1)[0] + "..."
    about = first or f"roles {', '.join(protocol.roles)}; {len(protocol.actions)} actions"
    return f"{protocol.name}: {about}"
