"""Typed decoding of YAML nodes with yaml.v3's rules and error texts.

yaml.v3 decodes into Go structs non-strictly: unknown keys are ignored, a
modelled key with an incompatible value is a *type error*; type errors are
collected and reported together as ``yaml: unmarshal errors:`` followed by one
``line N: cannot unmarshal …`` line each. Some of those texts reach score
details byte for byte (hook-outcome sidecars), so the decoder reproduces them.

Safety: the composer is libyaml's (C), documents are size-capped by the
caller, only the first document is composed, and every node visit is counted
so an alias bomb ("billion laughs") fails fast instead of expanding.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from datetime import datetime, timezone

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from . import resolve as R

try:  # libyaml; the pure-Python loader is the fallback, never a requirement
    from yaml import CSafeLoader as _Base
except ImportError:  # pragma: no cover
    from yaml import SafeLoader as _Base  # type: ignore[assignment]


class _Loader(_Base):  # type: ignore[misc,valid-type]
    """The composer asks a Python resolver for every scalar's tag; we resolve
    scalars ourselves (yaml.v3 rules), so answer with one constant, cheaply."""

    def resolve(self, kind, value, implicit):  # noqa: ANN001, ANN201
        return "?"

    # libyaml's composer also calls these two around every node, for PyYAML's path
    # resolvers, which nothing here registers: C builtins that do nothing instead of the
    # Python methods take 14 % off composing (callgrind, 1,500 iteration-log files)
    descend_resolver = staticmethod(operator.is_)  # (parent, index): a comparison, thrown away
    ascend_resolver = staticmethod(tuple)  # (): the empty tuple


DEFAULT_NODE_BUDGET = 200_000


def budget_for(text: str) -> int:
    """How many nodes decoding ``text`` may visit: a bomb is told by its expansion against
    the input's size, not by a count fixed for every size. Without aliases a document
    has fewer nodes than characters, so a real archive of any size passes (a
    5,000-iteration ``historical.yaml`` of 5.1 MB visits ~1.1 million); an alias bomb
    grows exponentially with its input and meets the limit after a few kilobytes."""
    return DEFAULT_NODE_BUDGET + 2 * len(text)


class YamlError(Exception):
    """A document that cannot be decoded; ``line``/``column`` are 1-based."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


class FatalDecode(YamlError):
    """An error yaml.v3 raises at once instead of collecting (e.g. an unmarshaler error)."""


MAX_FLOW_DEPTH = 1000
MAX_INDENT = 4000
_BRACKETS = re.compile(r"[\[\]{}]")
_INDENT = re.compile(r"^ {%d,}" % (MAX_INDENT + 1), re.M)


def check_nesting(text: str) -> None:
    """Refuse documents nested deep enough to exhaust the C stack.

    libyaml's composer recurses once per nesting level and crashes the whole
    process (SIGSEGV) somewhere past ~20,000 levels of ``[``/``{``: a 40 KB
    file. Real iteration logs nest fewer than ten levels."""
    if text.count("[") + text.count("{") > MAX_FLOW_DEPTH:
        depth = 0
        for m in _BRACKETS.finditer(text):
            if m.group() in "[{":
                depth += 1
                if depth > MAX_FLOW_DEPTH:
                    line = text.count("\n", 0, m.start()) + 1
                    raise YamlError(f"yaml: line {line}: nesting deeper than {MAX_FLOW_DEPTH} "
                                    "levels; not parsed", line)
            elif depth:
                depth -= 1
    m = _INDENT.search(text)
    if m:
        line = text.count("\n", 0, m.start()) + 1
        raise YamlError(f"yaml: line {line}: indented deeper than {MAX_INDENT} columns; not parsed", line)


def compose_first(text: str) -> Node | None:
    """Compose only the first document (yaml.v3 Unmarshal never reads further)."""
    check_nesting(text)
    loader = _Loader(text)
    try:
        if loader.check_node():
            return loader.get_node()
        return None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        col = mark.column + 1 if mark is not None else None
        problem = exc.problem or exc.context or "invalid YAML"
        where = f"line {line}: " if line is not None else ""
        raise YamlError(f"yaml: {where}{problem}", line, col) from None
    except yaml.YAMLError as exc:
        raise YamlError(f"yaml: {exc}") from None
    finally:
        loader.dispose()


