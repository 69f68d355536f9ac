"""Logging for the daemon: structlog, one line per event, levels journald understands.

``json`` (default under systemd): JSON lines on stdout, each prefixed with the
syslog priority (``<3>`` error, ``<4>`` warning, ``<6>`` info, ``<7>`` debug),
which journald strips and keeps as the entry's priority. ``console``: readable
lines for a terminal. Standard-library loggers (APScheduler, watchfiles, our
own ``agentledger`` logger) go through the same processors; watchfiles is
quieted to WARNING.
"""

from __future__ import annotations

import logging
import sys

import structlog

_PRIORITY = {"critical": 2, "error": 3, "warning": 4, "info": 6, "debug": 7}


class _PrefixFormatter(structlog.stdlib.ProcessorFormatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return f"<{_PRIORITY.get(record.levelname.lower(), 6)}>{text}"


def _scrub_secrets(_logger, _name, event_dict: dict) -> dict:
    """Last before rendering: any URL password or ``password=`` value anywhere in the
    entry (a message, a field, a traceback line) becomes ``***``, and every control
    character a field holds is escaped (``terminal.shown``: a path or a name from the
    data clears no console and forges no line; a traceback keeps its line breaks)."""
    from ..redact import scrub
    from ..terminal import shown, shown_lines

    def clean(value, keep_lines: bool = False):
        if isinstance(value, str):
            return (shown_lines if keep_lines else shown)(scrub(value))
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value

    return {k: clean(v, k in ("exception", "stack")) for k, v in event_dict.items()}


def resolve_format(fmt: str) -> str:
    """``auto``: JSON lines with syslog priorities for journald (``$JOURNAL_STREAM`` set)
    or any non-terminal; readable console lines for a person at a terminal."""
    import os

    if fmt != "auto":
        return fmt
    return "json" if os.environ.get("JOURNAL_STREAM") or not sys.stdout.isatty() else "console"


def setup(fmt: str = "auto", level: str = "info") -> None:
    fmt = resolve_format(fmt)
    shared = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if fmt == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stdout.isatty())
        formatter_cls = structlog.stdlib.ProcessorFormatter
    else:
        renderer = structlog.processors.JSONRenderer()
        formatter_cls = _PrefixFormatter
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(formatter_cls(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    # Tracebacks without frame locals: locals can hold file contents.
                    structlog.processors.ExceptionRenderer(
                        structlog.tracebacks.ExceptionDictTransformer(show_locals=False))
                    if fmt != "console" else structlog.processors.format_exc_info,
                    _scrub_secrets,
                    renderer],
    ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    logging.getLogger("watchfiles").setLevel(logging.WARNING)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
