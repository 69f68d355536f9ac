"""What a transaction's events changed, for choosing which iterations to rescore."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Touched:
    iterations: set[tuple[str, int]] = field(default_factory=set)  # (source, iteration)
    artifacts: set[tuple[str, str]] = field(default_factory=set)  # (source, repo path)
    transcript_times: dict[str, list[int]] = field(default_factory=dict)  # directory -> ts_ns

    def merge(self, other: Touched) -> None:
        self.iterations |= other.iterations
        self.artifacts |= other.artifacts
        for k, v in other.transcript_times.items():
            self.transcript_times.setdefault(k, []).extend(v)

    def clear(self) -> None:
        self.iterations.clear()
        self.artifacts.clear()
        self.transcript_times.clear()

    def pending_rows(self) -> list[tuple]:
        """The ``pending`` rows that queue these changes for the next scoring pass."""
        rows = [(s, "iteration", str(it), None, None) for s, it in sorted(self.iterations)]
        rows += [(s, "artifact", p, None, None) for s, p in sorted(self.artifacts)]
        rows += [(d, "transcript", d, min(ts), max(ts)) for d, ts in sorted(self.transcript_times.items()) if ts]
        return rows
