"""The ``agentledger`` command line.

Thin: each command parses flags, calls the ledger, prints. One module per group of
commands (``ingest``: take data in and keep scores fresh; ``read``: look at the
ledger; ``trajectories``; ``views``: ui, report, export, import), and ``common``
for what they share. Exit status: 0 ok; 1 findings, nothing found, or a failure
(one line on stderr); 2 a usage error (bad flag or value, one line naming the
valid ones). No input the user gives ends in a traceback. Imports stay lazy so that ``agentledger score N`` (the close-task hook)
loads only the stdlib, PyYAML and the scorer.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Sequence

from ..process import collector
from .common import EXIT_FAIL, EXIT_OK, EXIT_USAGE, UsageError, add_common_flags

GROUPS = ("ingest", "read", "answers", "trajectories", "views", "team", "settings")  # help lists them in this order

# the group (module) each command is in: a command line naming one first builds that
# command's flags alone (``main``); tests/test_cli.py checks this against the modules
COMMAND_GROUPS = {
    **dict.fromkeys(("ingest", "run", "score", "backfill", "rebuild"), "ingest"),
    **dict.fromkeys(("status", "quarantine", "trials", "runs", "query"), "read"),
    **dict.fromkeys(("compare", "cost", "experiment", "detections"), "answers"),
    **dict.fromkeys(("trajectories", "trajectory", "lint"), "trajectories"),
    **dict.fromkeys(("ui", "report", "export", "import"), "views"),
    **dict.fromkeys(("ship", "central"), "team"),
    "config": "settings",
}


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (what is wrong, and where help is),
    not the whole usage block: the sub-commands share this class."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def exit(self, status: int = 0, message: str | None = None):  # type: ignore[override]
        """Every usage line goes out scrubbed of passwords (a keyword/value connection
        string named where a URL goes, say) and with control characters escaped."""
        if message:
            from ..terminal import message as line

            message = line(message)
        super().exit(status, message)


class _Skipped:
    """What ``cmd`` hands a group for a command not being built: takes its flags, keeps nothing."""

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: self


@functools.cache
def build_parser(only: str | None = None, command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or (``only``: a group's module name) that group's
    commands alone, or (``command``) that one command of it: the close-task hook need
    not import every other command's module, nor build every other command's flags.
    Built once a process (a parser reads any number of command lines): the warm copy
    that answers the hook (``served.py``) builds it for each process it forks."""
    import importlib

    parser = Parser(
        prog="agentledger",
        description="An event-sourced ledger of coding-agent runs that keeps their outcome scores fresh.",
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"agentledger {__version__}")
    add_common_flags(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def cmd(name: str, help: str) -> argparse.ArgumentParser:
        if command is not None and name != command:
            return _Skipped()  # type: ignore[return-value]
        p = sub.add_parser(name, help=help.replace("%", "%%"), description=help)  # help is %-formatted
        add_common_flags(p)
        return p

    for group in (only,) if only else GROUPS:
        importlib.import_module(f"{__name__}.{group}").add_commands(cmd)
    return parser


# the commands --rubric means something to: an activation (rebuild refuses it with a
# word of its own), or export --format csv's filter
SCORING_COMMANDS = frozenset({"ingest", "score", "backfill", "run", "rebuild", "export"})


def setup_logging(args: argparse.Namespace) -> None:
    import logging

    class Shown(logging.Formatter):
        """A warning names files and values from the data: scrubbed and escaped as every error line is."""

        def format(self, record: logging.LogRecord) -> str:
            from ..terminal import message

            return message(super().format(record))

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(Shown("agentledger: %(levelname)s: %(message)s"))
    logging.basicConfig(level=logging.ERROR if getattr(args, "quiet", False) else logging.WARNING,
                        handlers=[handler])


def main(argv: Sequence[str] | None = None, *, own_process: bool = False) -> int:
    """``own_process``: this process runs this one command and nothing else (the console
    script), so a command may set a limit that holds for the whole process (``query``:
    SQLite's hard heap limit, which can only be lowered); tests call ``main`` in their own
    process and leave it False."""
    argv = list(sys.argv[1:] if argv is None else argv)
    hook = argv[:1] == ["score"]  # the close-task hook: `agentledger score N …`
    group = COMMAND_GROUPS.get(argv[0]) if argv else None  # else --help, --version, a typo: every command
    parser = build_parser(group, argv[0]) if group else build_parser()
    args = parser.parse_args(argv)
    args.argv = argv  # the command line as given (the close-task hook hands it to a running service)
    args.own_process = own_process
    from ..service import hook as served

    if served.SERVING is not None and args.command != "score":  # a process answering for the service runs
        raise served.NotServed  # the close-task hook's command, nothing else (cli/served.py)
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    if not hook:  # the hook sets logging up only when it works itself (a running service may answer it)
        setup_logging(args)
    collector.pace()
    if getattr(args, "rubric", None) and args.command not in SCORING_COMMANDS:
        parser.exit(EXIT_USAGE, f"agentledger {args.command}: error: --rubric goes with a command that scores"
                                f" (backfill, ingest, run, score): it activates that rubric; "
                                f"{args.command} reads what is active\n")
    if args.command in RAW_OUTPUT:
        return _run(args, parser)
    from ..terminal import Escaping

    out = sys.stdout
    sys.stdout = escaping = Escaping(out)  # nothing from data reaches a terminal raw, whoever prints it
    try:
        return _run(args, parser)
    finally:
        if sys.stdout is escaping:
            sys.stdout = out


# commands whose standard output is the ledger's own bytes (an export's payload text), not text for a person
RAW_OUTPUT = frozenset({"export"})


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import sqlite3

    from ..errors import AgentledgerError
    from ..terminal import message

    try:
        return args.func(args)
    except AgentledgerError as exc:  # the one place an error becomes an exit code (errors.py)
        if type(exc) is UsageError:  # about this command's flags
            parser.exit(exc.exit_code, f"agentledger {args.command}: error: {exc}\n")
        print(message(f"agentledger: error: {exc}"), file=sys.stderr)  # a password never reaches a terminal
        return exc.exit_code
    except BrokenPipeError:
        return EXIT_OK
    except sqlite3.Error as exc:  # the ledger itself: a full disk, a file that is not a ledger, …
        print(message(f"agentledger: error: the ledger could not be used: {exc}"), file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt:  # a statement on the server was cancelled on the way (psycopg)
        print("agentledger: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # a file the user named cannot be read or written: one line, no traceback
        where = f"{exc.filename}: " if exc.filename else ""
        print(message(f"agentledger: error: {where}{exc.strerror or exc}"), file=sys.stderr)
        return EXIT_FAIL
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
