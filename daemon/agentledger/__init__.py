"""agentledger: an event-sourced ledger of coding-agent runs, with fresh outcome scores."""

__version__ = "0.1.0"
