"""Reduced versions of the examples in examples/: each checks the qualitative result its example demonstrates.

The examples are scripts; their main functions are imported with small sizes (no subprocess), so a broken result
fails here, not only in a figure.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import gradcode

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))

import adaptive_k  # noqa: E402
import adaptive_k_load  # noqa: E402
import backup_workers  # noqa: E402
import codes_under_stragglers  # noqa: E402
import codes_vs_dropping  # noqa: E402
import dropcompute_scaling  # noqa: E402
import order_statistics  # noqa: E402
import sync_vs_async  # noqa: E402
import tour  # noqa: E402


def test_order_statistics_simulation_matches_closed_forms():
    rows = order_statistics.sweep(n=10, ks=[1, 5, 9, 10], iterations=4000, seed=0)
    for r in rows:
        assert r["numeric"] == pytest.approx(r["closed"], rel=1e-6)
        assert r["simulated"] == pytest.approx(r["closed"], rel=0.05), r
    for label in order_statistics.DELAYS:   # the straggler tax: the last worker is the most expensive one
        t = [r["closed"] for r in rows if r["delay"] == label]
        assert t == sorted(t) and t[-1] - t[-2] > (t[1] - t[0]) / 4   # k = 9 -> 10 vs one step of 1 -> 5


def test_order_statistics_script_writes_outputs(tmp_path):
    order_statistics.main(["--quick", "--out", str(tmp_path)])
    assert (tmp_path / "order_statistics.png").stat().st_size > 0
    assert "closed form" in (tmp_path / "order_statistics.md").read_text()


def test_backup_workers_diminishing_returns():
    rows = backup_workers.sweep([0, 4, 20], iterations=200, seeds=[0])
    for label in backup_workers.DELAYS:
        sel = {r["b"]: r for r in rows if r["delay"] == label}
        assert sel[0]["mean_step"] > sel[4]["mean_step"] > sel[20]["mean_step"]
        # diminishing returns: the first 4 backups save more step time per backup than the next 16
        assert (sel[0]["mean_step"] - sel[4]["mean_step"]) / 4 > (sel[4]["mean_step"] - sel[20]["mean_step"]) / 16
        assert math.isfinite(sel[20]["time_to_target"]) and sel[20]["time_to_target"] < sel[0]["time_to_target"]


def test_adaptive_k_between_small_and_large_k():
    schemes = {**adaptive_k.fixed_schemes(), **adaptive_k.adaptive_schemes()}
    res = adaptive_k.compare(schemes, budget=800.0, seeds=[0], points=200)
    final = {label: r["error"][-1] for label, r in res.items()}
    early = {label: r["error"][len(r["error"]) // 8] for label, r in res.items()}
    n = adaptive_k.N_WORKERS
    for label in adaptive_k.adaptive_schemes():
        assert len(adaptive_k.switches(res[label]["runs"][0])) >= 3           # k did switch
        assert early[label] < 0.5 * early[f"fastest_k k={n}"]                 # faster than waiting for all, early
        assert final[label] < 0.5 * final["fastest_k k=1"]                     # below the k = 1 floor, late
        assert final[label] < final[f"fastest_k k={n // 4}"]
    assert final["fastest_k k=1"] > 5 * final[f"fastest_k k={n}"]              # small k has a higher floor


def test_adaptive_k_load_is_first_and_cheapest():
    schemes = {**adaptive_k.fixed_schemes(), **adaptive_k.adaptive_schemes(), **adaptive_k_load.load_schemes()}
    res = adaptive_k.compare(schemes, budget=400.0, seeds=[0], points=200)
    adaptive_k_load.cumulative_work(res)
    rows = {r[0]: r for r in adaptive_k_load.rows_for(res, [5e-3])}
    akl = rows["adaptive_k_load"]
    others = [r for label, r in rows.items() if label != "adaptive_k_load"]
    assert math.isfinite(akl[2])
    assert all(akl[2] < r[2] for r in others)              # reaches 5e-3 first
    assert all(akl[3] < r[3] for r in others)              # with the fewest samples computed


def test_dropcompute_example_scores_with_the_schemes_rule():
    from gradcode import make_delay
    from gradcode.schemes.dropcompute import local_stop

    micro, comm = make_delay("lognormal", comm=dropcompute_scaling.COMM).sample_micro(3, np.arange(20), 8, 12)
    for check in dropcompute_scaling.REFERENCE:     # the rules without history (predictive: tests/test_schemes.py)
        steps = dropcompute_scaling.Steps(micro, comm, check)
        assert steps.gain(float("inf")) == (1.0, 0.0)
        for tau in (5.0, 12.0, 16.5, 18.0, 30.0):
            counts, times = local_stop(micro, tau, check)
            speedup, drop = steps.gain(tau)
            assert drop == pytest.approx(1 - counts.sum() / counts.size / 12)
            assert speedup == pytest.approx((1 - drop) * steps.base / np.mean(np.max(times + comm, axis=1)))


def test_dropcompute_scaling_matches_reference_and_orders_checks():
    rows = dropcompute_scaling.sweep([8, 200], iterations=200, n_taus=13)
    got = {(r["n"], r["check"]): r["speedup"] for r in rows}
    for check, (ref, _, _) in dropcompute_scaling.REFERENCE.items():
        assert got[(200, check)] > got[(8, check)]                         # grows with n
        assert got[(200, check)] == pytest.approx(ref[200], abs=0.05)
    for n in (8, 200):                                                     # idealized > official > before only
        assert got[(n, "idealized")] >= got[(n, "official")] >= got[(n, "before_microbatch")]
    assert got[(200, "official")] < got[(200, "predictive")] < got[(200, "idealized")]   # ours, in between


def test_codes_exact_flat_then_failing_approximate_graceful():
    rs = [0, 2, 3, 6, 10]
    exact = codes_under_stragglers.residual_curve("cyclic_repetition", 20, 3, rs, count=10)
    assert max(exact[:3]) < 1e-10 and exact[3] > 1e-3                       # flat up to s, then degrades
    gf = codes_under_stragglers.residual_curve("reed_solomon_gf", 20, 3, rs, count=10)
    assert gf[:3] == [0.0, 0.0, 0.0] and all(np.isnan(gf[3:]))              # exact, then cannot decode at all
    approx = codes_under_stragglers.residual_curve("expander", 20, 3, rs, count=10)
    assert 0 < approx[1] < approx[3] < approx[4] < 1                         # graceful, monotone
    assert approx[3] < exact[3]                                              # beyond s, better than the fallback


def test_codes_numerical_stability_ordering():
    stab = {c: codes_under_stragglers.stability(c, 40, 9, count=20) for c in codes_under_stragglers.STABILITY_CODES}
    assert stab["reed_solomon_gf"]["error"] == 0.0 and stab["reed_solomon_gf"]["raises"] == 0
    assert stab["fractional_repetition"]["error"] < 1e-14
    assert stab["cyclic_repetition"]["error"] < 1e-10
    for w in stab.values():
        assert w["error"] < 1e-6 or w["raises"]   # a decode is either accurate or refused, never silently wrong


def test_codes_vs_dropping_redundancy_costs_work():
    schemes = {k: v for k, v in codes_vs_dropping.SCHEMES.items()
               if k in ("sync", "fastest_k k=9", "adaptive_k_load", "coded fractional_repetition s=3 (exact)")}
    rows = codes_vs_dropping.compare([0], schemes)
    for dlabel in codes_vs_dropping.DELAYS:
        sel = {r["scheme"]: r for r in rows if r["delay"] == dlabel}
        assert all(math.isfinite(r["time"]) for r in sel.values())
        coded = sel["coded fractional_repetition s=3 (exact)"]
        assert coded["samples"] > 2 * sel["sync"]["samples"]           # redundancy: (s + 1)-fold work
        assert sel["adaptive_k_load"]["time"] < min(r["time"] for k, r in sel.items() if k != "adaptive_k_load")
    pareto = {r["scheme"]: r for r in rows if r["delay"] == "pareto alpha=1.5"}
    assert pareto["fastest_k k=9"]["time"] < pareto["sync"]["time"] / 2       # dropping wins under a heavy tail


def test_tour_recovers_the_gradient(tmp_path, capsys):
    facts = tour.main(["--out", str(tmp_path)])
    assert facts["residual"] < 1e-12 and facts["error"] < 1e-12 and facts["fallback_residual"] > 0.01
    coded = facts["runs"]["coded cyclic_repetition s=2"].records
    assert all(r["grad_error"] < 1e-12 for r in coded)
    assert any(r["grad_error"] > 0.01 for r in facts["runs"]["fastest_k k=4"].records)
    out = capsys.readouterr().out
    assert "decoding weights" in out and (tmp_path / "tour.png").exists()
    assert "shifted_exponential" in out and "time grows with load" in out          # the delay model is named
    numbers = re.findall(r"^#+ (\d+(?:\.\d+)?)\.? ", out, flags=re.M)
    assert numbers == sorted(set(numbers), key=lambda x: tuple(map(int, x.split(".")))), numbers   # no repeats
    assert "Why entries like 11.813" in out and "support (0, 4, 5)" in out


def test_tour_quick_does_less_work(tmp_path):
    full = tour.main(["--out", str(tmp_path / "full")])["runs"]["fastest_k k=4"]
    quick = tour.main(["--quick", "--out", str(tmp_path / "quick")])["runs"]["fastest_k k=4"]
    assert len(quick.records) < len(full.records)
    assert quick.summary["computed"] < full.summary["computed"]


def test_tour_timelines_share_one_scale(tmp_path):
    runs = tour.main(["--quick", "--out", str(tmp_path)])["runs"]
    fast, coded = runs["fastest_k k=4"].records, runs["coded cyclic_repetition s=2"].records
    t_end = max(fast[-1]["end"], coded[-1]["end"])
    width = 60

    def last_column(records):   # the rightmost drawn column of the timeline
        bars = [line.split("|")[1] for line in tour.timeline(records, t_end, width) if line.startswith("  w")]
        assert all(len(bar) == width for bar in bars)
        return max(len(bar.rstrip()) for bar in bars)

    # the code's iterations take ~3x longer (load 3): drawn on one scale its bars run ~3x further right
    assert last_column(coded) > 2 * last_column(fast)
    assert last_column(coded) >= width - 1


def test_tour_holdings_picture_is_the_support():
    code = gradcode.make_code("cyclic_repetition", n=tour.N_WORKERS, s=tour.S, seed=0)
    rows = tour.holdings(code)[1:]
    for i, row in enumerate(rows):
        marks = row.split("   ")[1].split()
        assert tuple(j for j, m in enumerate(marks) if m == "#") == code.support(i)


def test_readme_five_lines_run_and_use_the_tours_code(capsys):
    readme = (EXAMPLES.parent / "README.md").read_text()
    block = readme.split("## Five lines")[1].split("```python\n")[1].split("```")[0]
    assert f'make_code("cyclic_repetition", n={tour.N_WORKERS}, s={tour.S}, seed=0)' in block
    assert "code.support(" in block
    exec(compile(block, "README.md", "exec"), {})
    printed = capsys.readouterr().out.split()
    assert printed[:3] == ["(1,", "2,", "3)"] and float(printed[3]) < 1e-12 and float(printed[4]) < 1e-12


def test_regimes_sweep_spec_is_valid_and_a_reduced_cell_runs(tmp_path):
    """examples/regimes.toml (the README's "Where codes win"): 5 x 3 cells, every code's s moved together, every
    cell a valid comparison; a reduced version (two cells, 4 iterations, one seed) runs and ranks the cells."""
    import copy
    import csv

    from gradcode.study.sweep import expand, read_sweep
    from gradcode.study.sweep_run import sweep

    raw = read_sweep(EXAMPLES / "regimes.toml")
    grid = expand(raw)
    assert len(grid.cells) == 15 and grid.paths == ["delay.extra", "schemes.*.s"]
    codes = [e for e in grid.cells[-1].spec["schemes"] if "s" in e]
    assert len(codes) == 3 and {e["s"] for e in codes} == {3}
    small = copy.deepcopy(raw)
    small["sweep"] = {"delay.extra": [0.0, 16.0], "schemes.*.s": [2]}
    small["run"].update(iterations=4, seeds=[0])
    sweep(small, tmp_path / "out", jobs=1, progress=False)
    rows = list(csv.DictReader(open(tmp_path / "out" / "sweep.csv")))
    assert len(rows) == 2 * 9
    sync = {r["delay.extra"]: float(r["mean_iteration_time"]) for r in rows if r["scheme"] == "sync"}
    assert sync["16.0"] > sync["0.0"]      # the added delay lengthens sync's iterations


@pytest.mark.slow
def test_sync_vs_async_staleness_and_step():
    """Async's mean staleness is about n - 1 (n gradients in flight, one applied per update) and its maximum far
    above under heavy tails; at the workload's step plain async goes nowhere while lr / staleness learns."""
    rows = {r["scheme"]: r for r in sync_vs_async.compare((8,), [0], 60.0)}
    for label in ("async", "async lr/staleness"):
        assert rows[label]["mean_staleness"] == pytest.approx(7, rel=0.1)
        assert rows[label]["max_staleness"] > 2 * 7
    assert rows["sync"]["mean_staleness"] is None
    assert rows["async lr/staleness"]["test_accuracy"] > rows["async"]["test_accuracy"] + 0.3
