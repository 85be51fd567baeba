"""Partial work: chunked interruptible workers, streaming, ``partial_coded`` and its chunk order."""

import itertools
import json
import warnings

import numpy as np
import pytest

from gradcode import make_scheme
from gradcode.clusters.driver import StopPolicy
from gradcode.clusters.iteration import chunk_ends, iteration
from gradcode.clusters.records import worker_values
from gradcode.clusters.sim import simulate
from gradcode.errors import ConfigError, DecodeFallbackWarning
from gradcode.schemes import chunk_order
from gradcode.workloads import make_workload


@pytest.fixture(scope="module")
def workload():
    return make_workload("least_squares", n_samples=360, dim=8, seed=3)


# --- the chunk order ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,s", [(n, s) for n in range(2, 7) for s in range(0, min(n, 3))])
def test_optimal_order_matches_brute_force(n, s):
    rng = np.random.default_rng(100 * n + s)
    for _ in range(3 if (n, s) == (6, 2) else 8):
        tau = 1.0 + rng.pareto(1.5, size=n)
        order = chunk_order.optimal_order(tau, s)
        # a valid order: every worker its own cyclic chunks, each once
        assert [sorted(o) for o in order] == [sorted(o) for o in chunk_order.natural_order(n, s)]
        best, _ = chunk_order.brute_force_order(tau, s)
        assert chunk_order.completion_time(order, tau) == pytest.approx(best, rel=1e-12)


def _qmax_by_enumeration(order) -> int:
    """Q_max from its definition: one more than the most chunks processed in a state that misses a chunk."""
    worst = -1
    for x in itertools.product(*[range(len(o) + 1) for o in order]):
        covered = {c for o, k in zip(order, x, strict=True) for c in o[:k]}
        if len(covered) < len({c for o in order for c in o}):
            worst = max(worst, sum(x))
    return worst + 1


@pytest.mark.parametrize("n,s", [(n, s) for n in range(2, 7) for s in range(1, min(n, 3))])
def test_natural_order_minimises_the_worst_case_chunk_count(n, s):
    """The paper's speed-free criterion Q_max: the formula equals its definition, and no order of the cyclic
    assignment beats the natural one (brute force over every combination of orders, n <= 6)."""
    rng = np.random.default_rng(n + 10 * s)
    perms = [list(itertools.permutations(o)) for o in chunk_order.natural_order(n, s)]
    for _ in range(3):    # the closed form against the definition, on random orders
        order = tuple(p[rng.integers(len(p))] for p in perms)
        assert chunk_order.worst_case_chunks(order) == _qmax_by_enumeration(order)
    best = min(chunk_order.worst_case_chunks(combo) for combo in itertools.product(*perms))
    assert chunk_order.worst_case_chunks(chunk_order.natural_order(n, s)) == best
    assert chunk_order.worst_case_chunks(chunk_order.optimal_order(np.ones(n), s)) == best


# --- l > 1: every chunk from l workers (the gradient split in l parts) ------------------------------------------
@pytest.mark.parametrize("n,s,l", [(4, 1, 2), (5, 2, 2), (5, 2, 3)])
def test_optimal_order_with_l_copies_matches_brute_force(n, s, l):
    rng = np.random.default_rng(7 * n + s + 100 * l)
    for _ in range(2):
        tau = 1.0 + rng.pareto(1.5, size=n)
        order = chunk_order.optimal_order(tau, s, l)
        assert [sorted(o) for o in order] == [sorted(o) for o in chunk_order.natural_order(n, s)]
        best, _ = chunk_order.brute_force_order(tau, s, l)
        assert chunk_order.completion_time(order, tau, l) == pytest.approx(best, rel=1e-12)
        assert chunk_order.completion_time(order, tau, l) >= chunk_order.completion_time(order, tau, 1)


def _qmax_l_by_enumeration(order, l) -> int:
    worst = -1
    chunks = {c for o in order for c in o}
    for x in itertools.product(*[range(len(o) + 1) for o in order]):
        count = {}
        for o, k in zip(order, x, strict=True):
            for c in o[:k]:
                count[c] = count.get(c, 0) + 1
        if any(count.get(c, 0) < l for c in chunks):
            worst = max(worst, sum(x))
    return worst + 1


