"""``gradcode advise``: tuned settings never lose to the defaults on the same draws, the words carry the numbers of
the tables, bad input is refused before any work, ``--out`` writes its files, ``--verify`` runs on MPI."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from helpers import cli

from gradcode.cli import main
from gradcode.clusters.sim import simulate
from gradcode.errors import ConfigError
from gradcode.output.advice import advice_text, interval, short, write_advice
from gradcode.output.numfmt import fmt_ci
from gradcode.spec import build, load_spec
from gradcode.study import advise_cli
from gradcode.study.advise import GAP, Candidate, Trial, advise, extension

TINY = {
    "cluster": {"workers": 4},
    "workload": {"name": "least_squares", "n_samples": 120, "dim": 5, "noise": 0.1, "seed": 1},
    "delay": {"name": "shifted_exponential", "a": 1.0, "mu": 0.5},
    "schemes": [{"name": "fastest_k", "k": 3}, {"name": "coded", "code": "cyclic_repetition", "s": 2}],
    "run": {"iterations": 60, "time_scale": 0.02, "grace": 5.0},
}


@pytest.fixture(scope="module")
def tiny_advice():
    return advise(copy.deepcopy(TINY), seeds=[0, 1], quick=True)


def test_tuned_never_loses_to_the_default_on_the_same_draws(tiny_advice):
    a = tiny_advice
    assert a.default("fastest_k").candidate.table == {"name": "fastest_k", "k": 3}    # the spec's entry is the default
    for family, trials in a.trials.items():
        assert all(t.seeds == a.seeds for t in trials), family
        default = a.default(family)
        if default is not None:
            assert a.tuned(family).score() <= default.score(), family
    # the same draws: the default rerun alone, seed by seed, gives the times the ranking used
    spec = load_spec(copy.deepcopy(TINY))
    default = a.default("coded")
    for i, seed in enumerate(a.seeds):
        (scheme,), delay, workload = build(spec, scheme_index=1)
        summary = simulate(scheme, delay, workload, spec.options, seed=seed, target_loss=a.target).summary
        assert summary["time_to_target"] == default.times[i]
    assert [t.score() for t in a.ranking] == sorted(t.score() for t in a.ranking)


def test_the_words_carry_the_tables_numbers(tiny_advice, tmp_path):
    a = tiny_advice
    best = a.ranking[0]
    text = advice_text(a)
    assert f"Use {short(best)}:" in text
    workload = build(load_spec(copy.deepcopy(TINY)))[2]          # no target_loss: the relative target
    start = workload.loss(workload.init_params())
    assert a.target == pytest.approx(workload.optimal_loss + GAP * (start - workload.optimal_loss))
    mean, half = interval(best.times)
    assert mean == pytest.approx(np.mean(best.times[np.isfinite(best.times)]))
    assert f"{fmt_ci(mean, half)} time units" in text and f"{len(a.seeds) - best.missed}/{len(a.seeds)}" in text
    written = write_advice(a, tmp_path)
    names = {p.name for p in written}
    assert {"advice.md", "advice.html", "advice.json", "ranking.png", "tuning.png"} <= names
    assert short(best) in (tmp_path / "advice.html").read_text()


@pytest.mark.parametrize("change, message", [
    (lambda s: s.pop("workload"), "needs a [workload]"),
    (lambda s: s.update(workload={"name": "logistic", "n_samples": 60, "dim": 3}), "set [run] target_loss"),
    (lambda s: s.update(delays=[dict(s.pop("delay"), label="a"), {"name": "pareto", "label": "b"}]),
     "one delay model"),
])
def test_bad_specs_are_refused_before_any_work(change, message):
    spec = copy.deepcopy(TINY)
    change(spec)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        advise(spec)


def test_command_line_errors(tmp_path, capsys):
    path = tmp_path / "spec.toml"
    path.write_text('[cluster]\nworkers = 4\n[delay]\nname = "pareto"\n[workload]\nname = "least_squares"\n')
    assert main(["advise", str(path), "--hostfile", str(path)]) == 2
    assert "--hostfile is for the MPI runs of --verify" in capsys.readouterr().err
    assert main(["advise", str(path), "--target-gap", "2"]) == 2
    assert "--target-gap must be in (0, 1)" in capsys.readouterr().err
    assert advise_cli.GAP == GAP


@pytest.mark.mpi
@pytest.mark.slow
def test_verify_runs_the_first_choices_on_mpi(tmp_path):
    import tomli_w

    path = tmp_path / "spec.toml"
    spec = copy.deepcopy(TINY)
    spec["cluster"]["workers"] = 3
    path.write_text(tomli_w.dumps(spec))
    proc = cli("advise", path, "--quick", "--seeds", "0", "--verify", "--out", tmp_path / "out", timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("measured on MPI") == 2
    runs = sorted((tmp_path / "out" / "verify").iterdir())
    assert len(runs) == 2 and all((r / "records.jsonl").is_file() for r in runs)
    assert "On MPI (--verify)" in (tmp_path / "out" / "advice.md").read_text()


def test_a_best_setting_at_the_end_of_its_grid_gets_one_step_beyond():
    spec = load_spec(copy.deepcopy(TINY))
    one = np.ones(2)

    def trial(table, time):
        return Trial(Candidate(table["name"], table), [0, 1], one * time, one, one, one, one, None, None)

    ks = [trial({"name": "fastest_k", "k": k}, time) for k, time in ((2, 5.0), (3, 7.0))]
    assert extension(spec, ks).table == {"name": "fastest_k", "k": 1}
    assert extension(spec, [ks[0], trial({"name": "fastest_k", "k": 1}, 6.0), ks[1]]) is None   # inside: no step
    limits = [trial({"name": "anytime", "T": t}, time) for t, time in ((1.0, 9.0), (2.0, 4.0))]
    assert extension(spec, limits).table["T"] == 4.0                          # the same ratio past the end
    codes = [trial({"name": "coded", "code": "cyclic_repetition", "s": s}, time) for s, time in ((1, 3.0), (2, 4.0))]
    assert extension(spec, codes) is None                                     # s = 1 is the least s can be
