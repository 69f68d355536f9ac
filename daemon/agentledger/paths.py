"""Where things are: the configuration file, the default ledger, the data files of
``schema/`` (installed or in a checkout).

The first two are also read by the close-task hook's first look for a running service
(``service/hook.py``), before anything but the standard library is imported: so this
module imports ``os`` alone at the top (pathlib and functools would cost it ~7 ms)."""

from __future__ import annotations

import os

SYSTEM_CONFIG = "/etc/agentledger/agentledger.toml"


def config_candidates(env=None) -> list[str]:
    """Where a configuration file is looked for when none is named, in order: the
    current directory, the user's ($XDG_CONFIG_HOME), the system's."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return ["agentledger.toml", os.path.join(xdg, "agentledger", "agentledger.toml"), SYSTEM_CONFIG]


def config_file(explicit: str | None, env=None) -> str | None:
    """``--config``, then ``$AGENTLEDGER_CONFIG``, then the first of ``config_candidates``
    that exists; None: built-in defaults."""
    env = os.environ if env is None else env
    return explicit or env.get("AGENTLEDGER_CONFIG") or next(
        (p for p in config_candidates(env) if os.path.isfile(p)), None)


def default_store(env=None) -> str:
    """The ledger when no configuration names one: ``$XDG_STATE_HOME/agentledger/ledger.sqlite``."""
    env = os.environ if env is None else env
    state = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "agentledger", "ledger.sqlite")


def default_store_path():
    """``default_store`` as a ``pathlib.Path`` (the configuration's default)."""
    from pathlib import Path

    return Path(default_store())


_schema = None


def schema_dir():
    """``agentledger/schema`` inside a wheel, else the checkout's top-level ``schema/``
    (a ``pathlib.Path``, found once)."""
    global _schema
    if _schema is None:
        from pathlib import Path

        here = Path(__file__).resolve().parent
        _schema = next((c for c in (here / "schema", here.parent.parent / "schema") if (c / "rubrics").is_dir()), None)
        if _schema is None:
            raise FileNotFoundError("agentledger: cannot find the schema/ directory (rubrics, migrations)")
    return _schema
