"""One iteration scored, in a worker for bulk work: the ``score.computed`` payload, its
JSON and the sidecar's bytes. Apart from ``scoring_pass.py`` so that the scorer is
imported by a pass that scores, not by every command that opens the ledger.
"""

from __future__ import annotations

from ..jsonnum import encode_float
from ..output import sidecars
from ..scoring import rubric as rubrics
from ..scoring.combine import Score, score
from ..store.events import canonical_json, content_hash
from ..store.scores import PROJECTED, signals_of


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
    payload = score_payload(s, digest, marker, key, g.window)
    text = canonical_json(payload)
    # the bytes ``render_score_payload(payload)`` gives (what a rebuild renders from the
    # stored event), from the score itself: its floats are the payload's before encoding
    data = sidecars.render_iteration(s.iteration, s.rubric_version, s.scored, float(s.value), s.band, s.breakdown,
                                     linked_traces_marker=bool(marker and s.linked_traces))
    # the whole payload crosses back as its JSON text; as a dict only what the score's
    # projection reads (unpickling the whole dict costs the committing process ~37 us a score)
    projected = {k: payload[k] for k in PROJECTED}
    return (projected, text, content_hash(text.encode("utf-8")), data, sidecars.sha256(data),
            signals_of(payload["breakdown"]), replaces)


def score_payload(s: Score, digest: str, marker: bool, key: str, window: tuple | None = None) -> dict:
    """The ``score.computed`` payload: the whole score, explainable, and what it came from
    (``window``: the transcript window its tokens were summed over, for pricing them)."""
    f = encode_float
    breakdown = [{"signal": r.signal, "label": r.label, "present": r.present, "sub_score": f(r.sub_score),
                  "detail": r.detail, "nominal_weight": f(r.nominal_weight),
                  "effective_weight": f(r.effective_weight), "contribution": f(r.contribution)}
                 for r in s.breakdown]
    integrity = [{"signal": p.signal, "role": p.role,
                  "claimed": {"present": p.claimed.present, "sub_score": f(p.claimed.sub_score),
                              "detail": p.claimed.detail},
                  "observed": {"present": p.observed.present, "sub_score": f(p.observed.sub_score),
                               "detail": p.observed.detail},
                  "comparable": p.comparable, "delta": f(p.delta)} for p in s.integrity]
    return {
        "iteration": s.iteration, "rubric_version": s.rubric_version, "inputs_hash": digest, "inputs_key": key,
        "scored": s.scored, "value": f(s.value), "band": s.band,
        "breakdown": breakdown, "integrity": integrity,
        "linked_traces": s.linked_traces, "marker": marker,
        "sidecar": sidecars.iteration_sidecar_name(s.iteration),
        "window": list(window) if window is not None else None,
    }
