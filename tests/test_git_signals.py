"""landed, objective scope and the commit-time rule, against real git repositories."""

from __future__ import annotations

import json
from pathlib import Path

from agentledger.config import Config, ScoringConfig, StoreConfig, make_source
from agentledger.ledger import Ledger

from .conftest import Repo


def record(n: int, commit: str, *, task: str = "", summary: str = "", tokens: str = "") -> str:
    return (f"schema_version: 2\niteration: {n}\ntask_id: \"{task}\"\ncommit: \"{commit}\"\n"
            f"impl:\n  summary: \"{summary}\"\n  scope_note: on-target\n{tokens}")


def score_all(tmp: Path, log: Path, repo: Path, trunk: str = "master") -> dict[int, dict[str, dict]]:
    cfg = Config(store=StoreConfig(path=tmp / f"ledger-{trunk}.sqlite"), scoring=ScoringConfig(),
                 iteration_logs=(make_source(log, repo, trunk),))
    ledger = Ledger(cfg)
    src = cfg.iteration_logs[0]
    ledger.ingest(src)
    ledger.ensure_rubric()
    report = ledger.score(src)
    assert not report.errors, report.errors
    out: dict[int, dict[str, dict]] = {}
    for it, bd in ledger.conn.execute("SELECT iteration, breakdown FROM score_details"):
        out[it] = {row["signal"]: row for row in json.loads(bd)}
    ledger.close()
    return out


def score_one(cfg: Config, n: int) -> dict[str, dict]:
    """Iteration ``n`` ingested and scored alone (as ``score N`` does): its breakdown by signal."""
    ledger = Ledger(cfg)
    src = cfg.iteration_logs[0]
    ledger.ingest(src, iterations=[n])
    ledger.ensure_rubric()
    ledger.score(src, [n])
    (bd,) = ledger.conn.execute("SELECT breakdown FROM score_details WHERE iteration = ?", (n,)).fetchone()
    ledger.close()
    return {r["signal"]: r for r in json.loads(bd)}


