"""Sync, backup workers and asynchronous SGD: the comparison of "Revisiting Distributed Synchronous SGD".

Question. Chen et al. (2016) argue that synchronous SGD with ``b`` backup workers beats asynchronous SGD: async never
waits, but each of its updates applies a gradient computed on a model several updates old ("asynchronous noise"),
and that staleness grows with the number of workers. Does that hold here, and where does async win on a small
model?

Setup. The mlp (one hidden layer of 32) on the digits, held-out accuracy and loss on its 20% test split; every
worker computes mini-batches of 16 samples (one load unit); heavy-tailed delays (Pareto, alpha 2, t_m 1: mean 2
units, infinite variance; 0.5 units of communication per message); ``n`` = 8, 16, 32 workers on the simulator and
``n`` = 8 on MPI (same draws). Schemes: sync; backup with ``b = n/16`` and ``n/8`` (at least 1); async_sgd with the
workload's step (lr 0.5), with the staleness-aware step ``lr / staleness`` (Zhang et al., IJCAI 2016), and, as a
control, with a constant step as small as that one typically is (``lr / (n - 1)``, ``n - 1`` the mean staleness).
Every run gets the same virtual time budget and, but for that control, the same step; held-out metrics are
evaluated once per ``n`` gradients for every scheme (an async round of ``n`` updates, a sync iteration). Time to
the held-out accuracy TARGET (median over seeds; "-" where not every seed reached it), held-out loss at the end of
the budget, and the staleness of the asynchronous updates (updates since the model the gradient was computed on:
mean and max).
Run: ``python examples/sync_vs_async.py [--quick] [--out DIR] [--no-mpi]``; docs/benchmarks.md has the results.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
from _common import parse_args, save_figure, table, write_report  # noqa: E402

from gradcode import make_delay, make_scheme, make_workload, simulate  # noqa: E402

NAME = "sync_vs_async"
DELAY = {"name": "pareto", "alpha": 2.0, "t_m": 1.0, "comm": 0.5}
WORKLOAD = {"name": "mlp", "hidden": [32], "seed": 0}
BATCH = 16
TARGET = 0.93          # held-out accuracy
BUDGET = 400.0         # virtual time units per run
LR = 0.5               # the mlp's own step


def schemes(n: int) -> dict[str, dict]:
    """The paper's four: sync, backups b = n/16 .. n/8 (at least one), async and async with the staleness step."""
    out = {"sync": {"name": "sync"}}
    for b in sorted({max(1, n // 16), max(1, n // 8)}):
        out[f"backup b={b}"] = {"name": "backup", "b": b}
    out["async"] = {"name": "async_sgd"}
    out["async lr/staleness"] = {"name": "async_sgd", "step": "staleness"}
    # the control: a constant step as small as the staleness step's typical one (mean staleness n - 1)
    out["async lr/(n-1)"] = {"name": "async_sgd", "lr": LR / (n - 1)}
    return out


def metrics(records: list[dict]) -> dict:
    """Time to TARGET accuracy (None if never), the last held-out loss and accuracy, staleness mean and max."""
    tested = [r for r in records if r.get("test_accuracy") is not None]
    hit = next((r["end"] for r in tested if r["test_accuracy"] >= TARGET), None)
    stale = [r["staleness"] for r in records if r.get("staleness") is not None]
    last = tested[-1] if tested else {}
    return {"time_to_target": hit, "test_loss": last.get("test_loss"), "test_accuracy": last.get("test_accuracy"),
            "mean_staleness": float(np.mean(stale)) if stale else None, "max_staleness": max(stale, default=None),
            "updates": len(records), "curve": [(r["end"], r["test_accuracy"]) for r in tested]}


def run_sim(n: int, spec: dict, seed: int, budget: float) -> dict:
    spec = dict(spec)
    lr = spec.pop("lr", LR)
    scheme = make_scheme(spec, n=n, batch=BATCH)
    rounds = scheme.updates_per_iteration      # evaluate once per n gradients, whatever the scheme
    res = simulate(scheme, make_delay(DELAY), make_workload(**WORKLOAD), iterations=100_000, seed=seed,
                   time_budget=budget, loss_every=rounds, eval_every=rounds, lr=lr)
    return metrics(res.records)


def run_mpi(n: int, spec: dict, seed: int, budget: float, out: Path) -> dict:
    """The same run on the MPI cluster (``gradcode run``), 20 ms per model unit."""
    import tomli_w

    from gradcode.output.report import read_records
    from mpi_runtime.launch import launch

    spec = dict(spec)
    lr = spec.pop("lr", LR)
    rounds = n if spec["name"] == "async_sgd" else 1
    run = {"cluster": {"workers": n}, "workload": dict(WORKLOAD), "delay": dict(DELAY),
           "scheme": {**spec, "batch": BATCH},
           "run": {"iterations": 100_000, "seed": seed, "time_budget": budget, "time_scale": 0.02, "lr": lr,
                   "loss_every": rounds, "eval_every": rounds, "grace": 10.0}}
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.toml").write_text(tomli_w.dumps(run))
    code = launch(out / "spec.toml", out / "run", timeout=1200, echo=lambda *a, **k: None)
    summary = json.loads((out / "run" / "summary.json").read_text())
    if code != 0 or "error" in summary:
        raise RuntimeError(f"MPI run in {out} failed (exit {code}): {summary.get('error')}")
    return metrics(read_records(out / "run" / "records.jsonl")[0])


def compare(ns, seeds, budget: float) -> list[dict]:
    rows = []
    for n in ns:
        for label, spec in schemes(n).items():
            runs = [run_sim(n, spec, seed, budget) for seed in seeds]
            rows.append(summarize_runs("sim", n, label, runs))
    return rows


def summarize_runs(cluster: str, n: int, label: str, runs: list[dict]) -> dict:
    """Medians over seeds (time to target only where every seed reached it)."""
    times = [r["time_to_target"] for r in runs]
    med = lambda key: float(np.median([r[key] for r in runs])) if all(r[key] is not None for r in runs) else None  # noqa: E731
    return {"cluster": cluster, "n": n, "scheme": label,
            "time_to_target": None if None in times else float(np.median(times)),
            "reached": sum(t is not None for t in times), "seeds": len(runs),
            "test_loss": med("test_loss"), "test_accuracy": med("test_accuracy"),
            "mean_staleness": med("mean_staleness"), "max_staleness": med("max_staleness"),
            "updates": med("updates"), "curve": runs[0]["curve"]}


def color(label: str, backups: list[str]) -> str:
    """One colour per scheme across the panels (the backups by their rank: b = n/16, then n/8)."""
    if label.startswith("backup"):
        return f"C{1 + backups.index(label)}"
    return {"sync": "C0", "async": "C3", "async lr/staleness": "C4"}.get(label, "C5")


def figure(rows: list[dict], out: Path) -> Path:
    import matplotlib.pyplot as plt

    ns = sorted({r["n"] for r in rows if r["cluster"] == "sim"})
    fig, axes = plt.subplots(1, len(ns) + 1, figsize=(4.2 * (len(ns) + 1), 3.6))
    for ax, n in zip(axes, ns, strict=False):
        sel = [r for r in rows if r["cluster"] == "sim" and r["n"] == n and r["curve"]]
        backups = [r["scheme"] for r in sel if r["scheme"].startswith("backup")]
        for r in sel:
            t, acc = zip(*r["curve"], strict=True)
            ax.plot(t, acc, label=r["scheme"], color=color(r["scheme"], backups), lw=1)
        ax.axhline(TARGET, color="grey", ls=":")
        ax.set(title=f"n = {n} (first seed; plain async is below 0.5)", xlabel="time (model units)",
               ylabel="held-out accuracy", ylim=(0.5, 1))
        ax.legend(fontsize=7)
    ax = axes[-1]     # every async variant sees the same draws, so the same staleness
    sel = [r for r in rows if r["cluster"] == "sim" and r["scheme"] == "async"]
    ax.plot([r["n"] for r in sel], [r["mean_staleness"] for r in sel], "o-", label="mean")
    ax.plot([r["n"] for r in sel], [r["max_staleness"] for r in sel], "s--", label="max")
    ax.plot([r["n"] for r in sel], [r["n"] - 1 for r in sel], ":", color="grey", label="n - 1")
    ax.set(title="async staleness against n (median of seeds)", xlabel="workers n", ylabel="updates",
           xscale="log", yscale="log")
    ax.legend(fontsize=7)
    return save_figure(fig, out, NAME)


def report(rows: list[dict], seeds, budget: float) -> str:
    fmt = lambda x: "-" if x is None else x  # noqa: E731
    body = table(["cluster", "n", "scheme", f"time to accuracy {TARGET}", "reached", "held-out loss",
                  "held-out accuracy", "mean staleness", "max staleness", "updates"],
                 [[r["cluster"], r["n"], r["scheme"], fmt(r["time_to_target"]), f"{r['reached']}/{r['seeds']}",
                   fmt(r["test_loss"]), fmt(r["test_accuracy"]), fmt(r["mean_staleness"]), fmt(r["max_staleness"]),
                   fmt(r["updates"])] for r in rows])
    return ("# Sync, backup workers and async SGD (mlp on digits, Pareto alpha 2 delays)\n\n"
            f"Budget {budget:g} model units per run, seeds {list(seeds)} (medians; MPI: seed {seeds[0]}).\n\n{body}\n")


def main(argv=None) -> list[dict]:
    args = parse_args(NAME, __doc__, [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--no-mpi"])
    no_mpi = "--no-mpi" in (argv if argv is not None else sys.argv[1:])
    ns, seeds, budget = ((8,), [0], 100.0) if args.quick else ((8, 16, 32), [0, 1, 2], BUDGET)
    rows = compare(ns, seeds, budget)
    if not args.quick and not no_mpi:
        for label, spec in schemes(8).items():
            slug = "".join(c if c.isalnum() else "_" for c in label)
            rows.append(summarize_runs("mpi", 8, label, [run_mpi(8, spec, seeds[0], budget,
                                                                 Path(args.out) / "mpi" / slug)]))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / f"{NAME}.json").write_text(json.dumps(rows))
    figure(rows, Path(args.out))
    write_report(args.out, NAME, report(rows, seeds, budget))
    return rows


if __name__ == "__main__":
    main()
