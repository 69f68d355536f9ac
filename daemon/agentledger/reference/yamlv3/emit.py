"""Emit YAML exactly as Go's yaml.v3 ``Marshal`` does, for the shapes we write.

Sidecars must be byte-identical to the reference's, so this is not a general
YAML writer: it emits block mappings whose values are scalars, lists of
scalars, or lists of flat mappings, with yaml.v3's 4-space indentation and
its scalar-style choice (plain → single-quoted → double-quoted; literal block
for multi-line text). See ``scoring-rubric.md`` §9.3.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Union

from ..fmt import format_float
from .resolve import plain_is_string

Scalar = Union[str, bool, int, float]
Row = Sequence[tuple[str, Scalar]]
Value = Union[Scalar, Sequence[Scalar], Sequence[Row]]

_INDENT = 4


def _printable(cp: int) -> bool:
    """libyaml's is_printable, as a code-point test."""
    return (
        cp == 0x0A
        or 0x20 <= cp <= 0x7E
        or 0xA0 <= cp <= 0xD7FF
        or (0xE000 <= cp <= 0xFFFD and cp != 0xFEFF)
    )


class _Analysis:
    __slots__ = ("plain", "single", "block", "multiline")

    def __init__(self, s: str):
        block_ind = False  # only block context is emitted: flow indicators never matter
        leading_space = leading_break = trailing_space = trailing_break = False
        break_space = space_break = previous_space = previous_break = False
        special = tabs = line_breaks = False
        if s.startswith("---") or s.startswith("..."):
            block_ind = True
        n = len(s)
        preceded_ws = True
        for i, ch in enumerate(s):
            followed_ws = i + 1 >= n or s[i + 1] in " \t\n\r"
            if i == 0:
                if ch in "#,[]{}&*!|>'\"%@`":
                    block_ind = True
                elif ch in "?:-" and followed_ws:
                    block_ind = True
            elif (ch == ":" and followed_ws) or (ch == "#" and preceded_ws):
                block_ind = True
            if ch == "\t":
                tabs = True
            elif not _printable(ord(ch)):
                special = True
            if ch == " ":
                if i == 0:
                    leading_space = True
                if i == n - 1:
                    trailing_space = True
                if previous_break:
                    break_space = True
                previous_space, previous_break = True, False
            elif ch in "\n\r\x85\u2028\u2029":
                line_breaks = True
                if i == 0:
                    leading_break = True
                if i == n - 1:
                    trailing_break = True
                if previous_space:
                    space_break = True
                previous_space, previous_break = False, True
            else:
                previous_space = previous_break = False
            preceded_ws = ch in " \t\n\r"
        plain = single = block = True
        if leading_space or leading_break or trailing_space or trailing_break:
            plain = False
        if trailing_space:
            block = False
        if break_space:
            plain = single = False
        if space_break or tabs or special:
            plain = single = False
        if space_break or special:
            block = False
        if line_breaks:
            plain = False
        if block_ind:
            plain = False
        self.plain, self.single, self.block, self.multiline = plain, single, block, line_breaks


_DQ_ESC = {
    0x00: "0", 0x07: "a", 0x08: "b", 0x09: "t", 0x0A: "n", 0x0B: "v", 0x0C: "f",
    0x0D: "r", 0x1B: "e", 0x22: '"', 0x5C: "\\", 0x85: "N", 0xA0: "_",
    0x2028: "L", 0x2029: "P",
}


def _double_quoted(s: str) -> str:
    out = ['"']
    for ch in s:
        cp = ord(ch)
        if not _printable(cp) or cp == 0xFEFF or ch in "\n\r\x85\u2028\u2029\"\\":
            esc = _DQ_ESC.get(cp)
            if esc is not None:
                out.append("\\" + esc)
            elif cp <= 0xFF:
                out.append(f"\\x{cp:02X}")
            elif cp <= 0xFFFF:
                out.append(f"\\u{cp:04X}")
            else:
                out.append(f"\\U{cp:08X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _literal(s: str, content_indent: int) -> str:
    hints = ""
    if s[:1] in (" ", "\n"):
        hints += str(_INDENT)
    if not s.endswith("\n"):
        hints += "-"
    elif len(s) == 1 or s[-2] == "\n":
        hints += "+"
    body = s[:-1] if s.endswith("\n") else s
    pad = " " * content_indent
    lines = [(pad + line) if line else "" for line in body.split("\n")]
    return "|" + hints + "\n" + "\n".join(lines)


# Text that is certainly plain in block context: no indicator at the start, no
# ": " or " #" inside, no leading/trailing space, printable ASCII only.
_SURELY_PLAIN = re.compile(r"[A-Za-z0-9_(./][\x20-\x7e]*[^ \x00-\x1f]\Z|[A-Za-z0-9_(./]\Z")


@lru_cache(maxsize=4096)
def format_string(s: str, block_indent: int) -> str:
    """The text after ``key: `` for a string value in a mapping at ``block_indent``."""
    if _SURELY_PLAIN.match(s) and ": " not in s and " #" not in s and not s.endswith(":") \
            and not s.startswith(("---", "...")) and plain_is_string(s):
        return s
    a = _Analysis(s)
    if "\n" in s:
        if a.block:
            return _literal(s, block_indent + _INDENT)
        return _double_quoted(s)
    if not plain_is_string(s):
        return _double_quoted(s)
    if a.plain:
        return s
    if a.single:
        return "'" + s.replace("'", "''") + "'"
    return _double_quoted(s)


def format_scalar(v: Scalar, block_indent: int) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        text = format_float(v)
        return {"NaN": ".nan", "+Inf": ".inf", "-Inf": "-.inf"}.get(text, text)
    return format_string(v, block_indent)


def _emit_mapping(pairs: Row, key_indent: int, first_prefix: str, block_indent: int,
                  out: list[str]) -> None:
    """A block mapping whose keys sit at ``key_indent``; the first line starts with
    ``first_prefix`` (e.g. ``'    - '``). ``block_indent`` is where the mapping
    starts (a list item starts at its ``- ``): literal-block content is indented
    relative to it, not to the keys."""
    pad = " " * key_indent
    for i, (key, value) in enumerate(pairs):
        lead = first_prefix if i == 0 else pad
        if isinstance(value, (list, tuple)):
            if not value:
                out.append(f"{lead}{key}: []")
                continue
            out.append(f"{lead}{key}:")
            item_col = block_indent + _INDENT
            item_pad = " " * item_col
            for item in value:
                if isinstance(item, (list, tuple)):
                    _emit_mapping(item, item_col + 2, item_pad + "- ", item_col, out)
                else:
                    out.append(f"{item_pad}- {format_scalar(item, item_col)}")
        else:
            out.append(f"{lead}{key}: {format_scalar(value, block_indent)}")


def dump(pairs: Row) -> bytes:
    """Marshal a top-level mapping to yaml.v3 bytes."""
    out: list[str] = []
    _emit_mapping(pairs, 0, "", 0, out)
    return ("\n".join(out) + "\n").encode("utf-8")
