"""Answers from the ledger: is it getting better, why, and is the difference real
(``agentledger compare``). Reads the store through a read-only connection; the
statistics (scipy) are imported only here."""
