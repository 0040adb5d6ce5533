"""Rule family_gap in `--jobs` forked workers (checker/rules/family_gap_jobs.py): the same
verdict, count, proof length and note as one process, on both back-ends; a class a worker
does not prove, or an inflated claim, still rejects the certificate with the same message;
work a worker's proofs charge reaches the parent's budget; the workers' caches are held
against the memory limit before any worker starts.

The test models have fewer maxima than FORK_MIN_OUTPUTS, so every test lowers it to 1 and
asserts that the workers really ran (pool.map_in_order called)."""

from __future__ import annotations

import re

import pytest
from family_gap_models import NAME, certificate, mutate, rule_line

from checker import arith as backends
from checker.certificate import CertificateChecker
from checker.errors import Malformed, Rejected
from checker.limits import Limits
from checker.rules import family_gap_jobs as jobs_mod
from checker.rules import pool


@pytest.fixture
def forked(monkeypatch):
    """Fork whatever the number of maxima; count the pools the rule starts."""
    calls = []
    real = pool.map_in_order

    def counted(jobs, fn, items, tick=None):
        calls.append((jobs, len(list(items))))
        return real(jobs, fn, items, tick)

    monkeypatch.setattr(jobs_mod, "FORK_MIN_OUTPUTS", 1)
    monkeypatch.setattr(pool, "map_in_order", counted)
    return calls


def _replay(lines, arith, jobs, limits=None):
    checker = CertificateChecker(arith=backends.get(arith), jobs=jobs,
                                 **({"limits": limits} if limits else {}))
    for line in lines:
        checker.feed(line)
    return checker.finish()


def _verdict(lines, arith, jobs):
    try:
        r = _replay(lines, arith, jobs)
        notes = [re.sub(r" \([0-9.]+ s\)$", "", n) for n in r.rule_notes]  # not the time
        return ("ok", r.facts.correct, r.work, notes)
    except (Malformed, Rejected) as e:
        return (type(e), str(e))


@pytest.mark.parametrize("arith", ["mpmath", "arb"])
@pytest.mark.parametrize("boxes", ["off", "on"])
def test_workers_give_the_same_report(forked, arith, boxes):
    lines = certificate(NAME, merge="always", boxes=boxes)
    assert len({c[1] for c in rule_line(lines)["hints"]["classes"]}) > 1  # several maxima
    one = _verdict(lines, arith, 1)
    assert not forked
    two = _verdict(lines, arith, 2)
    assert forked and forked[0][0] == 2
    assert one[0] == "ok" and one == two


@pytest.mark.parametrize("arith", ["mpmath", "arb"])
def test_a_class_a_worker_does_not_prove_rejects(forked, arith):
    """A logit-difference λ of the last class lowered far below its bound."""
    lines = certificate(NAME)
    classes = rule_line(lines)["hints"]["classes"]

    def edit(r):  # every diff hint of the last class to -1e3: no logit bound is that low
        import base64
        import struct
        raw = base64.b64decode(r["hints"]["classes"][-1][6])
        n = len(raw) // 8
        r["hints"]["classes"][-1][6] = base64.b64encode(struct.pack(f"<{n}d", *[-1e3] * n)
                                                        ).decode()
    assert len(classes) > 1
    bad = mutate(lines, edit)
    one = _verdict(bad, arith, 1)
    two = _verdict(bad, arith, 2)
    assert forked
    assert one[0] is Rejected and one == two


def test_an_inflated_claim_rejects(forked):
    lines = mutate(certificate(NAME), lambda r: None, claim_delta=1)
    with pytest.raises(Rejected, match="proves"):
        _replay(lines, "arb", 2)
    assert forked


def test_work_charged_in_a_worker_reaches_the_parent():
    """run_in_workers charges what each worker's meter passed on (a stand-in prover that
    charges 7 per block, and a residue that charges 5)."""
    charged = []
    meter = jobs_mod.Meter(charged.append)

    class Charging:
        def prove(self, block):
            meter(7)
            return len(block), None

    def residue():
        meter(5)
        return 3

    if not pool.can_fork():
        pytest.skip("no fork on this platform")
    results, certified = jobs_mod.run_in_workers(2, Charging(), [[1], [2, 3], [4]], residue,
                                                 meter)
    assert results == [(1, None), (2, None), (1, None)] and certified == 3
    assert sorted(charged) == [5, 7, 7, 7]  # the workers' charges, once each, in the parent


def test_combine_keeps_the_first_smallest_slack():
    raw = ((0, 1, 0, 1), (0, 1, 0, 1))
    results = [(4, (0.5, 3, 1, raw)), (2, None), (5, (0.25, 9, 2, raw)), (1, (0.25, 1, 0, raw))]
    proven, worst = jobs_mod.combine(results)
    assert proven == 12 and worst[:3] == (0.25, 9, 2)


def test_the_workers_caches_are_held_before_they_start(forked):
    """A memory limit the one-process check fits in, but not a second worker's caches."""
    lines = certificate(NAME)
    # the smallest limit one process needs, found by bisection on the limit itself
    lo, hi = 1, 1 << 26
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            _replay(lines, "arb", 1, Limits(max_stored_elements=mid))
            hi = mid
        except Malformed:
            lo = mid + 1
    _replay(lines, "arb", 1, Limits(max_stored_elements=lo))
    with pytest.raises(Malformed, match="every worker's"):
        _replay(lines, "arb", 2, Limits(max_stored_elements=lo))
    assert not forked  # refused before any worker started


def _slow(x):
    import time

    time.sleep(0.6)
    return x * 2


def test_the_parent_ticks_while_it_waits():
    """pool.map_in_order calls `tick` while a worker runs (the time limit and the progress
    line keep running in the parent), and an exception from the tick (a time limit) ends the
    map."""
    if not pool.can_fork():
        pytest.skip("no fork on this platform")
    ticks = []
    assert pool.map_in_order(2, _slow, [1, 2, 3], tick=lambda: ticks.append(1)) == [2, 4, 6]
    assert len(ticks) >= 2

    def limit():
        raise Malformed("checking took longer than 0 s")
    with pytest.raises(Malformed, match="longer"):
        pool.map_in_order(2, _slow, [1, 2], tick=limit)
