"""Configuration: a TOML file, then ``AGENTLEDGER_*`` environment variables, then flags.

Where the file comes from: ``--config PATH``, else ``$AGENTLEDGER_CONFIG``,
else ``./agentledger.toml`` if present, else built-in defaults. Every scalar
key ``[section] key`` can be overridden by ``AGENTLEDGER_SECTION_KEY``.

This module is deliberately stdlib-only (``tomllib`` + dataclasses): it runs
on every ``agentledger score`` call from the close-task hook, where importing
pydantic alone would cost ~60 ms. Unknown keys are errors, so a typo in a
service's config fails loudly at start instead of being silently ignored.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .errors import UsageError
from . import paths
from .paths import default_store_path
from .redact import redact_url, strip_password

DEFAULT_RUBRIC = "2.1.0"
DEFAULT_TRUNK = "master"


class ConfigError(UsageError, ValueError):
    """A configuration that cannot be used: exit 2."""


class _Named:
    """A source is identified in the ledger by its directory's absolute path; its
    optional name is for people."""

    path: Path
    name: str

    @functools.cached_property
    def id(self) -> str:
        # asked ~10 times an iteration in a pass (kept in the instance's ``__dict__``: not a
        # field, so neither equality nor ``replace`` sees it)
        return str(self.path)

    @property
    def label(self) -> str:
        return self.name or str(self.path)


@dataclass(frozen=True)
class IterationLogSource(_Named):
    path: Path  # the iteration-log directory
    repo: Path  # the git work tree its records' commits live in
    trunk: str = DEFAULT_TRUNK
    name: str = ""
    transcripts: tuple[Path, ...] = ()  # Claude/Codex transcript directories (read non-recursively)
    vally_transcripts: tuple[Path, ...] = ()  # opt-in: vally trajectories count as transcripts


@dataclass(frozen=True)
class VallySource(_Named):
    """A directory tree of vally eval/experiment output (results.jsonl, run-summary.jsonl)."""

    path: Path
    name: str = ""


@dataclass(frozen=True)
class AnnotationSource(_Named):
    """A directory tree of annotated trajectories (``*.md`` with a YAML front matter)."""

    path: Path
    name: str = ""


@dataclass(frozen=True)
class StoreConfig:
    path: Path = field(default_factory=default_store_path)
    synchronous: str = "FULL"


@dataclass(frozen=True)
class ScoringConfig:
    rubric: str = DEFAULT_RUBRIC  # the configured rubric; --rubric is Config.explicit_rubric
    # Write `linked_traces_to_outcomes: true` like the reference's record-aware
    # writer. Off by default: the reference sidecar set was written without it.
    linked_traces_marker: bool = False


@dataclass(frozen=True)
class SidecarsConfig:
    # "auto": fsync a write of up to 20 sidecars (the close-task hook, live
    # changes); bulk rewrites rely on the ledger instead, which rewrites any
    # sidecar whose bytes differ on the next run. "always" / "never".
    fsync: str = "auto"


@dataclass(frozen=True)
class DaemonConfig:
    reconcile_seconds: int = 300  # full scan: the backstop for missed file notifications
    trunk_check_seconds: int = 30  # how often a moved trunk (landing, revert) is looked for
    debounce_ms: int = 50  # how long watchfiles gathers a burst of changes
    force_polling: bool = False  # poll instead of inotify (NFS, some containers)
    log_format: str = "auto"  # auto (json under journald or off a terminal, console on one) | json | console


@dataclass(frozen=True)
class LimitsConfig:
    max_file_bytes: int = 8 * 1024 * 1024
    max_line_bytes: int = 16 * 1024 * 1024


@dataclass(frozen=True)
class LedgerConfig:
    name: str = ""  # how people call this ledger in a team ledger; empty: the host name


@dataclass(frozen=True)
class CostConfig:
    # A TOML file of prices that win over the price database (genai-prices), USD per
    # million tokens by model: [models."my-model"] input = 3.0, output = 15.0, cache_read,
    # cache_write_5m, cache_write_1h. Empty: the database alone.
    prices: str = ""


@dataclass(frozen=True)
class DetectConfig:
    enabled: bool = True  # watch every score and trial stream for a sustained shift
    # run with each detection's JSON on stdin (split like a shell line, never run by a
    # shell); empty: none. Killed with its process group after timeout_seconds.
    command: str = ""
    timeout_seconds: int = 10


@dataclass(frozen=True)
class ShipDestination:
    """A team ledger (PostgreSQL) this ledger's events are shipped to. The URL may hold a
    password; ``label`` never does."""

    url: str
    name: str = ""
    batch: int = 5000  # events per transaction on the server
    connections: int = 2  # batches in flight at once, each on its own server connection
    stall_seconds: int = 120  # a pass that confirms no batch for this long is cut off and retried
    idle_seconds: int = 60  # the daemon closes its server connections after this long with nothing to send

    @property
    def label(self) -> str:
        """How people see it, and the key of its cursor: the name, else the URL without
        its password (adding, changing or removing the password keeps the cursor)."""
        return self.name or strip_password(self.url)

    @property
    def legacy_label(self) -> str:
        """The cursor key a release before 2026-11 wrote: the URL with ``***`` for its password."""
        return self.name or redact_url(self.url)


@dataclass(frozen=True)
class Config:
    store: StoreConfig = field(default_factory=StoreConfig)
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    sidecars: SidecarsConfig = field(default_factory=SidecarsConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    ledger: LedgerConfig = field(default_factory=LedgerConfig)
    cost: CostConfig = field(default_factory=CostConfig)
    detect: DetectConfig = field(default_factory=DetectConfig)
    ship: tuple[ShipDestination, ...] = ()
    iteration_logs: tuple[IterationLogSource, ...] = ()
    vally: tuple[VallySource, ...] = ()
    annotations: tuple[AnnotationSource, ...] = ()
    origin: str = "defaults"
    # --rubric on the command line: an explicit activation (Ledger.rubric_target), never
    # a configuration value (the file and the environment set [scoring] rubric)
    explicit_rubric: str | None = None

    @property
    def has_sources(self) -> bool:
        return bool(self.iteration_logs or self.vally or self.annotations)


_SECTIONS = {"store": StoreConfig, "scoring": ScoringConfig, "sidecars": SidecarsConfig,
             "daemon": DaemonConfig, "limits": LimitsConfig, "ledger": LedgerConfig, "cost": CostConfig,
             "detect": DetectConfig}
_CHOICES = {("store", "synchronous"): ("OFF", "NORMAL", "FULL", "EXTRA"),
            ("sidecars", "fsync"): ("auto", "always", "never"),
            ("daemon", "log_format"): ("auto", "json", "console")}


def _coerce(section: str, key: str, tp: Any, value: Any, where: str) -> Any:
    name = f"[{section}] {key}"
    if tp in (Path, "Path"):
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{where}: {name} must be a non-empty path string")
        return Path(os.path.expanduser(value))
    if tp in (bool, "bool"):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return value.lower() in ("1", "true", "yes", "on")
        raise ConfigError(f"{where}: {name} must be true or false, not {value!r}")
    if tp in (int, "int"):
        if isinstance(value, bool):
            raise ConfigError(f"{where}: {name} must be an integer")
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: {name} must be an integer, not {value!r}") from None
        if number <= 0:
            raise ConfigError(f"{where}: {name} must be positive")
        return number
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {name} must be a string, not {value!r}")
    return value


def _section(cls: type, section: str, data: dict[str, Any], where: str) -> Any:
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) in [{section}]: {', '.join(unknown)} "
                          f"(known: {', '.join(known)})")
    values = {k: _coerce(section, k, known[k].type, v, where) for k, v in data.items()}
    for k, v in values.items():
        choices = _CHOICES.get((section, k))
        if choices and v.upper() not in (c.upper() for c in choices):
            raise ConfigError(f"{where}: [{section}] {k} must be one of {', '.join(choices)}, not {v!r}")
    return cls(**values)


def _source(data: Any, where: str, base: Path) -> IterationLogSource:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: each [[iteration_logs]] entry must be a table")
    allowed = {"path", "repo", "trunk", "name", "transcripts"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) in [[iteration_logs]]: {', '.join(unknown)}")
    for req in ("path", "repo"):
        if not isinstance(data.get(req), str) or not data[req]:
            raise ConfigError(f"{where}: [[iteration_logs]] needs {req} = \"…\"")
    transcripts = data.get("transcripts", [])
    if not isinstance(transcripts, list) or not all(isinstance(t, str) and t for t in transcripts):
        raise ConfigError(f"{where}: [[iteration_logs]] transcripts must be a list of directory paths")
    return make_source(data["path"], data["repo"], data.get("trunk") or DEFAULT_TRUNK,
                       data.get("name", ""), base=base, transcripts=transcripts)


def make_source(path: str | Path, repo: str | Path, trunk: str = DEFAULT_TRUNK, name: str = "",
                base: Path | None = None, transcripts: list[str] | tuple = ()) -> IterationLogSource:
    base = base or Path.cwd()
    p = (base / os.path.expanduser(str(path))).resolve()
    r = (base / os.path.expanduser(str(repo))).resolve()
    if not isinstance(trunk, str) or not trunk.strip():
        raise ConfigError("trunk must be a non-empty branch name")
    plain, vally = split_transcripts(transcripts, base)
    return IterationLogSource(path=p, repo=r, trunk=trunk, name=name, transcripts=plain, vally_transcripts=vally)


def split_transcripts(entries, base: Path) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """``DIR`` is a Claude/Codex transcript directory; ``vally:DIR`` opts a vally results
    tree in, its trials' trajectories counting as transcripts."""
    plain, vally = [], []
    for entry in entries:
        text = str(entry)
        target = vally if text.startswith("vally:") else plain
        text = text.removeprefix("vally:")
        target.append((base / os.path.expanduser(text)).resolve())
    return tuple(dict.fromkeys(plain)), tuple(dict.fromkeys(vally))


