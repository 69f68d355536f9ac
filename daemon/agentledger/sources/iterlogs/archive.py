"""A large ``historical.yaml`` read an entry at a time (#56): composing the whole archive
held its node tree (100,000 iterations: 2,857 MB peak, 57.0 CPU s); an entry at a time
holds one entry's nodes beside the text and the records made so far (414 MB, 34.4 s:
``python bench/bench_archive.py --iterations 100000``).

Only the archive's plain shape is read this way: comments, then ``iterations:`` as the one
key at the root, then its entries, each a ``- `` line at one indentation and nothing at
the root after them. Each entry is composed alone (libyaml, as the whole document is),
its marks moved to its place in the file, and decoded with the decoder the whole archive
would have used, so records, collected type errors and their lines are the same. Any other
shape, an alias to an anchor of another entry, or any syntax error sends the archive to
the whole-document path, whose answer (and error text) is the reference's."""

from __future__ import annotations

import re
from collections.abc import Callable

from yaml.nodes import MappingNode, Node, SequenceNode

from ...reference.yamlv3.decode import Decoder, YamlError, compose_first

ENTRY_AT_A_TIME_FROM = 1 << 20  # bytes: a smaller archive is composed whole
_HEAD = re.compile(r"(?:[ \t]*(?:#[^\n]*)?\n)*iterations:[ \t]*\n")
_FIRST_ITEM = re.compile(r"(?m)^( *)- ")


class NotPlain(Exception):
    """The archive is not of the plain shape (or an entry did not compose alone)."""


def entries(text: str, decoder: Decoder, decode: Callable[[Decoder, Node], object]) -> list:
    """``decode(decoder, entry)`` of each entry, in order (None results dropped), or
    ``NotPlain``. The decoder's ``FatalDecode`` (its node budget) goes up as the whole
    path's does."""
    head = _HEAD.match(text)
    if head is None:
        raise NotPlain
    body = head.end()
    first = _FIRST_ITEM.search(text, body)
    if first is None or not _only_comments(text[body:first.start()]):
        raise NotPlain
    indent = first.group(1)
    starts = [m.start() for m in re.compile(rf"(?m)^{indent}- ").finditer(text, first.start())]
    # nothing at the root after the entries (another key, a document marker); with entries
    # at the root's own indentation ("iterations:\n- …") every root line must begin one
    root_line = re.compile(r"(?m)^(?![ #\n-])" if not indent else r"(?m)^(?=[^ #\n])")
    if root_line.search(text, first.start()):
        raise NotPlain
    out = []
    line = text.count("\n", 0, first.start())
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(text)
        chunk = text[start:end]
        try:
            node = compose_first(chunk)
        except YamlError:
            raise NotPlain from None
        if not isinstance(node, SequenceNode) or len(node.value) != 1:
            raise NotPlain
        _move(node.value[0], line, set())
        got = decode(decoder, node.value[0])
        if got is not None:
            out.append(got)
        line += chunk.count("\n")
    return out


def _only_comments(text: str) -> bool:
    return all(not ln.strip() or ln.lstrip().startswith("#") for ln in text.splitlines())


class _Line:
    """A mark moved to its line in the whole file (libyaml's marks cannot be written): the
    decoder reads a node's line and nothing else of its marks."""

    __slots__ = ("line", "column")

    def __init__(self, line: int, column: int) -> None:
        self.line, self.column = line, column


def _move(node: Node, lines: int, seen: set[int]) -> None:
    """Each mark of ``node`` and below moved down ``lines`` lines (an aliased node once)."""
    if id(node) in seen:
        return
    seen.add(id(node))
    start, end = node.start_mark, node.end_mark
    node.start_mark = _Line(start.line + lines, start.column)
    node.end_mark = _Line(end.line + lines, end.column)
    if isinstance(node, MappingNode):
        for k, v in node.value:
            _move(k, lines, seen)
            _move(v, lines, seen)
    elif isinstance(node, SequenceNode):
        for v in node.value:
            _move(v, lines, seen)


__all__ = ["ENTRY_AT_A_TIME_FROM", "NotPlain", "entries"]
