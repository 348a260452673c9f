"""The protocols that ship with strabo, reachable by name wherever it is installed.

In a checkout they are the files of ``protocols/``; in an installed wheel the
same files sit in the package (``strabo/protocols/``). Either way, a name such as
``atomic-ucp`` (the file name without ``.lsh``) finds one.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["describe", "directory", "find", "names", "path"]


def directory() -> Path:
    """The folder holding the bundled ``.lsh`` files."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "protocols", here.parent / "protocols"):
        if candidate.is_dir() and any(candidate.glob("*.lsh")):
            return candidate
    raise FileNotFoundError(
        f"no bundled protocols next to {here}: this strabo installation is incomplete"
    )


def names() -> list[str]:
    """Every bundled protocol's name, sorted."""
    return sorted(p.stem for p in directory().glob("*.lsh"))


def path(name: str) -> Path:
    """The file of the bundled protocol ``name`` (with or without ``.lsh``)."""
    stem = name.removesuffix(".lsh")
    found = directory() / f"{stem}.lsh"
    if not found.is_file():
        raise KeyError(f"no bundled protocol named {name!r} (bundled: {', '.join(names())})")
    return found


def find(name: str, base: Path | None = None) -> Path | None:
    """What ``name`` means where a protocol file is expected: the file (relative
    to ``base``) if it exists, else the bundled protocol of that name, else None.
    A name with a path separator is only ever a path."""
    file = (base or Path()) / name
    if file.is_file():
        return file
    if "/" in name or "\\" in name:
        return None
    try:
        return path(name)
    except (KeyError, FileNotFoundError):
        return None


def describe(name: str) -> str:
    """What a bundled protocol is about, in one line: its first comment's first
    sentence, or its roles if it has no comment (the paper's listings have none)."""
    from langshaw import LangshawProtocol

    protocol = LangshawProtocol.load(path(name))
    comment: list[str] = []
    for line in path(name).read_text(encoding="utf-8").splitlines()[1:]:
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