# AGENTLEDGER_* variables that are not [section] keys: the config file, ad-hoc sources,
# worker-pool knobs, and the test suite's own.
OTHER_VARIABLES = frozenset({
    "AGENTLEDGER_CONFIG", "AGENTLEDGER_ITERATION_LOG", "AGENTLEDGER_REPO", "AGENTLEDGER_TRUNK",
    "AGENTLEDGER_WORKERS", "AGENTLEDGER_PARALLEL_TAIL_BYTES", "AGENTLEDGER_PARALLEL_TAIL_BLOCK",
    "AGENTLEDGER_PARALLEL_MIN_ITEMS", "AGENTLEDGER_SHARED", "AGENTLEDGER_TEST_RUN",
})


def _check_environment(env: dict[str, str]) -> None:
    """An ``AGENTLEDGER_*`` variable that names no setting is a typo: say so, and which
    one was probably meant, instead of ignoring it."""
    settings = {f"AGENTLEDGER_{section.upper()}_{f.name.upper()}" for section, cls in _SECTIONS.items()
                for f in fields(cls)}
    known = settings | OTHER_VARIABLES
    unknown = sorted(name for name in env if name.startswith("AGENTLEDGER_") and name not in known)
    if unknown:
        import difflib  # only to word the error: the close-task hook never pays for it

        close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        hint = f" (did you mean {close[0]}?)" if close else f" (settings: {', '.join(sorted(settings))})"
        raise ConfigError(f"unknown environment variable ${unknown[0]}{hint}")


