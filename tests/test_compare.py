"""``agentledger compare``: the statistics against known answers (hand-computed cases,
planted effects), and the command on real ledgers (paired rubric comparisons, vally
variants over the same stimuli, a CI gate)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from agentledger.analysis import stats
from agentledger.example import synth

from tests.conftest import run_cli


# -- the statistics, by hand ---------------------------------------------------------------------
def test_mcnemar_is_the_exact_binomial_test_of_the_discordant_pairs() -> None:
    # 8 pairs fail→pass, 1 pass→fail, 31 unchanged: p = 2 · P(X ≤ 1 | 9, ½) = 2 · 10/512
    a = [0] * 8 + [1] + [1] * 20 + [0] * 11
    b = [1] * 8 + [0] + [1] * 20 + [0] * 11
    d = stats.difference(a, b, binary=True, paired=True, seed=1)
    assert d.test == "McNemar exact" and d.p == pytest.approx(20 / 512, rel=1e-12)
    assert d.delta == pytest.approx(7 / 40) and d.ci_low < 7 / 40 < d.ci_high


def test_fisher_is_the_two_sided_hypergeometric_sum() -> None:
    a, b = [1] * 30 + [0] * 10, [1] * 38 + [0] * 2
    # the tables with the same margins (68 passes of 80, 40 in each row), no more probable than the one seen
    def prob(k: int) -> float:
        return math.comb(40, k) * math.comb(40, 68 - k) / math.comb(80, 68)

    seen = prob(30)
    want = sum(prob(k) for k in range(28, 41) if prob(k) <= seen * (1 + 1e-7))
    d = stats.difference(a, b, binary=True, paired=False, seed=1)
    assert d.test == "Fisher exact" and d.p == pytest.approx(want, rel=1e-9)
    assert (d.value_a, d.value_b) == (0.75, 0.95)


def test_holm_adjusts_in_order_and_keeps_it_monotone() -> None:
    assert stats.holm([0.01, 0.04, 0.03, math.nan])[:3] == pytest.approx([0.03, 0.06, 0.06])
    assert math.isnan(stats.holm([0.01, math.nan])[1])
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_a_planted_shift_is_found_and_none_is_found_where_none_was_planted() -> None:
    """200 paired units with a planted +0.3 SD shift: found, interval holds it. The same
    without a shift: 50 seeds, false positives at about alpha (≤ 5 of 50)."""
    rng = random.Random(3)
    base = [rng.gauss(0.6, 0.1) for _ in range(200)]
    moved = [x + 0.03 + rng.gauss(0, 0.05) for x in base]
    d = stats.difference(base, moved, binary=False, paired=True, seed=0)
    assert d.p < 0.001 and d.ci_low < 0.03 < d.ci_high and d.mde < 0.03
    false_alarms = 0
    for seed in range(50):
        r = random.Random(100 + seed)
        x = [r.gauss(0.6, 0.1) for _ in range(60)]
        y = [r.gauss(0.6, 0.1) for _ in range(60)]
        false_alarms += stats.difference(x, y, binary=False, paired=False, seed=seed, resamples=500).p < 0.05
    assert false_alarms <= 5


def test_the_same_data_and_seed_give_the_same_answer() -> None:
    r = random.Random(9)
    x, y = [r.random() for _ in range(80)], [r.random() + 0.1 for _ in range(80)]
    assert stats.difference(x, y, binary=False, paired=False, seed=4) == \
        stats.difference(x, y, binary=False, paired=False, seed=4)


# -- the command -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """60 iterations scored under 2.1.0, then backfilled to 3.0.0: every unit in both."""
    root = tmp_path_factory.mktemp("compare")
    gen = synth.generate(root / "gen", 60, seed=5)
    args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(root / "l.sqlite")]
    assert run_cli("ingest", *args)[0] == 0
    assert run_cli("backfill", "--rubric", "3.0.0", *args)[0] == 0
    return args


def test_two_rubrics_compare_iteration_by_iteration(scored) -> None:
    code, out, err = run_cli("compare", "--a", "rubric=2.1.0", "--b", "rubric=3.0.0", "--json", *scored)
    assert code == 0, err
    data = json.loads(out)
    assert data["paired"] and data["pairs"] == 60
    score = data["results"][0]
    assert score["metric"] == "score" and score["n_a"] == 60 and score["test"].startswith("permutation (paired")
    # the values are the ledger's own means
    from agentledger.store.db import connect_readonly

    conn = connect_readonly(Path(scored[-1]))
    for version, key in (("2.1.0", "value_a"), ("3.0.0", "value_b")):
        mean = conn.execute("SELECT avg(value) FROM scores WHERE rubric_version = ? AND scored", (version,)).fetchone()[0]
        assert score[key] == pytest.approx(mean, rel=1e-12)
    conn.close()
    assert {r["metric"] for r in data["results"]} >= {"score", "signal:landed", "signal:verifier"}
    again = run_cli("compare", "--a", "rubric=2.1.0", "--b", "rubric=3.0.0", "--json", *scored)[1]
    assert again == out  # seeded: the same answer every time


def test_markdown_for_a_pull_request_and_independent_halves(scored) -> None:
    code, out, err = run_cli("compare", "--a", "iterations=1-30", "--b", "iterations=31-60", "--format", "markdown",
                             *scored)
    assert code == 0, err
    assert out.startswith("### agentledger compare: iterations") and "independent cohorts" in out
    rows = [ln for ln in out.splitlines() if ln.startswith("| overall score")]
    assert len(rows) == 1 and "permutation (difference of means)" in rows[0]


def test_the_readmes_date_split_compares_on_generated_data(scored) -> None:
    code, out, err = run_cli("compare", "--a", "until=2026-06-14", "--b", "since=2026-06-15", "--format", "markdown",
                             *scored)
    assert code == 0 and "### agentledger compare: iterations" in out, err


@pytest.mark.parametrize("argv, says", [
    (["--a", "colour=red", "--b", "rubric=3.0.0"], "'colour' selects no iterations"),
    (["--a", "rubric=2.1.0", "--b", "rubric=2.1.0"], "select the same cohort"),
    (["--a", "iterations=abc", "--b", "rubric=3.0.0"], "give a range LO-HI"),
    (["--a", "rubric=2.1.0", "--b", "rubric=3.0.0", "--metric", "nope"], "no metric nope"),
    (["--a", "rubric=2.1.0", "--b", "rubric=3.0.0", "--alpha", "2"], "between 0 and 1"),
    # gates fail closed: a cohort that selects nothing, a value that matches nothing, a date that is none
    (["--a", "rubric=2.1.0", "--b", "rubric=9.9.9"], "rubric='9.9.9' has scored no iteration"),
    (["--a", "rubric=2.1.0", "--b", "session=no-such-session"], "session='no-such-session' matches no iterations"),
    (["--a", "task=t0-0", "--b", "task=t9-typo"], "task='t9-typo' matches no iterations (the task values here: t0-0"),
    (["--a", "until=2026-06-30", "--b", "since=2099-07-01"], "cohort B (since=2099-07-01) selects no iterations:"
                                                              " the iterations here are dated"),
    (["--a", "since=1990-01-01", "--b", "until=1990-12-31"], "cohort B (until=1990-12-31) selects no iterations"),
    (["--a", "iterations=1-30", "--b", "iterations=900-990"], "cohort B (iterations=900-990) selects no iterations"),
    (["--a", "since=zzz", "--b", "rubric=3.0.0"], "since='zzz' is not a date"),
    (["--a", "since=2026-13-45", "--b", "rubric=3.0.0"], "since='2026-13-45' is not a date"),
    (["--a", "until=2026-02-30", "--b", "rubric=3.0.0"], "until='2026-02-30' is not a date"),
    (["--a", "until=2026-6-1", "--b", "rubric=3.0.0"], "until='2026-6-1' is not a date"),
    (["--a", "since=2026-06-01T25:00:00", "--b", "rubric=3.0.0"], "is not a date"),
    (["--a", "since=", "--b", "rubric=3.0.0"], "a selector term is KEY=VALUE"),
])
def test_a_bad_selector_is_one_line_and_exit_2(scored, argv, says) -> None:
    code, out, err = run_cli("compare", *argv, *scored)
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def _variants(root: Path, passes_a, passes_b) -> list[str]:
    """Two vally runs over the same 77 stimuli (one trial each), with planted verdicts."""
    for run, variant, passes in (("run-a", "baseline", passes_a), ("run-b", "skill", passes_b)):
        d = root / "vally" / run
        d.mkdir(parents=True)
        lines = []
        for i in range(77):
            rec = json.loads(synth.vally_trial_line(i, run_id=run, variant=variant))
            rec["status"] = "success"
            rec["gradeResult"]["passed"] = passes(i)
            lines.append(json.dumps(rec) + "\n")
        (d / "results.jsonl").write_text("".join(lines))
    return ["--vally", str(root / "vally"), "--db", str(root / "l.sqlite")]


def test_a_gate_on_a_typo_fails_closed(tmp_path: Path) -> None:
    """The red team's typo (variant=skil) and its kin: one line naming the term, exit 2, never
    "not enough data" and exit 0; a real date range and a real variant still compare."""
    args = _variants(tmp_path, lambda i: True, lambda i: i % 3 != 0)
    assert run_cli("ingest", *args)[0] == 0
    for b, says in [("variant=skil", "variant='skil' matches no trials (the variant values here: baseline, skill)"),
                    ("variant=Skill", "variant='Skill' matches no trials"), ("run=run-z", "run='run-z' matches no"),
                    ("model=gpt-9", "model='gpt-9' matches no trials"), ("eval=e99", "eval='e99' matches no trials"),
                    ("stimulus=nope", "stimulus='nope' matches no trials"), ("since=2099-01-01", "selects no trials:"),
                    ("experiment=nope", "experiment='nope' matches no trials")]:
        code, out, err = run_cli("compare", "trials", "--a", "variant=baseline", "--b", b, "--fail-on-regression",
                                 *args)
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1 and not out, (b, err)
    code, _, err = run_cli("compare", "trials", "--a", "variant=baseline", "--b", "variant=skill",
                           "--fail-on-regression", *args)
    assert code == 1 and "regressed" in err


def test_variants_over_the_same_stimuli_pair_and_a_regression_fails_the_gate(tmp_path: Path) -> None:
    # baseline passes 70 of 77; the skill variant fails 14 of the baseline's passes and fixes 1
    args = _variants(tmp_path, lambda i: i % 11 != 0, lambda i: i % 11 != 0 and i % 5 != 0 or i == 0)
    assert run_cli("ingest", *args)[0] == 0
    code, out, err = run_cli("compare", "trials", "--a", "variant=baseline", "--b", "variant=skill",
                             "--metric", "pass_rate", "--json", "--fail-on-regression", *args)
    data = json.loads(out)
    r = data["results"][0]
    b01 = sum(1 for i in range(77) if i % 11 == 0 and (i % 5 != 0 and i % 11 != 0 or i == 0))
    b10 = sum(1 for i in range(77) if i % 11 != 0 and not (i % 5 != 0))
    assert (b01, b10) == (1, 14)
    assert data["paired"] and data["pairs"] == 77 and r["test"] == "McNemar exact"
    assert r["p"] == pytest.approx(2 * sum(math.comb(15, k) for k in range(2)) / 2 ** 15, rel=1e-12)
    assert r["verdict"] == "regressed" and code == 1 and "regressed: pass rate" in err
    code, _, _ = run_cli("compare", "trials", "--a", "variant=skill", "--b", "variant=baseline",
                         "--metric", "pass_rate", "--fail-on-regression", *args)
    assert code == 0  # the other way round it improved


# -- vally experiments -------------------------------------------------------------------------------
def test_pass_at_k_is_the_unbiased_estimator() -> None:
    from agentledger.analysis.experiments import pass_at_k

    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(5, 2, 1) == pytest.approx(2 / 5)
    assert pass_at_k(5, 4, 2) == 1.0 and pass_at_k(3, 0, 3) == 0.0


def test_the_real_experiment_record_shows_what_vallys_report_shows(tmp_path: Path) -> None:
    """report.md's row for this stimulus: 28.1 s, 79,618 tokens, 6 turns, 7 tool calls, 3/3 graders."""
    import shutil

    from tests.conftest import need_fixtures

    fixtures = need_fixtures() / "vally"
    run = tmp_path / "out" / "2026-07-31T11-17-14-108Z" / "baseline"
    run.mkdir(parents=True)
    shutil.copy(fixtures / "baseline__results.first-record.jsonl", run / "results.jsonl")
    shutil.copy(fixtures / "baseline__run-summary.jsonl", run / "run-summary.jsonl")
    args = ["--vally", str(tmp_path / "out"), "--db", str(tmp_path / "l.sqlite")]
    assert run_cli("ingest", *args)[0] == 0
    code, out, err = run_cli("experiment", "--json", *args)
    assert code == 0, err
    exp = json.loads(out)
    (s,) = exp["stimuli"]
    assert (exp["experiment"], exp["run_id"]) == ("dotnet-skills", "5160984c-53f8-4363-893d-bb091abbc3c1")
    assert (round(s["duration_s"], 1), s["tokens"], s["turns"], s["tool_calls"]) == (28.1, 79618, 6, 7)
    assert (s["graders_passed"], s["graders_total"], s["passed"], s["trials"]) == (3, 3, 1, 1)
    text = run_cli("experiment", *args)[1]
    assert "28.1" in text and "79,618" in text and "3/3" in text


