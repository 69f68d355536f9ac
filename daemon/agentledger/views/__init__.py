"""Views of the ledger for people and other tools: the HTML report, exports and imports."""
