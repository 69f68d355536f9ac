"""What the ledger writes for people and other tools: sidecars, the HTML report, exports."""
