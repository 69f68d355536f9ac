"""Rubric definitions, loaded from ``schema/rubrics/<version>.toml``.

The rubric is data: which signals, their labels and weights, their order,
and the bands. The code only knows how to measure each signal id.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache

from ..errors import UsageError
from ..paths import schema_dir


@dataclass(frozen=True)
class SignalDef:
    id: str
    label: str
    weight: float
    kind: str
    two_way: bool


@dataclass(frozen=True)
class Rubric:
    version: str
    combination: str
    signals: tuple[SignalDef, ...]
    bands: tuple[tuple[str, float], ...]

    def band(self, value: float) -> str:
        for name, lower in self.bands:
            if value >= lower:
                return name
        return self.bands[-1][0]  # NaN compares false everywhere: the lowest band

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(s.id for s in self.signals)


class UnknownRubric(UsageError, KeyError):
    def __str__(self) -> str:  # a KeyError prints its repr; this is a message for people
        return str(self.args[0]) if self.args else "unknown rubric"


def available() -> list[str]:
    return sorted((p.stem for p in (schema_dir() / "rubrics").glob("*.toml")),
                  key=lambda v: tuple(int(x) for x in v.split(".")))


@cache
def load(version: str) -> Rubric:
    path = schema_dir() / "rubrics" / f"{version}.toml"
    if not path.is_file():
        raise UnknownRubric(f"unknown rubric version {version!r} (have: {', '.join(available())})")
    data = tomllib.loads(path.read_text("utf-8"))
    if data.get("combination") != "weighted_mean_renormalized":
        raise ValueError(f"rubric {version}: unsupported combination {data.get('combination')!r}")
    signals = tuple(
        SignalDef(s["id"], s["label"], float(s["weight"]), s.get("kind", ""), bool(s.get("two_way")))
        for s in data["signals"]
    )
    total = sum(s.weight for s in signals)
    if abs(total - 1.0) > 1e-9:
        raise ValueError(f"rubric {version}: weights sum to {total}, not 1")
    bands = tuple((b["name"], float(b["min"])) for b in data["bands"])
    return Rubric(version=data["version"], combination=data["combination"],
                  signals=signals, bands=bands)
