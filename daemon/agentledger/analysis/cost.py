"""Money, at query time, from raw token counts: nothing priced is stored, so a price
correction or a new override applies to every trial and iteration at once.

Prices come from your override file first (``[cost] prices``: USD per million tokens
by model), then from genai-prices' bundled database (a maintained price list; its
network update is never called), at the time the tokens were spent where the database
knows price history. Input tokens count every input token, cached ones included (the
convention of vally and genai-prices); cache writes are priced by their lifetime
(5 minutes or 1 hour) where the source says which, else as 5-minute writes, the
default. A model that neither knows is *unpriced*: its cost is None, never zero.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import astuple, dataclass
from datetime import datetime
from pathlib import Path

KEYS = ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h")  # USD per million tokens


class PricesError(ValueError):
    pass


@dataclass(frozen=True)
class Tokens:
    input: int  # every input token, cache reads and writes included
    output: int = 0
    cache_read: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0


# the most a price may be, USD per million tokens: far above any model's, and small enough
# that no count of tokens makes a sum that is not a number (1e308 printed "$inf")
MAX_PRICE = 1_000_000


class Prices:
    def __init__(self, overrides: dict[str, dict[str, float]] | None = None) -> None:
        self.overrides = overrides or {}
        self._unknown: set[str] = set()  # models the database does not know (asked once)

    @classmethod
    def load(cls, path: str | Path | None) -> Prices:
        """The override file (``[models."NAME"]`` tables of ``KEYS``), checked."""
        if not path:
            return cls()
        from ..userfiles import UserFileError, read_text

        p = Path(path).expanduser()
        try:
            data = tomllib.loads(read_text(p, "price file"))
        except UserFileError as exc:
            raise PricesError(str(exc)) from None
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise PricesError(f"{p}: cannot read the price file: {exc}") from None
        models = data.get("models", {})
        if set(data) - {"models"} or not isinstance(models, dict):
            raise PricesError(f"{p}: a price file holds [models.\"NAME\"] tables only")
        out: dict[str, dict[str, float]] = {}
        for name, prices in models.items():
            if not isinstance(prices, dict) or set(prices) - set(KEYS):
                raise PricesError(f"{p}: [models.{name!r}] takes {', '.join(KEYS)} (USD per million tokens)")
            for key, value in prices.items():
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                        or not 0 <= value <= MAX_PRICE:
                    raise PricesError(f"{p}: [models.{name!r}] {key} = {value!r}: give a price from 0 to"
                                      f" {MAX_PRICE:,} USD per million tokens")
            out[name] = {k: float(v) for k, v in prices.items()}
        return cls(out)

    def cost(self, model: str, t: Tokens, when: str | None = None) -> float | None:
        """USD for ``t`` tokens of ``model`` (spent at ISO time ``when``), None: unpriced."""
        if model in self.overrides:
            return _from_table(self.overrides[model], t)
        if not model or model in self._unknown:
            return None
        import warnings

        from genai_prices import Usage, calc_price

        writes = t.cache_write_5m + t.cache_write_1h
        try:
            at = datetime.fromisoformat(when.replace("Z", "+00:00")) if when else None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the library warns about usage keys it does not price
                price = calc_price(Usage(input_tokens=t.input, output_tokens=t.output, cache_read_tokens=t.cache_read,
                                         cache_write_tokens=writes, cache_write_5m_tokens=t.cache_write_5m,
                                         cache_write_1h_tokens=t.cache_write_1h), model, genai_request_timestamp=at)
        except LookupError:
            self._unknown.add(model)
            return None
        except ValueError:  # counts it cannot price together (e.g. more cached than input)
            return None
        return float(price.total_price)


def _from_table(p: dict[str, float], t: Tokens) -> float | None:
    uncached = t.input - t.cache_read - t.cache_write_5m - t.cache_write_1h
    parts = (("input", max(uncached, 0)), ("output", t.output), ("cache_read", t.cache_read),
             ("cache_write_5m", t.cache_write_5m), ("cache_write_1h", t.cache_write_1h))
    total = 0.0
    for key, n in parts:
        if n:
            if key not in p:
                return None  # tokens of a kind this model has no price for: unpriced, not cheaper
            total += n * p[key] / 1e6
    return total


GROUPS = {"trial": "t.item_id", "run": "t.run_id", "variant": "t.variant", "model": "t.model", "eval": "t.eval_name",
          "day": "substr(e.recorded_at, 1, 10)"}


@dataclass
class Line:
    group: str
    units: int = 0  # trials, or iterations
    priced: int = 0
    usd: float = 0.0
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @property
    def unpriced(self) -> int:
        return self.units - self.priced

    def count(self, inp: int, out: int, read: int, write: int) -> None:
        """Add raw token counts (trials' and iterations' alike)."""
        self.input += inp
        self.output += out
        self.cache_read += read
        self.cache_write += write


def trial_cost(prices: Prices, model: str, inp, out, cache_read, cache_write, when: str) -> float | None:
    """A vally trial's cost (its cache writes' lifetime is not reported: 5-minute writes)."""
    if inp is None and out is None:
        return None  # no token counts: nothing to price
    return prices.cost(model, Tokens(inp or 0, out or 0, cache_read or 0, cache_write or 0), when)


def trial_costs(conn, prices: Prices, by: str, run: str | None = None) -> list[Line]:
    """vally trials' cost grouped ``by`` one of ``GROUPS`` (of one run, or all)."""
    where, args = ("WHERE t.run_id = ?", [run]) if run else ("", [])
    lines: dict[str, Line] = {}
    for group, model, inp, out, cr, cw, when in conn.execute(
            f"SELECT {GROUPS[by]}, t.model, t.input_tokens, t.output_tokens, t.cache_read_tokens,"
            f" t.cache_write_tokens, e.recorded_at FROM trials t JOIN events e ON e.seq = t.seq {where}"
            " ORDER BY 1, t.item_id", args):
        line = lines.setdefault(group, Line(group))
        line.units += 1
        line.count(inp or 0, out or 0, cr or 0, cw or 0)
        usd = trial_cost(prices, model, inp, out, cr, cw, when)
        if usd is not None:
            line.priced += 1
            line.usd += usd
    return list(lines.values())


