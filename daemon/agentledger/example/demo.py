"""``make demo``: the ledger's main job on a generated example, start to finish.

Starts the real service (``agentledger run``, with a notification socket as
systemd gives it), then plays an agent against it: closes iterations, writes bad
input and annotations, bumps the rubric, stops it. Every other step runs the real
``agentledger`` command and prints what a user would type and see. Exits by
itself; leaves everything under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from . import synth


def step(title: str) -> None:
    print(f"\n\033[1m== {title}\033[0m" if sys.stdout.isatty() else f"\n== {title}")


def agentledger(*args: str, cfg: Path, show: int | None = None) -> str:
    cmd = ["agentledger", *args, "--config", str(cfg)]
    print("$ " + " ".join(shlex.quote(c) for c in cmd))
    proc = subprocess.run([sys.executable, "-m", "agentledger", *cmd[1:]], capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    lines = out.rstrip("\n").splitlines()
    for line in lines[:show] if show else lines:
        print("  " + line)
    if show and len(lines) > show:
        print(f"  … ({len(lines) - show} more lines)")
    if proc.returncode not in (0,):
        print(f"  (exit status {proc.returncode})")
    return out


def wait_for(pred, timeout: float = 60.0) -> float:
    """Seconds until ``pred()`` holds (raises after ``timeout``)."""
    start = time.monotonic()
    while not pred():
        if time.monotonic() - start > timeout:
            raise SystemExit("demo: the daemon did not get there in time; see daemon.log")
        time.sleep(0.01)
    return time.monotonic() - start


class Service:
    """``agentledger run`` as systemd would start it: a child process told where to
    send its sd_notify messages (a unix datagram socket we read)."""

    def __init__(self, cfg: Path, out: Path):
        self.sock_path = out / "notify.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(self.sock_path))
        self.sock.settimeout(300)
        self.log = out / "daemon.log"
        cmd = ["agentledger", "run", "--config", str(cfg), "--log-format", "console"]
        print("$ NOTIFY_SOCKET=" + str(self.sock_path) + " " + " ".join(shlex.quote(c) for c in cmd)
              + f" > {self.log.name} &")
        self.proc = subprocess.Popen([sys.executable, "-m", "agentledger", *cmd[1:]],
                                     stdout=self.log.open("w"), stderr=subprocess.STDOUT,
                                     env={**os.environ, "NOTIFY_SOCKET": str(self.sock_path)})

    def wait_ready(self) -> None:
        start = time.monotonic()
        while True:
            msg = self.sock.recv(65536).decode()
            status = [ln for ln in msg.splitlines() if ln.startswith("STATUS=")]
            if "READY=1" in msg:
                print(f"  READY=1 after {time.monotonic() - start:.1f} s; {status[0] if status else ''}")
                self.sock.setblocking(False)
                return

    def stop(self) -> None:
        print(f"$ kill -TERM {self.proc.pid}")
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        print(f"  exited with status {code}; the last lines of {self.log.name}:")
        for line in self.log.read_text().splitlines()[-4:]:
            print("    " + line[:150])
        self.sock.close()


def ledger_count(cfg: Path, sql: str) -> int:
    out = subprocess.run([sys.executable, "-m", "agentledger", "query", sql, "--json", "--config", str(cfg)],
                         capture_output=True, text=True).stdout
    rows = json.loads(out or "[]")
    return next(iter(rows[0].values())) if rows else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("demo-out"))
    ap.add_argument("--iterations", type=int, default=60)
    args = ap.parse_args()
    out = args.out.resolve()
    if out.exists():
        shutil.rmtree(out)

    step(f"Generate an example: {args.iterations} closed iterations, sessions, hook outcomes, labels, "
         "a git repository with reverts and an unmerged branch, a Claude transcript, vally results")
    gen = synth.generate(out / "example", args.iterations)
    transcripts = out / "example" / "claude-transcripts"
    synth.claude_transcript(transcripts / "session.jsonl", args.iterations)
    runs = out / "example" / "vally-results" / "2026-11-22T08-00-00-000Z" / "baseline"
    runs.mkdir(parents=True)
    with (runs / "results.jsonl").open("wb") as fh:
        for i in range(12):
            fh.write(synth.vally_trial_line(i))
    analyses = out / "example" / "analyses"
    analyses.mkdir()
    cfg = out / "agentledger.toml"
    cfg.write_text(f'[store]\npath = "ledger.sqlite"\n\n[scoring]\nrubric = "2.1.0"\n\n[ledger]\nname = "laptop"\n\n'
                   f'[[iteration_logs]]\nname = "example"\npath = "{gen.log}"\nrepo = "{gen.repo}"\n'
                   f'transcripts = ["{transcripts}"]\n\n[[vally]]\npath = "{runs.parent.parent}"\n\n'
                   f'[[annotations]]\npath = "{analyses}"\n')
    print(f"  iteration log: {gen.log}\n  transcripts:   {transcripts}\n  vally runs:    {runs.parent.parent}"
          f"\n  annotations:   {analyses}\n  config:        {cfg}")

    step("Start the service: it scans every source, then watches them and tells systemd it is ready")
    svc = Service(cfg, out)
    try:
        svc.wait_ready()
        agentledger("status", cfg=cfg, show=9)

        step("An agent closes three iterations (commit + iter-N.yaml renamed into place) while it watches")
        n = args.iterations
        for k in (1, 2, 3):
            synth.add_iteration(gen, n + k)
            took = wait_for((gen.log / f"iter-{n + k}.score.yaml").exists)
            print(f"  iter-{n + k}.yaml closed → iter-{n + k}.score.yaml written {took * 1000:.0f} ms later")
        print(f"\n$ head -14 {gen.log / f'iter-{n + 3}.score.yaml'}")
        for line in (gen.log / f"iter-{n + 3}.score.yaml").read_text().splitlines()[:14]:
            print("  " + line)

        step("The close-task hook: the running service answers it (same output; it works itself when none runs)")
        synth.add_iteration(gen, n + 4)
        agentledger("score", str(n + 4), cfg=cfg, show=4)

        step("Transcripts fill in token efficiency where a record has no native telemetry; eval runs are tailed")
        agentledger("query", "SELECT iteration, json_extract(r.value, '$.detail') AS token_efficiency FROM "
                    "score_details, json_each(score_details.breakdown) AS r WHERE json_extract(r.value, '$.signal')"
                    " = 'token_efficiency' AND json_extract(r.value, '$.detail') LIKE 'backfilled%' "
                    "ORDER BY iteration LIMIT 3", cfg=cfg)
        agentledger("runs", cfg=cfg)

        step("Bad input is quarantined, never fatal; the next good write of the file is picked up")
        (gen.log / f"iter-{n + 5}.yaml").write_text("schema_version: 2\niteration: [oops\n")
        wait_for(lambda: ledger_count(cfg, "SELECT count(*) FROM quarantine WHERE resolved_seq IS NULL") > 0)
        agentledger("quarantine", cfg=cfg)
        synth.add_iteration(gen, n + 5)
        took = wait_for((gen.log / f"iter-{n + 5}.score.yaml").exists)
        print(f"  fixed iter-{n + 5}.yaml scored {took * 1000:.0f} ms after the good write")
        agentledger("quarantine", cfg=cfg)

        step("Annotated trajectories dropped into the watched directory become queryable")
        for k, task in enumerate(("arc-5a1c0de1", "arc-7e11a2b3", "arc3-ls20-0f0f0f0f")):
            (analyses / f"{task}.md").write_text(synth.annotation(task, seed=k + 3))
        wait_for(lambda: ledger_count(cfg, "SELECT count(*) FROM trajectories") == 3)
        agentledger("trajectories", cfg=cfg)
        agentledger("trajectory", "arc-7e11a2b3", cfg=cfg, show=12)
        agentledger("query", "SELECT name, declared, agree FROM computed_field_agreement", cfg=cfg)

        step("Query the ledger directly (read-only)")
        agentledger("query", "SELECT band, count(*) AS iterations, round(avg(value), 3) AS mean_value "
                    "FROM scores WHERE rubric_version = '2.1.0' GROUP BY band ORDER BY mean_value DESC", cfg=cfg)
        agentledger("query", "SELECT json_extract(r.value, '$.signal') AS signal, "
                    "sum(json_extract(r.value, '$.present')) AS present_in, "
                    "round(avg(json_extract(r.value, '$.sub_score')), 3) AS mean_sub_score "
                    "FROM score_details, json_each(score_details.breakdown) AS r "
                    "WHERE json_extract(r.value, '$.present') GROUP BY signal ORDER BY mean_sub_score", cfg=cfg)

        step("Bump the rubric in the config and reload (SIGHUP): the service backfills every score from the ledger")
        cfg.write_text(cfg.read_text().replace('rubric = "2.1.0"', 'rubric = "3.0.0"'))
        print(f"$ sed -i 's/rubric = \"2.1.0\"/rubric = \"3.0.0\"/' {cfg} && kill -HUP {svc.proc.pid}")
        svc.proc.send_signal(signal.SIGHUP)
        sidecar = gen.log / "iter-1.score.yaml"
        took = wait_for(lambda: "rubric_version: 3.0.0" in sidecar.read_text(), timeout=300)
        total = len(list(gen.log.glob("iter-*.score.yaml")))
        print(f"  {total} sidecars rewritten under 3.0.0 within {took:.1f} s")
        print(f"$ head -5 {sidecar}\n" + "\n".join("  " + h for h in sidecar.read_text().splitlines()[:5]))

        step("Stop the service (SIGTERM): it finishes the current step and exits 0")
    finally:
        svc.stop()
    agentledger("query", "SELECT type, count(*) AS n FROM events GROUP BY type ORDER BY n DESC", cfg=cfg)

    step("Rebuild every projection from the events: sidecars come out byte-identical")
    before = {p.name: p.read_bytes() for p in gen.log.glob("*.score.yaml")}
    agentledger("rebuild", cfg=cfg)
    after = {p.name: p.read_bytes() for p in gen.log.glob("*.score.yaml")}
    print(f"  {len(after)} sidecars, {sum(before[k] != after.get(k) for k in before)} changed")

    step("Did the new rubric change the scores, and is it real? Every iteration under both, compared")
    agentledger("compare", "--a", "rubric=2.1.0", "--b", "rubric=3.0.0", "--metric", "score", cfg=cfg)

    step("Regressions are noticed while they happen: another project's 300 iterations, whose agent switched"
         " model at iteration 250 and got worse")
    other = synth.generate(out / "regressing", 300, seed=3, regress_at=250)
    other_cfg = out / "regressing.toml"
    other_cfg.write_text(f'[store]\npath = "regressing.sqlite"\n\n[detect]\ncommand = "tee {out / "detections.jsonl"}"'
                         f'\n\n[[iteration_logs]]\nname = "regressing"\npath = "{other.log}"\nrepo = "{other.repo}"\n')
    agentledger("ingest", cfg=other_cfg, show=2)
    agentledger("detections", cfg=other_cfg)
    print(f"  ([detect] command handed each one, as JSON on stdin, to `tee {out / 'detections.jsonl'}`)")

    step("The report: the ledger's charts in one self-contained HTML file")
    agentledger("report", "-o", str(out / "report.html"), cfg=cfg)
    team(out, cfg)
    command, config = shlex.quote(_command()), f"--config {shlex.quote(str(cfg))}"
    print(f"\nDone. Everything is under {out}; try, from any shell:\n  {command} status {config}\n"
          f"  {command} query 'SELECT * FROM session_overview' {config}\n"
          f"  open {shlex.quote(str(out / 'report.html'))} (and team-report.html) in a browser")


def team(out: Path, cfg: Path) -> None:
    """The team part, when PostgreSQL 15 and psycopg are here: this machine and a second
    generated one ship to a throwaway local cluster; a central query shows both."""
    import importlib.util

    from . import pgcluster

    if not pgcluster.available() or importlib.util.find_spec("psycopg") is None:
        print("\n(team ledger part skipped: it needs PostgreSQL 15 and the [central] extra)")
        return
    step("The team ledger: two machines ship to one PostgreSQL (a throwaway cluster), queried as one")
    cluster = pgcluster.Cluster()
    try:
        url = cluster.create_database("team").replace(f":{pgcluster.PASSWORD}@", "@")
        # libpq reads the passwords from a password file: none in a URL or the output
        pgpass = out / "pgpass"
        pgpass.write_text(f"{cluster.dir}:{cluster.port}:*:{pgcluster.USER}:{pgcluster.PASSWORD}\n")
        pgpass.chmod(0o600)
        os.environ["PGPASSFILE"] = str(pgpass)
        other = synth.generate(out / "machine-b" / "example", 30, seed=11)
        other_cfg = out / "machine-b" / "agentledger.toml"
        other_cfg.write_text(f'[store]\npath = "ledger.sqlite"\n[ledger]\nname = "ci-runner"\n'
                             f'[[iteration_logs]]\npath = "{other.log}"\nrepo = "{other.repo}"\n')
        agentledger("ingest", "-q", cfg=other_cfg)
        agentledger("ship", "--central", url, cfg=cfg)
        agentledger("ship", "--central", url, cfg=other_cfg)
        # reads go through a reader role (the read door takes no superuser's URL): its
        # ~/.pgpass line, which add-reader prints, goes to the password file, not the screen
        print(f"$ agentledger central add-reader {url} team_reader   # (its password line → {pgpass.name})")
        made = subprocess.run([sys.executable, "-m", "agentledger", "central", "add-reader", url, "team_reader"],
                              capture_output=True, text=True)
        if made.returncode != 0:
            raise SystemExit(f"demo: {made.stderr.strip()}")
        with pgpass.open("a") as fh:
            fh.write(made.stdout.strip() + "\n")
        reads = url.replace(f"{pgcluster.USER}@", "team_reader@", 1)
        agentledger("query", "--central", reads, "SELECT ledger, count(*) AS iterations,"
                    " round(avg(value)::numeric, 3) AS mean, string_agg(DISTINCT rubric_version, ',') AS rubrics"
                    " FROM latest_scores GROUP BY 1", cfg=cfg)
        agentledger("report", "--central", reads, "-o", str(out / "team-report.html"), cfg=cfg)
    finally:
        cluster.close()
        os.environ.pop("PGPASSFILE", None)


def _command() -> str:
    """How to run agentledger from a fresh shell: the console script beside this
    interpreter (the demo's .venv is not on PATH), else ``python -m agentledger``."""
    script = Path(sys.executable).parent / "agentledger"
    if script.is_file() and os.access(script, os.X_OK):
        return str(script.absolute())
    return f"{sys.executable} -m agentledger"


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
