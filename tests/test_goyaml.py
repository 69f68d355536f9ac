"""yaml.v3 decoding and emission rules, and Go number/string formatting (spec §3.5, §4.0, §9.3)."""

from __future__ import annotations

import math

import pytest
from agentledger.reference.fmt import fixed, format_float, go_quote, short
from agentledger.reference.yamlv3.decode import Decoder, FatalDecode, YamlError, load_document
from agentledger.reference.yamlv3.emit import dump, format_string
from agentledger.reference.yamlv3.resolve import resolve_plain
from agentledger.sources.iterlogs.records import parse_historical, parse_record
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize("x,text", [
    (0.2, "0.2"), (1e-05, "1e-05"), (3.25e-05, "3.25e-05"), (1234567.0, "1.234567e+06"),
    (1e6, "1e+06"), (0.0001, "0.0001"), (0.31249999999999994, "0.31249999999999994"), (1.0, "1"),
    (0.0, "0"), (123456.0, "123456"), (-0.0, "-0"), (100.0, "100"), (1e21, "1e+21"), (-2.5, "-2.5"),
])
def test_format_float_matches_go(x: float, text: str) -> None:
    assert format_float(x) == text


def test_fixed_and_quote_and_short() -> None:
    assert fixed(0.0625, 3) == "0.062" and fixed(12.5, 0) == "12" and fixed(math.nan, 3) == "NaN"
    assert fixed(math.inf, 0) == "+Inf" and fixed(-math.inf, 3) == "-Inf" and fixed(-0.0, 3) == "-0.000"
    assert go_quote('a"b\\c\n\x01é') == '"a\\"b\\\\c\\n\\x01é"'
    assert short("0123456789abcdef") == "0123456789ab" and short("abc") == "abc"


@pytest.mark.parametrize("text,expected", [
    ("2/2 verifiers scored, mean status", "2/2 verifiers scored, mean status"),
    ("scope_note: on-target", "'scope_note: on-target'"),
    ("allow: r1 (1 records)", "'allow: r1 (1 records)'"),
    ("0 retries, 0 user corrections, 33% tool-error rate", "0 retries, 0 user corrections, 33% tool-error rate"),
    ('no write_scope declared for task "t1"', 'no write_scope declared for task "t1"'),
    ("2.1.0", "2.1.0"), ("true", '"true"'), ("12345", '"12345"'), ("1.5", '"1.5"'), ("", '""'),
    ("null", '"null"'), ("~", '"~"'), ("2026-05-17", '"2026-05-17"'), ("yes", '"yes"'), ("Off", '"Off"'),
    ("1:30", '"1:30"'), ("0bff2f58-962f-4852-abaf-38cd6151218e", "0bff2f58-962f-4852-abaf-38cd6151218e"),
    ("it's", "it's"), ("- x", "'- x'"), ("a #b", "'a #b'"), (" lead", "' lead'"), ("tab\there", '"tab\\there"'),
    ("---x", "'---x'"), ("#x", "'#x'"),
])
def test_string_styles(text: str, expected: str) -> None:
    assert format_string(text, 0) == expected


def test_literal_blocks() -> None:
    detail = "cannot parse hook-outcomes sidecar for iter-7: yaml: unmarshal errors:\n  line 12: cannot unmarshal !!map into string"
    out = dump([("breakdown", [[("signal", "hook_outcomes"), ("detail", detail)]])]).decode()
    assert out == ("breakdown:\n    - signal: hook_outcomes\n      detail: |-\n"
                   "        cannot parse hook-outcomes sidecar for iter-7: yaml: unmarshal errors:\n"
                   "          line 12: cannot unmarshal !!map into string\n")
    assert dump([("k", "a\n\nb\n")]).decode() == "k: |\n    a\n\n    b\n"
    assert dump([("k", "a \nb")]).decode() == 'k: "a \\nb"\n'  # blank before a break: no literal
    assert dump([("k", []), ("n", 3), ("b", False)]).decode() == "k: []\nn: 3\nb: false\n"


@pytest.mark.parametrize("text,tag", [
    ("017", "!!int"), ("08", "!!float"), ("0x1F", "!!int"), ("1_000", "!!int"), ("2.7", "!!float"),
    (".inf", "!!float"), ("yes", "!!str"), ("True", "!!bool"), ("2026-05-17", "!!timestamp"),
    ("~", "!!null"), ("<<", "!!str"), ("+.5", "!!float"), ("1e3", "!!float"),
])
def test_plain_resolution(text: str, tag: str) -> None:
    assert resolve_plain(text)[0] == tag