def _experiment(root: Path, run_id: str, verdicts: dict[str, list[list[bool]]]) -> None:
    """One experiment run: per variant, per stimulus (11 of them), its trials' verdicts."""
    for variant, by_stimulus in verdicts.items():
        d = root / "vally" / run_id / variant
        d.mkdir(parents=True)
        lines = []
        for s, trials in enumerate(by_stimulus):
            for k, passed in enumerate(trials):
                rec = json.loads(synth.vally_trial_line(s, run_id=run_id, variant=variant))
                rec["stimulus"], rec["evalName"], rec["status"] = f"stimulus {s}", "e", "success"
                rec["itemId"] = f"e::{variant}::m::stimulus {s}::trial-{k}"
                rec["gradeResult"]["passed"] = passed
                rec["gradeResult"]["details"] = [{"name": "exit-code", "passed": passed, "score": 1.0 * passed},
                                                 {"name": "judge", "passed": True, "score": 1}]
                lines.append(json.dumps(rec) + "\n")
        (d / "results.jsonl").write_text("".join(lines))


def test_a_three_variant_experiment(tmp_path: Path) -> None:
    """The common real shape: three variants, one trial a stimulus; plus a stimulus tried
    five times (pass@k) and one whose verdict changed since an earlier run (flaky)."""
    base = [[True]] * 8 + [[False]] * 3
    skill = [[True]] * 11
    plugin = [[False]] * 6 + [[True]] * 5
    base_rerun = [[s[0]] for s in base]
    base_rerun[0] = [False]  # stimulus 0 failed in the earlier run: flaky
    _experiment(tmp_path, "run-1", {"baseline": base_rerun})
    skill[10] = [True, False, True, False, False]  # n=5, c=2
    _experiment(tmp_path, "run-2", {"baseline": base, "skill": skill, "plugin": plugin})
    args = ["--vally", str(tmp_path / "vally"), "--db", str(tmp_path / "l.sqlite")]
    assert run_cli("ingest", *args)[0] == 0
    code, out, err = run_cli("experiment", "--run", "run-2", "--json", *args)
    assert code == 0, err
    exp = json.loads(out)
    v = {r["variant"]: r for r in exp["variants"]}
    assert exp["baseline"] == "baseline" and set(v) == {"baseline", "skill", "plugin"}
    assert v["baseline"]["pass_rate"] == pytest.approx(8 / 11) and v["baseline"]["flaky"] == 1
    assert v["skill"]["pass_at"]["2"] == pytest.approx(0.7)  # only stimulus 10 has two trials or more
    assert v["skill"]["pass_at"]["1"] == pytest.approx((10 + 2 / 5) / 11)
    flaky = {(s["variant"], s["stimulus"]) for s in exp["stimuli"] if s["flaky"]}
    assert flaky == {("baseline", "stimulus 0"), ("skill", "stimulus 10")}
    graders = {(g["variant"], g["grader"]): (g["passed"], g["total"]) for g in exp["graders"]}
    assert graders[("plugin", "exit-code")] == (5, 11) and graders[("plugin", "judge")] == (11, 11)
    # each variant against the baseline, stimulus by stimulus
    plug = exp["deltas"]["plugin"]
    assert plug["paired"] and plug["pairs"] == 11
    rate = next(r for r in plug["results"] if r["metric"] == "pass_rate")
    # baseline passes 0-7, plugin 6-10: discordant 6 pass→fail (0-5), 3 fail→pass (8-10)
    assert rate["test"] == "McNemar exact" and rate["p"] == pytest.approx(2 * sum(
        math.comb(9, k) for k in range(4)) / 2 ** 9)
    md = run_cli("experiment", "--run", "run-2", "--format", "markdown", *args)[1]
    assert "### plugin against baseline" in md and "| variant | stimuli |" in md
    code, _, err = run_cli("experiment", "--run", "run-2", "--baseline", "nope", *args)
    assert code == 2 and "has variants baseline, plugin, skill" in err


