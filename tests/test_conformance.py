"""Every reference sidecar, reproduced byte for byte through the real pipeline.

Conditions as in shared/fixtures/reference-scores/README.md: an empty `git
init` repository (or a git-initialised copy of iterlog_signals_repo), no
transcripts; single-file fixtures placed alone as iter-<their iteration>.yaml.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from agentledger.config import Config, ScoringConfig, StoreConfig, make_source
from agentledger.ledger import Ledger

from .conftest import REAL_LOG, REFERENCE, TESTDATA, copy_log, need_fixtures

SINGLE = {"v1_iter": 7, "v2_iter": 52, "v2_sparse": 65, "v2_structured": 70}
SETS = ["real-iteration-log", "testdata-iterlog", *(f"testdata-{k}" for k in SINGLE),
        "testdata-v2_iter.repo-iterlog_signals_repo"]


def prepare(name: str, tmp: Path) -> tuple[Path, Path]:
    """(iteration-log dir, repo dir) for a reference input set."""
    repo = tmp / "repo"
    if name.endswith(".repo-iterlog_signals_repo"):
        shutil.copytree(TESTDATA / "iterlog_signals_repo", repo)
    else:
        repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    log = tmp / "log"
    if name == "real-iteration-log":
        copy_log(REAL_LOG, log)
    elif name == "testdata-iterlog":
        shutil.copytree(TESTDATA / "iterlog", log)
    else:
        fixture = name.removeprefix("testdata-").split(".")[0]
        log.mkdir()
        shutil.copy(TESTDATA / f"{fixture}.yaml", log / f"iter-{SINGLE[fixture]}.yaml")
    return log, repo


def ledger_for(tmp: Path, log: Path, repo: Path, rubric: str) -> Ledger:
    cfg = Config(store=StoreConfig(path=tmp / "ledger.sqlite"), scoring=ScoringConfig(rubric=rubric),
                 iteration_logs=(make_source(log, repo),))
    return Ledger(cfg)


def run_ingest(ledger: Ledger) -> None:
    for src in ledger.cfg.iteration_logs:
        ledger.ingest(src)
        ledger.ensure_rubric()
        report = ledger.score(src)
        assert not report.errors


def sidecar_names(d: Path) -> set[str]:
    return {p.name for p in d.iterdir() if p.name.endswith(".score.yaml")}


@pytest.mark.parametrize("rubric", ["2.1.0", "2.0.2"])
@pytest.mark.parametrize("name", SETS)
def test_reference_sidecars_byte_for_byte(tmp_path: Path, name: str, rubric: str) -> None:
    need_fixtures()
    log, repo = prepare(name, tmp_path)
    ledger = ledger_for(tmp_path, log, repo, rubric)
    run_ingest(ledger)
    expected_dir = REFERENCE / f"rubric-{rubric}" / name
    expected = sidecar_names(expected_dir)
    assert expected, f"no reference files in {expected_dir}"
    assert sidecar_names(log) == expected  # nothing missing, nothing extra (no bogus iter-0)
    for fname in sorted(expected):
        assert (log / fname).read_bytes() == (expected_dir / fname).read_bytes(), fname


def test_reference_set_is_complete() -> None:
    """Guard against a silently shrinking conformance target: 118 sidecars in all."""
    need_fixtures()
    total = sum(len(sidecar_names(REFERENCE / f"rubric-{r}" / n)) for r in ("2.1.0", "2.0.2") for n in SETS)
    assert total == 118


def test_rubric_bump_backfill_ends_identical_to_the_new_reference(tmp_path: Path) -> None:
    need_fixtures()
    log, repo = prepare("real-iteration-log", tmp_path)
    run_ingest(ledger_for(tmp_path, log, repo, "2.0.2"))
    old = REFERENCE / "rubric-2.0.2" / "real-iteration-log"
    assert all((log / f).read_bytes() == (old / f).read_bytes() for f in sidecar_names(old))

    ledger = ledger_for(tmp_path, log, repo, "2.1.0")
    report = ledger.ensure_rubric()
    assert report is not None and report.scored == 46 and not report.errors
    new = REFERENCE / "rubric-2.1.0" / "real-iteration-log"
    for fname in sorted(sidecar_names(new)):
        assert (log / fname).read_bytes() == (new / fname).read_bytes(), fname
    kinds = dict(ledger.conn.execute("SELECT type, count(*) FROM events GROUP BY type").fetchall())
    assert kinds["rubric.activated"] == 2 and kinds["backfill.started"] == 1 and kinds["backfill.completed"] == 1
    # The activation is recorded once: running it again is a no-op.
    assert ledger.ensure_rubric() is None


def test_three_zero_zero_sidecar_matches_go_emitter_oracle(fixtures: Path) -> None:
    """The only Go-written 3.0.0 sidecar (eval bridge): re-emit its values, get its bytes."""
    import yaml
    from agentledger.output.sidecars import BreakdownRow, render_iteration

    path = fixtures / "dot-agents/internal/eval/store/testdata/r2contract-go-impl-pure-fn/iteration-log/iter-1.score.yaml"
    doc = yaml.safe_load(path.read_text())
    rows = [BreakdownRow(r["signal"], r["label"], r["present"], float(r["sub_score"]), r.get("detail", ""),
                         float(r["nominal_weight"]), float(r["effective_weight"]), float(r["contribution"]))
            for r in doc["breakdown"]]
    data = render_iteration(doc["iteration"], str(doc["rubric_version"]), doc["scored"], float(doc["value"]),
                            doc["band"], rows)
    assert data == path.read_bytes()