def _int(text: str) -> int:
    d = Decoder()
    v = d.int_(load_document(f"v: {text}").value[0][1])
    d.raise_if_errors()
    return v


def test_integer_decoding_quirks() -> None:
    assert _int("017") == 15 and _int("010") == 8 and _int("08") == 8 and _int("2.7") == 2
    assert _int("-0.5") == 0 and _int("3.0") == 3 and _int("~") == 0 and _int("-.inf") == -(2**63)
    for bad in ('"3"', "true", ".nan", ".inf", "2026-01-01", "99999999999999999999"):
        with pytest.raises(YamlError):
            _int(bad)


def test_tristate_flags() -> None:
    def tri(text: str):
        return parse_record(f"schema_version: 1\niteration: 1\ntests_total_pass: {text}\n").impl.tests_total_pass

    assert tri("true") is True and tri("True") is False and tri("~") is None and tri("") is None
    assert tri("3") is True and tri("0") is False and tri("+3") is True and tri("007") is True
    assert tri('"t"') is True and tri('"F"') is False and tri('" "') is None
    for bad in ("yes", "0x1", "1_0", "1.0", "2026-01-01", "[a]"):
        with pytest.raises(YamlError):
            tri(bad)


def test_v2_ignores_top_level_v1_keys_and_null_items() -> None:
    r = parse_record("schema_version: 2\niteration: 9\nscope_note: on-target\nretries: 4\n"
                     "verifiers: [~, {status: pass}]\nreview:\n  failed_gates: [a, ~, '']\n")
    assert r.impl.scope_note == "" and r.impl.retries == 0 and len(r.verifiers) == 1
    assert r.review.failed_gates == ("a", "")


def test_duplicate_keys_fail_even_when_ignored() -> None:
    with pytest.raises(YamlError, match='mapping key "item" already defined at line 3'):
        parse_record("schema_version: 1\niteration: 1\nitem: a\nitem: b\n")


def test_historical_entries_and_alias_bomb() -> None:
    recs = parse_historical("iterations:\n  - {schema_version: 2, iteration: 3, retries: 1}\n  - ~\n")
    assert [(r.schema_version, r.iteration, r.impl.retries) for r in recs] == [(1, 3, 1)]
    # Aliases are never expanded by the composer; the decoder counts every node it
    # visits, so a record whose lists alias each other cannot blow up memory or time.
    items = ",".join(["{name: t, kind: k}"] * 1000)
    verifiers = ",".join(["*v"] * 1000)
    bomb = (f"schema_version: 2\niteration: 1\nk: &k [{items}]\n"
            f"v: &v {{status: pass, tests_added_by_kind: *k}}\nverifiers: [{verifiers}]\n")
    with pytest.raises(FatalDecode, match="expands too many aliases"):
        parse_record(bomb)


def test_deep_nesting_is_refused_not_a_crash() -> None:
    """40,000 nested brackets (80 KB) used to SIGSEGV the process inside libyaml's composer."""
    for text in ("v: " + "[" * 40000 + "]" * 40000, "v: " + "{a: " * 40000 + "}" * 40000,
                 "a:\n" + " " * 5000 + "b: 1\n"):
        with pytest.raises(YamlError, match="nesting deeper|indented deeper"):
            parse_record("schema_version: 1\niteration: 1\n" + text)
    # Ordinary brackets in large numbers are fine when they do not nest.
    recs = parse_historical("iterations:\n" + "".join(f"  - {{iteration: {i}, scope_note: '[x]'}}\n" for i in range(3000)))
    assert len(recs) == 3000


_pieces = st.sampled_from(list("abc019 :-[]{},'\"#&*!|>~.\n\t") + [
    "true", "null", ".nan", "schema_version: 2\n", "iteration: ", "verifiers:\n  - ", "records:\n",
    "labels:\n", "  ", "&a ", "*a", "<<: ", "!!str "])
yamlish = st.lists(_pieces, max_size=60).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.one_of(yamlish, st.text(max_size=200)))
def test_parsers_never_raise_anything_but_yaml_errors(text: str) -> None:
    from agentledger.sources.iterlogs.artifacts import parse_artifact
    from agentledger.sources.iterlogs.sidefiles import parse_hook_outcomes, parse_labels

    for fn in (parse_record, parse_historical, lambda t: parse_artifact("verifier_result", t),
               lambda t: parse_artifact("review_decision", t), lambda t: parse_artifact("tasks", t)):
        try:
            fn(text)
        except YamlError:
            pass
    parse_hook_outcomes(text)  # errors are values here
    parse_labels(text, 1)
