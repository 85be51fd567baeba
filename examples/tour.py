"""A tour of gradcode: gradient coding and a straggler-tolerant run, printed step by step.

Question. What does a gradient code actually do, and what happens inside one simulated iteration?

Setup. ``n = 6`` workers, ``s = 2`` stragglers, the cyclic repetition code (Tandon et al., ICML 2017): we print its
encoding matrix ``B`` (and why its entries look arbitrary), a picture of who holds which data partition, one
straggler pattern, the decoding weights and the recovered gradient; then a tiny simulated run of fastest-k and the
same code as a scheme under the ``shifted_exponential`` delay model, where a worker's time grows with its load, with a
per-worker text timeline of busy, waited and wasted time, both on one time scale.

Finding. Any 4 of the 6 messages give the full gradient to ~1e-15; fastest-k ends each iteration at the 4th arrival
too, but with an estimate from only 4 of 6 partitions, while the code's workers each compute 3 partitions: 3x the
work, and since time grows with load, 3x the time. Read the source top to bottom: the comments are the lesson. The
same lesson as a notebook, with pictures and parameters to change: ``examples/tour.ipynb``.

Run: ``python examples/tour.py [--quick] [--out DIR]`` (``--quick``: 3 iterations on 60 samples instead of 6 on
600).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
from _common import parse_args, save_figure, write_report  # noqa: E402

from gradcode import NotDecodableError, make_code, make_delay, make_scheme, make_workload, simulate  # noqa: E402

NAME = "tour"
N_WORKERS, S = 6, 2
SIZES = {False: {"iterations": 6, "n_samples": 600}, True: {"iterations": 3, "n_samples": 60}}   # by --quick
np.set_printoptions(precision=3, suppress=True, linewidth=110)


def lesson_code(say) -> dict:
    # --- 1. The setting --------------------------------------------------------------------------------------
    # The data is cut into n_parts = n partitions; g_j is the gradient on partition j; the master wants g = sum_j g_j.
    # A straggler is a worker that is late. A gradient code lets the master ignore any s of them.
    code = make_code("cyclic_repetition", n=N_WORKERS, s=S, seed=0)   # seeded: B contains random numbers
    say(f"## 1. The code: {code!r}")
    say("Worker i sends y_i = sum_j B[i, j] g_j. The encoding matrix B (rows: workers, columns: partitions):")
    say("```\n" + str(code.B) + "\n```")
    # Only the pattern of B is fixed; its values are chosen so that ANY n - s rows combine into the all-ones row.
    # The construction draws a random s x n matrix H whose rows sum to zero (H 1 = 0), sets B[i, i] = 1 and solves
    # H b_i = 0 for the other s entries of row i. That small random system is sometimes nearly singular: a large
    # coefficient such as 11.813. Harmless in exact arithmetic; in floating point it costs a few digits, which the
    # decode's residual (section 4) shows.
    big = np.unravel_index(np.abs(code.B).argmax(), code.B.shape)
    say(f"Why entries like {code.B[big]:.3f} (B[{big[0]}, {big[1]}])? Only the pattern of B is fixed; its values come "
        "from a seeded random matrix H with H 1 = 0: B[i, i] = 1 and the rest of row i solves H b_i = 0, so any "
        "n - s rows combine into the all-ones row. A nearly singular random system gives a large coefficient; the "
        "residual below shows what it costs (another seed: other values, the same pattern).")

    # --- 2. Who holds what ------------------------------------------------------------------------------------
    # Row i is nonzero on a cyclic window of s + 1 partitions: every partition lives on s + 1 workers, so any s
    # of them can go missing. Redundancy is the price: each worker computes s + 1 partitions instead of 1.
    say(f"## 2. Who holds what (each worker computes s + 1 = {S + 1} partitions; code.support(i))")
    say("```\n" + "\n".join(holdings(code)) + "\n```")

    # --- 3. Encode --------------------------------------------------------------------------------------------
    # Real partial gradients would come from a workload; small integers make the arithmetic visible.
    partials = np.arange(1.0, N_WORKERS + 1).reshape(N_WORKERS, 1) * np.array([[1.0, -1.0]])   # g_j = (j+1, -(j+1))
    truth = partials.sum(axis=0)
    messages = code.encode(partials)
    say("## 3. Partial gradients g_j and the messages y_i = B g")
    say("```\ng =\n" + str(partials) + "\ny =\n" + str(messages) + "\n```")
    say(f"The full gradient the master wants: sum_j g_j = {truth}")

    # --- 4. A straggler pattern ---------------------------------------------------------------------------------
    # Workers 1 and 4 are late. The master decodes from the other n - s = 4: it needs weights a with
    # a^T B_F = 1^T (B_F: the rows of the responders), then sum_i a_i y_i = sum_j g_j.
    responders = [0, 2, 3, 5]
    dec = code.decoding(responders)
    estimate = code.combine(messages[responders], responders)
    say("## 4. Workers 1 and 4 straggle; decode from workers 0, 2, 3, 5")
    say(f"- decoding weights a = {dec.weights} (zero for the stragglers), method = {dec.method}")
    say(f"- check: a^T B = {dec.weights @ code.B} (should be all ones)")
    say(f"- residual ||B_F^T a - 1|| / sqrt(n_parts) = {dec.residual:.1e}: always reported, never hidden")
    say(f"- recovered gradient sum_i a_i y_i = {estimate}; error = {np.linalg.norm(estimate - truth):.1e}")

    # --- 5. Too many stragglers --------------------------------------------------------------------------------
    # With 3 stragglers the exact decode is impossible; the code says so instead of returning a wrong gradient.
    # method="auto" falls back to the best approximation (least squares), warns and reports its residual.
    few = [0, 2, 3]
    try:
        code.decode(few, method="exact")
    except NotDecodableError as err:
        say("## 5. Three stragglers (workers 1, 4, 5): the exact decode refuses")
        say(f"- NotDecodableError: {err}")
    approx = code.decoding(few, method="auto")
    say(f"- method='auto' falls back to least-squares weights (method '{approx.method}', a DecodeFallbackWarning) "
        f"with residual {approx.residual:.2f}: an approximate gradient {code.combine(messages[few], few)}, and the "
        "record says so")
    return {"residual": dec.residual, "error": float(np.linalg.norm(estimate - truth)),
            "fallback_residual": approx.residual}


def holdings(code) -> list[str]:
    """A text picture of who holds what: one line per worker, '#' under each partition it holds
    (``code.support(i)``), '.' elsewhere."""
    lines = ["partition  " + " ".join(str(j % 10) for j in range(code.n_parts))]
    for i in range(code.n):
        held = code.support(i)
        lines.append(f"worker {i}   " + " ".join("#" if j in held else "." for j in range(code.n_parts))
                     + f"   support {held}")
    return lines


def timeline(records: list[dict], t_end: float, width: int = 72) -> list[str]:
    """One text bar per worker per iteration, from the records' ``busy`` spans: '#' busy on a message that was
    used, 'x' busy on a message that was thrown away (wasted), '.' idle (waiting for the iteration to end). ``t_end``
    is the right edge of the scale: the same for every run shown, so that their lengths can be compared."""
    scale = width / t_end
    lines = []
    for rec in records:
        start, end = rec["start"], rec["end"]
        used = rec["responders"].tolist()
        lines.append(f"iteration {rec['iteration']}: {start:6.2f} -> {end:6.2f}, used workers {used}")
        for i in range(N_WORKERS):
            arrive = rec["busy"][i][1]
            a, b = int(start * scale), int(min(arrive, end) * scale)
            mark = "#" if i in used else "x"
            bar = (" " * a + mark * max(1, b - a) + "." * max(0, int(end * scale) - max(b, a + 1)))[:width]
            late = "" if i in used else f"  (late by {arrive - end:.2f}: its work is wasted)"
            lines.append(f"  w{i} |{bar:<{width}}|{late}")
    return lines


def lesson_run(say, quick: bool = False) -> dict:
    # --- 6. A simulated run --------------------------------------------------------------------------------------
    # The simulator draws every worker's response time from a delay model on a virtual clock and computes real
    # gradients of a real workload. The delay model here is "shifted_exponential": a worker with load L (units of
    # work) takes T = L * (a + Exp(1)/mu). TIME GROWS WITH LOAD: the code's workers carry s + 1 = 3 partitions, so
    # each of their arrivals comes ~3x later. late_workers="abandon" makes each iteration start fresh, so the bars
    # below are exactly the draws of that iteration (the same draws for both schemes: common random numbers).
    size = SIZES[quick]
    delay = make_delay("shifted_exponential", a=1.0, mu=1.0)
    wl = make_workload("least_squares", n_samples=size["n_samples"], dim=4, noise=0.1, seed=0)
    say("## 6. A simulated run: delay model shifted_exponential, T_i = load_i * (1 + Exp(1)): time grows with load; "
        f"{size['iterations']} iterations")
    out = {}
    for label, scheme in [("fastest_k k=4", make_scheme("fastest_k", n=N_WORKERS, k=N_WORKERS - S)),
                          ("coded cyclic_repetition s=2",
                           make_scheme("coded", n=N_WORKERS, code="cyclic_repetition", s=S))]:
        out[label] = simulate(scheme, delay, wl, iterations=size["iterations"], seed=7, late_workers="abandon")
    t_end = max(res.records[-1]["end"] for res in out.values())   # one scale for both timelines
    for number, (label, res) in enumerate(out.items(), start=1):
        say(f"### 6.{number} {label}, load {res.records[0]['load']:g} per worker ('#' used, 'x' wasted, '.' waiting; "
            f"one scale: the full width is {t_end:.1f} time units)")
        say("```\n" + "\n".join(timeline(res.records, t_end)) + "\n```")
        errs = [r["grad_error"] for r in res.records]
        say(f"- mean iteration time {res.summary['mean_iteration_time']:.2f}; relative gradient error per "
            f"iteration {np.round(errs, 3).tolist()}; work computed {res.summary['computed']:.0f} units "
            f"(wasted {res.summary['wasted']:.0f})")
    # --- 7. The lesson ---------------------------------------------------------------------------------------------
    # Both stop at the 4th arrival. Fastest-k's gradient misses 2 of the 6 partitions (error > 0); the code's is
    # exact (error ~1e-15) but each worker did 3 units of work, and under this delay model every arrival came 3x
    # later. With straggling that does not grow with load (a fixed extra delay on a few workers), the extra work
    # would cost far less time: see examples/tour.ipynb, section 4, and examples/codes_vs_dropping.py.
    ratio = (out["coded cyclic_repetition s=2"].summary["mean_iteration_time"]
             / out["fastest_k k=4"].summary["mean_iteration_time"])
    say("## 7. The lesson: both wait for 4 of 6; fastest-k pays with a noisier gradient, the code with 3x work, "
        f"which under a delay model where time grows with load is 3x time (here {ratio:.2f}x fastest-k's mean "
        "iteration time, with the same draws).")
    return out


def plot(runs: dict, out) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for i, (label, res) in enumerate(runs.items()):
        ends = [r["end"] for r in res.records]
        ax.plot(ends, [r["grad_error"] for r in res.records], "o-", color=f"C{i}", label=label)
    ax.set_yscale("symlog", linthresh=1e-16)
    ax.set_xlabel("virtual time")
    ax.set_ylabel("relative gradient error")
    ax.set_title("tour: fastest-k vs a gradient code (n = 6, s = 2)")
    ax.legend(fontsize=8)
    return save_figure(fig, out, NAME)


def main(argv=None) -> dict:
    args = parse_args(NAME, __doc__, argv)
    lines: list[str] = []
    say = lines.append
    say("# A tour of gradcode (n = 6, s = 2)")
    facts = lesson_code(say)
    runs = lesson_run(say, quick=args.quick)
    plot(runs, args.out)
    write_report(args.out, NAME, "\n\n".join(lines))
    return {**facts, "runs": runs}


if __name__ == "__main__":
    main()