def line_of(node: Node) -> int:
    return node.start_mark.line + 1


def is_quoted(node: ScalarNode) -> bool:
    return node.style in ("'", '"', "|", ">")


def tag_of(node: Node) -> tuple[str, object]:
    """The short tag and value yaml.v3 resolves for ``node``."""
    if isinstance(node, MappingNode):
        return "!!map", None
    if isinstance(node, SequenceNode):
        return "!!seq", None
    assert isinstance(node, ScalarNode)
    if is_quoted(node):
        return R.STR, node.value
    return R.resolve_plain(node.value)


def is_null(node: Node | None) -> bool:
    return node is None or (isinstance(node, ScalarNode) and tag_of(node)[0] == R.NULL)


def _value_excerpt(text: str) -> str:
    raw = text.encode("utf-8")
    if len(raw) > 10:
        return " `" + raw[:7].decode("utf-8", "replace") + "...`"
    return " `" + text + "`"


@dataclass
class Decoder:
    """Collects type errors across one document, like yaml.v3's decoder."""

    budget: int = DEFAULT_NODE_BUDGET

    def __post_init__(self) -> None:
        self.errors: list[str] = []

    # -- bookkeeping ---------------------------------------------------------
    def _visit(self) -> None:
        self.budget -= 1
        if self.budget < 0:
            raise FatalDecode("yaml: document is too large or expands too many aliases")

    def type_error(self, node: Node, gotype: str) -> None:
        tag, _ = tag_of(node)
        value = "" if tag in ("!!seq", "!!map") else _value_excerpt(node.value)
        self.errors.append(f"line {line_of(node)}: cannot unmarshal {tag}{value} into {gotype}")

    def raise_if_errors(self, prefix: str = "") -> None:
        if self.errors:
            raise YamlError(prefix + "yaml: unmarshal errors:\n  " + "\n  ".join(self.errors),
                            _first_line(self.errors))

    # -- containers ----------------------------------------------------------
    def mapping(self, node: Node | None, gotype: str) -> dict[str, Node] | None:
        """Keys of a decoded mapping; ``None`` for null or a type error."""
        if node is None:
            return None
        self._visit()
        if isinstance(node, MappingNode):
            out: dict[str, Node] = {}
            first_line: dict[str, int] = {}
            for key, value in node.value:
                self._visit()
                k = key.value if isinstance(key, ScalarNode) else repr(key)
                if k in first_line:
                    self.errors.append(
                        f'line {line_of(key)}: mapping key "{k}" already defined at line {first_line[k]}'
                    )
                    continue
                first_line[k] = line_of(key)
                out[k] = value
            return out
        if is_null(node):
            return None
        self.type_error(node, gotype)
        return None

    def sequence(self, node: Node | None, gotype: str) -> list[Node]:
        """Items of a sequence with null items dropped (yaml.v3 never keeps them)."""
        if node is None:
            return []
        self._visit()
        if isinstance(node, SequenceNode):
            items = []
            for item in node.value:
                self._visit()
                if not is_null(item):
                    items.append(item)
            return items
        if is_null(node):
            return []
        self.type_error(node, gotype)
        return []

    # -- scalars -------------------------------------------------------------
    def string(self, node: Node | None) -> str:
        if node is None:
            return ""
        self._visit()
        if isinstance(node, ScalarNode):
            return "" if is_null(node) else node.value
        self.type_error(node, "string")
        return ""

    def int_(self, node: Node | None, gotype: str = "int") -> int:
        if node is None:
            return 0
        self._visit()
        if not isinstance(node, ScalarNode):
            self.type_error(node, gotype)
            return 0
        tag, value = tag_of(node)
        if tag == R.NULL:
            return 0
        if tag == R.INT and isinstance(value, int):
            if R.INT64_MIN <= value <= R.INT64_MAX:
                return value
        elif tag == R.FLOAT and isinstance(value, float):
            # yaml.v3 accepts any float <= MaxInt64 (so not NaN or +Inf) and converts
            # it like amd64 does: out of range (incl. -Inf) gives the minimum int64.
            if not math.isnan(value) and value <= float(R.INT64_MAX):
                if value < -(2.0**63) or value >= 2.0**63:
                    return R.INT64_MIN
                return int(value)  # truncation toward zero
        self.type_error(node, gotype)
        return 0

    def float_(self, node: Node | None) -> float:
        if node is None:
            return 0.0
        self._visit()
        if not isinstance(node, ScalarNode):
            self.type_error(node, "float64")
            return 0.0
        tag, value = tag_of(node)
        if tag == R.NULL:
            return 0.0
        if tag == R.INT:
            return float(value)  # type: ignore[arg-type]
        if tag == R.FLOAT:
            return value  # type: ignore[return-value]
        self.type_error(node, "float64")
        return 0.0

    def bool_(self, node: Node | None) -> bool:
        if node is None:
            return False
        self._visit()
        if not isinstance(node, ScalarNode):
            self.type_error(node, "bool")
            return False
        tag, value = tag_of(node)
        if tag == R.NULL:
            return False
        if tag == R.BOOL:
            return bool(value)
        if tag == R.STR:
            if value in R.OLD_BOOL_TRUE:
                return True
            if value in R.OLD_BOOL_FALSE:
                return False
        self.type_error(node, "bool")
        return False

    def tri(self, node: Node | None) -> bool | None:
        """The reference's OptionalBool: decided from the node's resolved tag."""
        if node is None:
            return None
        self._visit()
        if not isinstance(node, ScalarNode):
            raise FatalDecode(f"yaml: line {line_of(node)}: optional bool must be a scalar",
                              line_of(node))
        tag, value = tag_of(node)
        if tag == R.NULL:
            return None
        if tag == R.BOOL:
            return node.value == "true"  # [QUIRK] True/TRUE decode as set-and-false
        if tag == R.INT:
            text = node.value
            body = text[1:] if text[:1] in "+-" else text
            if body.isascii() and body.isdigit():
                return int(text) != 0
            raise FatalDecode(f'strconv.Atoi: parsing "{text}": invalid syntax', line_of(node))
        if tag == R.STR:
            text = str(value).strip()
            if not text:
                return None
            if text in ("1", "t", "T", "TRUE", "true", "True"):
                return True
            if text in ("0", "f", "F", "FALSE", "false", "False"):
                return False
            raise FatalDecode(f'strconv.ParseBool: parsing "{text}": invalid syntax', line_of(node))
        raise FatalDecode(f"yaml: line {line_of(node)}: cannot decode {tag} as an optional bool",
                          line_of(node))

    def str_list(self, node: Node | None) -> list[str]:
        out = []
        for item in self.sequence(node, "[]string"):
            if isinstance(item, ScalarNode):
                out.append(item.value)
            else:
                self.type_error(item, "string")
        return out

    def timestamp(self, node: Node | None, gotype: str = "time.Time") -> datetime:
        """time.Time fields: plain YAML timestamps, or quoted RFC 3339 text."""
        zero = datetime(1, 1, 1, tzinfo=timezone.utc)
        if node is None:
            return zero
        self._visit()
        if not isinstance(node, ScalarNode):
            self.type_error(node, gotype)
            return zero
        tag, value = tag_of(node)
        if tag == R.NULL:
            return zero
        if tag == R.TIMESTAMP:
            return value  # type: ignore[return-value]
        if tag == R.STR:
            parsed = R.parse_timestamp(str(value))
            if parsed is not None and ("T" in str(value)):
                return parsed
        self.type_error(node, gotype)
        return zero


def _first_line(errors: list[str]) -> int | None:
    try:
        return int(errors[0].split(":", 1)[0].removeprefix("line "))
    except (ValueError, IndexError):
        return None


def load_document(text: str) -> Node | None:
    """Compose the first document of ``text``; ``YamlError`` on a syntax error."""
    return compose_first(text)
