"""One row of a score's breakdown: the type the scorer makes and the sidecar prints,
apart from ``combine.py`` so that writing sidecars does not import the scorer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    signal: str
    label: str
    present: bool
    sub_score: float
    detail: str
    nominal_weight: float
    effective_weight: float
    contribution: float
