"""The one grammar of the iteration log's file names, for every kind of file in it.

An iteration number in a name is ASCII digits with no leading zero (``0``, ``7``,
``66``): ``iter-066.yaml``, ``iter-６６.labels.yaml`` (fullwidth digits, which
Python's ``\\d`` and ``int`` both take) and ``iter- 66.yaml`` name no iteration, so no
such file can take the place of another's (an agent that writes ``iter-066.hook-outcomes.yaml``
and removes it again must not retract ``iter-66.hook-outcomes.yaml``). Every name a
reader classifies and every name a writer makes comes from here: the parser's
``parse`` and the makers below are inverse of each other (``tests/test_names.py``).

Standard library only, and importable by every package (as ``errors`` is)."""

from __future__ import annotations

import re

RECORD, HISTORICAL, HOOK, LABELS, MISNAMED = "record", "historical", "hook_outcomes", "labels", "misnamed"
SCORE = "score"  # iter-N.score.yaml: our own output, never an input

HISTORICAL_NAME = "historical.yaml"
_SUFFIX = {RECORD: ".yaml", HOOK: ".hook-outcomes.yaml", LABELS: ".labels.yaml", SCORE: ".score.yaml"}
_KIND_OF = {".": RECORD, ".hook-outcomes.": HOOK, ".labels.": LABELS, ".score.": SCORE}
NUMBER = "0|[1-9][0-9]*"  # re.ASCII is not needed: the classes are spelled out
_NAME = re.compile(rf"iter-({NUMBER})(\.|\.hook-outcomes\.|\.labels\.|\.score\.)yaml")
_NUMBER = re.compile(NUMBER)

SESSION_PREFIX, SESSION_SUFFIX = "session-", ".score.yaml"
NAME_MAX = 255
_UNSAFE_ID = re.compile(r"[/\\\x00-\x1f\x7f]")


def iteration_file(kind: str, n: int) -> str:
    """The one name of iteration ``n``'s file of ``kind`` (record, hook_outcomes, labels, score).
    A record may say a negative iteration (the archive's entries are read whole): its
    score sidecar is named as the reference names it, ``iter--1.score.yaml``, a name
    ``parse`` calls misnamed, so it is never read as an input."""
    return f"iter-{n}{_SUFFIX[kind]}"


def parse(name: str) -> tuple[str, int | None] | None:
    """(kind, N) for a name of the grammar; ``(HISTORICAL, None)`` for the archive;
    ``(MISNAMED, None)`` for a name that looks like an iteration's file (``iter-….yaml``)
    but is not spelled as the grammar spells one; None for any other name."""
    m = _NAME.fullmatch(name)
    if m:
        return _KIND_OF[m.group(2)], int(m.group(1))
    if name == HISTORICAL_NAME:
        return HISTORICAL, None
    if name.startswith("iter-") and name.endswith(".yaml"):
        return MISNAMED, None
    return None


def iteration_number(text: str) -> int | None:
    """An iteration number as the grammar spells it (a command's argument too), or None."""
    return int(text) if _NUMBER.fullmatch(text) else None


def session_file(session_id: str) -> str:
    return f"{SESSION_PREFIX}{session_id}{SESSION_SUFFIX}"


def unsafe_session_id(session_id: str) -> str | None:
    """Why ``session_id`` cannot be a file-name component, or None if it can.

    The reference writes ``session-<id>.score.yaml`` with the id verbatim, so an
    id like ``../../etc/x`` writes outside the log directory. We refuse it."""
    if not session_id:
        return "empty session_id has no addressable sidecar"
    if _UNSAFE_ID.search(session_id):
        return "contains a path separator or a control character"
    if session_id in (".", ".."):
        return "is a relative path component"
    if len(session_file(session_id).encode("utf-8", "surrogatepass")) > NAME_MAX:
        return f"makes a file name longer than {NAME_MAX} bytes"
    return None
