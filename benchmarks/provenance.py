"""Which tree a benchmark ran: the commit recorded beside its numbers."""

from __future__ import annotations

import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def commit() -> str:
    """THUNDER_COMMIT where set (the device machine's copy of the tree carries a git directory that
    may be older than the tree: pass the local HEAD), else HEAD, with "+changes" where tracked
    files differ from it."""
    if os.environ.get("THUNDER_COMMIT"):
        return os.environ["THUNDER_COMMIT"]
    try:
        head = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, text=True,
                                       stderr=subprocess.DEVNULL).strip()
    except Exception:
        return "unknown"
    try:
        changed = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], cwd=HERE,
                                 stderr=subprocess.DEVNULL).returncode == 1
    except Exception:
        changed = False
    return head + ("+changes" if changed else "")
