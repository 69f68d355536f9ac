"""The facts about an iteration that come from outside its files: what git says
of its commit, and what its transcript window sums to. Apart from ``inputs.py`` so
that ``sources/git.py`` can make them without importing the data model.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LandedFacts:
    """What git says about a record's commit on the trunk (spec §4.1)."""

    raw: str = ""  # commit.strip()
    resolved: str = ""  # full SHA when `raw^{commit}` resolves
    reachable: bool = False  # resolved and an ancestor of the trunk
    reverted_by: str = ""  # first trunk commit (newest first) that reverts it
    matched: str = ""  # unresolved: newest trunk commit whose subject equals the summary
    matched_reverted_by: str = ""


@dataclass(frozen=True)
class TranscriptTotals:
    """Sums over the transcript lines inside an iteration's window (spec §4.7)."""

    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read: int = 0
    cache_creation: int = 0
    tool_results: int = 0
    tool_errors: int = 0
