"""The layout in docs/architecture.md is the code's: every import of every module
(lazy ones inside functions included) is one its package may make.

A rule names packages (``scoring``) or single modules (``store.events``): data
flows one way, source → events → store → ledger → sidecar, and nothing imports
the command line.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "daemon" / "agentledger"

# package -> what it may import from the project (besides itself)
MAY_IMPORT: dict[str, set[str]] = {
    "paths": set(),
    "jsonnum": set(),
    "model": {"jsonnum", "reference"},
    "reference": {"jsonnum", "model"},
    "process": set(),
    "redact": set(),
    "errors": set(),
    "names": set(),
    "terminal": {"redact"},
    "userfiles": set(),
    "config": {"paths", "redact"},
    "scoring": {"jsonnum", "model", "reference", "paths"},
    "output": {"reference", "process", "scoring"},
    "sources": {"config", "jsonnum", "reference", "model", "output", "scoring", "store.events"},
    "store": {"jsonnum", "model", "output", "paths", "scoring", "sources.annotations"},
    "ledger": {"analysis", "config", "jsonnum", "model", "output", "paths", "process", "scoring", "sources", "store"},
    "views": {"analysis", "scoring", "store"},
    "analysis": {"scoring"},
    "central": {"config", "paths", "redact", "scoring", "views"},
    "service": {"central", "config", "ledger", "output", "paths", "redact", "store"},
    "example": {"config", "ledger", "sources", "store"},
    "cli": {"analysis", "central", "config", "jsonnum", "ledger", "model", "output", "paths", "process", "redact", "scoring", "service",
            "sources", "store", "views"},
    "__main__": {"cli", "service"},
    "__init__": set(),
}


def modules() -> list[tuple[str, Path]]:
    out = []
    for f in sorted(PKG.rglob("*.py")):
        parts = list(f.relative_to(PKG).with_suffix("").parts)
        out.append((".".join(parts), f))
    return out


def imports(name: str, path: Path) -> set[str]:
    """Project modules ``name`` imports, as dotted names below ``agentledger``."""
    here = name.split(".")[:-1]  # the package a relative import starts from
    found = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
                names = [mod] if node.module else [f"{mod}.{a.name}".strip(".") for a in node.names]
            elif node.module and (node.module == "agentledger" or node.module.startswith("agentledger.")):
                mod = node.module.removeprefix("agentledger").strip(".")
                names = [mod] if mod else [a.name for a in node.names]
            else:
                continue
            found.update(n for n in names if n)
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("agentledger.") for a in node.names if a.name.startswith("agentledger."))
    return found


def package(name: str) -> str:
    return name.split(".")[0]


EVERYWHERE = ("errors", "names", "terminal", "userfiles")


def allowed(importer: str, target: str) -> bool:
    own = package(importer)
    if package(target) == own or target == "__version__" or target in EVERYWHERE:
        return True  # every package may raise errors, name files and show text
    rules = MAY_IMPORT[own]
    return any(target == r or target.startswith(r + ".") for r in rules)


def test_every_import_is_one_its_package_may_make() -> None:
    wrong = [f"{name} imports {target}" for name, path in modules() for target in sorted(imports(name, path))
             if not allowed(name, target)]
    assert not wrong, "imports the layout does not allow:\n" + "\n".join(wrong)


def test_every_package_has_a_rule_and_a_row_in_the_architecture_doc() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text("utf-8")
    for name in {package(n) for n, _ in modules()}:
        assert name in MAY_IMPORT, f"{name}: no import rule in this test"
        if name not in ("__init__", "__main__"):
            assert re.search(rf"`{re.escape(name)}(/|\.py)?`", doc), f"{name}: no row in docs/architecture.md"


def test_the_doc_table_states_the_same_rules() -> None:
    """The doc's "may import" column is this test's MAY_IMPORT, word for word."""
    doc = (ROOT / "docs" / "architecture.md").read_text("utf-8")
    rows = re.findall(r"^\| `(\w+)(?:/|\.py)?` \|[^|]*\| ([^|]*) \|$", doc, re.M)
    assert rows, "no module table in docs/architecture.md"
    for name, may in rows:
        stated = {m.strip().strip("`") for m in may.split(",") if m.strip() and m.strip() != "—"}
        assert stated == MAY_IMPORT[name], f"docs/architecture.md row {name}: {sorted(stated)} != the rule"


@pytest.mark.parametrize("bad", ["scoring imports store", "config imports sources", "store imports cli"])
def test_the_rules_refuse_what_they_must(bad: str) -> None:
    importer, _, target = bad.partition(" imports ")
    assert not allowed(f"{importer}.x", f"{target}.y")


def test_no_module_is_over_the_size_a_newcomer_reads_in_one_sitting() -> None:
    big = {n: len(p.read_text("utf-8").splitlines()) for n, p in modules()}
    over = {n: lines for n, lines in big.items() if lines > 450}
    assert not over, f"modules over 450 lines: {over}"


def test_no_class_is_over_the_size_a_newcomer_reads_in_one_sitting() -> None:
    over = {}
    for name, path in modules():
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > 260:
                over[f"{name}.{node.name}"] = node.end_lineno - node.lineno + 1
    assert not over, f"classes over 260 lines: {over}"


def _module_of(target: str, known: set[str]) -> str | None:
    """The project module an import target names (``store.events.Event`` → ``store.events``)."""
    parts = target.split(".")
    for k in range(len(parts), 0, -1):
        name = ".".join(parts[:k])
        if name in known:
            return name
    return None


def circles() -> list[list[str]]:
    """Import circles among the modules of one package (lazy imports included)."""
    mods = dict(modules())
    known = set(mods)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps = {_module_of(t, known) for t in imports(name, path)}
        graph[name] = {d for d in deps if d and d != name and package(d) == package(name)
                       and not d.endswith("__init__")}
    found, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == "open":
                found.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, stack)
        stack.pop()
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    return found


def test_no_circle_inside_a_package() -> None:
    assert not circles(), "import circles:\n" + "\n".join(" -> ".join(c) for c in circles())


# what appends events or projects them: only store/ touches these; everyone else
# writes through store.log.EventLog
_WRITE_PATH = {"store.events": {"append", "append_many", "append_rows"},
               "store.projections": {"Projector"}, "store.trials": {"TrialFamily"}}


def test_events_are_written_only_through_the_event_log() -> None:
    wrong = []
    for name, path in modules():
        if package(name) == "store":
            continue
        here = name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            if node.level:
                mod = ".".join(here[: len(here) - (node.level - 1)] + [node.module])
            else:
                mod = node.module.removeprefix("agentledger").strip(".")
            hit = _WRITE_PATH.get(mod, set()) & {a.name for a in node.names}
            wrong += [f"{name} imports {mod}.{h}" for h in sorted(hit)]
    assert not wrong, "writes past store.log.EventLog:\n" + "\n".join(wrong)
