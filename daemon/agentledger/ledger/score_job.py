"""One iteration scored, in a worker for bulk work: the ``score.computed`` payload, its
JSON and the sidecar's bytes. Apart from ``scoring_pass.py`` so that the scorer is
imported by a pass that scores, not by every command that opens the ledger.
"""

from __future__ import annotations

from json.encoder import encode_basestring

from ..jsonnum import encode_float
from ..output import sidecars
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
    text, signals = payload_json(s, digest, marker, key, g.window)
    # the bytes ``render_score_payload(payload)`` gives (what a rebuild renders from the
    # stored event), from the score itself: its floats are the payload's before encoding
    data = sidecars.render_iteration(s.iteration, s.rubric_version, s.scored, float(s.value), s.band, s.breakdown,
                                     linked_traces_marker=bool(marker and s.linked_traces))
    # the whole payload crosses back as its JSON text; as a dict only what the score's
    # projection reads (unpickling the whole dict cost the committing process ~37 us a score)
    head = {"iteration": s.iteration, "rubric_version": s.rubric_version, "inputs_hash": digest, "inputs_key": key,
            "scored": s.scored, "value": encode_float(s.value), "band": s.band,
            "sidecar": sidecars.iteration_sidecar_name(s.iteration)}  # the payload's fields but its lists
    projected = {k: head[k] for k in PROJECTED}
    return (projected, text, content_hash(text.encode("utf-8")), data, sidecars.sha256(data), signals, replaces)


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


def payload_json(s: Score, digest: str, marker: bool, key: str, window: tuple | None = None) -> tuple[str, str]:
    """The ``score.computed`` payload's JSON text and the score's ``signals`` column
    (``store.scores.signals_of`` of its breakdown), written directly."""
    rows, signals = [], {}
    for r in s.breakdown:
        sub = _num(r.sub_score)
        rows.append(f'{{"signal":{_str(r.signal)},"label":{_str(r.label)},"present":{_bool(r.present)},'
                    f'"sub_score":{sub},"detail":{_str(r.detail)},"nominal_weight":{_num(r.nominal_weight)},'
                    f'"effective_weight":{_num(r.effective_weight)},"contribution":{_num(r.contribution)}}}')
        if r.present and type(r.sub_score) in (int, float) and sub[0] != '"':  # a non-finite one is a tag: left out
            signals[r.signal] = r.sub_score
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
