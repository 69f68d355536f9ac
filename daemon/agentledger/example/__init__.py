"""The generated example: a synthetic iteration log, repository, transcripts and vally runs (demo, benchmarks, tests)."""