def test_large_cohorts_use_what_the_resampling_converges_to() -> None:
    """From 500 units a side: the z test and the normal interval agree with the
    permutation test and the bootstrap run on the same data (below the threshold)."""
    r = random.Random(21)
    x = [min(1.0, max(0.0, r.gauss(0.62, 0.2))) for _ in range(600)]
    y = [min(1.0, max(0.0, r.gauss(0.6, 0.2))) for _ in range(600)]
    big = stats.difference(x, y, binary=False, paired=False, seed=0)
    assert big.test.startswith("Welch z")
    old, stats.LARGE = stats.LARGE, 10 ** 9
    try:
        exact = stats.difference(x, y, binary=False, paired=False, seed=0, resamples=4000)
    finally:
        stats.LARGE = old
    assert exact.test.startswith("permutation")
    assert big.p == pytest.approx(exact.p, abs=0.03)
    assert big.ci_low == pytest.approx(exact.ci_low, abs=0.004) and big.ci_high == pytest.approx(exact.ci_high, abs=0.004)


def test_the_report_opens_with_what_changed_and_says_how_to_reproduce_it(scored, tmp_path: Path) -> None:
    import shlex

    out_file = tmp_path / "r.html"
    code, _, err = run_cli("report", "-o", str(out_file), *scored)
    assert code == 0, err
    page = out_file.read_text()
    assert page.index('id="what-changed"') < page.index('id="trend-overall"')  # the first section
    command = page.split('id="what-changed"', 1)[1].split('<p class="note">', 1)[1].split("</p>", 1)[0]
    argv = shlex.split(command)
    assert argv[:2] == ["agentledger", "compare"]
    code, out, err = run_cli(*argv[1:], "--json", *scored)
    assert code == 0, err
    score = json.loads(out)["results"][0]
    shown = f"{score['value_a']:.3f}</td><td>{score['value_b']:.3f}"
    assert shown in page  # the figure is the command's


