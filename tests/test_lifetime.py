"""Nothing outlives the process the user started, and nothing it leaves on disk stays.

Every run here is a real subprocess killed with SIGKILL; what belongs to it is found
through an environment tag that its forkserver and workers inherit.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from agentledger.example import synth
from agentledger.output import sidecars
from agentledger.process import lifetime

from tests.conftest import RUN_TAG, leftover_temp_dirs, run_cli, tagged_processes, wait_until

KILLS = 20


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_only_dead_writers_leftovers_are_removed(tmp_path: Path) -> None:
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        hour_ago = time.time() - 3600 - 5
        names = {
            "dead": f".agentledger-{_dead_pid()}-abc.tmp",
            "live": f".agentledger-{live.pid}-def.tmp",
            "mine": f".agentledger-{os.getpid()}-ghi.tmp",
            "reused": f".agentledger-{live.pid}-old.tmp",  # older than the process now under that pid
            "legacy_old": ".agentledger-zzzzzz.tmp",
            "legacy_new": ".agentledger-yyyyyy.tmp",
            "other_tool": f".fsops-{_dead_pid()}-x.tmp",
            "sidecar": "iter-1.score.yaml",
        }
        for name in names.values():
            (tmp_path / name).write_text("x")
        for key in ("reused", "legacy_old"):
            os.utime(tmp_path / names[key], (hour_ago, hour_ago))
        assert sidecars.remove_stale_temps(tmp_path) == 3
        left = {p.name for p in tmp_path.iterdir()}
        assert left == {names[k] for k in ("live", "mine", "legacy_new", "other_tool", "sidecar")}
    finally:
        live.kill()
        live.wait()


def test_a_killed_writers_temp_file_is_removed_by_the_next_run(tmp_path: Path) -> None:
    """A real writer killed between creating its temp file and the rename; a live one
    beside it keeps its file. The next full pass removes it (the close-task hook leaves
    it: listing a large directory was a third of its time)."""
    gen = synth.generate(tmp_path / "gen", 6)
    code = ("import sys, tempfile, time\nfrom agentledger.output import sidecars\nfrom agentledger.process import lifetime\n"
            "fd, p = tempfile.mkstemp(prefix=lifetime.stamped(sidecars.TEMP_PREFIX), suffix=sidecars.TEMP_SUFFIX,"
            " dir=sys.argv[1])\nprint(p, flush=True)\ntime.sleep(120)\n")
    killed = subprocess.Popen([sys.executable, "-c", code, str(gen.log)], stdout=subprocess.PIPE, text=True)
    live = subprocess.Popen([sys.executable, "-c", code, str(gen.log)], stdout=subprocess.PIPE, text=True)
    try:
        killed_tmp, live_tmp = Path(killed.stdout.readline().strip()), Path(live.stdout.readline().strip())
        killed.kill()
        killed.wait()
        assert killed_tmp.exists() and live_tmp.exists()
        args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(tmp_path / "l.sqlite")]
        assert run_cli("score", "3", *args)[0] == 0  # the close-task hook does not list the directory
        assert killed_tmp.exists()
        assert run_cli("ingest", *args)[0] == 0  # the next full pass does
        assert not killed_tmp.exists() and live_tmp.exists()
    finally:
        live.kill()
        live.wait()
        killed.stdout.close()
        live.stdout.close()


def test_the_daemon_removes_dead_writers_temp_files_at_start(tmp_path: Path) -> None:
    gen = synth.generate(tmp_path / "gen", 4)
    stale = gen.log / f".agentledger-{_dead_pid()}-zz.tmp"
    stale.write_text("half a sidecar")
    proc = subprocess.Popen([sys.executable, "-m", "agentledger", "run", "--iteration-log", str(gen.log),
                             "--repo", str(gen.repo), "--db", str(tmp_path / "l.sqlite")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: not stale.exists() and (gen.log / "iter-4.score.yaml").exists(), 60)
        # the daemon's own writes may still be in flight (a session sidecar): none stays
        assert wait_until(lambda: not list(gen.log.glob(".agentledger-*")), 30)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


# -- SIGKILL at random moments: no process of the killed run survives it ------------------
def _kill_runs(cmd: list[str], env: dict[str, str], tmp_path: Path, *, seed: int, busy: int = 2,
               fresh_db: bool = True) -> dict[str, int]:
    """Start ``cmd`` ``KILLS`` times and SIGKILL it: half the time once it has at least
    ``busy`` processes (the main one and its helpers: a condition, not a delay), else
    at a random moment of its first two seconds. After each kill, nothing tagged with
    that run may be alive 5 s later. Returns counts of kills with helpers alive."""
    rng = random.Random(seed)
    counts = {"kills": 0, "with_helpers": 0}
    for i in range(KILLS):
        tag = uuid.uuid4().hex
        run_cmd = [c.replace("{db}", str(tmp_path / f"l{i if fresh_db else ''}.sqlite")) for c in cmd]
        proc = subprocess.Popen(run_cmd, env={**os.environ, **env, RUN_TAG: tag},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            if i % 2 == 0:
                wait_until(lambda: len(tagged_processes(tag)) >= busy or proc.poll() is not None, 60)
                time.sleep(rng.uniform(0, 0.3))  # a random moment once they are up
            else:
                time.sleep(rng.uniform(0.05, 2.0))  # a random moment from the start
            helpers = len(tagged_processes(tag)) - 1
        finally:
            proc.kill()
            proc.wait()
        counts["kills"] += 1
        counts["with_helpers"] += helpers > 0
        survivors = wait_until(lambda: not tagged_processes(tag), 5)
        assert survivors, f"kill {i}: still alive 5 s after SIGKILL: {tagged_processes(tag)}"
    return counts



@pytest.fixture(scope="module")
def big_results(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("vally")
    run = root / "run-1"
    run.mkdir()
    with open(run / "results.jsonl", "wb") as fh:
        i = 0
        while fh.tell() < 26 << 20:
            fh.write(synth.vally_trial_line(i, pad=2000))
            i += 1
    return root


@pytest.fixture(scope="module")
def log300(tmp_path_factory):
    return synth.generate(tmp_path_factory.mktemp("gen") / "gen", 300, seed=5)


@pytest.mark.slow
def test_sigkill_of_a_parallel_catch_up_leaves_no_process_and_no_pool_dir(big_results: Path, tmp_path: Path) -> None:
    before = leftover_temp_dirs()
    env = {"AGENTLEDGER_PARALLEL_TAIL_BYTES": "1", "AGENTLEDGER_PARALLEL_TAIL_BLOCK": "65536"}
    counts = _kill_runs([sys.executable, "-m", "agentledger", "--db", "{db}", "--vally", str(big_results), "ingest"],
                        env, tmp_path, seed=1, busy=3)
    assert counts["with_helpers"] >= KILLS // 2, counts
    assert wait_until(lambda: leftover_temp_dirs() <= before, 5), leftover_temp_dirs() - before


@pytest.mark.slow
def test_sigkill_of_parallel_scoring_leaves_no_process(log300, tmp_path: Path) -> None:
    before = leftover_temp_dirs()
    env = {"AGENTLEDGER_PARALLEL_MIN_ITEMS": "50"}
    counts = _kill_runs([sys.executable, "-m", "agentledger", "--db", "{db}", "--iteration-log", str(log300.log),
                         "--repo", str(log300.repo), "ingest"], env, tmp_path, seed=2, busy=3)
    assert counts["with_helpers"] >= KILLS // 2, counts
    assert wait_until(lambda: leftover_temp_dirs() <= before, 5), leftover_temp_dirs() - before
    assert not list(log300.log.glob(".agentledger-*")) or run_cli(
        "--db", str(tmp_path / "after.sqlite"), "--iteration-log", str(log300.log), "--repo", str(log300.repo),
        "score", "1")[0] == 0
    assert not list(log300.log.glob(".agentledger-*"))  # the next run removed what the kills left


@pytest.mark.slow
def test_sigkill_of_the_daemon_leaves_no_process(log300, tmp_path: Path) -> None:
    env = {"AGENTLEDGER_PARALLEL_MIN_ITEMS": "50"}
    counts = _kill_runs([sys.executable, "-m", "agentledger", "--db", "{db}", "--iteration-log", str(log300.log),
                         "--repo", str(log300.repo), "run", "--log-format", "json"], env, tmp_path, seed=3, busy=3)
    assert counts["with_helpers"] >= KILLS // 2, counts


@pytest.mark.slow
def test_sigterm_and_sigkill_of_ui_leave_no_process_and_no_temp_dir(log300, tmp_path: Path) -> None:
    if shutil.which("datasette") is None and not _has_datasette():
        pytest.skip("Datasette is the [ui] extra; `make test` installs it")
    db = tmp_path / "ui.sqlite"
    assert run_cli("--db", str(db), "--iteration-log", str(log300.log), "--repo", str(log300.repo), "ingest")[0] == 0
    before = leftover_temp_dirs()
    counts = _kill_runs([sys.executable, "-m", "agentledger", "--db", str(db), "ui", "--port", "0"], {}, tmp_path,
                        seed=4, busy=1, fresh_db=False)
    assert counts["kills"] == KILLS
    tag = uuid.uuid4().hex
    proc = subprocess.Popen([sys.executable, "-m", "agentledger", "--db", str(db), "ui", "--port", "0"],
                            env={**os.environ, RUN_TAG: tag}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(random.Random(5).uniform(0.5, 1.5))
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert wait_until(lambda: not tagged_processes(tag), 5), tagged_processes(tag)
    assert leftover_temp_dirs() <= before


def _has_datasette() -> bool:
    import importlib.util

    if importlib.util.find_spec("datasette") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("Datasette is missing (the [ui] extra; `make test` installs it)")
        return False
    return True


def test_a_worker_ends_with_its_parent(tmp_path: Path) -> None:
    """exit_with_parent in isolation: a child that watches a parent we SIGKILL."""
    code = ("import os, sys, time\nfrom agentledger.process import lifetime\n"
            "lifetime.exit_with_parent(int(sys.argv[1]), sys.argv[2])\ntime.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    leftovers = tmp_path / "pool"
    leftovers.mkdir()
    child = subprocess.Popen([sys.executable, "-c", code, str(parent.pid), str(leftovers)])
    try:
        assert wait_until(lambda: any(t != str(child.pid) for t in os.listdir(f"/proc/{child.pid}/task")), 30)
        parent.kill()
        parent.wait()
        assert child.wait(timeout=5) == 1
        assert not leftovers.exists()
    finally:
        for p in (parent, child):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert lifetime.owner_alive(os.getpid(), time.time())
    assert not lifetime.owner_alive(_dead_pid(), time.time())


def test_a_run_killed_before_its_workers_start_leaves_no_pool_dir(tmp_path: Path) -> None:
    """SIGKILL once the pool's directory (its forkserver's socket) is made and before any
    worker exists to remove it: while the forkserver still imports the jobs' modules
    (held there until the run is dead). The forkserver removes it when it ends."""
    (tmp_path / "held_import.py").write_text(
        "import os, time\n"
        "parent = os.getppid()\n"
        "open(os.environ['HELD_MARKER'], 'w').close()\n"
        "while os.getppid() == parent:  # until the run that started this forkserver is gone\n"
        "    time.sleep(0.01)\n")
    marker, tag = tmp_path / "held", uuid.uuid4().hex
    code = ("import time\nfrom agentledger.process import parallel\nparallel.preload('held_import')\n"
            "parallel._start_pool(2)\nprint(flush=True)\ntime.sleep(120)\n")
    env = {**os.environ, RUN_TAG: tag, "HELD_MARKER": str(marker),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    before = leftover_temp_dirs()
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"\n", "the pool did not start"
        assert wait_until(marker.exists, 60), "the forkserver never imported the jobs' modules"
        pool_dirs = list(Path(tempfile.gettempdir()).glob(f"agentledger-pool-{proc.pid}-*"))
        assert len(pool_dirs) == 1, pool_dirs
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert wait_until(lambda: not tagged_processes(tag), 10), tagged_processes(tag)
    assert not pool_dirs[0].exists()
    assert leftover_temp_dirs() <= before
