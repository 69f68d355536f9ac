"""``agentledger`` (the console script) and ``python -m agentledger``.

The close-task hook, ``agentledger score N``, first asks a running service with the
standard library alone (``service/hook.py``'s ``quick``): when one answers, the ledger's
modules are never imported here."""

import sys


def main() -> int:
    """The command's exit code, after which the process ends at once (``leave``)."""
    code = command(sys.argv[1:])
    leave(code)
    return code  # (only when another thread still runs: the interpreter's own exit waits for it)


def command(argv: list[str]) -> int:
    if "score" in argv:
        from .service import hook

        answer = hook.quick(argv)
        if answer is not None:
            code, out, err = answer
            try:
                sys.stdout.write(out)
                sys.stderr.write(err)
            except BrokenPipeError:  # as the command line itself takes a reader that went away
                return 0
            return code
    from .cli import main as cli_main

    return cli_main(argv, own_process=True)


def leave(code: int) -> None:
    """End the process as the interpreter's exit would, less its teardown: the exit
    handlers run (``atexit``: the worker pool's, logging's) and the standard streams are
    flushed, then ``os._exit``. Freeing every module and object one by one is all the
    rest does, and it cost a command 20-40 ms after a scan that found nothing changed
    (~10 % of it) and ~90 ms after a cold ingest of 10,000 iterations. Returns, leaving
    the exit to the interpreter, while another thread runs (its exit waits for them) or
    when a stream cannot be flushed (it reports that as it always does)."""
    import threading

    if threading.active_count() > 1:
        return
    import atexit
    import os

    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # a reader that went away, a closed stream, none
        return
    os._exit(code)


if __name__ == "__main__":  # worker processes import this module too
    sys.exit(main())
