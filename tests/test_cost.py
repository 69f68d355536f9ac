"""Money for iterations and sessions (#24, item 4): an iteration's transcript turns priced
by the model that answered, with 1-hour cache writes apart; the record's own
session_tokens where no turn falls in its window; unpriced never zero. By hand."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from agentledger.example import synth

from tests.conftest import query, run_cli

PRICES = """
[models."m-test"]
input = 1.0
output = 2.0
cache_read = 0.1
cache_write_5m = 1.25
cache_write_1h = 2.0

[models."synthetic-1"]
input = 3.0
output = 5.0
"""


def _turn(ts_ns: int, model, usage: dict) -> str:
    ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts_ns // 10**9)) + ".000Z"
    return json.dumps({"type": "assistant", "timestamp": ts,
                       "message": {"role": "assistant", "model": model, "usage": usage}}) + "\n"


@pytest.fixture(scope="module")
def priced(tmp_path_factory):
    root = tmp_path_factory.mktemp("cost")
    gen = synth.generate(root / "gen", 40, seed=5)
    tdir = root / "transcripts"
    tdir.mkdir()
    (tdir / "a.jsonl").write_text("")
    db = root / "l.sqlite"
    (root / "prices.toml").write_text(PRICES)
    args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--transcripts", str(tdir), "--db", str(db)]
    assert run_cli("ingest", *args)[0] == 0
    windows = {it: json.loads(w) for it, w in query(
        db, "SELECT s.iteration, json_extract(e.payload, '$.window') FROM scores s JOIN events e ON e.seq = s.seq"
            " WHERE json_extract(e.payload, '$.window') IS NOT NULL ORDER BY 1")}
    a, b = [it for it, (start, _) in windows.items() if start is not None][5:7]
    with open(tdir / "a.jsonl", "a") as fh:
        # iteration a: one turn of m-test, 200 of its 500 cache writes for an hour
        fh.write(_turn(windows[a][1] - 10**9, "m-test", {
            "input_tokens": 1000, "output_tokens": 200, "cache_read_input_tokens": 3000,
            "cache_creation_input_tokens": 500,
            "cache_creation": {"ephemeral_5m_input_tokens": 300, "ephemeral_1h_input_tokens": 200}}))
        # iteration b: a model nobody prices, and a turn whose extras are the wrong type
        # (they count for nothing; its tokens count as before)
        fh.write(_turn(windows[b][1] - 2 * 10**9, "no-such-model-xyz", {"input_tokens": 10, "output_tokens": 1}))
        fh.write(_turn(windows[b][1] - 10**9, 42, {"input_tokens": 5, "output_tokens": 1,
                                                    "cache_creation": "lots"}))
    assert run_cli("ingest", *args)[0] == 0
    return gen, db, args, a, b


def _cost(args, *more) -> dict:
    code, out, err = run_cli("cost", "iterations", *more, "--json", *args)
    assert code == 0, err
    return {x["group"]: x for x in json.loads(out)}


def test_a_turn_is_priced_by_its_model_with_1_hour_writes_apart(priced, tmp_path) -> None:
    gen, db, args, a, b = priced
    lines = _cost(args, "--by", "iteration")
    assert lines == _cost(args, "--by", "iteration")  # nothing stored: asked twice, the same
    # without a price file, m-test is nobody's model
    assert lines[str(a)]["usd"] is None and lines[str(a)]["unpriced"] == 1
    code, out, err = run_cli("cost", "iterations", "--by", "iteration", "--json", *args,
                             "--config", str(_config(tmp_path, db)))
    assert code == 0, err
    lines = {x["group"]: x for x in json.loads(out)}
    # by hand: 1,000 uncached input × $1 + 200 output × $2 + 3,000 reads × $0.10
    #          + 300 five-minute writes × $1.25 + 200 one-hour writes × $2, per million
    assert lines[str(a)]["usd"] == pytest.approx((1000 * 1 + 200 * 2 + 3000 * 0.1 + 300 * 1.25 + 200 * 2) / 1e6,
                                                 abs=1e-12)
    assert lines[str(a)]["input"] == 4500 and lines[str(a)]["cache_write"] == 500
    assert lines[str(b)]["usd"] is None and lines[str(b)]["unpriced"] == 1 and lines[str(b)]["input"] == 15
    # an iteration no turn falls in: its record's session_tokens, at synthetic-1's prices
    natives = {}
    for it in range(1, 41):
        rec = yaml.safe_load((gen.log / f"iter-{it}.yaml").read_text())
        if it not in (a, b) and isinstance(rec.get("session_tokens"), dict) and str(it) in lines:
            natives[it] = rec["session_tokens"]
    assert natives
    for it, st in natives.items():
        want = (st["input_tokens"] * 3 + st["output_tokens"] * 5) / 1e6
        assert lines[str(it)]["usd"] == pytest.approx(want, abs=1e-12), it
    silent = [g for g, x in lines.items() if int(g) not in natives and int(g) not in (a, b)]
    assert silent and all(lines[g]["usd"] is None and lines[g]["input"] == 0 for g in silent)  # never zero


def _config(tmp_path: Path, db: Path) -> Path:
    cfg = tmp_path / "agentledger.toml"
    cfg.write_text(f'[store]\npath = "{db}"\n[cost]\nprices = "{db.parent / "prices.toml"}"\n')
    return cfg


def test_sessions_days_and_models_sum_their_iterations(priced, tmp_path) -> None:
    _, db, args, a, b = priced
    cfg = ["--config", str(_config(tmp_path, db))]
    by_it = {x["group"]: x for x in json.loads(run_cli("cost", "iterations", "--by", "iteration", "--json",
                                                            *args, *cfg)[1])}
    for by in ("session", "day", "source"):
        lines = json.loads(run_cli("cost", "iterations", "--by", by, "--json", *args, *cfg)[1])
        assert sum(x["iterations"] for x in lines) == len(by_it)
        assert sum(x["usd"] or 0 for x in lines) == pytest.approx(sum(x["usd"] or 0 for x in by_it.values()))
        assert sum(x["unpriced"] for x in lines) == sum(x["unpriced"] for x in by_it.values())
    models = {x["group"]: x for x in json.loads(run_cli("cost", "iterations", "--by", "model", "--json",
                                                             *args, *cfg)[1])}
    assert models["m-test"]["iterations"] == 1 and models["m-test"]["usd"] == pytest.approx(by_it[str(a)]["usd"])
    assert models["no-such-model-xyz"]["usd"] is None
    facts = query(db, "SELECT model, cache_write_1h, turns, input_tokens FROM transcript_facts ORDER BY ts_ns")
    assert facts == [("m-test", 200, 1, 1000), ("no-such-model-xyz", None, 1, 10), (None, None, 1, 5)]


def test_a_grouping_that_does_not_fit_is_one_line_and_exit_2(priced) -> None:
    _, _, args, _, _ = priced
    code, out, err = run_cli("cost", "iterations", "--by", "variant", *args)
    assert code == 2 and "does not group iterations" in err and "Traceback" not in err
    code, _, err = run_cli("cost", "trials", "--by", "session", *args)
    assert code == 2 and "does not group trials" in err


def test_compare_iterations_has_their_cost_as_a_metric(priced, tmp_path) -> None:
    _, db, args, _, _ = priced
    cfg = ["--config", str(_config(tmp_path, db))]
    by_it = {int(x["group"]): x for x in json.loads(run_cli("cost", "iterations", "--by", "iteration", "--json",
                                                                 *args, *cfg)[1])}
    code, out, err = run_cli("compare", "--a", "iterations=1-20", "--b", "iterations=21-40", "--metric", "cost_usd",
                             "--json", *args, *cfg)
    assert code == 0, err
    c = json.loads(out)
    (r,) = c["results"]
    for side, lo, hi in (("a", 1, 20), ("b", 21, 40)):
        usd = [x["usd"] for it, x in by_it.items() if lo <= it <= hi and x["usd"] is not None]
        assert r[f"n_{side}"] == len(usd) and r[f"value_{side}"] == pytest.approx(sum(usd) / len(usd))
    assert c["unpriced"] == [sum(x["unpriced"] for it, x in by_it.items() if lo <= it <= hi)
                             for lo, hi in ((1, 20), (21, 40))]


def test_a_real_record_is_priced_from_its_own_session_tokens(fixtures: Path, empty_repo, tmp_path) -> None:
    """The real eval-store record (claude-opus-4-8, native session_tokens 4,200 in,
    850 out, 3,100 cache reads, 900 cache writes) has no transcript: its record's
    counts, read as Anthropic usage, by hand at the prices of the file."""
    log = fixtures / "dot-agents/internal/eval/store/testdata/r2contract-go-impl-pure-fn/iteration-log"
    work = tmp_path / "log"
    work.mkdir()
    (work / "iter-1.yaml").write_bytes((log / "iter-1.yaml").read_bytes())
    db = tmp_path / "l.sqlite"
    (tmp_path / "prices.toml").write_text('[models."claude-opus-4-8"]\ninput = 5.0\noutput = 25.0\n'
                                          'cache_read = 0.5\ncache_write_5m = 6.25\n')
    cfg = tmp_path / "agentledger.toml"
    cfg.write_text(f'[store]\npath = "{db}"\n[cost]\nprices = "{tmp_path / "prices.toml"}"\n')
    args = ["--iteration-log", str(work), "--repo", str(empty_repo.path), "--config", str(cfg)]
    assert run_cli("ingest", *args)[0] == 0
    code, out, err = run_cli("cost", "iterations", "--by", "model", "--json", *args)
    assert code == 0, err
    (line,) = json.loads(out)
    assert line["group"] == "claude-opus-4-8" and line["priced"] == 1
    assert line["usd"] == pytest.approx((4200 * 5 + 850 * 25 + 3100 * 0.5 + 900 * 6.25) / 1e6, abs=1e-12)
