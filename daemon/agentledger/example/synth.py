"""Generate a realistic iteration log with a matching git repository.

Used by ``make demo``, the benchmarks and the crash tests, so that none of
them needs data from outside the project. Deterministic for a given seed. The
repository is written with one ``git fast-import`` stream, so 10,000 commits
take about a second.

Layout made under ``root``::

    root/repo/                         git work tree, trunk `master`, a `side` branch
    root/repo/.agents/active/iteration-log/iter-N.yaml (+ hook-outcomes, labels)
    root/repo/.agents/active/verification/<task>/*.yaml
    root/repo/.agents/workflow/plans/<plan>/TASKS.yaml
"""

from __future__ import annotations

import os
import random
import subprocess
from dataclasses import dataclass
from pathlib import Path

LOG_REL = ".agents/active/iteration-log"
_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
_AREAS = ["src/api", "src/core", "src/cli", "docs", "tests", "internal/store"]


@dataclass
class Generated:
    root: Path
    repo: Path
    log: Path
    iterations: int


def _git(repo: Path, *args: str, input: bytes | None = None) -> str:
    env = {**os.environ, **_ENV}
    proc = subprocess.run(["git", "-C", str(repo), *args], input=input, capture_output=True, env=env, check=True)
    return proc.stdout.decode().strip()


def _data(text: str) -> bytes:
    raw = text.encode()
    return b"data %d\n" % len(raw) + raw + b"\n"


