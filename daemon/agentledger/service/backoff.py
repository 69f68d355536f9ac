"""How long the daemon waits after failures in a row (a store it cannot open, a team
server it cannot reach): one rule for every retry loop."""

from __future__ import annotations


def backoff(failures: int) -> float:
    """Seconds to wait after the ``failures``-th failure in a row: 0.5 s doubling to 60 s."""
    return min(60.0, 0.5 * 2 ** (failures - 1))