IGROUPS = ("iteration", "session", "day", "model", "source")


def _claude(inp: int, out: int, read: int, write: int, hour: int) -> Tokens:
    """Anthropic usage (``input_tokens`` without the cache reads and writes) as ``Tokens``;
    ``hour`` of the writes were 1-hour writes."""
    hour = min(max(hour, 0), max(write, 0))
    return Tokens(inp + read + write, out, read, write - hour, hour)


def _window(conn, dirs: tuple[str, ...], window: str | None, model: str) -> list[tuple[str, Tokens]] | None:
    """The tokens of the transcript turns inside an iteration's window, by the model
    that answered (else ``model``); None when no turn falls inside it."""
    if not dirs or not window:
        return None
    start, end = json.loads(window)
    parts: dict[str, Tokens] = {}
    for kind, m, inp, out, read, write, hour in conn.execute(
            "SELECT kind, coalesce(model, ?), sum(input_tokens), sum(output_tokens), sum(cache_read),"
            " sum(cache_creation), sum(coalesce(cache_write_1h, 0)) FROM transcript_facts"
            " WHERE source IN (SELECT value FROM json_each(?)) AND ts_ns > ? AND ts_ns <= ? AND turns > 0"
            " GROUP BY 1, 2 ORDER BY 2, 1", (model, json.dumps(list(dirs)), -(2 ** 63) if start is None else start,
                                             end)):
        if kind == "claude":
            t = _claude(inp, out, read, write, hour)
        elif kind == "codex":  # its input counts the cached input, and it writes no cache
            t = Tokens(inp, out, read)
        else:  # vally trajectories: input counts every input token
            t = Tokens(inp, out, read, write)
        have = parts.get(m)
        parts[m] = t if have is None else Tokens(*(a + b for a, b in zip(astuple(have), astuple(t))))
    return list(parts.items()) or None