def config_candidates() -> list[Path]:
    """``paths.config_candidates`` (where a configuration file is looked for), as paths."""
    return [Path(p) for p in paths.config_candidates()]


def find_config_file(explicit: str | None) -> Path | None:
    """``paths.config_file``: the configuration file in force, or None (built-in defaults)."""
    found = paths.config_file(explicit)
    return Path(found) if found else None


def find_dot_agents_log(start: Path | None = None) -> tuple[Path, Path] | None:
    """(iteration log, repository) of the dot-agents repository around ``start`` (the
    current directory or a parent holding ``.agents/active/iteration-log``), so that
    ``agentledger score N`` needs no configuration inside one."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        log = d / ".agents" / "active" / "iteration-log"
        if log.is_dir():
            return log, d
    return None


def load(explicit: str | None = None, env: dict[str, str] | None = None) -> Config:
    env = dict(os.environ if env is None else env)
    path = find_config_file(explicit)
    data: dict[str, Any] = {}
    origin = "defaults"
    base = Path.cwd()
    if path is not None:
        import tomllib  # only with a file to read (~4 ms of the close-task hook's start otherwise)

        from .userfiles import UserFileError, read_text

        try:
            data = tomllib.loads(read_text(path, "config file"))
        except UserFileError as exc:
            raise ConfigError(str(exc)) from None
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML: {exc}") from None
        origin = str(path)
        base = path.resolve().parent
    _check_environment(env)
    unknown = sorted(set(data) - set(_SECTIONS) - {"iteration_logs", "vally", "annotations", "ship"})
    if unknown:
        raise ConfigError(f"{origin}: unknown section(s): {', '.join(unknown)}")
    parts: dict[str, Any] = {}
    for section, cls in _SECTIONS.items():
        raw = data.get(section, {})
        if not isinstance(raw, dict):
            raise ConfigError(f"{origin}: [{section}] must be a table")
        raw = dict(raw)
        for f in fields(cls):
            key = f"AGENTLEDGER_{section.upper()}_{f.name.upper()}"
            if env.get(key):
                _coerce(section, f.name, f.type, env[key], f"${key}")  # a bad value is blamed on its variable
                raw[f.name] = env[key]
        if section == "store" and "path" in raw and path is not None and not env.get("AGENTLEDGER_STORE_PATH"):
            raw["path"] = str(base / os.path.expanduser(raw["path"]))
        parts[section] = _section(cls, section, raw, origin)
    logs = data.get("iteration_logs", [])
    if not isinstance(logs, list):
        raise ConfigError(f"{origin}: iteration_logs must be an array of tables ([[iteration_logs]])")
    sources = tuple(_source(item, origin, base) for item in logs)
    if env.get("AGENTLEDGER_ITERATION_LOG"):
        if not env.get("AGENTLEDGER_REPO"):
            raise ConfigError("AGENTLEDGER_ITERATION_LOG needs AGENTLEDGER_REPO too")
        sources = (make_source(env["AGENTLEDGER_ITERATION_LOG"], env["AGENTLEDGER_REPO"],
                               env.get("AGENTLEDGER_TRUNK") or DEFAULT_TRUNK),)
    vally = _dir_sources(data, "vally", VallySource, origin, base)
    annotations = _dir_sources(data, "annotations", AnnotationSource, origin, base)
    return Config(iteration_logs=sources, vally=vally, annotations=annotations, origin=origin,
                  ship=_destinations(data, origin), **parts)


_SHIP_LIMITS = {"batch": 1_000_000, "connections": 16, "stall_seconds": 86400, "idle_seconds": 86400}  # from 1


def _destinations(data: dict, origin: str) -> tuple[ShipDestination, ...]:
    """``[[ship]]``: url (postgresql://…), optional name and the numbers in _SHIP_LIMITS."""
    items = data.get("ship", [])
    if not isinstance(items, list) or not all(isinstance(v, dict) for v in items):
        raise ConfigError(f"{origin}: ship must be an array of tables ([[ship]])")
    out = []
    for item in items:
        unknown = sorted(set(item) - {"url", "name", *_SHIP_LIMITS})
        url = item.get("url")
        if unknown or not isinstance(url, str) or not url.startswith(("postgresql://", "postgres://")):
            raise ConfigError(f"{origin}: each [[ship]] needs url = \"postgresql://…\" (and optionally name, "
                              f"{', '.join(_SHIP_LIMITS)})"
                              + (f"; unknown key(s): {', '.join(unknown)}" if unknown else ""))
        numbers = {}  # those given; ShipDestination has the defaults
        for key, top in _SHIP_LIMITS.items():
            if key in item:
                value = item[key]
                if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= top:
                    raise ConfigError(f"{origin}: [[ship]] {key} must be a whole number from 1 to {top}")
                numbers[key] = value
        out.append(ShipDestination(url, str(item.get("name", "")), **numbers))
    labels = [d.label for d in out]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"{origin}: two [[ship]] destinations are the same: give them different names")
    return tuple(out)