def generate(root: str | Path, n: int = 200, *, seed: int = 7, sessions_every: int = 12,
             regress_at: int | None = None) -> Generated:
    """``regress_at``: from that iteration on, the agent runs another model and does worse
    work (failing verifiers, rejected reviews, scope breaches): a planted regression."""
    rng = random.Random(seed)
    root = Path(root)
    repo = root / "repo"
    log = repo / LOG_REL
    log.mkdir(parents=True, exist_ok=True)
    _git(repo, "init", "-q", "-b", "master")

    # One trunk commit per iteration (a few are reverted a little later), plus a
    # few commits on a side branch that never lands. One fast-import process;
    # `get-mark` returns a commit's SHA when a revert message needs it.
    env = {**os.environ, **_ENV}
    proc = subprocess.Popen(["git", "-C", str(repo), "fast-import", "--quiet"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    t0 = 1_760_000_000
    subjects: dict[int, str] = {}
    marks: dict[int, int] = {}
    sha_of: dict[int, str] = {}
    reverted: set[int] = set()
    mark = 0

    def commit(branch: str, when: int, message: str, path: str, parent: int | None = None) -> int:
        nonlocal mark
        mark += 1
        cmd = b"commit refs/heads/%s\nmark :%d\n" % (branch.encode(), mark)
        cmd += b"committer Agent <agent@example.com> %d +0000\n" % when + _data(message)
        if parent is not None:
            cmd += b"from :%d\n" % parent
        cmd += b"M 644 inline %s\n" % path.encode() + _data(f"{message}\n")
        proc.stdin.write(cmd)
        return mark

    def sha(m: int) -> str:
        if m not in sha_of:
            proc.stdin.write(b"get-mark :%d\n" % m)
            proc.stdin.flush()
            sha_of[m] = proc.stdout.readline().decode().strip()
        return sha_of[m]

    for i in range(1, n + 1):
        area = _AREAS[i % len(_AREAS)]
        subjects[i] = f"iter {i}: {rng.choice(['add', 'fix', 'refactor', 'test'])} {area.split('/')[-1]} #{i}"
        marks[i] = commit("master", t0 + 60 * i, subjects[i], f"{area}/f{i % 50}.txt")
        if i > 5 and rng.random() < 0.03:
            victim = rng.randint(i - 5, i - 1)
            if victim not in reverted:
                reverted.add(victim)
                commit("master", t0 + 60 * i + 30,
                       f'Revert "{subjects[victim]}"\n\nThis reverts commit {sha(marks[victim])}.',
                       f"{area}/f{i % 50}.txt")
    side_marks = [commit("side", t0 + 7, "side experiment 0", "side/s0.txt", parent=marks[1])]
    side_marks += [commit("side", t0 + 8 + k, f"side experiment {k}", f"side/s{k}.txt") for k in (1, 2)]
    for m in list(marks.values()) + side_marks:
        sha(m)
    proc.stdin.close()
    if proc.wait() != 0:
        raise RuntimeError("git fast-import failed")
    _git(repo, "checkout", "-q", "-f", "master")

    # Plans with write scopes, verification artifacts, and the iteration log.
    plans = repo / ".agents/workflow/plans"
    for p in range(5):
        d = plans / f"plan-{p}"
        d.mkdir(parents=True, exist_ok=True)
        tasks = "".join(f"  - id: t{p}-{k}\n    write_scope: [\"{_AREAS[(p + k) % len(_AREAS)]}/\"]\n"
                        for k in range(4))
        (d / "TASKS.yaml").write_text(f"schema_version: 1\ntasks:\n{tasks}")
    ver = repo / ".agents/active/verification"
    for i in range(1, n + 1):
        worse = regress_at is not None and i >= regress_at
        (log / f"iter-{i}.yaml").write_text(_record(i, rng, n, sha_of, marks, side_marks, subjects, sessions_every,
                                                    worse))
        if i % 7 == 0:
            d = ver / f"task-{i}"
            d.mkdir(parents=True, exist_ok=True)
            (d / "test.result.yaml").write_text(f"schema_version: 1\nstatus: {rng.choice(['pass', 'pass', 'fail', 'partial'])}\n")
            (d / "review-decision.yaml").write_text(
                "schema_version: 1\npost_invocation:\n  user_corrections:\n    - tighten the scope\n  retries_in_loop: 1\n")
        if i % 5 == 0:
            (log / f"iter-{i}.hook-outcomes.yaml").write_text(hook_sidecar(i, rng))
        if i % 11 == 0:
            (log / f"iter-{i}.labels.yaml").write_text(labels_sidecar(i, rng))
    return Generated(root=root, repo=repo, log=log, iterations=n)


def _record(i: int, rng: random.Random, n: int, sha_of: dict, marks: dict, side: list, subjects: dict,
            every: int, worse: bool = False) -> str:
    roll = rng.random()
    if roll < 0.04:
        commit = f"{rng.getrandbits(28):07x}"  # does not resolve
    elif roll < 0.06:
        commit = sha_of[rng.choice(side)]  # never lands
    else:
        commit = sha_of[marks[i]][: rng.choice([7, 12, 40])]
    plan, task = i % 5, (i // 5) % 4
    if i <= 3:  # a few v1 entries, as old logs have
        return (f"schema_version: 1\niteration: {i}\ndate: \"2026-05-0{i}\"\ntask_id: t{plan}-{task}\n"
                f"commit: \"{commit}\"\ntests_added: 3\ntests_total_pass: true\nretries: {i % 2}\n"
                f"scope_note: on-target\nsummary: \"{subjects[i]}\"\n")
    session = f"sess-{(i - 1) // every:05d}"
    status = rng.choice(["fail", "fail", "fail", "fail", "partial", "pass"] if worse
                        else ["pass", "pass", "pass", "fail", "partial", "unknown"])
    verif = ""
    if rng.random() < 0.8:
        art = f".agents/active/verification/task-{i}/test.result.yaml" if i % 7 == 0 else ""
        verif = (f"verifiers:\n  - type: test\n    status: {status}\n    gate_passed: true\n"
                 f"    tests_total_pass: {str(status == 'pass').lower()}\n    retries: {rng.choice([0, 0, 1])}\n"
                 f"    result_artifact: \"{art}\"\n")
    tokens = ""
    if rng.random() < 0.5:
        tokens = (f"session_tokens:\n  input_tokens: {rng.randint(1000, 90000)}\n  output_tokens: {rng.randint(100, 9000)}\n"
                  f"  cache_hit_rate: {rng.random():.3f}\n")
    decision = f".agents/active/verification/task-{i}/review-decision.yaml" if i % 7 == 0 else ""
    note = rng.choice(["scope-breach", "scope-breach", "partial", "scope-breach", "partial"] if worse
                      else ["on-target", "on-target", "partial", "scope-breach", "Within declared write_scope"])
    model = "synthetic-2" if worse else "synthetic-1"
    return (
        "# yaml-language-server: $schema=../../../../schemas/workflow-iter-log.schema.json\n"
        f"schema_version: 2\niteration: {i}\ndate: \"2026-06-{1 + i % 28:02d}\"\nwave: synthetic\n"
        f"task_id: t{plan}-{task}\ncommit: {commit}\nfiles_changed: {rng.randint(1, 12)}\n"
        f"agent:\n  session_id: {session}\n  harness: claude-code\n  model: {model}\n{tokens}"
        f"impl:\n  summary: \"{subjects[i]}\"\n  scope_note: {note}\n  retries: {rng.choice([0, 0, 0, 1, 2])}\n"
        f"  focused_tests_added: {rng.randint(0, 9)}\n  focused_tests_pass: {rng.choice(['false', 'false', 'false', '~'] if worse else ['true', 'true', 'false', '~'])}\n"
        f"{verif}review:\n  overall_decision: {rng.choice(['reject', 'reject', 'reject', ''] if worse else ['accept', 'accept', 'reject', ''])}\n"
        f"  decision_artifact: \"{decision}\"\n"
    )


def hook_sidecar(i: int, rng: random.Random) -> str:
    result = rng.choice(["allow", "allow", "advise", "remediate"])
    return (
        "# yaml-language-server: $schema=../../../../schemas/workflow-hook-outcome.schema.json\n"
        "schema_version: 1\nrecords:\n"
        f"    - schema_version: 1\n      sentinel_id: iteration-close-{i}\n      skill: iteration-close\n"
        f"      lifecycle_point: stop\n      intervention_class: remediate_at_stop\n      result: {result}\n"
        f"      rule_id: iteration-close.R1.{rng.randint(1, 4)}\n      platform: claude\n"
        f"      ts: \"2026-06-01T00:00:{i % 60:02d}Z\"\n      correlation_id: iteration-close-{i}\n"
    )


def labels_sidecar(i: int, rng: random.Random) -> str:
    return (
        f"iteration: {i}\nschema_version: 1.0.0\nlabels:\n"
        f"    - id: {i:032x}\n      iteration: {i}\n      actor: reviewer@example.com\n      role: reviewer\n"
        f"      schema_version: 1.0.0\n      created_at: 2026-06-02T09:00:00Z\n      updated_at: 2026-06-02T09:00:00Z\n"
        f"      history:\n        - actor: reviewer@example.com\n          role: reviewer\n"
        f"          timestamp: 2026-06-02T09:00:00Z\n          structured:\n"
        f"            correctness: {rng.randint(0, 3)}\n            scope_judgement: {rng.choice(['on-target', 'partial', 'breach'])}\n"
        f"            hallucination: {rng.choice(['none', 'minor', 'major'])}\n"
    )


def add_iteration(gen: Generated, i: int, *, seed: int = 1) -> Path:
    """Commit one more change on the trunk and close iteration ``i`` for it (the demo's "agent")."""
    rng = random.Random(seed * 1000 + i)
    f = gen.repo / "src" / "live" / f"change-{i}.txt"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(f"iteration {i}\n")
    env = {**os.environ, **_ENV, "GIT_AUTHOR_NAME": "Agent", "GIT_AUTHOR_EMAIL": "agent@example.com",
           "GIT_COMMITTER_NAME": "Agent", "GIT_COMMITTER_EMAIL": "agent@example.com"}
    subprocess.run(["git", "-C", str(gen.repo), "add", str(f)], check=True, env=env, capture_output=True)
    subprocess.run(["git", "-C", str(gen.repo), "commit", "-q", "-m", f"iter {i}: live change"],
                   check=True, env=env, capture_output=True)
    sha = _git(gen.repo, "rev-parse", "HEAD")
    text = (f"schema_version: 2\niteration: {i}\ntask_id: t0-0\ncommit: {sha}\n"
            f"agent:\n  session_id: sess-live\nsession_tokens:\n  cache_hit_rate: {0.5 + rng.random() / 2:.3f}\n"
            f"impl:\n  summary: \"iter {i}: live change\"\n  scope_note: on-target\n  retries: {rng.choice([0, 1])}\n"
            f"  focused_tests_pass: true\nverifiers:\n  - type: test\n    status: pass\n    tests_total_pass: true\n")
    path = gen.log / f"iter-{i}.yaml"
    tmp = path.with_name(f".iter-{i}.yaml.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def vally_trial_line(i: int, *, run_id: str = "run-1", variant: str = "baseline", pad: int = 0,
                     pass_rate: float = 0.7, model: str | None = None) -> bytes:
    """One synthetic vally ``trial-result`` line (newline included), shaped like vally 0.9 output;
    ``pass_rate``: of the trials that ran, how many pass."""
    import json

    rng = random.Random(i)
    status = "success" if rng.random() < 0.9 else "error"
    passed = status == "success" and rng.random() < pass_rate
    model = model or f"model-{i % 3}"
    events = [{"type": "tool_result", "timestamp": "2026-07-31T11:17:20.000Z", "turn": 0,
               "data": {"toolName": "bash", "toolCallId": f"c{k}", "success": rng.random() < 0.8}}
              for k in range(rng.randint(1, 6))]
    record = {
        "type": "trial-result",
        "itemId": f"/evals/e{i % 7}/eval.yaml::{variant}::{model}::stimulus {i % 11}::trial-{i // 77}",
        "evalName": f"e{i % 7}", "evalFilePath": f"/evals/e{i % 7}/eval.yaml", "variant": variant,
        "stimulus": f"stimulus {i % 11}", "model": model, "status": status,
        "durationMs": rng.randint(5000, 90000),
        "gradeResult": {"name": "trajectory-grade", "kind": "code", "passed": passed, "score": 1.0 if passed else 0.5},
        "trajectory": {"events": events, "id": f"t-{i}", "output": "x" * pad,
                       "metrics": {"tokenUsage": {"inputTokens": rng.randint(1000, 90000), "outputTokens": 800,
                                                  "cacheReadTokens": 500, "cacheWriteTokens": 100, "callCount": 3},
                                   "toolCallCount": len(events), "turnCount": 3, "wallTimeMs": 20000}},
        "experiment": {"name": "exp", "runId": run_id, "variant": variant, "baseline": "baseline"},
    }
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def claude_transcript(path: Path, iterations: int, *, seed: int = 5) -> int:
    """A Claude-style transcript with turns and tool results inside each synthetic
    iteration's window (commits land at t0 + 60*i); returns the number of lines."""
    import json
    import time

    rng = random.Random(seed)
    t0 = 1_760_000_000
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = 0
    with path.open("w") as fh:
        for i in range(1, iterations + 1):
            for k in range(rng.randint(1, 3)):
                ts = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(t0 + 60 * i - 50 + 10 * k))
                fh.write(json.dumps({"type": "assistant", "timestamp": ts, "sessionId": f"s{i // 12}",
                                     "message": {"role": "assistant", "usage": {
                                         "input_tokens": rng.randint(100, 900), "output_tokens": 80,
                                         "cache_read_input_tokens": rng.randint(0, 9000),
                                         "cache_creation_input_tokens": rng.randint(100, 3000)}}}) + "\n")
                fh.write(json.dumps({"type": "user", "timestamp": ts, "message": {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": f"t{i}-{k}", "is_error": rng.random() < 0.15}]}}) + "\n")
                lines += 2
    return lines


def annotation(task: str, seed: int = 1) -> str:
    """An annotated trajectory (format v2) with a control flow, a hypothesis log and
    computed fields, some of them declared wrong on purpose (as real ones often are)."""
    rng = random.Random(seed)
    n = rng.randint(6, 14)
    hyps = rng.randint(1, 4)
    accepted = rng.random() < 0.6
    lines, outcomes = [], []
    for it in range(1, n + 1):
        if it == n:
            phase, tag = "RETURN", ""
        else:
            phase = rng.choice(["EXPLORE:structure", "EXPLORE:hyp-test", "EXPLORE:hyp-test", "EXTRACT:implement",
                                "VERIFY:train-val", "ERROR:runtime"])
            tag = f"[H{rng.randint(1, hyps)}]" if "hyp-test" in phase else ""
        mark = rng.choice("✓✗~→")
        outcomes.append(mark)
        lines.append(f"iter {it:>2}  {phase:<18} {tag:<5} {mark}  step {it} of the search")
    rows = []
    for h in range(1, hyps + 1):
        outcome = "accepted" if accepted and h == hyps else rng.choice(["rejected", "rejected", "abandoned"])
        its = sorted(rng.sample(range(1, n), min(2, n - 1)))
        rows.append(f"| H{h} | idea number {h} | {','.join(map(str, its))} | {outcome} | checked on train |")
    verdict = "perfect" if accepted else rng.choice(["wrong-answer", "timeout"])
    score = 1 if accepted else 0
    fm = [
        "---", f"taskId: {task}", f"score: {score}", f"iterations: {n}", f"wallTimeMs: {rng.randint(10, 900) * 1000}",
        "answerType: ANSWER_TYPE.GRID", f"taskGroup: TASK_TYPE.{rng.choice(['ARC', 'ARC3'])}", 'answer: "[[1]]"',
        'expected: "[[1]]"', "error: null" if verdict != "timeout" else 'error: "RLM reached max iterations"',
        "patterns:", *[f"  - {p}" for p in rng.sample(["format-discovery", "multi-strategy", "verification",
                                                       "brute-force", "hypothesis-churn", "grid-cartography"], 3)],
        f"failureMode: {'null' if accepted else rng.choice(['spinning', 'premature-return', 'anchoring'])}",
        f"verdict: {verdict}", f"hypothesesTested: {hyps}", f"itersExplore: {rng.randint(1, n)}", "---",
    ]
    body = [
        "", f"# Trajectory: {task}", "", "## Task Summary", "", "A generated example.", "", "## Control Flow", "",
        "```", *lines, "```", "", "## Hypothesis Log", "", "| ID | Hypothesis | Iters | Outcome | Evidence |",
        "|----|-----------|-------|---------|----------|", *rows, "", "## Phase Analysis", "", "Generated.", "",
    ]
    return "\n".join(fm + body)
