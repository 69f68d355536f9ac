"""What the ledger writes beside the logs: score sidecars, rendered byte for byte as the reference does, and the atomic writer (with its writer thread)."""