def test_a_git_range_selects_the_iterations_whose_commit_it_lists(scored, tmp_path: Path) -> None:
    import sqlite3
    import subprocess

    repo = scored[scored.index("--repo") + 1]
    db = scored[scored.index("--db") + 1]

    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", repo, *a], capture_output=True, text=True).stdout

    listed = set(git("rev-list", "HEAD~20..HEAD").split())
    want = set()
    with sqlite3.connect(db) as c:
        for it, ref in c.execute("SELECT iteration, commit_ref FROM iterations"):
            sha = git("rev-parse", "--verify", "-q", f"{ref}^{{commit}}").strip()
            if sha in listed:
                want.add(it)
    assert 0 < len(want) < 60
    code, out, err = run_cli("compare", "--a", "git=HEAD~20", "--b", "git=HEAD~20..HEAD", "--json", *scored)
    assert code == 0, err
    data = json.loads(out)
    assert data["units_b"] == len(want) and not data["paired"]
    # a range is the user's text, never an option for git
    trap = tmp_path / "written-by-git"
    code, _, err = run_cli("compare", "--a", f"git=--output={trap}", "--b", "git=HEAD", *scored)
    assert code == 2 and len(err.strip().splitlines()) == 1 and not trap.exists()


def test_annotated_trajectories_by_task_group_on_the_real_fixtures(tmp_path: Path) -> None:
    import shutil
    import sqlite3

    from tests.conftest import need_fixtures

    ann = tmp_path / "ann"
    shutil.copytree(need_fixtures() / "annotated", ann, ignore=shutil.ignore_patterns("*.json", "PROVENANCE*"))
    args = ["--annotations", str(ann), "--db", str(tmp_path / "l.sqlite")]
    assert run_cli("ingest", *args)[0] == 0
    code, out, err = run_cli("compare", "annotations", "--a", "group=TASK_TYPE.ARC", "--b", "group=TASK_TYPE.ARC3",
                             "--json", *args)
    assert code == 0, err
    data = json.loads(out)
    by = {r["metric"]: r for r in data["results"]}
    with sqlite3.connect(tmp_path / "l.sqlite") as c:
        for group, key in (("TASK_TYPE.ARC", "value_a"), ("TASK_TYPE.ARC3", "value_b")):
            mean = c.execute("SELECT avg(coalesce(score_norm, score)) FROM trajectories WHERE task_group = ?",
                             (group,)).fetchone()[0]
            assert by["score"][key] == pytest.approx(mean, rel=1e-12)
        counts = [c.execute("SELECT count(*), sum(failure_mode = 'timeout') FROM trajectories WHERE task_group = ?",
                            (g,)).fetchone() for g in ("TASK_TYPE.ARC", "TASK_TYPE.ARC3")]
    (n1, k1), (n2, k2) = counts
    timeout = by["failure_mode:timeout"]
    assert (timeout["n_a"], timeout["n_b"]) == (n1, n2) and timeout["test"] == "Fisher exact"

    def prob(k: int) -> float:  # the hypergeometric probability of k timeouts in the first group
        return math.comb(n1, k) * math.comb(n2, k1 + k2 - k) / math.comb(n1 + n2, k1 + k2)

    want = sum(prob(k) for k in range(0, min(n1, k1 + k2) + 1) if prob(k) <= prob(k1) * (1 + 1e-7))
    assert timeout["p"] == pytest.approx(want, rel=1e-9)