def _native(model: str, native: str | None) -> list[tuple[str, Tokens]] | None:
    """The record's own ``session_tokens`` (Anthropic usage; writes as 5-minute writes)."""
    data = json.loads(native) if native else None
    keys = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens")
    if not isinstance(data, dict) or not any(k in data for k in keys):
        return None
    n = [data.get(k) if isinstance(data.get(k), int) and not isinstance(data.get(k), bool) and data.get(k) >= 0
         else 0 for k in keys]
    return [(model, _claude(*n, 0))]


def iteration_parts(conn, rubric: str, transcripts: dict[str, tuple[str, ...]], only: set[tuple] | None = None):
    """For each iteration scored under ``rubric`` (each score names the transcript window
    its tokens came from): (source, iteration, session, date, record model, parts), where
    parts are (model, Tokens) — the turns of the source's transcripts (``transcripts``:
    iteration-log source -> its transcript directories) inside that window, by the model
    that answered (else the record's ``agent.model``) with 1-hour cache writes apart;
    when no turn falls in it, the record's ``session_tokens``; else none. ``only``: just
    these (source, iteration) units (a cohort's), no window summed for any other."""
    rows = conn.execute(
        "SELECT s.source, s.iteration, i.session_id, i.date, json_extract(e.payload, '$.window'),"
        " json_extract(r.record, '$.agent.model'), json_extract(r.record, '$.session_tokens') FROM scores s"
        " JOIN events e ON e.seq = s.seq JOIN iterations i ON i.source = s.source AND i.iteration = s.iteration"
        " LEFT JOIN record_files r ON r.source = i.source AND r.file = i.file AND r.ordinal = i.ordinal"
        " WHERE s.rubric_version = ? ORDER BY s.source, s.iteration", (rubric,))
    for src, it, session, day, window, model, native in rows:
        if only is not None and (src, it) not in only:
            continue
        model = model if isinstance(model, str) else ""
        when = day if isinstance(day, str) and len(day) >= 10 else None
        parts = _window(conn, transcripts.get(src, ()), window, model) or _native(model, native) or []
        yield src, it, session, when, model, parts


def priced(prices: Prices, parts: list[tuple[str, Tokens]], when: str | None) -> float | None:
    """The cost of an iteration's parts; None when it has none or any is unpriced."""
    usd = [prices.cost(m, t, when) for m, t in parts]
    return sum(usd) if usd and None not in usd else None  # type: ignore[arg-type]


def iteration_costs(conn, prices: Prices, by: str, rubric: str,
                    transcripts: dict[str, tuple[str, ...]]) -> list[Line]:
    """Iterations' cost grouped ``by`` one of ``IGROUPS`` (``session``: the iterations of
    each session summed), from ``iteration_parts``. An iteration with no token counts,
    or with any part unpriced, is unpriced (its tokens still counted); by model, each
    model's part is its own."""
    lines: dict[str, Line] = {}
    several = len(transcripts) > 1
    for src, it, session, when, model, parts in iteration_parts(conn, rubric, transcripts):
        named = {"iteration": f"{src} #{it}" if several else str(it), "session": session or "(no session)",
                 "day": when[:10] if when else "(undated)", "source": src}
        groups: dict[str, list[tuple[str, Tokens]]] = {}
        for m, t in parts:
            groups.setdefault((m or "(no model)") if by == "model" else named[by], []).append((m, t))
        for group, mine in groups.items() or [((model or "(no model)") if by == "model" else named[by], [])]:
            line = lines.setdefault(group, Line(group))
            line.units += 1
            for _, t in mine:
                line.count(t.input, t.output, t.cache_read, t.cache_write_5m + t.cache_write_1h)
            usd = priced(prices, mine, when)
            if usd is not None:
                line.priced += 1
                line.usd += usd
    return sorted(lines.values(), key=lambda x: (x.group.isdigit() and int(x.group), x.group))