def _slow_git(tmp_path: Path, monkeypatch, cases: str) -> None:
    """Put a ``git`` first on PATH that runs the real one after ``cases`` (shell ``case``
    arms over " ARGS ", e.g. a ``sleep`` for some commands)."""
    import os
    import shutil

    slow = tmp_path / "bin"
    slow.mkdir()
    (slow / "git").write_text(f'#!/bin/sh\ncase " $* " in {cases} esac\nexec {shutil.which("git")} "$@"\n')
    (slow / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{slow}{os.pathsep}{os.environ['PATH']}")


def test_landed_scope_and_commit_time(tmp_path: Path, make_repo) -> None:
    repo: Repo = make_repo()
    c1 = repo.commit("feat: one", {"a.go": "1"})
    c2 = repo.commit("feat: two", {"src/x.go": "x", "docs/y.md": "y"})
    c3 = repo.commit(f'Revert "feat: two"\n\nThis reverts commit {c2}.', {"src/x.go": "x2"})
    c5 = repo.commit("chore: empty")
    repo.git("checkout", "-q", "-b", "side")
    c4 = repo.commit("side work", {"side.txt": "s"})
    repo.git("checkout", "-q", "master")
    plans = repo.path / ".agents/workflow/plans/p1"
    plans.mkdir(parents=True)
    (plans / "TASKS.yaml").write_text("tasks:\n  - id: t2\n    write_scope: [\"src/\"]\n")

    log = tmp_path / "log"
    log.mkdir()
    files = {
        1: record(1, c1),
        2: record(2, c2, task="t2"),
        3: record(3, c4),
        4: record(4, "deadbee", summary="feat: one"),
        5: record(5, "cafebabe", summary="FEAT: TWO"),
        6: record(6, "abc1234", summary="nothing like it"),
        7: record(7, c5, task="t2"),
        8: record(8, c1, tokens="session_tokens:\n  cache_hit_rate: 0.62\n"),
        9: record(9, "abc1234", tokens="session_tokens:\n  cache_hit_rate: 0.62\n"),
    }
    for n, text in files.items():
        (log / f"iter-{n}.yaml").write_text(text)
    s = score_all(tmp_path, log, repo.path)

    def landed(n: int) -> tuple[bool, float, str]:
        r = s[n]["landed"]
        return r["present"], r["sub_score"], r["detail"]

    assert landed(1) == (True, 1.0, f"commit {c1[:12]} reachable from master, not reverted")
    assert landed(2) == (True, 0.0, f"commit {c2[:12]} reachable but reverted by {c3[:12]}")
    assert landed(3) == (True, 0.0, f"commit {c4[:12]} not reachable from master")
    assert landed(4) == (True, 1.0, f"unresolved SHA deadbee; message-matched {c1[:12]} reachable from master")
    assert landed(5) == (True, 0.0, f"unresolved SHA cafebabe; message-matched {c2[:12]}, later reverted by {c3[:12]}")
    assert landed(6) == (False, 0, "commit SHA abc1234 does not resolve and no message match")

    assert s[2]["scope"]["detail"] == '1/2 changed files within declared write_scope of task "t2"'
    assert s[2]["scope"]["sub_score"] == 0.5
    assert s[7]["scope"]["detail"] == f"commit {c5[:12]} changed no files"
    # No declared scope: the self-reported note is used, detail included.
    assert s[1]["scope"]["detail"] == "scope_note: on-target"

    assert s[8]["token_efficiency"]["present"] is True
    assert s[8]["token_efficiency"]["detail"] == "native session_tokens: cache_hit_rate 0.620"
    assert s[9]["token_efficiency"]["detail"] == "commit time unresolvable; cannot window the transcript"


def test_single_iteration_scoring_matches_batch(tmp_path: Path, make_repo) -> None:
    """`score N` streams only the top of the trunk log; it must agree with a full pass."""
    repo: Repo = make_repo()
    shas = [repo.commit(f"change {i}", {f"f{i}.txt": str(i)}) for i in range(30)]
    repo.commit(f"Revert change 3\n\nThis reverts commit {shas[3][:10]}.")
    log = tmp_path / "log"
    log.mkdir()
    for i, sha in enumerate(shas):
        (log / f"iter-{i + 1}.yaml").write_text(record(i + 1, sha))
    batch = score_all(tmp_path, log, repo.path)

    cfg = Config(store=StoreConfig(path=tmp_path / "single.sqlite"), iteration_logs=(make_source(log, repo.path),))
    for n in (1, 4, 30):
        assert score_one(cfg, n) == batch[n]
    assert batch[4]["landed"]["detail"].startswith(f"commit {shas[3][:12]} reachable but reverted by")


def test_trunk_name_is_configurable(tmp_path: Path, make_repo) -> None:
    repo: Repo = make_repo(branch="main")
    c1 = repo.commit("only", {"a": "1"})
    log = tmp_path / "log"
    log.mkdir()
    (log / "iter-1.yaml").write_text(record(1, c1))
    assert score_all(tmp_path, log, repo.path)[1]["landed"]["detail"] == f"commit {c1[:12]} not reachable from master"
    assert score_all(tmp_path, log, repo.path, "main")[1]["landed"]["detail"] == \
        f"commit {c1[:12]} reachable from main, not reverted"


def test_not_a_git_repository_is_reported_not_fatal(tmp_path: Path) -> None:
    from agentledger.ledger import SourceError

    log = tmp_path / "log"
    log.mkdir()
    (log / "iter-1.yaml").write_text(record(1, "abc"))
    plain = tmp_path / "plain"
    plain.mkdir()
    cfg = Config(store=StoreConfig(path=tmp_path / "l.sqlite"), iteration_logs=(make_source(log, plain),))
    ledger = Ledger(cfg)
    src = cfg.iteration_logs[0]
    ledger.ingest(src)  # events are still recorded
    assert ledger.conn.execute("SELECT count(*) FROM iterations").fetchone()[0] == 1
    try:
        ledger.score(src)
    except SourceError as exc:
        assert "is not a git repository" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("expected SourceError")


def test_commit_landing_after_close_flips_landed_and_rewrites_only_that_sidecar(tmp_path: Path, make_repo) -> None:
    from .conftest import run_cli

    repo: Repo = make_repo()
    base = repo.commit("base", {"a": "1"})
    repo.git("checkout", "-q", "-b", "feature")
    feature = repo.commit("feature work", {"f": "1"})
    repo.git("checkout", "-q", "master")
    log = tmp_path / "log"
    log.mkdir()
    (log / "iter-1.yaml").write_text(record(1, base))
    (log / "iter-2.yaml").write_text(record(2, feature))
    args = ["--iteration-log", str(log), "--repo", str(repo.path), "--db", str(tmp_path / "l.sqlite")]
    assert run_cli("ingest", "--once", *args)[0] == 0
    assert f"commit {feature[:12]} not reachable from master" in (log / "iter-2.score.yaml").read_text()
    before = {n: (log / f"iter-{n}.score.yaml").stat().st_mtime_ns for n in (1, 2)}

    repo.git("merge", "-q", "--no-ff", "-m", "merge feature", "feature")  # it lands after closing
    code, out, _ = run_cli("ingest", "--once", "--json", *args)
    assert code == 0 and __import__("json").loads(out)["sidecars_written"] == 1
    assert f"commit {feature[:12]} reachable from master, not reverted" in (log / "iter-2.score.yaml").read_text()
    assert (log / "iter-1.score.yaml").stat().st_mtime_ns == before[1]

    repo.git("revert", "--no-edit", feature)  # and is reverted later (a revert of the merge would name the merge)
    run_cli("ingest", "--once", *args)
    assert f"commit {feature[:12]} reachable but reverted by" in (log / "iter-2.score.yaml").read_text()


def test_changed_files_of_more_commits_than_one_command_line_holds(tmp_path: Path, monkeypatch) -> None:
    """50,000 SHAs on one `git show` command line were past ARG_MAX (the crash at 50,000
    iterations): they go on stdin, in bounded calls, and the answer does not depend on the bound."""
    import subprocess

    from agentledger.example import synth
    from agentledger.sources import git

    gen = synth.generate(tmp_path / "gen", 450, seed=2)
    shas = subprocess.run(["git", "-C", str(gen.repo), "rev-list", "--all"], capture_output=True, text=True,
                          check=True).stdout.split()
    assert len(shas) > 450
    whole = git.GitRepo(str(gen.repo), "master").changed_files(shas)
    monkeypatch.setattr(git, "SHAS_PER_CALL", 64)
    bounded = git.GitRepo(str(gen.repo), "master")
    calls = []
    real = bounded._run
    bounded._run = lambda *a, **k: calls.append((len(a), k["input"].count(b"\n"))) or real(*a, **k)
    assert bounded.changed_files(shas) == whole and all(v for v in whole.values())
    assert len(calls) == -(-len(shas) // 64) and max(n for _, n in calls) == 64
    assert {a for a, _ in calls} == {8}  # `log` and its options: no SHA on a command line


def test_changed_files_are_what_git_show_lists_merges_and_renames_included(make_repo) -> None:
    """The changed files of each commit, asked for many at once, are what `git show
    --name-only` prints for that commit alone: a root commit, a rename, an empty commit, a
    merge (its dense combined diff: nothing when it only joins), a merge with a change of
    its own, an octopus merge. (`git log` alone lists no file for any merge.)"""
    from agentledger.sources.git import GitRepo

    repo: Repo = make_repo()
    shas = [repo.commit("root", {"a": "a\n", "b": "b\n", "c": "c\n"})]
    repo.git("checkout", "-q", "-b", "side")
    repo.git("mv", "b", "b2")
    shas.append(repo.commit("side: rename and change", {"a": "a\nside\n"}))
    repo.git("checkout", "-q", "master")
    shas.append(repo.commit("master: change", {"c": "c\nmaster\n"}))
    shas.append(repo.commit("empty"))
    repo.git("merge", "-q", "--no-ff", "-m", "join", "side")
    shas.append(repo.git("rev-parse", "HEAD"))
    repo.git("checkout", "-q", "-b", "evil", shas[0])
    repo.commit("evil side", {"c": "c\nevil\n"})
    repo.git("checkout", "-q", "master")
    repo.git("merge", "-q", "--no-ff", "--no-commit", "-X", "ours", "evil")
    shas.append(repo.commit("merge with its own change", {"zz": "own\n"}))
    tips = []
    for name in ("o1", "o2"):
        repo.git("checkout", "-q", "-b", name, shas[0])
        tips.append(repo.commit(name, {name: name}))
    repo.git("checkout", "-q", "master")
    repo.git("merge", "-q", "-m", "octopus", *tips)
    shas += [*tips, repo.git("rev-parse", "HEAD")]

    def shown(sha: str) -> tuple[str, ...]:
        out = repo.git("show", "--no-ext-diff", "--no-textconv", "--name-only", "--format=", sha)
        return tuple(line for line in out.splitlines() if line.strip())

    got = GitRepo(str(repo.path), "master").changed_files(shas)
    assert got == {sha: shown(sha) for sha in shas}
    assert got[shas[5]] == ("zz",) and got[shas[4]] == () and set(got[shas[1]]) == {"a", "b2"}


def test_the_work_tree_check_brings_the_trunk_tip_in_one_process(tmp_path: Path, make_repo, monkeypatch) -> None:
    """Within a view the check and the trunk's tip are one git process; their answers are
    those of asking each on its own: a repository with its trunk, without it, a bare
    repository and a plain directory."""
    import subprocess

    from agentledger.sources.git import GitRepo

    repo: Repo = make_repo()
    tip = repo.commit("base", {"a": "1"})
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    plain = tmp_path / "plain"
    plain.mkdir()
    calls = []
    real = GitRepo._run
    monkeypatch.setattr(GitRepo, "_run", lambda self, *a, **k: calls.append(a[0]) or real(self, *a, **k))
    for path, trunk, problem, want in ((repo.path, "master", None, tip), (repo.path, "nosuch", None, None),
                                       (bare, "master", "is not a git repository", None),
                                       (plain, "master", "is not a git repository", None)):
        calls.clear()
        with GitRepo(str(path), trunk).one_view() as g:
            said = g.check()
            assert (said is None) if problem is None else (problem in said), (path, trunk, said)
            assert g.trunk_tip() == want
            assert g.check() == said and g.trunk_tip() == want  # asked again: from the view
        assert calls == ["rev-parse"] * (1 if problem is None else 2), (path, trunk, calls)
        alone = GitRepo(str(path), trunk)  # outside a view, each is its own question
        assert alone.check() == said and alone.trunk_tip() == want


def test_a_few_full_shas_resolve_in_one_process_as_in_two(tmp_path: Path, make_repo, monkeypatch) -> None:
    """The close-task hook's commits (a few full SHAs) resolve with one ``git log``; what
    that says is what the two-query resolution says, for commits and for what is not one
    (an annotated tag's SHA, a tree's, an upper-case SHA, a missing one, a name), and the
    files each commit changed come with it, as asking for them on their own says."""
    from agentledger.sources import commits, git

    repo: Repo = make_repo()
    first = repo.commit("first", {"a": "1"}, date="2026-01-02T03:04:05+00:00")
    second = repo.commit("second", {"a": "2"})
    repo.git("tag", "-a", "-m", "annotated", "v1", first)
    tag = repo.git("rev-parse", "v1").strip()
    tree = repo.git("rev-parse", f"{second}^{{tree}}").strip()
    cases = [[first], [second, first], [tag], [first, tag], [tree], [second.upper()], ["0" * 40],
             [first, "0" * 40], ["master", second]]
    calls = []
    real = git.GitRepo._run
    monkeypatch.setattr(git.GitRepo, "_run", lambda self, *a, **k: calls.append(a[0]) or real(self, *a, **k))
    for raws in cases:
        calls.clear()
        g = git.GitRepo(str(repo.path))
        fast = g.resolve(raws)
        if all(len(r) == 40 and r == r.lower() and r in (first, second) for r in raws):
            assert calls == ["log"], (raws, calls)  # one process
            # which also said what each changed, as the question asked on its own says
            assert g.changed_files(raws) == git.GitRepo(str(repo.path)).changed_files(raws), raws
            assert calls == ["log", "log"], (raws, calls)  # (the second by the other repository)
        monkeypatch.setattr(commits, "FEW", 0)
        assert git.GitRepo(str(repo.path)).resolve(raws) == fast, raws
        monkeypatch.setattr(commits, "FEW", 8)
    assert git.GitRepo(str(repo.path)).resolve([first])[first].commit_time == "2026-01-02T03:04:05+00:00"


def test_a_few_abbreviated_commits_resolve_with_their_files_in_two_processes(make_repo, monkeypatch) -> None:
    """The close-task hook's commit strings are usually abbreviated SHAs or names: one
    ``cat-file`` resolves them, and one ``git log`` says both their times and the files
    each changed (asked next by the scoring: no third process). What they say is what a
    batch of many says, where times and files are asked apart."""
    from agentledger.sources import commits, git

    repo: Repo = make_repo()
    first = repo.commit("first", {"a": "1"}, date="2026-01-02T03:04:05+00:00")
    second = repo.commit("second", {"a": "2", "b": "3"})
    repo.git("tag", "-a", "-m", "annotated", "v1", first)
    calls = []
    real = git.GitRepo._run
    monkeypatch.setattr(git.GitRepo, "_run", lambda self, *a, **k: calls.append(a[0]) or real(self, *a, **k))
    # (a tag's commit is not a commit the string names: its time is not asked, its files are asked apart)
    for raws, want in (([second[:10]], ["cat-file", "log"]), ([first[:7], "master"], ["cat-file", "log"]),
                       (["v1", second[:12], "nosuch"], ["cat-file", "cat-file", "log", "log"])):
        calls.clear()
        g = git.GitRepo(str(repo.path))
        few = g.resolve(raws)
        shas = [r.sha for r in few.values() if r.sha]
        assert g.changed_files(shas) == {sha: tuple(repo.git("show", "--name-only", "--format=", sha).split())
                                         for sha in shas}, raws
        assert calls == want, (raws, calls)
        monkeypatch.setattr(commits, "FEW", 0)  # as part of a large batch
        many = git.GitRepo(str(repo.path))
        assert many.resolve(raws) == few, raws
        monkeypatch.setattr(commits, "FEW", 8)
    assert git.GitRepo(str(repo.path)).resolve([first[:8]])[first[:8]].commit_time == "2026-01-02T03:04:05+00:00"


def test_the_trunk_tips_own_iteration_is_scored_without_reading_the_trunk_log(tmp_path: Path, make_repo,
                                                                              monkeypatch) -> None:
    """An iteration whose commit is the trunk's tip (the close-task hook's usual case) is
    reachable and reverted by nothing newer: no ``git log`` of the trunk is started for
    it, and its score is the full pass's. An older one still reads the log (a revert at
    the tip names it)."""
    from agentledger.sources import git

    repo: Repo = make_repo()
    shas = [repo.commit(f"change {i}", {f"f{i}.txt": str(i)}) for i in range(5)]
    shas.append(repo.commit(f"Revert change 3\n\nThis reverts commit {shas[3][:10]}."))
    log = tmp_path / "log"
    log.mkdir()
    for i, sha in enumerate(shas):
        (log / f"iter-{i + 1}.yaml").write_text(record(i + 1, sha[:10]))
    batch = score_all(tmp_path, log, repo.path)
    streams = []
    real = git.GitRepo.stream
    monkeypatch.setattr(git.GitRepo, "stream", lambda self, *a: streams.append(a[0]) or real(self, *a))
    cfg = Config(store=StoreConfig(path=tmp_path / "single.sqlite"), iteration_logs=(make_source(log, repo.path),))
    for n, reads_log in ((6, False), (4, True)):
        streams.clear()
        assert score_one(cfg, n) == batch[n]
        assert streams == (["log"] if reads_log else []), (n, streams)
    assert "reverted by" in batch[4]["landed"]["detail"] and "not reverted" in batch[6]["landed"]["detail"]


def test_commits_resolved_ahead_while_artifacts_are_read_score_the_same(tmp_path: Path, make_repo,
                                                                         monkeypatch) -> None:
    """A full scan that changed many iterations has git resolve their commits on a thread
    while it reads the artifacts (``GitRepo.prefetch``); the planner and the scoring pass
    then use what it resolved. Short SHAs, a branch name, a reverted and a missing commit
    score exactly as when they are resolved in the pass, and the thread is over when the
    ingest returns, however long git takes (here a git that names the trunk's tip after 1 s)."""

    from agentledger.ledger import iterlogs
    from agentledger.sources.git import GitRepo

    from .conftest import query, run_cli, threads_named

    repo: Repo = make_repo()
    shas = [repo.commit(f"feat: change {i}", {f"f{i}.txt": str(i)}) for i in range(12)]
    repo.commit(f'Revert "feat: change 2"\n\nThis reverts commit {shas[2]}.')
    repo.git("branch", "side", shas[5])
    refs = [shas[0], shas[1][:7], shas[2][:9], "side", "deadbee", shas[7][:12], "", shas[9]]
    log = tmp_path / "log"
    log.mkdir()
    for i, ref in enumerate(refs, 1):
        (log / f"iter-{i}.yaml").write_text(record(i, ref, summary=f"feat: change {i}"))

    def scores(db: Path) -> list[tuple]:
        args = ["--iteration-log", str(log), "--repo", str(repo.path), "--db", str(db), "-q"]
        code, _, err = run_cli("ingest", *args)
        assert code == 0, err
        assert not threads_named("agentledger-git-prefetch") and not threads_named("agentledger-trunk-ahead")
        return query(db, "SELECT iteration, inputs_hash, sidecar_sha256 FROM scores ORDER BY iteration")

    started = []
    real = GitRepo.prefetch
    monkeypatch.setattr(GitRepo, "prefetch", lambda self, raws: (started.append(list(raws)), real(self, raws))[1])
    alone = scores(tmp_path / "alone.sqlite")
    assert started == []  # 8 iterations: below PREFETCH_FROM
    # the trunk tip alone (the prefetch's first question) takes 1 s
    _slow_git(tmp_path, monkeypatch, '*" --is-inside-work-tree "*) ;; *" rev-parse "*) sleep 1;;')
    monkeypatch.setattr(iterlogs, "PREFETCH_FROM", 1)
    ahead = scores(tmp_path / "ahead.sqlite")
    assert sorted(started[0]) == sorted(refs)
    assert ahead == alone and len(ahead) == len(refs)


def test_what_a_prefetch_resolved_is_kept_at_its_tip_and_dropped_once_the_trunk_moved(make_repo) -> None:
    """The planner keeps a prefetch's resolutions only at the trunk tip they were made at
    (one pass sees one trunk); once the trunk moved, a branch name resolves to where it
    points now."""
    from agentledger.sources.git import GitRepo

    repo: Repo = make_repo()
    first = repo.commit("one", {"a": "1"})
    repo.git("branch", "side", first)
    git = GitRepo(str(repo.path))
    git.prefetch(["side"])
    git.join_prefetch()
    other = repo.commit("elsewhere", {"b": "1"})
    repo.git("reset", "-q", "--hard", first)  # the trunk back where the prefetch saw it
    repo.git("branch", "-f", "side", other)
    git.forget(fresh_at=git._trunk_tip())
    assert git.resolve(["side"])["side"].sha == first  # kept: resolved at this tip, in this pass
    git.prefetch(["side"])
    git.join_prefetch()
    second = repo.commit("two", {"a": "2"})
    repo.git("branch", "-f", "side", second)
    git.forget(fresh_at=git._trunk_tip())  # the trunk moved since: dropped
    assert git.resolve(["side"])["side"].sha == second


def test_a_pass_in_parts_has_git_answer_each_part_ahead_and_scores_the_same(tmp_path: Path, make_repo,
                                                                             monkeypatch) -> None:
    """A scoring pass gathered in several parts gathers each on a thread of its own, a part
    ahead, while another resolves each part's commits and lists the files they changed
    (``GitRepo.ahead``). Short SHAs, a branch, a
    reverted and a missing commit score exactly as when the pass asks git itself, no
    commit's files are listed twice, and the thread is over when the command returns, here
    with a git whose every answer about objects takes a while (the pass waits on it)."""
    import threading

    from agentledger.ledger import scoring_pass
    from agentledger.sources.git import GitRepo

    from .conftest import query, run_cli, threads_named

    repo: Repo = make_repo()
    shas = [repo.commit(f"feat: change {i}", {f"f{i}.txt": str(i)}) for i in range(12)]
    repo.commit(f'Revert "feat: change 2"\n\nThis reverts commit {shas[2]}.')
    repo.git("branch", "side", shas[5])
    refs = [shas[0], shas[1][:7], shas[2][:9], "side", "deadbee", shas[7][:12], "", shas[9], shas[10][:8],
            shas[11]]
    plans = repo.path / ".agents/workflow/plans/p1"
    plans.mkdir(parents=True)
    (plans / "TASKS.yaml").write_text("tasks:\n  - id: t1\n    write_scope: [\"f0.txt\"]\n")
    log = tmp_path / "log"
    log.mkdir()
    for i, ref in enumerate(refs, 1):  # the odd ones with a task (their changed files are asked)
        (log / f"iter-{i}.yaml").write_text(record(i, ref, task="t1" if i % 2 else "", summary=f"feat: change {i}"))
    listed: list[str] = []
    real_run = GitRepo._run

    def run(self, *args, input=None, check=False):
        if args[0] == "log" and "--name-only" in args:
            listed.extend(input.decode().split())
        return real_run(self, *args, input=input, check=check)

    monkeypatch.setattr(GitRepo, "_run", run)

    def scores(db: Path) -> list[tuple]:
        listed.clear()
        args = ["--iteration-log", str(log), "--repo", str(repo.path), "--db", str(db), "-q"]
        code, _, err = run_cli("ingest", *args)
        assert code == 0, err
        assert not threads_named("agentledger-git-ahead") and not threads_named("agentledger-trunk-ahead")
        assert len(listed) == len(set(listed)), listed  # each commit's files listed once
        return query(db, "SELECT iteration, inputs_hash, sidecar_sha256 FROM scores ORDER BY iteration")

    alone = scores(tmp_path / "alone.sqlite")  # 10 iterations: one part, nothing ahead
    monkeypatch.setattr(scoring_pass, "FIRST_PART", 2)
    monkeypatch.setattr(scoring_pass, "GATHER_CHUNK", 3)
    started = []
    real_ahead = GitRepo.ahead
    monkeypatch.setattr(GitRepo, "ahead", lambda self, parts: (started.append(parts), real_ahead(self, parts))[1])
    gathered_on = []  # and each part's inputs are gathered on a thread of their own, a part ahead
    real_made = scoring_pass.made_ahead

    def made(batches, *, name):
        for batch in real_made(((gathered_on.append(threading.current_thread().name), b)[1] for b in batches),
                               name=name):
            yield batch

    monkeypatch.setattr(scoring_pass, "made_ahead", made)
    _slow_git(tmp_path, monkeypatch, '*" cat-file "*|*" --name-only "*) sleep 0.2;;')  # each resolution and listing
    ahead = scores(tmp_path / "ahead.sqlite")
    # the parts of 2, 3, 3, 2 iterations ("" left out), the commits of the odd ones listed
    assert [(raws, sorted(listed)) for raws, listed in started[0]] == [
        (refs[0:2], [refs[0]]), (refs[2:5], sorted([refs[2], refs[4]])), ([refs[5], refs[7]], []),
        (refs[8:10], [refs[8]])]
    assert ahead == alone and len(ahead) == len(refs)
    assert gathered_on == ["agentledger-gather"] * 4
    assert json.loads(query(tmp_path / "ahead.sqlite", "SELECT breakdown FROM score_details WHERE iteration = 1")
                      [0][0])[4]["detail"] == '1/1 changed files within declared write_scope of task "t1"'



def test_a_pass_ends_its_thread_ahead_before_the_next_part(tmp_path: Path, make_repo, monkeypatch) -> None:
    """``join_ahead`` stops the thread before its next part and waits for it: a pass that
    stops (or fails) leaves no git work running for parts it will never gather."""

    from agentledger.sources.git import GitRepo

    repo: Repo = make_repo()
    shas = [repo.commit(f"c{i}", {f"f{i}": str(i)}) for i in range(3)]
    _slow_git(tmp_path, monkeypatch, '*" cat-file "*) sleep 0.5;;')
    git = GitRepo(str(repo.path))
    git.ahead([[s[:7]] for s in shas])
    git.join_ahead()
    assert git._ahead is None
    resolved = [s for s in shas if s[:7] in git.commits._resolved]
    assert resolved in ([], shas[:1])  # the part under way at most, nothing after it


def _log_state(log) -> tuple:
    return (log.index, log.subject_at, log.revert_prefix, log.revert_lengths, log.by_subject, log._eof)


def test_a_trunk_log_read_ahead_is_the_log_read_alone(tmp_path: Path, make_repo, monkeypatch) -> None:
    """``GitRepo.prefetch`` and ``ahead`` read the trunk's log on a thread of its own
    (``_read_trunk``) while the pass gets ready: a reader on another thread waits for it and
    finds the same log, reverts and subjects included; a stop ends it before its next chunk,
    and the next reader reads on from there to the same log; and nothing is left running
    once the pass joins its threads or the repository is closed. Here ``git log`` takes
    0.3 s to start, so the pass's own reader comes while the thread is under way."""
    from agentledger.sources.git import GitRepo

    from .conftest import threads_named

    repo: Repo = make_repo()
    shas = [repo.commit(f"feat: change {i}\n\n" + f"line {i}\n" * 4000, {f"f{i}.txt": str(i)}) for i in range(6)]
    repo.commit(f'Revert "feat: change 2"\n\nThis reverts commit {shas[2]}.')
    alone = GitRepo(str(repo.path))
    alone.trunk_log().read_all()
    assert len(alone.trunk_log().index) == 7 and alone.trunk_log().first_revert(shas[2], 5)

    _slow_git(tmp_path, monkeypatch, '*" log "*) sleep 0.3;;')
    git = GitRepo(str(repo.path))
    git.prefetch(shas[:2])
    log = git.trunk_log()
    assert threads_named("agentledger-trunk-ahead")
    assert log.position(shas[0]) == 6  # waits for the thread under way, then answers
    log.read_all()
    git.join_prefetch()
    assert _log_state(log) == _log_state(alone.trunk_log())
    git.close()
    assert not threads_named("agentledger-trunk-ahead")

    class AfterOne:  # set once one chunk was read
        calls = 0

        def is_set(self) -> bool:
            self.calls += 1
            return self.calls > 1

    cut = GitRepo(str(repo.path))
    log = cut.trunk_log()
    log.read_all(AfterOne())  # type: ignore[arg-type]
    assert not log._eof and 0 < len(log.index) < 7  # the messages span chunks of 64 KiB
    log.read_all()
    assert _log_state(log) == _log_state(alone.trunk_log())
    git = GitRepo(str(repo.path))
    with git.one_view():
        git.ahead([([shas[0]], set())])
        git.join_ahead()
    assert not threads_named("agentledger-trunk-ahead") and git._trunk_reader is None
    for g in (alone, cut, git):
        g.close()


def test_what_git_has_answered_is_read_without_waiting_for_a_call_under_way(make_repo, monkeypatch) -> None:
    """A scoring pass's gathering asks for commits ``GitRepo.ahead`` has resolved and
    listed while that thread runs git for the next part: the answers are read at once,
    not after that call (a backfill's workers waited ~0.1 s for it). A resolution is
    published whole: no reader sees a commit resolved without its time."""
    import threading

    from agentledger.sources.git import GitRepo

    repo = make_repo()
    shas = [repo.commit(f"c{i}", {f"f{i}.txt": "x"}, date=f"2026-01-0{i + 1}T00:00:00Z") for i in range(3)]
    g = GitRepo(str(repo.path), "master")
    first = g.commits.resolve(shas[:2])
    listed = g.changed_files(shas[:2])
    answers: list = []
    with g.commits._resolving, g._listing:  # a call under way on another thread holds these
        reader = threading.Thread(target=lambda: answers.append((g.commits.resolve(shas[:2]),
                                                                 g.changed_files(shas[:2]))))
        reader.start()
        reader.join(10)
        waiting = threading.Thread(target=g.commits.resolve, args=([shas[2]],))  # a new one waits its turn
        waiting.start()
        waiting.join(0.2)
        assert answers == [(first, listed)] and waiting.is_alive()
    reader.join()
    waiting.join()
    assert first[shas[0]].commit_time == "2026-01-01T00:00:00+00:00" and listed[shas[1]] == ("f1.txt",)

    seen = []  # what a reader finds while the times of a batch are asked for
    real_times = g.commits._commit_times
    monkeypatch.setattr(g.commits, "_commit_times", lambda found, **kw: (
        seen.append({r: g.commits._resolved.get(r) for r in ["HEAD~1", "HEAD"]}), real_times(found, **kw))[1])
    got = g.commits.resolve(["HEAD~1", "HEAD"])
    assert seen == [{"HEAD~1": None, "HEAD": None}]
    assert got["HEAD"].sha == shas[2] and got["HEAD"].commit_time == "2026-01-03T00:00:00+00:00"