def _dir_sources(data: dict, key: str, cls: type, origin: str, base: Path) -> tuple:
    """``[[vally]]`` / ``[[annotations]]``: tables of ``path`` and an optional ``name``."""
    items = data.get(key, [])
    if not isinstance(items, list) or not all(isinstance(v, dict) for v in items):
        raise ConfigError(f"{origin}: {key} must be an array of tables ([[{key}]])")
    out = []
    for item in items:
        unknown = sorted(set(item) - {"path", "name"})
        if unknown or not isinstance(item.get("path"), str) or not item["path"]:
            raise ConfigError(f"{origin}: each [[{key}]] needs path = \"…\" (and optionally name)")
        out.append(cls((base / os.path.expanduser(item["path"])).resolve(), item.get("name", "")))
    return tuple(out)


def with_overrides(cfg: Config, *, db: str | None = None, rubric: str | None = None,
                   iteration_log: str | None = None, repo: str | None = None,
                   trunk: str | None = None, vally: list[str] | None = None,
                   transcripts: list[str] | None = None, annotations: list[str] | None = None) -> Config:
    """Apply command-line flags (the last word). Ad-hoc sources replace configured ones."""
    if vally:
        cfg = replace(cfg, vally=tuple(VallySource(Path(os.path.expanduser(v)).resolve()) for v in vally))
    if annotations:
        cfg = replace(cfg, annotations=tuple(AnnotationSource(Path(os.path.expanduser(a)).resolve())
                                             for a in annotations))
    if db:
        cfg = replace(cfg, store=replace(cfg.store, path=Path(os.path.expanduser(db))))
    if rubric:
        cfg = replace(cfg, explicit_rubric=rubric)
    if iteration_log or repo:
        if not (iteration_log and repo):
            raise ConfigError("--iteration-log and --repo go together")
        cfg = replace(cfg, iteration_logs=(make_source(iteration_log, repo, trunk or DEFAULT_TRUNK),))
    elif trunk:
        cfg = replace(cfg, iteration_logs=tuple(replace(s, trunk=trunk) for s in cfg.iteration_logs))
    if transcripts:
        plain, vally_dirs = split_transcripts(transcripts, Path.cwd())
        cfg = replace(cfg, iteration_logs=tuple(replace(s, transcripts=plain, vally_transcripts=vally_dirs)
                                                for s in cfg.iteration_logs))
    return cfg