@pytest.mark.parametrize("n,s,l", [(4, 2, 2), (5, 1, 2), (5, 2, 3)])
def test_worst_case_chunks_with_l_copies_and_natural_order_is_best(n, s, l):
    rng = np.random.default_rng(n + 3 * l)
    perms = [list(itertools.permutations(o)) for o in chunk_order.natural_order(n, s)]
    for _ in range(3):
        order = tuple(p[rng.integers(len(p))] for p in perms)
        assert chunk_order.worst_case_chunks(order, l) == _qmax_l_by_enumeration(order, l)
    best = min(chunk_order.worst_case_chunks(combo, l) for combo in itertools.product(*perms))
    assert chunk_order.worst_case_chunks(chunk_order.natural_order(n, s), l) == best


@pytest.mark.parametrize("l", [2, 3])
def test_split_messages_decode_exactly_with_duplicates_and_any_order(l):
    n, s, d = 6, 2, 12
    sch = make_scheme("partial_coded", n=n, s=s, l=l)
    for t in range(3):    # an optimized (non-natural) order: the coefficient row follows the chunk, not the slot
        sch.observe_chunks(t, np.array([1.0, 9.0, 1.0, 1.0, 1.0, 1.0]))
    plan = sch.plan(3)
    G = _partials(n, d=d, seed=l)
    every = [(i, c) for i in range(n) for c in sch.emits(i, plan)]
    rng = np.random.default_rng(l)
    for trial in range(4):
        received = [every[k] for k in rng.permutation(len(every))]
        received = received[:2] + received[:2] + received[2:]          # duplicates
        msgs = _messages(sch, plan, received, G)
        assert msgs.shape == (len(received), d // l) and sch.message_size(d) == d // l
        k = sch.stop_index(received, plan)
        assert k is not None and sch.done(received[:k], plan) and not sch.done(received[:k - 1], plan)
        out = sch.combine(msgs[:k], received[:k], plan)
        assert out.method == "exact" and out.residual <= 1e-12
        np.testing.assert_allclose(out.gradient, G.sum(axis=0), rtol=1e-10, atol=1e-12)
        if trial == 0:   # one copy short: audible, not silent (the scheme warns once per set of messages)
            with pytest.warns(DecodeFallbackWarning):
                short = sch.combine(msgs[:k - 1], received[:k - 1], plan)
            assert short.method == "fallback" and short.residual > 1e-3


def test_split_needs_l_copies_and_approximate_mode_uses_fewer():
    n, s, l, d = 4, 1, 2, 6
    sch = make_scheme("partial_coded", n=n, s=s, l=l, order="natural", mode="approximate", wait=2)
    plan = sch.plan(0)
    G = _partials(n, d=d)
    received = [(0, 1), (3, 2), (1, 1)]      # chunk 0 from workers 0 and 3 (in); chunk 1 from worker 1 only
    assert not sch.done(received, plan)
    out = sch.combine(_messages(sch, plan, received, G), received, plan)
    assert out.method == "approximate"
    assert out.residual == pytest.approx(np.sqrt((1 + 2 + 2) / (n * l)))   # chunk 1 half in, chunks 2-3 missing
    received += [(0, 2)]                      # chunk 1 from a second worker: two chunks in, wait = 2
    assert sch.done(received, plan)


def test_split_rejects_what_it_does_not_cover():
    with pytest.raises(ConfigError, match="l"):
        make_scheme("partial_coded", n=6, s=2, l=4)
    with pytest.raises(ConfigError, match="group"):
        make_scheme("partial_coded", n=6, s=2, l=2, group=2)
    with pytest.raises(ConfigError, match="divide"):
        make_scheme("partial_coded", n=6, s=2, l=3).message_size(8)


def test_split_runs_on_the_simulator_with_fewer_floats(workload):
    runs = {l: simulate(make_scheme("partial_coded", n=6, s=2, l=l), "pareto", workload, iterations=6, seed=2)
            for l in (1, 2)}
    for res in runs.values():
        assert all(r["method"] == "exact" and r["residual"] <= 1e-8 for r in res.records)
    per_msg = {l: res.summary["floats"] / sum(worker_values(r, "worker_messages", 6).sum() for r in res.records)
               for l, res in runs.items()}
    assert per_msg[1] == 8 and per_msg[2] == 4


def test_optimal_order_beats_natural_when_workers_differ():
    tau = [1.0, 1.0, 10.0, 10.0]
    assert chunk_order.optimal_order(np.ones(4), 2) == chunk_order.natural_order(4, 2)
    assert chunk_order.completion_time(chunk_order.optimal_order(tau, 2), tau) < \
        chunk_order.completion_time(chunk_order.natural_order(4, 2), tau)


def test_optimized_order_learns_persistent_slow_workers():
    sch = make_scheme("partial_coded", n=5, s=1)
    slow = np.array([1.0, 1.0, 8.0, 1.0, 1.0])
    for t in range(20):
        sch.observe_chunks(t, slow)
    plan = sch.plan(20)
    assert plan.parts[1][0] == 2      # worker 1 covers the slow worker 2's chunk first
    assert sch.record()["order_changed"]


# --- streaming: duplicates, order of arrival, exactness -------------------------------------------------------
def _partials(n_parts, d=5, seed=0):
    return np.random.default_rng(seed).standard_normal((n_parts, d))


def _messages(sch, plan, received, G):
    return np.stack([sch.message(i, c, G[list(plan.parts[i][:c])], plan) for i, c in received])


@pytest.mark.parametrize("group", [1, 2, 3])
def test_stream_with_duplicates_and_any_arrival_order_decodes_exactly(group):
    n, s = 6, 2
    sch = make_scheme("partial_coded", n=n, s=s, order="natural", group=group)
    plan = sch.plan(0)
    G = _partials(n)
    every = [(i, c) for i in range(n) for c in sch.emits(i, plan)]   # every chunk several times over
    rng = np.random.default_rng(1)
    for _ in range(5):
        received = [every[k] for k in rng.permutation(len(every))]
        received += received[:3]                                     # a message delivered twice
        assert sch.done(received, plan)
        out = sch.combine(_messages(sch, plan, received, G), received, plan)
        assert out.method == "exact" and out.residual <= 1e-8
        np.testing.assert_allclose(out.gradient, G.sum(axis=0), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("mode", ["exact", "approximate"])
def test_summing_on_arrival_equals_the_decode_of_every_message(mode):
    """The MPI master adds streamed chunks up as they arrive (``arrival_weight``, fixed when a message comes in) and
    finishes with ``combine_weighted``: the same estimate, residual and method as ``combine`` over all of
    them, for any arrival order, duplicates, and prefixes that miss chunks."""
    n, s = 6, 2
    sch = make_scheme("partial_coded", n=n, s=s, order="natural", mode=mode)
    assert sch.sums_on_arrival
    plan = sch.plan(0)
    G = _partials(n)
    every = [(i, c) for i in range(n) for c in sch.emits(i, plan)]
    rng = np.random.default_rng(7)
    for k in (1, 3, 8, len(every)):
        received = [every[j] for j in rng.permutation(len(every))][:k]
        received += received[:2]                                     # delivered twice
        messages = _messages(sch, plan, received, G)
        total = np.zeros(G.shape[1])
        for m in range(len(received)):
            total += sch.arrival_weight(received[:m + 1], plan) * messages[m]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DecodeFallbackWarning)
            want = sch.combine(messages, received, plan)
            got = sch.combine_weighted(total, received, plan)
        np.testing.assert_allclose(got.gradient, want.gradient, rtol=1e-12, atol=1e-14)
        assert (got.residual, got.method) == (want.residual, want.method)
        assert got.gradient is not total            # the master reuses its sum next iteration


def test_only_whole_messages_sum_on_arrival():
    """Tandon's second messages, groups of chunks and split messages are weighted by the whole received set."""
    assert make_scheme("fastest_k", n=4, k=3).sums_on_arrival               # averaging: one message per worker
    assert not make_scheme("coded", n=4, code="cyclic_repetition", s=1).sums_on_arrival
    for params in ({"protocol": "tandon"}, {"group": 2}, {"l": 2}):
        assert not make_scheme("partial_coded", n=4, s=1, **params).sums_on_arrival


def test_stop_index_is_the_first_prefix_that_covers():
    sch = make_scheme("partial_coded", n=4, s=1, order="natural")
    plan = sch.plan(0)
    # worker i's chunks: (i, i+1); (3, 2) is chunk 0, so chunk 3 first comes with (3, 1), the sixth message
    received = [(0, 1), (0, 1), (1, 1), (3, 2), (2, 1), (3, 1)]
    k = sch.stop_index(received, plan)
    assert k == 6 and not sch.done(received[:5], plan)
    assert sch.stop_index(received[:5], plan) is None


def test_exact_mode_that_cannot_decode_falls_back_audibly():
    sch = make_scheme("partial_coded", n=4, s=1, order="natural")
    plan = sch.plan(0)
    G = _partials(4)
    received = [(0, 1), (1, 1)]
    with pytest.warns(DecodeFallbackWarning):
        out = sch.combine(_messages(sch, plan, received, G), received, plan)
    assert out.method == "fallback" and out.residual > 1e-8


def test_exact_mode_keeps_the_codes_error_margin(monkeypatch):
    """A residual of tol / 2 is not exact: the codes' rule ``ERROR_MARGIN * residual <= tol`` holds here too."""
    from gradcode.codes._base import ERROR_MARGIN

    sch = make_scheme("partial_coded", n=4, s=1, order="natural", group=2)
    plan = sch.plan(0)
    G = _partials(4)
    received = [(i, c) for i in range(4) for c in sch.emits(i, plan)]
    messages = _messages(sch, plan, received, G)
    for residual, exact in ((sch.tol / 2, False), (sch.tol / ERROR_MARGIN, True)):
        monkeypatch.setattr(sch, "_weights", lambda rec, p, r=residual: (np.ones(len(rec)) / 2, r))
        assert sch.done(received, plan) is exact
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DecodeFallbackWarning)
            assert sch.combine(messages, received, plan).method == ("exact" if exact else "fallback")


