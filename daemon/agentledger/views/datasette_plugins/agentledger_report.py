"""A Datasette plugin, loaded by ``agentledger ui`` through ``--plugins-dir`` (never
installed as an entry point, so Datasette elsewhere stays untouched): ``/-/report``
serves the report of the ledger being browsed, made on request from Datasette's own
read-only connection, so the pictures are as fresh as the tables; a page is made
once per state of the ledger (its last seq) and kept while the ledger has not
changed (the header ``X-Agentledger-Report`` says ``hit`` or ``miss``). The canned
queries' descriptions link to its charts (``/-/report#sessions``).

Why not a charting plugin: the report already draws these charts, tested in
Chromium at 60 and 10,000 iterations; a second rendering in another charting
language would drift from it.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone

import datasette.handle_exception as _default_handler
from datasette import hookimpl
from datasette.utils.asgi import Base400, Response
from datasette.views.base import DatasetteError

# Datasette prints every error, a refused query included, as a rich traceback with the
# frames' locals (the SQL, the request, rows): pages of text per refusal, slow to draw,
# and data in the log. Here a refusal is one line (below) and a real error a plain traceback.
_default_handler.rich = None
sys.excepthook = sys.__excepthook__


@hookimpl
def register_routes():
    return [(r"^/-/report$", report_page)]


@hookimpl
def handle_exception(datasette, request, exception):
    """A refused or invalid request (4xx): one line on stderr; Datasette then answers as usual."""
    if isinstance(exception, (Base400, DatasetteError)):
        message = " ".join(str(getattr(exception, "message", None) or exception).split())
        print(f"agentledger ui: refused {request.method} {request.path}: {message[:300]}", file=sys.stderr,
              flush=True)
    return None


@hookimpl
def menu_links(datasette):
    return [{"href": datasette.urls.path("/-/report"), "label": "Report (charts)"}]


# made pages, by (the ledger's last seq, session, since): the projections change only
# with the events, so a page made at seq N is the page of every later request at N
_PAGES: dict[tuple, str] = {}
_KEEP = 8


async def report_page(datasette, request):
    from agentledger.views import report

    db = datasette.get_database()
    session = request.args.get("session") or None
    since = request.args.get("since") or None
    state = {"cache": "hit"}

    def build(conn) -> tuple[int, str]:
        seq = conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]
        key = (seq, session, since)
        if key not in _PAGES:
            state["cache"] = "miss"
            data = report.gather(conn, since=since, session=session)
            now = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
            while len(_PAGES) >= _KEEP:
                _PAGES.pop(next(iter(_PAGES)))
            _PAGES[key] = report.render(data, generated_at=now, ledger=db.name)
        return seq, _PAGES[key]

    seq, page = await db.execute_fn(build)
    return Response.html(page, headers={"X-Agentledger-Report": f"{state['cache']}; seq={seq}"})
