"""Git facts for scoring, from as few git processes as possible.

The reference runs several git commands per iteration (rev-parse, merge-base,
two full ``git log master`` passes, show). Here:

* every commit string of a batch is resolved by one ``cat-file --batch-check``, and
  committer times come from one ``log --no-walk --stdin`` (a few full SHAs of commits,
  the close-task hook's, by that one alone, which also lists the files each changed);
* the work-tree check brings the trunk's tip (one ``rev-parse``);
* the trunk log is streamed lazily, cached per trunk tip (``trunk_log.py``);
* changed files for many commits come from one ``git log --no-walk --stdin --name-only``
  (what ``git show --name-only`` prints for each, merges' combined diffs included, at a
  third of its cost for 10,000 commits).

Git runs with the user's global and system configuration isolated, so its built-in
defaults (rename detection on, C-quoted paths) hold as the reference's scores assume.

The configured repository, and only it, is trusted whoever owns it (``safe.directory``:
a service user scores other users' repositories, which git refuses as "dubious
ownership"); the settings by which a repository's own config could run a program are
overridden on the command line (``TRUST``); every command is read-only.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading

from ..errors import AgentledgerError
from ..scoring.facts import LandedFacts
from .commits import NAME_ONLY, Commits, Resolution, name_only
from .trunk_log import TrunkLog

_ENV_OVERRIDES = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
    "LC_ALL": "C",
}
SHAS_PER_CALL = 5000  # commits whose changed files one git process lists (its output held at once)


class GitError(AgentledgerError):
    """git refused or failed: its own words, one line."""


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, **_ENV_OVERRIDES}


# settings a repository's own config could point at a program, overridden for every command
TRUST = ("core.fsmonitor=false", "core.hooksPath=/dev/null", "core.pager=cat", "core.sshCommand=false",
         "diff.external=", "core.alternateRefsCommand=", "protocol.allow=never", "credential.helper=",
         "core.askPass=false")


def git_command(path: str) -> list[str]:
    """``git`` for the configured repository ``path`` (and its real path), trusted, with ``TRUST``."""
    settings = [*(f"safe.directory={p}" for p in dict.fromkeys((path, os.path.realpath(path)))), *TRUST]
    return ["git", *(x for s in settings for x in ("-c", s)), "-C", path]


class GitRepo:
    """One repository and its trunk branch; caches facts for the current trunk tip."""

    def __init__(self, path: str, trunk: str = "master"):
        self.path = str(path)
        self.git = git_command(self.path)
        self.trunk = trunk
        self._trunk_log: TrunkLog | None = None
        self._changed: dict[str, tuple[str, ...] | None] = {}
        self.commits = Commits(lambda *args, **kw: self._run(*args, **kw), self._changed.update)
        self._view: dict[str, str | None] | None = None  # see one_view
        self._listing = threading.Lock()  # ``changed_files`` runs on the caller's thread or ``ahead``'s
        self._ahead: tuple[threading.Thread, threading.Event] | None = None
        self._trunk_reader: tuple[threading.Thread, threading.Event] | None = None

    # -- plumbing -----------------------------------------------------------
    def stream(self, *args: str) -> subprocess.Popen[bytes]:
        """``git ARGS``, its output read as it comes (``TrunkLog``)."""
        return subprocess.Popen([*self.git, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_env())

    def _run(self, *args: str, input: bytes | None = None, check: bool = False) -> subprocess.CompletedProcess[bytes]:
        proc = subprocess.run([*self.git, *args], input=input,
                              capture_output=True, env=_env())
        if check and proc.returncode != 0:
            raise GitError(f"git {' '.join(args[:2])}: exit status {proc.returncode}: "
                           f"{proc.stderr.decode('utf-8', 'replace').strip()}")
        return proc

    @contextlib.contextmanager
    def one_view(self):
        """Within the block, the work-tree check and the trunk tip are read once:
        a scoring pass (which iterations to rescore, then their inputs) sees one
        trunk, and pays one git process for both instead of four. Within a view, another
        is the same one."""
        if self._view is not None:
            yield self
            return
        self._view = {}
        try:
            yield self
        finally:
            self._view = None

    def _viewed(self, key: str, read):
        if self._view is None:
            return read()
        if key not in self._view:
            self._view[key] = read()
        return self._view[key]

    def check(self) -> str | None:
        """None when the path is a git work tree, else the reason it is not."""
        return self._viewed("check", self._check)

    def _check(self) -> str | None:
        if not os.path.isdir(self.path):
            return f"{self.path} is not a directory"
        # one process says both: "true" and, when the trunk resolves (exit 0), its tip
        proc = self._run("rev-parse", "--is-inside-work-tree", "--verify", "--quiet", f"{self.trunk}^{{commit}}")
        lines = proc.stdout.split()
        if proc.returncode not in (0, 1) or not lines or lines[0] != b"true":
            return (f"{self.path} is not a git repository: "
                    f"{proc.stderr.decode('utf-8', 'replace').strip()}")
        if self._view is not None:  # the tip the view will be asked for
            tip = lines[1].decode() if proc.returncode == 0 and len(lines) == 2 else None
            self._view.setdefault("tip", tip)
        return None

    def trunk_tip(self) -> str | None:
        return self._viewed("tip", self._trunk_tip)

    def _trunk_tip(self) -> str | None:
        proc = self._run("rev-parse", "--verify", "--quiet", f"{self.trunk}^{{commit}}")
        tip = proc.stdout.decode().strip()
        return tip if proc.returncode == 0 and tip else None

    def trunk_log(self) -> TrunkLog:
        tip = self.trunk_tip()
        log = self._trunk_log
        if log is not None and log.tip != tip:
            self._join_trunk()  # (its reader: stopped before the log is extended or closed)
            if log.tip is not None and tip is not None and self._extend(log, tip):
                return log
            log.close()
            log = None
        if log is None:
            log = self._trunk_log = TrunkLog(self, tip)
        return log

    def _extend(self, log: TrunkLog, tip: str) -> bool:
        """Extend the cached log when the trunk moved forward linearly (then
        ``git log tip`` is the new commits followed by the old log, exactly)."""
        if not self.is_ancestor(log.tip, tip):  # type: ignore[arg-type]
            return False
        proc = self._run("log", f"{log.tip}..{tip}", "--format=%P%x1f%H%x1f%s%x1f%B%x1e")
        records = []
        for rec in proc.stdout.split(b"\x1e"):
            rec = rec.strip()
            if not rec:
                continue
            parents, _, rest = rec.partition(b"\x1f")
            if len(parents.split()) != 1:
                return False  # a merge: date order may interleave old and new
            records.append(rest)
        if proc.returncode != 0 or len(records) > 10_000:
            return False
        log.extend(tip, records)
        return True

    def close(self) -> None:
        self._join_trunk()
        if self._trunk_log is not None:
            self._trunk_log.close()

    # -- commit resolution (``commits.py``) -------------------------------------------
    def resolve(self, raws: list[str]) -> dict[str, Resolution]:
        return self.commits.resolve(raws)

    def forget(self, *, keep_shas: bool = False, fresh_at: str | None = None) -> None:
        self.commits.forget(keep_shas=keep_shas, fresh_at=fresh_at)

    def prefetch(self, raws: list[str]) -> None:
        """Resolve ``raws`` and read the trunk's log, each on a thread, while the caller
        reads files: the scoring pass that follows a large ingest asks for both first, and
        would otherwise wait on git with the workers idle (the log of 10,000 commits:
        ~0.1 s). The log's reader runs on into that pass (``join_ahead`` or ``close``
        ends it)."""
        self.commits.prefetch(raws, lambda: self._trunk_tip() if self._check() is None else None)
        self._read_trunk(self.trunk_log())

    def join_prefetch(self) -> None:
        self.commits.join_prefetch()

    def _read_trunk(self, log: TrunkLog) -> None:
        """The whole of ``log`` read on a thread, as a batch's ``landed`` reads it: a reader
        on another thread waits for it (``TrunkLog.read_all``). The log is taken on the
        caller's thread, so the thread never makes one (nor waits for ``trunk_log``); a
        failure only loses the head start."""
        if self._trunk_reader is not None:
            if self._trunk_reader[0].is_alive():
                return
            self._join_trunk()
        stop = threading.Event()

        def run() -> None:
            try:
                log.read_all(stop)
            except Exception:  # noqa: BLE001 - the pass's own read reads on, or fails itself
                pass

        thread = threading.Thread(target=run, name="agentledger-trunk-ahead", daemon=True)
        self._trunk_reader = (thread, stop)
        thread.start()

    def _join_trunk(self) -> None:
        """End the trunk log's reader: it stops before its next chunk and is waited for."""
        reader, self._trunk_reader = self._trunk_reader, None
        if reader is not None:
            reader[1].set()
            reader[0].join()

    def ahead(self, parts: list[tuple[list[str], set[str]]]) -> None:
        """For each part (its commit strings, and those of them whose changed files it
        will ask for), resolve them and list those files, a part after another, on a
        thread: a scoring pass gathering its inputs a part at a time then finds what it
        asks git already answered, instead of waiting on two git processes a part (a
        backfill of 10,000: ~0.5 s its main thread waited while the workers scored).
        Unlike ``prefetch`` the cache is kept: the pass's own calls would answer from it
        too. ``resolve`` and ``changed_files`` wait for what the thread has under way. The
        caller ends it with ``join_ahead``; a failure only loses the head start."""
        if self._ahead is not None:
            return
        stop = threading.Event()

        def run() -> None:
            try:
                for raws, listed in parts:
                    if stop.is_set():
                        return
                    res = self.resolve(raws)
                    if not stop.is_set():
                        self.changed_files([r.sha for raw, r in res.items() if r.sha and raw in listed])
            except Exception:  # noqa: BLE001 - only a head start; the pass asks git itself
                pass

        thread = threading.Thread(target=run, name="agentledger-git-ahead", daemon=True)
        self._ahead = (thread, stop)
        thread.start()
        self._read_trunk(self.trunk_log())  # (at the tip of the caller's view)

    def join_ahead(self) -> None:
        """End ``ahead``'s threads: each stops before its next part or chunk and is waited for."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead[1].set()
            ahead[0].join()
        self._join_trunk()

    # -- landed (§4.1) ----------------------------------------------------------
    def landed(self, raw_commit: str, summary: str, resolution: Resolution, log: TrunkLog, *,
               batch: bool) -> LandedFacts:
        """``log``: ``trunk_log()`` taken once for the whole batch (one tip, one pass)."""
        raw = raw_commit.strip()
        if not raw:
            return LandedFacts()
        if batch:
            log.read_all()
        sha = resolution.sha
        if not sha:
            want = summary.strip()
            if not want:
                return LandedFacts(raw=raw)
            pos = log.subject_match(want)
            if pos is None:
                return LandedFacts(raw=raw)
            matched = log.shas[pos]
            return LandedFacts(raw=raw, matched=matched, matched_reverted_by=log.first_revert(matched, pos))
        if sha == log.tip:  # the newest on the trunk (the hook's usual case): nothing above it reverts it,
            return LandedFacts(raw=raw, resolved=sha, reachable=True)  # and no `git log` need start
        if not batch and sha not in log.index:
            # One cheap process instead of reading the whole log for an orphan.
            if log.tip is None or self._run("merge-base", "--is-ancestor", sha, log.tip).returncode != 0:
                return LandedFacts(raw=raw, resolved=sha)
        pos = log.position(sha)
        if pos is None:
            return LandedFacts(raw=raw, resolved=sha)
        return LandedFacts(raw=raw, resolved=sha, reachable=True, reverted_by=log.first_revert(sha, pos))

    def commits_in(self, spec: str) -> set[str]:
        """``git rev-list SPEC`` (``A..B``, a branch); the user's text, never an option."""
        return set(self._run("rev-list", "--end-of-options", spec, "--", check=True).stdout.decode("ascii").split())

    def is_ancestor(self, old: str, new: str) -> bool:
        return self._run("merge-base", "--is-ancestor", old, new).returncode == 0

    # -- changed files (§4.5 step 4) ---------------------------------------------
    def changed_files(self, shas: list[str]) -> dict[str, tuple[str, ...] | None]:
        known = self._changed
        if all(s in known for s in shas):  # all answered (``ahead``): not held up by its listing of a later
            return {s: known[s] for s in shas}  # part (~50 ms of a backfill's first part, the workers idle)
        with self._listing:
            return self._changed_files(shas)

    def _changed_files(self, shas: list[str]) -> dict[str, tuple[str, ...] | None]:
        todo = [s for s in dict.fromkeys(shas) if s not in self._changed]
        for at in range(0, len(todo), SHAS_PER_CALL):  # on stdin: 50,000 SHAs are past ARG_MAX on a command line
            part = todo[at:at + SHAS_PER_CALL]
            # ``show --name-only`` took ~3x as long for 10,000
            proc = self._run("log", "--no-walk=unsorted", "--stdin", *NAME_ONLY, "--format=%x1e%H",
                             input=("\n".join(part) + "\n").encode())
            if proc.returncode == 0:
                self._changed.update(name_only(proc.stdout))
            for s in part:
                self._changed.setdefault(s, None)
        return {s: self._changed[s] for s in shas}
