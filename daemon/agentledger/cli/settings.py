"""``agentledger config``: the effective configuration, and where each value came from
(a flag, an environment variable, the configuration file, a discovered repository, or
the built-in default), like ``vector validate`` or ``fluent-bit --dry-run``."""

from __future__ import annotations

import argparse
import json
import os
import sys

from .common import EXIT_OK, load_config


def add_commands(cmd) -> None:
    p = cmd("config", "Print the effective configuration and where each value came from.")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(func=cmd_config)


def cmd_config(args: argparse.Namespace) -> int:
    import tomllib
    from dataclasses import fields

    from .. import config as C
    from .common import with_discovered_log

    cfg = load_config(args)  # a bad file, key or value fails here, as for every command
    path = C.find_config_file(getattr(args, "config", None))
    data = tomllib.loads(path.read_text("utf-8")) if path is not None else {}
    flags = {("store", "path"): getattr(args, "db", None)}
    rows = []
    for section, cls in C._SECTIONS.items():
        for f in fields(cls):
            variable = f"AGENTLEDGER_{section.upper()}_{f.name.upper()}"
            if flags.get((section, f.name)):
                origin = "--db"
            elif os.environ.get(variable):
                origin = f"${variable}"
            elif f.name in data.get(section, {}):
                origin = str(path)
            else:
                origin = "default"
            value = getattr(getattr(cfg, section), f.name)
            rows.append({"key": f"{section}.{f.name}", "value": str(value) if not isinstance(value, (int, bool))
                         else value, "from": origin})
    if cfg.explicit_rubric:
        rows.append({"key": "scoring.rubric (activated)", "value": cfg.explicit_rubric, "from": "--rubric"})
    sources_from = _sources_origin(args, path, data)
    if not cfg.has_sources:
        cfg = with_discovered_log(cfg)
        if cfg.has_sources:
            sources_from = "the dot-agents repository around the current directory"
    sources = ([{"kind": "iteration_log", "path": str(s.path), "repo": str(s.repo), "trunk": s.trunk,
                 "transcripts": [str(d) for d in (*s.transcripts, *s.vally_transcripts)]} for s in cfg.iteration_logs]
               + [{"kind": "vally", "path": str(s.path)} for s in cfg.vally]
               + [{"kind": "annotations", "path": str(s.path)} for s in cfg.annotations])
    looked = [str(p) for p in C.config_candidates()]
    ship = [{"destination": d.label, "batch": d.batch} for d in cfg.ship]  # never the password
    result = {"config_file": str(path) if path else None, "looked_in": looked, "settings": rows,
              "sources": sources, "sources_from": sources_from if sources else None, "ship": ship}
    if args.json:
        print(json.dumps(result, indent=2))
        return EXIT_OK
    if path:
        print(f"config file: {path}")
    else:
        print(f"config file: none (built-in defaults); looked in {', '.join(looked)}")
    width = max(len(r["key"]) for r in rows)
    for r in rows:
        value = json.dumps(r["value"]) if isinstance(r["value"], str) else str(r["value"]).lower()
        print(f"  {r['key']:<{width}} = {value:<40} # {r['from']}")
    if not sources:
        print("sources: none (pass --iteration-log DIR --repo DIR, or configure [[iteration_logs]])")
    for s in sources:
        extra = f" (repo {s['repo']}, trunk {s['trunk']})" if s["kind"] == "iteration_log" else ""
        print(f"  {s['kind']}: {s['path']}{extra}  # {sources_from}")
    for d in ship:
        print(f"  ship: {d['destination']} (batch {d['batch']})  # {path}")
    sys.stdout.flush()
    return EXIT_OK


def _sources_origin(args: argparse.Namespace, path, data: dict) -> str:
    if any(getattr(args, f, None) for f in ("iteration_log", "vally", "annotations")):
        return "flags"
    if os.environ.get("AGENTLEDGER_ITERATION_LOG"):
        return "$AGENTLEDGER_ITERATION_LOG"
    if any(k in data for k in ("iteration_logs", "vally", "annotations")):
        return str(path)
    return "default"
