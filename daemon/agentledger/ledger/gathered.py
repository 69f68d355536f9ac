"""One iteration's scoring inputs as a pass ships them to the worker that scores it.

Apart from ``inputs.py`` (which gathers them) so that the data model and the scorer's
inputs are imported by a pass that gathers, and by a worker when it unpickles its
first job, not by every command that opens the ledger.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..model import Record
from ..scoring.inputs import ScoringInputs, digests_of


@dataclass(frozen=True)
class Gathered:
    """One iteration's scoring inputs as gathered: every fact (``ScoringInputs.facts``),
    and the record as its stored JSON text. The record is decoded only where the
    iteration is scored, and only once its inputs hash shows it changed: a pass of
    10,000 iterations neither decodes nor ships 10,000 records from its main process."""

    iteration: int
    record_json: str
    facts: dict
    window: tuple[int | None, int] | None  # the transcript window its tokens were summed over

    def digests(self, rubric_version: str, marker: bool) -> tuple[str, str]:
        return digests_of(rubric_version, marker, self.record_json, self.facts)

    def inputs(self) -> ScoringInputs:
        return ScoringInputs(record=Record.from_json(json.loads(self.record_json)), **self.facts)
