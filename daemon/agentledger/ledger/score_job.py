"""One iteration scored, in a worker for bulk work: the ``score.computed`` payload, its
JSON and the sidecar's bytes. Apart from ``scoring_pass.py`` so that the scorer is
imported by a pass that scores, not by every command that opens the ledger.
"""

from __future__ import annotations

from json.encoder import encode_basestring

from ..jsonnum import encode_float
from ..output import score_rows, sidecars
from ..scoring import rubric as rubrics
from ..scoring.combine import Score, score
from ..scoring.signals import SignalValue
from ..store.events import canonical_json, content_hash
from ..store.scores import PROJECTED


def score_job(job: tuple) -> tuple[dict, str, str, bytes, str, str, str | None] | None:
    """Everything the ``score.computed`` event and its sidecar need, serialised here
    (in a worker, for bulk work), or None when the iteration's inputs did not change:
    the payload's ``PROJECTED`` fields, its JSON text (the event as stored), that text's
    hash, the sidecar's bytes and their sha256, the score's ``signals`` column; last, the
    score it replaces, as its event's idempotency key names it."""
    version, marker, g, prev, replaces = job
    digest, key = g.digests(version, marker)
    if digest == prev:
        return None
    s = score(rubrics.load(version), g.inputs())
    rows: list[str] = []
    text, signals = payload_json(s, digest, marker, key, g.window, rows)
    data = sidecar_bytes(s, rows, marker)
    # the whole payload crosses back as its JSON text; as a dict only what the score's
    # projection reads (unpickling the whole dict cost the committing process ~37 us a score)
    head = {"iteration": s.iteration, "rubric_version": s.rubric_version, "inputs_hash": digest, "inputs_key": key,
            "scored": s.scored, "value": encode_float(s.value), "band": s.band,
            "sidecar": sidecars.iteration_sidecar_name(s.iteration)}  # the payload's fields but its lists
    projected = {k: head[k] for k in PROJECTED}
    return (projected, text, content_hash(text.encode("utf-8")), data, sidecars.sha256(data), signals, replaces)


def sidecar_bytes(s: Score, rows: list[str], marker: bool) -> bytes:
    """The bytes ``render_score_payload(payload)`` gives (what a rebuild renders from the
    stored event), from the score itself (its floats are the payload's before encoding),
    each breakdown row's lines looked up by the row's JSON text (``rows``, from
    ``payload_json``), as a bulk sync looks up a stored row's (``store.scores.render_stored``)."""
    return sidecars.render_iteration_rows(
        s.iteration, s.rubric_version, s.scored, float(s.value), s.band,
        [score_rows.ROWS.get(t) or score_rows.remember_row(t, score_rows.row_text(r)) for t, r in zip(rows, s.breakdown)],
        linked_traces_marker=bool(marker and s.linked_traces))


# -- the payload's JSON text, written directly ---------------------------------------
# The payload is the whole score, explainable, and what it came from (``window``: the
# transcript window its tokens were summed over, for pricing them). Building it as dicts
# and encoding them cost 39-50 us a score, in every scoring pass (a backfill of 10,000:
# ~0.45 s of the workers' CPU). Its shape is fixed, so its text is written here field by
# field with the functions the JSON encoder itself uses (``encode_basestring``,
# ``float.__repr__``): ~29 us. Anything not of the expected type goes through the encoder,
# so the text is the encoder's in every case: ``tests/test_bulk.py::score_payload`` builds
# the dicts, and ``test_a_payloads_text_is_the_encoders`` compares.

def _num(x: object) -> str:
    if type(x) is float:
        if x - x == 0.0:  # finite: inf - inf and nan - nan are nan
            return float.__repr__(x)
        return '"NaN"' if x != x else ('"+Inf"' if x > 0 else '"-Inf"')  # encode_float's tags
    return canonical_json(encode_float(x))


def _str(x: object) -> str:
    return encode_basestring(x) if type(x) is str else canonical_json(x)


def _bool(x: object) -> str:
    return "true" if x is True else "false" if x is False else canonical_json(x)


def _value(v: SignalValue) -> str:
    return f'{{"present":{_bool(v.present)},"sub_score":{_num(v.sub_score)},"detail":{_str(v.detail)}}}'


def _row_json(r) -> str:
    return (f'{{"signal":{_str(r.signal)},"label":{_str(r.label)},"present":{_bool(r.present)},'
            f'"sub_score":{_num(r.sub_score)},"detail":{_str(r.detail)},"nominal_weight":{_num(r.nominal_weight)},'
            f'"effective_weight":{_num(r.effective_weight)},"contribution":{_num(r.contribution)}}}')


# Breakdown rows' JSON texts by the row's fields: rows repeat (~60 % of a pass's rows are
# one seen before). Only a row of the types the scorer makes (no int or bool among its
# numbers: 1, 1.0 and True are one key and three texts) and no negative zero is kept.
_ROW_JSON: dict[tuple, str] = {}
_ROW_JSON_KEPT = 32768


def _row_json_of(r) -> str:
    sub, nw, ew, c = r.sub_score, r.nominal_weight, r.effective_weight, r.contribution
    if not (type(sub) is type(nw) is type(ew) is type(c) is float and type(r.present) is bool
            and type(r.signal) is type(r.label) is type(r.detail) is str) \
            or 0.0 in (sub, nw, ew, c) and score_rows.negative_zero(r):
        return _row_json(r)
    key = (r.signal, r.label, r.present, sub, r.detail, nw, ew, c)
    return _ROW_JSON.get(key) or score_rows.remember(_ROW_JSON, _ROW_JSON_KEPT, key, _row_json(r))


def payload_json(s: Score, digest: str, marker: bool, key: str, window: tuple | None = None,
                 rows: list[str] | None = None) -> tuple[str, str]:
    """The ``score.computed`` payload's JSON text and the score's ``signals`` column
    (``store.scores.signals_of`` of its breakdown), written directly; ``rows``, when
    given, gets each breakdown row's JSON text."""
    if rows is None:
        rows = []
    signals = {}
    for r in s.breakdown:
        rows.append(_row_json_of(r))
        sub = r.sub_score
        # a non-finite sub-score is written as a tag: left out
        if r.present and (type(sub) is int or type(sub) is float and sub - sub == 0.0):
            signals[r.signal] = sub
    pairs = [f'{{"signal":{_str(p.signal)},"role":{_str(p.role)},"claimed":{_value(p.claimed)},'
             f'"observed":{_value(p.observed)},"comparable":{_bool(p.comparable)},"delta":{_num(p.delta)}}}'
             for p in s.integrity]
    text = (f'{{"iteration":{canonical_json(s.iteration)},"rubric_version":{_str(s.rubric_version)},'
            f'"inputs_hash":{_str(digest)},"inputs_key":{_str(key)},"scored":{_bool(s.scored)},'
            f'"value":{_num(s.value)},"band":{_str(s.band)},"breakdown":[{",".join(rows)}],'
            f'"integrity":[{",".join(pairs)}],"linked_traces":{_bool(s.linked_traces)},"marker":{_bool(marker)},'
            f'"sidecar":{_str(sidecars.iteration_sidecar_name(s.iteration))},'
            f'"window":{"null" if window is None else canonical_json(list(window))}}}')
    return text, canonical_json(signals)
