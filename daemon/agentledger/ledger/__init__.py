"""The ledger's main job, one direction: source → events → projections → score → sidecar.

``Ledger`` (``facade``) is what the CLI and the daemon hold; each of its parts has
one job and a module of its own (docs/architecture.md has the map).
"""

from ..process import parallel
from .facade import Ledger
from .outcome import Outcome, Progress, SourceError

# the modules of the ledger's worker jobs: observing files, scoring, writing sidecars
parallel.preload("agentledger.ledger.iterlogs", "agentledger.ledger.score_job", "agentledger.ledger.sidecar_writes")

__all__ = ["Ledger", "Outcome", "Progress", "SourceError"]
