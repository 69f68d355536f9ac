"""``agentledger`` (the console script) and ``python -m agentledger``.

The close-task hook, ``agentledger score N``, first asks a running service with the
standard library alone (``service/hook.py``'s ``quick``): when one answers, the ledger's
modules are never imported here."""

import sys


def main() -> int:
    argv = sys.argv[1:]
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

    return cli_main(argv)


if __name__ == "__main__":  # worker processes import this module too
    sys.exit(main())
