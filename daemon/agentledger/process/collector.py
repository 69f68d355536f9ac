"""How often the cyclic garbage collector runs in our processes.

CPython's default starts a young-generation collection every 700 net container
allocations and a full one every 100 young ones. A cold ingest allocates millions of
short-lived dicts, lists and tuples, nearly none of them in cycles, while its
committing process holds a few hundred thousand long-lived objects (checkpoints,
touched sets, queued jobs) that every full collection walks again: at 10,000
iterations the committing process spent 0.55–0.62 s of its ~4.5 s of CPU in ~940
collections. Young collections every 50,000 allocations leave ~6 of them there
(0.12 s), and the workers a few. The memory this holds back is what 50,000 small
objects take before a cycle among them is found: a few MB at most.

Stdlib only, a call each: the CLI's entry and each worker process set it.
"""

from __future__ import annotations

import gc

YOUNG = 50_000  # net container allocations between young-generation collections (CPython: 700)


def pace() -> None:
    """This process's collector at the pace above (the older generations keep their ratios)."""
    gc.set_threshold(YOUNG, *gc.get_threshold()[1:])
