"""Money, at query time, from raw token counts: nothing priced is stored, so a price
correction or a new override applies to every trial at once.

Prices come from your override file first (``[cost] prices``: USD per million tokens
by model), then from genai-prices' bundled database (a maintained price list; its
network update is never called), at the time the tokens were spent where the database
knows price history. Input tokens count every input token, cached ones included (the
convention of vally and genai-prices); cache writes are priced by their lifetime
(5 minutes or 1 hour) where the source says which, else as 5-minute writes, the
default. A model that neither knows is *unpriced*: its cost is None, never zero.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
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


class Prices:
    def __init__(self, overrides: dict[str, dict[str, float]] | None = None) -> None:
        self.overrides = overrides or {}
        self._unknown: set[str] = set()  # models the database does not know (asked once)

    @classmethod
    def load(cls, path: str | Path | None) -> Prices:
        """The override file (``[models."NAME"]`` tables of ``KEYS``), checked."""
        if not path:
            return cls()
        p = Path(path).expanduser()
        try:
            data = tomllib.loads(p.read_text("utf-8"))
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
                        or value < 0:
                    raise PricesError(f"{p}: [models.{name!r}] {key} = {value!r}: give a price ≥ 0")
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
    trials: int = 0
    priced: int = 0
    usd: float = 0.0
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @property
    def unpriced(self) -> int:
        return self.trials - self.priced


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
        line.trials += 1
        line.input, line.output = line.input + (inp or 0), line.output + (out or 0)
        line.cache_read, line.cache_write = line.cache_read + (cr or 0), line.cache_write + (cw or 0)
        usd = trial_cost(prices, model, inp, out, cr, cw, when)
        if usd is not None:
            line.priced += 1
            line.usd += usd
    return list(lines.values())
