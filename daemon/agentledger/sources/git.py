"""Git facts for scoring, from as few git processes as possible.

The reference runs several git commands per iteration (rev-parse, merge-base,
two full ``git log master`` passes, show). Here:

* every commit string of a batch is resolved by one ``cat-file --batch-check``, and
  committer times come from one ``log --no-walk --stdin`` (a few full SHAs of commits,
  the close-task hook's, by that one alone);
* the work-tree check brings the trunk's tip (one ``rev-parse``);
* the trunk log is streamed lazily, cached per trunk tip (``trunk_log.py``);
* changed files for many commits come from one ``git show --name-only``.

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
import re
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone

from ..errors import AgentledgerError
from ..scoring.facts import LandedFacts
from .trunk_log import TrunkLog

_ENV_OVERRIDES = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
    "LC_ALL": "C",
}
ARGS_PER_CALL = 2000  # SHAs on one command line (82 KB), far below ARG_MAX
_HEXISH = re.compile(r"[0-9a-fA-F]{4,64}")
_FULL_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
FEW = 8  # commit strings that are all full SHAs resolve in one process, not two (``resolve``)


class GitError(AgentledgerError):
    """git refused or failed: its own words, one line."""


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, **_ENV_OVERRIDES}


@dataclass(frozen=True)
class Resolution:
    sha: str = ""  # `raw.strip()^{commit}`, empty when it does not resolve
    commit_time: str | None = None  # ISO UTC of `raw` itself when it names a commit


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
        self._resolved: dict[str, Resolution] = {}
        self._volatile: set[str] = set()  # resolved keys a forward move forgets (not a SHA's)
        self._view: dict[str, str | None] | None = None  # see one_view

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
        if self._trunk_log is not None:
            self._trunk_log.close()

    # -- commit resolution ----------------------------------------------------
    def resolve(self, raws: list[str]) -> dict[str, Resolution]:
        """Resolve commit strings in one batch; results cached (commits are immutable,
        but a branch name can move, so only full SHAs are cached across calls)."""
        todo = [r for r in dict.fromkeys(raws) if r not in self._resolved]
        if todo and len(todo) <= FEW and all(_FULL_SHA.fullmatch(r) for r in todo) and self._commits(todo):
            todo = []  # a few full SHAs of commits (the close-task hook's): one process said so, and when
        if todo:
            # One query per string: the string itself. It names a commit (the
            # usual case: a SHA, branch or lightweight tag), an annotated tag
            # (peel it in a second, small query), or nothing.
            direct = self._batch_check([r if r and r == r.strip() and "\n" not in r else "" for r in todo])
            peel: dict[str, str] = {}
            for raw, ans in zip(todo, direct):
                if ans is None or ans[1] != "commit":
                    s = raw.strip()
                    if s and "\n" not in s:
                        peel[raw] = f"{s}^{{commit}}"
            peeled = dict(zip(peel, self._batch_check(list(peel.values()))))
            commits: dict[str, str] = {}
            for raw, ans in zip(todo, direct):
                direct_commit = ans[0] if ans is not None and ans[1] == "commit" else ""
                p = peeled.get(raw)
                sha = direct_commit or (p[0] if p is not None and p[1] == "commit" else "")
                commits[raw] = direct_commit
                self._resolved[raw] = Resolution(sha=sha)
                self._volatile.update(() if sha and _HEXISH.fullmatch(raw) else (raw,))
            times = self._commit_times([c for c in commits.values() if c])
            for raw, c in commits.items():
                if c and c in times:
                    self._resolved[raw] = Resolution(sha=self._resolved[raw].sha, commit_time=times[c])
        return {r: self._resolved[r] for r in raws}

    def forget(self, *, keep_shas: bool = False) -> None:
        """Drop cached resolutions: names move and missing commits can appear. With
        ``keep_shas`` (the trunk only moved forward), keep what a hex SHA (full or
        abbreviated) resolved to, since an existing commit never changes."""
        for raw in self._volatile if keep_shas else list(self._resolved):  # no pass over every SHA
            self._resolved.pop(raw, None)
        self._volatile.clear()

    def _commits(self, shas: list[str]) -> bool:
        """Resolve ``shas`` as the two queries below would, if each is a commit's full SHA:
        ``git log --no-walk`` prints each one's SHA and time, in the order given, or fails
        for a SHA that is missing or not a commit's (False: then nothing is resolved here)."""
        ok, found = self._log_times(shas)
        if not ok or [sha for sha, _ in found] != shas:
            return False  # (a tag's SHA prints its commit's)
        for sha, when in found:
            self._resolved[sha] = Resolution(sha=sha, commit_time=when)
        return True

    def _batch_check(self, queries: list[str]) -> list[tuple[str, str] | None]:
        real = [q for q in queries if q]
        results: list[tuple[str, str] | None] = [None] * len(queries)
        if not real:
            return results
        proc = self._run("cat-file", "--batch-check=%(objectname) %(objecttype)",
                         input=("\n".join(real) + "\n").encode("utf-8", "surrogateescape"))
        lines = proc.stdout.decode("utf-8", "replace").split("\n")
        it = iter(lines)
        for i, q in enumerate(queries):
            if not q:
                continue
            line = next(it, "")
            parts = line.rsplit(" ", 1)
            if len(parts) == 2 and parts[1] in ("commit", "tag", "tree", "blob") and \
                    re.fullmatch(r"[0-9a-f]{40,64}", parts[0]):
                results[i] = (parts[0], parts[1])
        return results

    def _commit_times(self, shas: list[str]) -> dict[str, str]:
        if not shas:
            return {}
        return {sha: when for sha, when in self._log_times(list(dict.fromkeys(shas)))[1] if when is not None}

    def _log_times(self, shas: list[str]) -> tuple[bool, list[tuple[str, str | None]]]:
        """``git log --no-walk`` of commit SHAs: whether git succeeded, and each commit it
        printed, in the order given, with its commit time (ISO UTC; None: git gave none)."""
        proc = self._run("log", "--no-walk=unsorted", "--stdin", "--format=%H %ct",
                         input=("\n".join(shas) + "\n").encode())
        out = []
        for line in proc.stdout.decode().splitlines():
            sha, _, ts = line.partition(" ")
            out.append((sha, datetime.fromtimestamp(int(ts), tz=timezone.utc).isoformat()
                        if ts.lstrip("-").isdigit() else None))
        return proc.returncode == 0, out

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
        if not batch and sha not in log.index and sha != log.tip:  # (the tip: the hook's usual case)
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
        todo = [s for s in dict.fromkeys(shas) if s not in self._changed]
        for at in range(0, len(todo), ARGS_PER_CALL):  # bounded: 50,000 SHAs are past ARG_MAX
            part = todo[at:at + ARGS_PER_CALL]
            proc = self._run("show", "--no-ext-diff", "--no-textconv", "--name-only", "--format=%x1e%H", *part)
            if proc.returncode == 0:
                for chunk in proc.stdout.decode("utf-8", "replace").split("\x1e")[1:]:
                    lines = chunk.split("\n")
                    self._changed[lines[0].strip()] = tuple(
                        ln.strip() for ln in lines[1:] if ln.strip())
            for s in part:
                self._changed.setdefault(s, None)
        return {s: self._changed[s] for s in shas}
