"""The ledger's main job, one direction: source → events → projections → score → sidecar.

``Ledger`` (``facade``) is what the CLI and the daemon hold; each of its parts has
one job and a module of its own (docs/architecture.md has the map).
"""

from .facade import Ledger
from .outcome import Outcome, Progress, SourceError

__all__ = ["Ledger", "Outcome", "Progress", "SourceError"]