def test_tandon_needs_every_first_message_and_a_decodable_code():
    sch = make_scheme("partial_coded", n=5, s=1, protocol="tandon", partitions=4)
    plan = sch.plan(0)
    own = 4 - 1 - 1
    assert plan.n_parts == 5 * own + 5 and sch.emits(0, plan) == (own, 4)
    firsts = [(i, own) for i in range(5)]
    seconds = [(i, 4) for i in range(5)]
    assert sch.done(firsts + seconds[:4], plan)
    assert not sch.done(firsts[1:] + seconds, plan)        # worker 0's own chunks never came
    G = _partials(plan.n_parts)
    received = seconds[2:] + firsts[::-1] + seconds[:1]
    out = sch.combine(_messages(sch, plan, received, G), received, plan)
    assert out.method == "exact"
    np.testing.assert_allclose(out.gradient, G.sum(axis=0), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("params", [{}, {"order": "natural"}, {"group": 2}, {"protocol": "tandon"}])
@pytest.mark.parametrize("late", ["finish", "abandon", "between_chunks"])
def test_exact_mode_gradient_equals_full_gradient_in_the_simulator(workload, params, late):
    res = simulate(make_scheme("partial_coded", n=6, s=2, **params), "pareto", workload, iterations=8, seed=4,
                   late_workers=late, loss_every=100)
    for rec in res.records:
        assert rec["method"] == "exact" and rec["residual"] <= 1e-8
        assert rec["grad_error"] <= 1e-10


def test_approximate_mode_stops_at_the_deadline_or_wait(workload):
    res = simulate(make_scheme("partial_coded", n=6, s=2, mode="approximate", wait=4), "pareto", workload,
                   iterations=6, seed=2)
    for rec in res.records:
        chunks = {tuple(m) for m in rec["received"]}
        assert rec["method"] in ("approximate", "exact")
        assert len(chunks) >= 1 and rec["residual"] <= np.sqrt(2 / 6) + 1e-12
    with pytest.raises(ConfigError, match="approximate"):
        make_scheme("partial_coded", n=6, s=2, deadline=1.0)
    with pytest.raises(ConfigError, match="order"):
        make_scheme("partial_coded", n=6, s=2, order="best")


@pytest.mark.parametrize("params", [{"s": 2}, {"s": 3, "group": 2}, {"s": 4, "group": 3},
                                    {"s": 2, "protocol": "tandon"}, {"s": 2, "mode": "approximate", "wait": 4}])
def test_stream_used_counts_the_chunks_since_each_workers_previous_message(params):
    """``Iteration.used`` (all messages at once, from the emit table) is the definition message by message: each
    received ``(i, c)`` delivers the chunks since worker ``i``'s previous emit before ``c``, at its chunk load;
    also without the table (as a cluster may build it) and for messages out of arrival order."""
    from dataclasses import replace

    sch = make_scheme("partial_coded", n=7, **params)
    rng = np.random.default_rng(5)
    for t in range(30):
        plan = sch.plan(t)
        it = iteration(StopPolicy(sch), plan, 0.0, np.zeros(7), rng.pareto(2.0, 7) + 1, rng.random(7), "finish")
        expected = np.zeros(7)
        for i, c in it.received:
            emits = sch.emits(i, plan)
            previous = max((e for e in emits if e < c), default=0)
            expected[i] += (c - previous) * plan.load[i] / plan.chunks(i)
        np.testing.assert_allclose(it.used(sch, plan), expected, rtol=1e-14)
        shuffled = replace(it, received=[it.received[k] for k in rng.permutation(len(it.received))], table=None)
        np.testing.assert_allclose(shuffled.used(sch, plan), expected, rtol=1e-14)


# --- chunked workers on the virtual clock ---------------------------------------------------------------------
def test_chunk_ends_and_local_deadline():
    sch = make_scheme("partial_coded", n=3, s=2, order="natural")
    plan = sch.plan(0)
    from dataclasses import replace
    ends, started = chunk_ends(replace(plan, tau=2.5), np.zeros(3), np.array([3.0, 6.0, 30.0]))
    np.testing.assert_allclose(ends[0], [1, 2, 3])
    np.testing.assert_allclose(ends[1], [2, 4, 6])
    assert started.tolist() == [3, 2, 1]      # a chunk starts only before 2.5 has passed


def test_abandon_drops_the_rest_at_the_next_chunk_boundary():
    sch = make_scheme("partial_coded", n=3, s=2, order="natural")
    plan = sch.plan(0)
    compute = np.array([3.0, 3.3, 60.0])
    for late, done2 in (("finish", 3), ("abandon", 1)):
        it = iteration(StopPolicy(sch), plan, 0.0, np.zeros(3), compute, np.zeros(3), late)
        # worker 0's chunks 0, 1, 2 end at 1, 2, 3, worker 1's 1, 2, 0 at 1.1, 2.2, 3.3: all in at 2.2;
        # worker 2's end at 20, 40, 60
        assert it.end == pytest.approx(2.2)
        assert it.done[2] == done2
        assert it.free[2] == pytest.approx(20.0 * done2)
        assert (it.computed(plan) >= 0).all() and it.used(sch, plan).sum() <= it.computed(plan).sum() + 1e-12


def test_no_worker_starts_a_plan_before_its_chunk_in_progress_ends(workload):
    """Interruptible workers never mix a stale chunk into a later iteration: a worker's spans do not overlap, and
    every message combined was sent for the current plan (the simulator computes it at the current model)."""
    res = simulate(make_scheme("partial_coded", n=6, s=2), "pareto", workload, iterations=40, seed=5,
                   late_workers="abandon")
    last_free = np.zeros(6)
    for rec in res.records:
        for i, span in enumerate(rec["busy"].tolist()):
            if not np.isnan(span[0]):
                assert span[0] >= last_free[i] - 1e-12
                last_free[i] = span[1]
        assert rec["method"] == "exact" and rec["residual"] == 0.0


def test_work_is_counted_per_worker(workload):
    for late in ("finish", "abandon"):
        for name, params in (("partial_coded", {"s": 2}), ("fastest_k", {"k": 4})):
            res = simulate(make_scheme(name, n=6, **params), "pareto", workload, iterations=10, seed=6,
                           late_workers=late)
            for rec in res.records:
                assert worker_values(rec, "worker_computed", 6).sum() == pytest.approx(rec["computed"])
                assert worker_values(rec, "worker_used", 6).sum() == pytest.approx(rec["used"])
                assert rec["wasted"] == pytest.approx(rec["computed"] - rec["used"])
                assert rec["wasted"] >= -1e-12
            assert 0 <= res.summary["wasted_fraction"] < 1


def test_streamed_messages_and_floats_are_recorded(workload):
    res = simulate(make_scheme("partial_coded", n=6, s=2, order="natural"), "constant", workload, iterations=3)
    for rec in res.records:
        # equal speeds, finish: everyone computes its 3 chunks and sends after each one
        assert rec["worker_messages"] == 3      # the same for every worker: one number (per_worker)
        assert worker_values(rec, "worker_messages", 6).tolist() == [3] * 6
        assert rec["floats"] == 18 * workload.dim and rec["messages"] == 18


def test_abandoning_workers_count_the_share_they_computed(workload):
    res = simulate(make_scheme("fastest_k", n=8, k=4), "pareto", workload, iterations=20, seed=7,
                   late_workers="abandon")
    for rec in res.records:
        done = worker_values(rec, "worker_computed", 8)
        late = np.setdiff1d(np.arange(8), rec["responders"])
        assert np.all(done[rec["responders"]] == 1.0)
        assert np.all((done[late] > 0) & (done[late] < 1.0))   # cut off mid-way: only that share counts


def test_partial_coded_is_faster_than_the_plain_cyclic_code():
    """Timing only, Pareto delays: the exact gradient with partial stragglers' work comes sooner."""
    mean = {}
    for name, params in (("partial_coded", {"s": 2, "order": "natural"}),
                         ("coded", {"code": "cyclic_repetition", "s": 2})):
        mean[name] = simulate(make_scheme(name, n=8, **params), "pareto", iterations=300, seed=8,
                              late_workers="abandon").summary["mean_iteration_time"]
    assert mean["partial_coded"] < mean["coded"]


@pytest.mark.parametrize(("name", "params", "same_as"), [
    ("partial_coded", {"s": 2}, "abandon"),                       # chunked: dropped after the chunk in progress
    ("coded", {"code": "cyclic_repetition", "s": 2}, "finish"),   # unchunked: one piece of work, finished
    ("fastest_k", {"k": 5}, "finish"),
])
def test_between_chunks_abandons_a_chunked_plan_and_finishes_the_others(workload, name, params, same_as):
    """``late_workers = "between_chunks"``: a late worker drops a stale plan only where it can look up from its work,
    so its records are, bit for bit, ``abandon``'s for a chunked plan and ``finish``'s for the others, training and
    timing only (where each rule takes its own vectorised path)."""
    def run(late, wl):
        records = simulate(make_scheme(name, n=8, **params), "pareto", wl, iterations=15, seed=9,
                           late_workers=late).records
        return json.dumps(records, default=lambda v: v.tolist())     # NaN == NaN here, to the bit
    for wl in (workload, None):
        assert run("between_chunks", wl) == run(same_as, wl)
        other = "finish" if same_as == "abandon" else "abandon"
        assert run("between_chunks", wl) != run(other, wl)     # the two rules differ on these draws


def test_between_chunks_is_where_partial_work_beats_the_plain_code_by_the_papers_margin():
    """The plain code's late workers finish their one piece of work, partial_coded's stop after the chunk in
    progress: over 60 iterations of the default delays (Pareto alpha 2, comm 0.5) the mean iteration time ratio is
    the one round's ~1.9 (docs/benchmarks.md), against ~1.37 when both finish (benchmarks/study_partial.py)."""
    delay = {"name": "pareto", "alpha": 2.0, "t_m": 1.0, "comm": 0.5}
    mean = {}
    for late in ("finish", "between_chunks"):
        for name, params in (("partial_coded", {"s": 2}), ("coded", {"code": "cyclic_repetition", "s": 2})):
            mean[late, name] = np.mean([simulate(make_scheme(name, n=8, **params), delay, iterations=60, seed=seed,
                                                 late_workers=late).summary["mean_iteration_time"]
                                        for seed in range(3)])
    assert mean["between_chunks", "coded"] == mean["finish", "coded"]
    assert mean["between_chunks", "partial_coded"] < mean["finish", "partial_coded"]
    assert mean["between_chunks", "coded"] / mean["between_chunks", "partial_coded"] > 1.5


def test_received_messages_are_well_formed(workload):
    res = simulate(make_scheme("partial_coded", n=5, s=1, group=2), "exponential", workload, iterations=5)
    for rec in res.records:
        assert all(len(m) == 2 for m in rec["received"])
        assert len({tuple(m) for m in rec["received"]}) == len(rec["received"])    # one message per (i, c)
        assert set(rec["responders"]) == {m[0] for m in rec["received"]}


def test_brute_force_enumerates_every_combination():
    n, s = 3, 1
    count = sum(1 for _ in itertools.product(*[itertools.permutations(o)
                                               for o in chunk_order.natural_order(n, s)]))
    assert count == 2 ** 3


def test_partial_work_example_runs_and_partial_coded_beats_the_code():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import partial_work

    pair = ["coded cyclic_repetition s=2", "partial_coded s=2 natural"]
    rows = {r["scheme"]: r for r in partial_work.time_to_target(0, seeds=(0,), iterations=80, schemes=pair)}
    assert rows["partial_coded s=2 natural"]["mean_iteration"] < rows["coded cyclic_repetition s=2"]["mean_iteration"]
    assert rows["partial_coded s=2 natural"]["speedup_vs_coded"] > 1
    w = partial_work.wasted(partial_work.DELAYS["straggle"], seeds=(0,), iterations=20)
    assert 0 < w["finish"]["wasted_fraction"] < 1 and 0 < w["abandon"]["wasted_fraction"] < 1


@pytest.mark.parametrize("module", ["chunk_order", "partial_coded"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    mod = importlib.import_module(f"gradcode.schemes.{module}")
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0


def test_a_timing_only_run_takes_any_l():
    """Without a workload there is no model size for ``l`` to divide: a timing-only run of ``l = 2`` ran into
    ``message_size(1)``'s ConfigError; it runs, and a chunk needs two copies."""
    from gradcode import make_delay, simulate

    runs = {l: simulate(make_scheme("partial_coded", n=6, s=2, l=l), make_delay("pareto", comm=0.5), iterations=8,
                        seed=1) for l in (1, 2, 3)}
    times = [runs[l].summary["mean_iteration_time"] for l in (1, 2, 3)]
    assert times[0] < times[1] < times[2]
    assert all("floats" not in r for run in runs.values() for r in run.records)


@pytest.mark.parametrize("params", [{"s": 2}, {"s": 2, "order": "natural"}, {"s": 3, "group": 2},
                                    {"s": 2, "group": 3}, {"s": 2, "l": 2}, {"s": 2, "protocol": "tandon"},
                                    {"s": 2, "mode": "approximate", "wait": 5}])
def test_partial_coded_from_the_partials_is_its_messages_combine(monkeypatch, params):
    """The simulator combines partial_coded's stream from every partition's gradients where the scheme can
    (``combine_partials``: whole chunks, one per message) and from its messages otherwise; both give the same
    run, to rounding. And the scheme's own ``message_parts`` (by arithmetic on ``group``) is the base class's (by
    the emits) for every message of every worker."""
    from gradcode.schemes._base import Scheme

    scheme = make_scheme("partial_coded", n=6, **params)
    plan = scheme.plan(0)
    for i in range(6):
        for c in scheme.emits(i, plan):
            assert scheme.message_parts(i, c, plan) == Scheme.message_parts(scheme, i, c, plan)
    wl = make_workload("least_squares", n_samples=600, dim=6, seed=1)

    def run():
        return simulate(make_scheme("partial_coded", n=6, **params), "pareto", wl, iterations=30, seed=2,
                        loss_every=1, lr=0.01, late_workers="between_chunks")

    fast = run()
    monkeypatch.setattr(type(scheme), "combine_partials", Scheme.combine_partials)
    slow = run()
    for a, b in zip(fast.records, slow.records, strict=True):
        assert np.array_equal(a["received"], b["received"]) and a["end"] == b["end"] and a["method"] == b["method"]
        assert a["residual"] == pytest.approx(b["residual"], abs=1e-12)
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-12)
        assert a["grad_error"] == pytest.approx(b["grad_error"], rel=1e-9, abs=1e-12)
    np.testing.assert_allclose(fast.params, slow.params, rtol=1e-12, atol=1e-15)


def test_least_true_finds_the_first_true_index_from_any_guess():
    """The ordering's search (``chunk_order._least_true``): the least index where a monotone test holds, from
    every starting guess, each index tested at most once; the last index when none holds."""
    for size in range(1, 25):
        for first in range(size + 1):            # the first index that holds (size: none)
            for guess in range(-2, size + 2):
                calls = []

                def ok(i, first=first, calls=calls, size=size):
                    calls.append(i)
                    assert 0 <= i < size
                    return i >= first

                assert chunk_order._least_true(ok, size, guess) == min(first, size - 1)
                assert len(calls) == len(set(calls))


@pytest.mark.parametrize("l", [1, 2])
def test_ordering_searched_from_any_time_is_the_bisections(l):
    """``timed_optimal_order`` gives the same orders whatever time its search starts from, and its time is the
    orders' completion time."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        n, s = int(rng.integers(3, 12)), 2
        tau = rng.exponential(size=n) + 0.5
        orders, time = chunk_order.timed_optimal_order(tau, s, l)
        assert time == pytest.approx(chunk_order.completion_time(orders, tau, l))
        for near in (0.0, float(tau.min()), time, float(tau.max()) * 3, 1e12):
            assert chunk_order.timed_optimal_order(tau, s, l, near=near) == (orders, time)
