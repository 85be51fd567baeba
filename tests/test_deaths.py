"""Workers that die, in the simulator and the spec (gradcode/deaths.py): ``[faults] die`` and ``die_random``
checked when the spec is loaded; a dead worker never answers again; the run goes on while the stop rule can hold
with the living and ends naming the dead when it cannot. The MPI cluster's side: tests/test_mpi_deaths.py."""

from __future__ import annotations

import json

import pytest

from gradcode import make_scheme, simulate
from gradcode.clusters.driver import SimulationError
from gradcode.deaths import planned_deaths
from gradcode.errors import ConfigError
from gradcode.spec import load_spec
from mpi_runtime.launch import _summary_from_outside as summary_from_outside
from mpi_runtime.launch import launch, summary_lines

DELAY = {"name": "shifted_exponential", "mu": 0.5}
WORKLOAD = {"name": "least_squares", "n_samples": 64, "dim": 6}


def _spec(faults: dict, iterations: int = 20) -> dict:
    return {"cluster": {"workers": 8}, "workload": dict(WORKLOAD), "delay": dict(DELAY),
            "scheme": {"name": "fastest_k", "k": 6}, "run": {"iterations": iterations}, "faults": faults}


@pytest.mark.parametrize("faults, match", [
    ({"die": {"worker": 8, "at": 3}}, r"\[faults\] die: worker 8 is not one of the 8 workers"),
    ({"die": {"worker": 2, "at": 20}}, r"\[faults\] die: at = 20 is not an iteration of this run"),
    ({"die": {"worker": 2}}, r"\[faults\] die must be \{worker = i, at = t\}"),
    ({"die": [{"worker": 2, "at": 1}, {"worker": 2, "at": 5}]}, r"a worker dies once; \[2\] given twice"),
    ({"die_random": {"count": 9, "seed": 0}}, r"count = 9, but only 8 of the 8 workers"),
    ({"die_random": {"count": 2}}, r"die_random must be \{count = m, seed = s\}"),
    ({"dies": {"worker": 1, "at": 1}}, r"\[faults\] dies: unknown|unknown key"),
])
def test_bad_faults_fail_when_the_spec_is_loaded(faults, match):
    with pytest.raises(ConfigError, match=match):
        load_spec(_spec(faults))


def test_random_deaths_are_drawn_from_their_seed():
    options = load_spec(_spec({"die": {"worker": 0, "at": 4}, "die_random": {"count": 3, "seed": 7}})).options
    deaths = planned_deaths(options, 8)
    assert deaths == planned_deaths(options, 8) and len(deaths) == 4 and deaths[0] == 4
    assert all(0 <= at < 20 for at in deaths.values())
    other = load_spec(_spec({"die_random": {"count": 3, "seed": 8}})).options
    assert planned_deaths(other, 8) != {w: t for w, t in deaths.items() if w}


def test_a_dead_worker_never_answers_and_the_run_goes_on():
    """fastest_k with k = 6 of 8 outlives two deaths: the dead are never responders from their iteration on, the
    records and the summary name them."""
    result = simulate(make_scheme("fastest_k", n=8, k=6), DELAY, WORKLOAD, iterations=20,
                      die=[{"worker": 3, "at": 5}, {"worker": 6, "at": 12}])
    assert len(result.records) == 20
    for r in result.records:
        dead = [w for w, at in ((3, 5), (6, 12)) if r["iteration"] >= at]
        assert r.get("dead") == (dead or None)
        assert not set(dead) & set(int(i) for i in r["responders"]) and len(r["responders"]) == 6
    assert result.summary["deaths"] == [{"worker": 3, "at": 5}, {"worker": 6, "at": 12}]


@pytest.mark.parametrize("name, params, survives", [
    ("coded", {"code": "cyclic_repetition", "s": 2}, 2),
    ("backup", {"b": 1}, 1),
])
def test_the_run_ends_naming_the_dead_when_the_rule_cannot_hold(name, params, survives):
    """An exact code outlives s deaths and still decodes exactly; one more ends the run at that iteration."""
    die = [{"worker": w, "at": 2 + 3 * j} for j, w in enumerate((1, 4, 6)[:survives + 1])]
    scheme = make_scheme(name, n=8, **params)
    with pytest.raises(SimulationError, match=rf"iteration {die[-1]['at']}: the stop rule of {name} can no longer "
                                              rf"hold with {7 - survives} of 8 workers alive; dead: worker 1 "):
        simulate(scheme, DELAY, WORKLOAD, iterations=20, die=die)
    ok = simulate(make_scheme(name, n=8, **params), DELAY, WORKLOAD, iterations=20, die=die[:-1])
    assert len(ok.records) == 20
    if name == "coded":
        assert all(r["grad_error"] < 1e-9 for r in ok.records)


def test_an_all_reduce_cannot_outlive_a_death_in_the_simulator():
    with pytest.raises(SimulationError, match="iteration 3: the All-Reduce of dropcompute needs every worker; dead: "
                                              "worker 1 at iteration 3 .Open MPI with ULFM"):
        simulate(make_scheme("dropcompute", n=4, M=2), DELAY, WORKLOAD, iterations=6, die={"worker": 1, "at": 3})


@pytest.mark.parametrize("timeout", [0, -1])
def test_a_timeout_that_is_not_positive_is_refused_before_launch(timeout, tmp_path):
    with pytest.raises(ConfigError, match=f"--timeout {timeout}: must be a number of seconds > 0"):
        launch(tmp_path / "no-such-spec.toml", tmp_path / "out", timeout=timeout)
    assert not (tmp_path / "out").exists()


def test_a_summary_rank_0_wrote_is_never_replaced(tmp_path):
    """The launcher's own error (a timeout, a lost host) is added to rank 0's summary, never written over it."""
    written = {"scheme": "fastest_k", "iterations": 40, "mean_iteration_time": 2.0, "overhead_ratio": 1.01,
               "deaths": [{"worker": 3, "at": 10, "rank": 4, "host": "h", "why": "its process is gone"}]}
    (tmp_path / "summary.json").write_text(json.dumps(written))
    cfg = type("Cfg", (), {"summary_fields": lambda self, u, e: {"error": e}})()
    summary_from_outside(tmp_path, cfg, "the job did not finish within 60 s and was killed", lambda line: None)
    kept = json.loads((tmp_path / "summary.json").read_text())
    assert {k: kept[k] for k in written} == written and "killed" in kept["launcher_error"]
    lines = summary_lines(tmp_path, 0)
    assert "  dead                 worker 3 (rank 4, host h) at iteration 10: its process is gone" in lines
