"""Everything one iteration's score depends on, gathered before scoring.

The scorer is a pure function of (rubric, ScoringInputs). Git facts, side
files and artifacts are resolved into plain values first, so a score can name
its inputs by hash: equal hash, equal score, no rewrite.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from ..model import Artifact, HookOutcomes, Labels, Record, to_jsonable
from .facts import LandedFacts, TranscriptTotals  # noqa: F401 - the inputs' names too

# Bump when a change to the scoring code (not the rubric data) can change a
# score for the same inputs, so every score is recomputed once.
SCORER_REVISION = 1


@dataclass(frozen=True)
class ScoringInputs:
    record: Record
    trunk: str = "master"
    hook: HookOutcomes | None = None  # None: no hook-outcomes sidecar
    labels: Labels | None = None  # None: no labels sidecar
    verifier_artifacts: tuple[Artifact | None, ...] = ()  # one per verifier
    review_artifact: Artifact | None = None
    landed: LandedFacts = LandedFacts()
    write_scope: tuple[str, ...] | None = None  # None: no task declares one
    changed_files: tuple[str, ...] | None = None  # None: unknown / unreadable
    commit_time: str | None = None  # ISO-8601 UTC, None when unresolvable
    # Sums over the window (previous resolved commit time, this commit time];
    # None when the commit time is unresolvable (no window, hence no rate).
    transcript: TranscriptTotals | None = None

    @property
    def tool_error_rate(self) -> float | None:
        t = self.transcript
        if t is None or t.tool_results <= 0:
            return None
        return t.tool_errors / t.tool_results

    def digest(self, rubric_version: str, record_json: str | None = None) -> str:
        """sha256 over everything the score depends on.

        ``record_json``: the record's stored JSON text, when the caller has it
        (saves re-serialising the record; it is the same JSON ``to_jsonable`` gives)."""
        return _hash(rubric_version, _joined(self._parts(record_json)))

    def digests(self, rubric_version: str, marker: bool, record_json: str | None = None) -> tuple[str, str]:
        """``digest`` under ``rubric_version`` (with the marker option), and the same
        hash with the rubric left out: the *inputs key*. Two scores under different
        rubrics with one key were computed from the same inputs, which is what lets a
        switch back to a rubric reuse its scores without gathering anything."""
        return digests_of(rubric_version, marker, record_json, self.facts())

    def facts(self) -> dict[str, object]:
        """Every input but the record (``ScoringInputs(record=…, **facts)`` is this one again)."""
        return {name: getattr(self, name) for name in FACTS}

    def _parts(self, record_json: str | None) -> tuple[str, ...]:
        return _parts_of(record_json if record_json is not None else _dump(to_jsonable(self.record)), self.facts())


FACTS = ("trunk", "hook", "labels", "verifier_artifacts", "review_artifact", "landed", "write_scope",
         "changed_files", "commit_time", "transcript")


def digests_of(rubric_version: str, marker: bool, record_json: str, facts: dict[str, object]) -> tuple[str, str]:
    """``ScoringInputs.digests`` from the record's stored JSON and the other inputs, with
    no ``Record`` decoded: a pass learns which iterations changed before decoding any.
    The two hashes share every part but the first: each part is encoded once."""
    tail = _joined(_parts_of(record_json, facts))
    tag = "+marker" if marker else ""
    return _hash(f"{rubric_version}{tag}", tail), _hash(tag, tail)


def _parts_of(record_json: str, f: dict[str, object]) -> tuple[str, ...]:
    return (
        str(SCORER_REVISION), f["trunk"], record_json,
        _dump(to_jsonable(f["hook"])), _dump(to_jsonable(f["labels"])),
        _dump(to_jsonable(f["verifier_artifacts"])), _dump(to_jsonable(f["review_artifact"])),
        _dump(to_jsonable(f["landed"])), _dump(f["write_scope"]), _dump(f["changed_files"]),
        _dump(f["commit_time"]), _dump(to_jsonable(f["transcript"])),
    )


def _joined(parts: tuple[str, ...]) -> bytes:
    """The parts as a digest hashes them: each in UTF-8, each ended by a NUL."""
    return b"".join(p.encode("utf-8") + b"\x00" for p in parts)


def _hash(first: str, tail: bytes) -> str:
    """sha256 over ``first`` and the ``_joined`` parts after it (``digests_of`` hashes
    one tail under two firsts)."""
    return "sha256:" + hashlib.sha256(_joined((first,)) + tail).hexdigest()


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # json.dumps with these
# arguments builds an encoder a call: nine calls an iteration scored


def _c_encoder():
    """``_ENCODER.encode``'s C encoder, made once: ``encode`` makes one a call (~1.5 us of
    ~3 for a small fact, ~5 calls an iteration scored). Without the circular-reference
    check, which needs a dict that an encoding stopped by an error would leave dirty; the
    facts are the data model's plain values, decoded from JSON, which has no cycles."""
    from json import encoder

    if encoder.c_make_encoder is None:  # (an interpreter without the C accelerator)
        return None
    return encoder.c_make_encoder(None, _ENCODER.default, encoder.encode_basestring, None, ":", ",",
                                  False, False, True)


_C_ENCODE = _c_encoder()


def _dump(value: object) -> str:
    if value is None:  # most facts are absent: no encoder call
        return "null"
    if _C_ENCODE is None or type(value) is str:  # (a string as ``encode`` writes one)
        return _ENCODER.encode(value)
    return "".join(_C_ENCODE(value, 0))
