"""The product's errors: one base, and the exit code each kind means.

Every error a command can end with is an ``AgentledgerError``; its message is one
line for people (no traceback), and ``cli`` maps it to an exit code in one place
(``exit_code``): 2 for what the user asked wrong (flags, configuration, an unknown
rubric), 1 for what could not be done. Parse problems inside a source never get
here: they become quarantine records (``sources/``).
"""

from __future__ import annotations


class AgentledgerError(Exception):
    """Could not do what was asked: exit 1, one line."""

    exit_code = 1


class Stopping(BaseException):
    """A stop was asked for (the daemon's SIGTERM) and a long pass has just committed a
    batch: it ends there, not at its end. A BaseException so that no step's ``except
    Exception`` takes it for a failure; what was committed stays, and the next start
    goes on from the checkpoints."""


class UsageError(AgentledgerError):
    """What was asked is wrong (flags, values, configuration): exit 2, one line naming
    what is valid."""

    exit_code = 2
