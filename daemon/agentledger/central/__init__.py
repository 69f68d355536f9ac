"""The team ledger: this ledger's events shipped to a PostgreSQL database shared by
many machines, and read back from it. Needs the ``[central]`` extra (psycopg 3);
nothing outside ``central/`` imports psycopg, so the local product works without it.
"""
