"""``process/ahead.py``: batches made on a thread one ahead of their consumer, with real threads."""

from __future__ import annotations

import threading

import pytest

from agentledger.process.ahead import made_ahead

from .conftest import threads_named as _threads


def test_items_come_in_order_and_the_next_batch_is_made_while_this_one_is_consumed() -> None:
    made: list[int] = []
    second_made = threading.Event()

    def batches():
        for i in range(4):
            made.append(i)
            if i == 1:
                second_made.set()
            yield [i * 10, i * 10 + 1]

    it = made_ahead(batches(), name="test-ahead")
    assert next(it) == 0
    # the consumer holds batch 0; batch 1 is made meanwhile, without being asked for
    assert second_made.wait(5)
    assert made[:2] == [0, 1]
    assert 3 not in made  # at most one batch waits made
    assert [0, *it] == [0, 1, 10, 11, 20, 21, 30, 31]
    assert not _threads("test-ahead")


def test_what_making_a_batch_raises_is_raised_to_the_consumer_after_the_batches_before_it() -> None:
    def batches():
        yield [1]
        raise ValueError("part 2 failed")

    got = []
    with pytest.raises(ValueError, match="part 2 failed"):
        for x in made_ahead(batches(), name="test-ahead"):
            got.append(x)
    assert got == [1]
    assert not _threads("test-ahead")


def test_a_consumer_that_stops_early_ends_the_thread_before_its_next_batch() -> None:
    made: list[int] = []
    closed = threading.Event()

    def batches():
        try:
            for i in range(100):
                made.append(i)
                yield [i]
        finally:
            closed.set()

    it = made_ahead(batches(), name="test-ahead")
    assert next(it) == 0
    it.close()  # the consumer gives up (an error, a stop asked for)
    assert not _threads("test-ahead")
    assert len(made) <= 3  # the one consumed, one waiting made, one under way at most
    assert closed.is_set()  # the batches' own clean-up ran


def test_a_pass_in_parts_cuts_them_on_the_workers_chunks(monkeypatch) -> None:
    """Each part of a pass the workers score is a whole number of their chunks (a chunk that
    spanned two parts waited for the second to be gathered), the first holds a chunk for
    each worker, each next twice the last up to the cap; unspread, the parts are as given."""
    from agentledger.ledger import scoring_pass
    from agentledger.process import parallel

    monkeypatch.setenv("AGENTLEDGER_WORKERS", "2")
    monkeypatch.setattr(parallel, "_disabled", False)
    its = list(range(1, 10_001))
    step = parallel.chunk_size(len(its))
    assert step == 512
    parts = scoring_pass.ScoringPass(None, None, None)._parts(None, its)  # type: ignore[arg-type]
    assert [len(p) for p in parts] == [1024, 2048, 4096, 2832]
    assert [x for p in parts for x in p] == its
    assert all(len(p) % step == 0 for p in parts[:-1])
    monkeypatch.setenv("AGENTLEDGER_PARALLEL_MIN_ITEMS", "20000")  # mapped here: no chunks
    assert parallel.chunk_size(len(its)) == 1
    parts = scoring_pass.ScoringPass(None, None, None)._parts(None, its)  # type: ignore[arg-type]
    assert [len(p) for p in parts] == [1000, 2000, 4000, 3000]