# -- cost -------------------------------------------------------------------------------------------
def test_prices_from_an_override_file_by_hand_and_unpriced_is_never_zero(tmp_path: Path) -> None:
    from agentledger.analysis.cost import Prices, PricesError, Tokens

    f = tmp_path / "prices.toml"
    f.write_text('[models."mine"]\ninput = 2.0\noutput = 10.0\ncache_read = 0.2\ncache_write_5m = 2.5\n'
                 'cache_write_1h = 4.0\n[models."no-cache"]\ninput = 1.0\noutput = 1.0\n')
    p = Prices.load(f)
    # 1,000 uncached input, 500 output, 2,000 cache reads, 300 + 200 cache writes
    t = Tokens(input=3500, output=500, cache_read=2000, cache_write_5m=300, cache_write_1h=200)
    assert p.cost("mine", t) == pytest.approx((1000 * 2.0 + 500 * 10.0 + 2000 * 0.2 + 300 * 2.5 + 200 * 4.0) / 1e6)
    assert p.cost("no-cache", t) is None  # cache reads it has no price for: unpriced, not cheaper
    assert p.cost("no-cache", Tokens(100, 50)) == pytest.approx(150 / 1e6)
    assert p.cost("a-model-nobody-prices", Tokens(100, 50)) is None
    for bad in ('[models."x"]\ninput = -1\n', '[models."x"]\nspeed = 1\n', "prices = 3\n", "[models\n"):
        f.write_text(bad)
        with pytest.raises(PricesError):
            Prices.load(f)


def test_the_real_trial_costs_what_the_published_prices_say(tmp_path: Path) -> None:
    """claude-opus-4.6 at $5 input, $25 output, $0.50 cache read, $6.25 5-minute cache write
    per million tokens (the trial's cache writes are 5-minute ones: vally does not say)."""
    import shutil

    from tests.conftest import need_fixtures

    run = tmp_path / "out" / "r" / "baseline"
    run.mkdir(parents=True)
    shutil.copy(need_fixtures() / "vally" / "baseline__results.first-record.jsonl", run / "results.jsonl")
    with open(run / "results.jsonl", "ab") as fh:
        fh.write(synth.vally_trial_line(3, variant="baseline"))  # model-0: no price anywhere
    args = ["--vally", str(tmp_path / "out"), "--db", str(tmp_path / "l.sqlite")]
    assert run_cli("ingest", *args)[0] == 0
    want = (78796 - 64955 - 13833) * 5 / 1e6 + 822 * 25 / 1e6 + 64955 * 0.5 / 1e6 + 13833 * 6.25 / 1e6
    code, out, err = run_cli("cost", "--by", "model", "--json", *args)
    assert code == 0, err
    lines = {x["group"]: x for x in json.loads(out)}
    assert lines["claude-opus-4.6"]["usd"] == pytest.approx(want, abs=1e-6)
    assert lines["model-0"]["usd"] is None and lines["model-0"]["unpriced"] == 1
    text = run_cli("cost", "--by", "model", *args)[1]
    assert "unpriced" in text and "1 unpriced trial(s)" in text
    # your own price wins over the database
    (tmp_path / "p.toml").write_text('[models."model-0"]\ninput = 1.0\noutput = 2.0\ncache_read = 0.1\n'
                                     'cache_write_5m = 1.25\n')
    cfg = tmp_path / "agentledger.toml"
    cfg.write_text(f'[cost]\nprices = "{tmp_path / "p.toml"}"\n')
    lines = {x["group"]: x for x in json.loads(run_cli("--config", str(cfg), "cost", "--by", "model", "--json",
                                                       *args)[1])}
    rec = json.loads(synth.vally_trial_line(3))["trajectory"]["metrics"]["tokenUsage"]
    assert lines["model-0"]["usd"] == pytest.approx(((rec["inputTokens"] - 500 - 100) * 1.0 + 800 * 2.0 + 500 * 0.1
                                                     + 100 * 1.25) / 1e6, abs=1e-6)
    cfg.write_text(f'[cost]\nprices = "{tmp_path / "missing.toml"}"\n')
    code, _, err = run_cli("--config", str(cfg), "cost", *args)
    assert code == 2 and "cannot read the price file" in err and len(err.strip().splitlines()) == 1
