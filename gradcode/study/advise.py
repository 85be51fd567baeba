"""``gradcode advise SPEC``: which scheme, with which parameters, for this cluster?

From a spec's cluster size ``n``, workload and delay model (a model or a captured trace), every scheme family is
tuned by simulation and the tuned schemes are ranked by their time to a loss target:

1. **Candidates.** Per family a small grid of its key parameter (fastest_k's ``k``, backup's ``b``, adaptive_k's
   ``k0``, adaptive_k_load's ``max_batch``, the code and its ``s``, partial_coded's ``s``, DropCompute's ``tau``,
   anytime's ``T``), always with the family's *default*: the spec's own entry of that scheme if it has one, else the
   base setting (:func:`base_table`). Families the spec names that are not in the grid (a plugin) are run as given.
2. **Common random numbers.** Every candidate runs on the same seeds, and a seed fixes the delay draws
   ``(seed, t, i, load)``: candidates differ by their scheme alone.
3. **Tuning.** A candidate's score is ``(seeds that missed the target, mean time to target over the others)``;
   a family's tuned setting is its candidate of least score. The default is a candidate on the same seeds, so the
   tuned setting never scores worse than it.
4. **Ranking.** The tuned settings in order of score, each time with a 95% Student-t interval over seeds,
   ``mean +- t_{0.975, m-1} s / sqrt(m)``, and the paired difference to the first (the same draws), whose
   interval says whether the order is clear.

The target is ``[run] target_loss``, else ``F* + gap (F(w_0) - F*)`` where the workload knows its optimal loss
``F*`` (``gap``: :data:`GAP`, ``--target-gap``); with neither, advise refuses before any work.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..errors import ConfigError, GradcodeError
from ..output.advice import LOWEST
from ..spec import Spec, build, load_spec
from .harness import scheme_label, seeds_of

GAP = 2e-4              # relative target: this fraction of the initial excess loss F(w_0) - F* left
DEFAULT_SEEDS = 5       # seeds when the spec names one: the spec's seed and the next ones
QUICK_SEEDS = 2

FAMILIES = ("sync", "fastest_k", "backup", "adaptive_k", "adaptive_k_load", "coded", "partial_coded", "dropcompute",
            "anytime")


def base_table(family: str, spec: Spec, workload) -> dict[str, Any]:
    """The setting of a family the spec does not name, with one load unit the same samples as sync's worker:
    ``[run] batch`` samples (or a whole partition, ``N / n``) a unit. adaptive_k_load's unit is ``max_batch``
    samples, so ``max_batch`` is that number (another value would make its workers faster or slower, not tune
    it); DropCompute and anytime split the unit in ``M`` micro-batches (4, or fewer so that they divide the
    batch), their automatic threshold learned after 3 steps."""
    batch = spec.options.batch
    table: dict[str, Any] = {"name": family}
    if family == "adaptive_k_load":
        table["max_batch"] = batch or max(1, workload.n_samples // spec.workers)
    elif family in ("dropcompute", "anytime"):
        m = math.gcd(batch, 4) if batch else 4
        table.update({"M": m, **({"batch": batch // m} if batch else {}), "warmup": 3, "record_steps": 8,
                      "tau" if family == "dropcompute" else "T": "auto"})
    elif family == "coded":
        table.update({"code": "cyclic_repetition", "s": 1})
    elif family == "partial_coded":
        table["s"] = 1
    return table


@dataclass
class Candidate:
    """One setting of one family: its scheme table (``name`` and parameters) and whether it is the default."""

    family: str
    table: dict[str, Any]
    default: bool = False

    @property
    def label(self) -> str:
        return scheme_label(self.table)


@dataclass
class Trial:
    """A candidate's runs on the seeds: per seed, the time to target (``inf``: missed) and what the records say."""

    candidate: Candidate
    seeds: list[int]
    times: np.ndarray                      # time to target per seed (inf: not reached)
    iterations: np.ndarray                 # iterations run per seed (to the target, or all of them)
    step: np.ndarray                       # mean iteration time per seed
    computed: np.ndarray                   # load units computed per iteration, per seed
    floats: np.ndarray                     # floats sent per iteration, per seed
    grad_error: float | None               # median relative gradient error over every iteration of every seed
    residual: float | None                 # mean decoding residual (codes), else None

    @property
    def missed(self) -> int:
        return int((~np.isfinite(self.times)).sum())

    @property
    def mean_time(self) -> float:
        reached = self.times[np.isfinite(self.times)]
        return float(reached.mean()) if reached.size else math.inf

    def score(self) -> tuple[int, float]:
        """Lower is better: seeds missed first, then the mean time to target of the others."""
        return self.missed, self.mean_time


@dataclass
class Advice:
    """What ``advise`` found: the target, the seeds, every trial per family and the tuned ones in rank order."""

    target: float
    target_note: str
    seeds: list[int]
    n: int
    delay: str
    trials: dict[str, list[Trial]]
    ranking: list[Trial]
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    verified: list[str] = field(default_factory=list)      # --verify: the MPI verdict, in words

    def tuned(self, family: str) -> Trial:
        return min(self.trials[family], key=Trial.score)

    def default(self, family: str) -> Trial | None:
        return next((t for t in self.trials[family] if t.candidate.default), None)


# --- the input ------------------------------------------------------------------------------------------------
def load_advice_spec(source, seeds: list[int] | None = None, quick: bool = False) -> tuple[Spec, list[int]]:
    """The spec (one delay model, a workload) and the seeds to run: ``seeds``, else the spec's ``seeds``, else its
    ``seed`` and the next ones (:data:`DEFAULT_SEEDS`); ``quick``: the first :data:`QUICK_SEEDS`."""
    spec = load_spec(_with_scheme(source), {"seeds": seeds} if seeds else None)
    if len(spec.delays) != 1:
        raise ConfigError(f"advise tunes for one delay model; the spec has {len(spec.delays)} [[delays]] tables: "
                          "keep one (a [delay] table, or one [[delays]])")
    if spec.workload is None:
        raise ConfigError("advise ranks schemes by time to a loss target and needs a [workload] (a timing-only "
                          "spec has no loss); add one, e.g. name = \"least_squares\"")
    chosen = seeds_of(spec)
    if not seeds and "seeds" not in spec.run:
        chosen = list(range(chosen[0], chosen[0] + DEFAULT_SEEDS))
    return spec, chosen[:QUICK_SEEDS] if quick else chosen


def _with_scheme(source):
    """A spec without schemes is fine here (advise tries them all): it gets ``[scheme] name = "sync"``."""
    from pathlib import Path

    from ..plumbing.registry import add_user_dirs
    from ..spec import _read_toml

    if isinstance(source, (str, Path)) and Path(source).is_file():
        add_user_dirs(Path(source).parent)       # user modules beside the spec, as load_spec would
        source = _read_toml(Path(source))
    if isinstance(source, dict) and "scheme" not in source and "schemes" not in source:
        source = {**source, "scheme": {"name": "sync"}}
    return source


def target_of(spec: Spec, workload, gap: float = GAP) -> tuple[float, str]:
    """The loss target and a sentence saying where it comes from; a :class:`ConfigError` if there is none."""
    if not 0 < gap < 1:
        raise ConfigError(f"--target-gap must be in (0, 1) (a fraction of the initial excess loss), got {gap}")
    if spec.options.target_loss is not None:
        return spec.options.target_loss, f"[run] target_loss = {spec.options.target_loss:.6g}"
    optimum = getattr(workload, "optimal_loss", None)
    if optimum is None:
        raise ConfigError("advise needs a loss target: set [run] target_loss (the workload "
                          f"{spec.workload.get('name')!r} knows no optimal loss, so no relative target exists)")
    start = float(workload.loss(workload.init_params()))
    target = optimum + gap * (start - optimum)
    return target, (f"F* + {gap:g} (F(w0) - F*) = {target:.6g}, with the workload's optimal loss F* = {optimum:.6g} "
                    f"and initial loss F(w0) = {start:.6g}")


# --- the candidates -------------------------------------------------------------------------------------------
def _between(values, low: int, high: int) -> list[int]:
    return sorted({int(v) for v in values if low <= int(v) <= high})


def grid(family: str, n: int, delay, quick: bool) -> list[dict[str, Any]]:
    """The settings tried for ``family`` at ``n`` workers (each a dict of parameters over its base)."""
    fractions = (0.5, 0.75) if quick else (0.25, 0.5, 0.75, 0.875)
    if family == "fastest_k":
        return [{"k": k} for k in _between([math.ceil(n * f) for f in fractions] + [n - 1], 1, n - 1)]
    if family == "backup":
        return [{"b": b} for b in _between([1, 2] if quick else [1, 2, n // 8, n // 4], 1, n - 1)]
    if family == "adaptive_k":
        return [{"k0": k} for k in _between([1] + [math.ceil(n * f) for f in fractions[:-1]], 1, n)]
    if family == "adaptive_k_load":
        return [{"burn_in": b} for b in ([5, 10] if quick else [5, 10, 20])]
    if family == "coded":
        return _code_grid(n, quick)
    if family == "partial_coded":
        return [{"s": s} for s in _between([1, 2], 1, n - 1)]
    if family in ("dropcompute", "anytime"):
        key = "tau" if family == "dropcompute" else "T"
        return [{key: t} for t in _limits(n, delay, (0.25, 0.5, 0.75))]
    return []


def _code_grid(n: int, quick: bool) -> list[dict[str, Any]]:
    """Exact codes: cyclic repetition at s = 1..3, fractional repetition where s + 1 divides n; one approximate
    code: the expander at s = 2, stopping at the first 3n/4 (optimal decoding)."""
    out = [{"code": "cyclic_repetition", "s": s} for s in _between([1, 2] if quick else [1, 2, 3], 1, n - 1)]
    if not quick:
        out += [{"code": "fractional_repetition", "s": s} for s in (1, 3) if s < n and n % (s + 1) == 0]
        out += [{"code": "expander", "s": 2, "wait": math.ceil(3 * n / 4)}] if n > 3 else []
    return out


def _limits(n: int, delay, fractions) -> list[float]:
    """Compute-time limits for one unit of work: ``E[T_(k:n)] - E[C]`` at ``k = f n`` (the time by which a
    fraction ``f`` of the workers would have finished a full step), rounded to 3 digits; none if infinite."""
    comm = delay.mean(0.0)
    out = []
    for f in fractions:
        value = delay.expected_order_statistic(max(1, math.ceil(n * f)), n, 1.0) - comm
        if math.isfinite(value) and value > 0:
            out.append(float(f"{value:.3g}"))
    return sorted(set(out))


def candidates(spec: Spec, delay, workload, quick: bool = False) -> dict[str, list[Candidate]]:
    """Every family's candidates, its default first (the spec's entries of the family are all defaults)."""
    given: dict[str, list[dict]] = {}
    for table in spec.schemes:
        given.setdefault(str(table["name"]), []).append({k: v for k, v in table.items() if k != "label"})
    n, out = spec.workers, {}
    for family in dict.fromkeys([*FAMILIES, *given]):
        base = base_table(family, spec, workload)
        defaults = [canonical(t) for t in given.get(family) or ([base] if _has_default(family) else [])]
        base = defaults[0] if defaults else base
        tables = [*defaults, *(canonical({**base, **params}) for params in grid(family, n, delay, quick))]
        unique: dict[str, dict] = {}
        for t in tables:                 # a grid point equal to a default is the default
            unique.setdefault(scheme_label(t), t)
        labels = {scheme_label(t) for t in defaults}
        out[family] = _buildable(spec, [Candidate(family, t, default=label in labels) for label, t in unique.items()])
    return {family: c for family, c in out.items() if c}


def canonical(table: dict[str, Any]) -> dict[str, Any]:
    """``table`` without the parameters set to the scheme's own default (``k0 = 1`` is ``adaptive_k``): one
    setting, one label."""
    from ..plumbing.registry import SCHEMES

    try:
        params = {p.name: p.default for p in SCHEMES.describe(table["name"]).params if not p.required}
    except ConfigError:
        return table
    return {k: v for k, v in table.items() if k not in params or not _same(params[k], v)}


def _same(a, b) -> bool:
    return type(a) is type(b) and a == b


def _has_default(family: str) -> bool:
    """Does the family run with its base setting alone (fastest_k needs a k, backup a b)?"""
    return family not in ("fastest_k", "backup")


def _buildable(spec: Spec, cands: list[Candidate]) -> list[Candidate]:
    """The candidates the scheme accepts at this n (not, e.g., a code's s too large); the spec's own entries were
    built when it was loaded."""
    kept = []
    for c in cands:
        try:
            build(replace(spec, schemes=[c.table]))
        except ConfigError:
            continue
        kept.append(c)
    return kept


STEP_KEYS = ("k", "b", "k0", "s", "burn_in", "tau", "T")    # the numeric parameters a grid may be extended in


def extension(spec: Spec, trials: list[Trial]) -> Candidate | None:
    """One more setting when the tuned one is at an end of its grid (of two values or more) in a parameter: a step
    beyond it (half the gap to its neighbour for an integer, the same ratio for a time limit), within what the
    parameter can take; None if there is no such end or step."""
    tuned = min(trials, key=Trial.score).candidate
    n, tried = spec.workers, {t.candidate.label for t in trials}
    for key in STEP_KEYS:
        values = sorted({t.candidate.table[key] for t in trials if _number(t.candidate.table.get(key))})
        value = tuned.table.get(key)
        if len(values) < 2 or not _number(value) or value not in (values[0], values[-1]):
            continue
        near = values[1] if value == values[0] else values[-2]
        if isinstance(value, int):
            step = max(1, abs(near - value) // 2)
            new = value - step if value == values[0] else value + step
            high = n if key == "k0" else n - 1 if key in ("k", "b", "s") else 10**6
            if not LOWEST.get(key, 0) <= new <= high:
                continue
        else:
            new = float(f"{value * value / near:.3g}")
        cand = Candidate(tuned.family, canonical({**tuned.table, key: new}))
        if cand.label not in tried and _buildable(spec, [cand]):
            return cand
    return None


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


# --- running --------------------------------------------------------------------------------------------------
def run_trial(cand: Candidate, spec: Spec, delay, workload, seeds: list[int], target: float) -> Trial:
    """``cand`` on every seed (simulated; the same draws as every other candidate), stopped at the target."""
    from ..clusters.sim import simulate

    per_seed, errors, residuals = [], [], []
    for seed in seeds:
        (scheme,), _, _ = build(replace(spec, schemes=[cand.table]), workload=workload)
        options = replace(spec.options, seed=seed, target_loss=target)
        result = simulate(scheme, delay, workload, options)
        recs, summary = result.records, result.summary
        per_seed.append((summary.get("time_to_target") if summary.get("time_to_target") is not None else math.inf,
                         len(recs), summary["mean_iteration_time"], summary["computed"] / len(recs),
                         _floats(summary, scheme, workload) / len(recs)))
        errors += [r["grad_error"] for r in recs if r.get("grad_error") is not None]
        residuals += [r["residual"] for r in recs if r.get("residual") is not None]
    cols = [np.array(c, dtype=float) for c in zip(*per_seed, strict=True)]
    return Trial(cand, list(seeds), *cols, grad_error=float(np.median(errors)) if errors else None,
                 residual=float(np.mean(residuals)) if residuals else None)


def _floats(summary: dict[str, Any], scheme, workload) -> float:
    """Floats sent in the run: the records' count, else messages times the scheme's message size."""
    if summary.get("floats") is not None:
        return float(summary["floats"])
    return float(summary["messages"] * scheme.message_size(int(workload.dim)))


def advise(source, *, seeds: list[int] | None = None, quick: bool = False, gap: float = GAP,
           progress: bool = False) -> Advice:
    """Tune every family on the spec ``source`` and rank the tuned settings (module docstring)."""
    from ..clusters.sim import check_simulable
    from ..plumbing.progress import progress_bar
    from .harness import delay_label

    wall, cpu = time.perf_counter(), time.process_time()
    spec, seeds = load_advice_spec(source, seeds, quick)
    _, delay, workload = build(spec)
    check_simulable(delay)
    target, note = target_of(spec, workload, gap)
    cands = candidates(spec, delay, workload, quick)
    trials: dict[str, list[Trial]] = {}
    notes: list[str] = []
    with progress_bar(sum(map(len, cands.values())), unit="setting", disable=not progress, desc="advise") as bar:
        for family, group in cands.items():
            for cand in group:
                try:
                    trials.setdefault(family, []).append(run_trial(cand, spec, delay, workload, seeds, target))
                except GradcodeError as err:     # e.g. a simulation refused for its memory: the others still rank
                    notes.append(f"{cand.label} could not run: {err}")
                bar.update(1)
    trials = {family: ts for family, ts in trials.items() if ts}
    for ts in trials.values():       # one step past the end of a grid where the tuned setting sits there
        beyond = extension(spec, ts)
        if beyond is not None:
            ts.append(run_trial(beyond, spec, delay, workload, seeds, target))
    if not trials:
        raise GradcodeError("advise: no setting could run; " + "; ".join(notes))
    ranking = sorted((min(ts, key=Trial.score) for ts in trials.values()), key=Trial.score)
    return Advice(target=target, target_note=note, seeds=seeds, n=spec.workers, delay=delay_label(spec.delays[0]),
                  trials=trials, ranking=ranking, seconds=time.perf_counter() - wall,
                  cpu_seconds=time.process_time() - cpu, notes=notes)


# --- the command ----------------------------------------------------------------------------------------------
def advise_main(args) -> int:
    """``gradcode advise SPEC [--out DIR] [--verify] [--hostfile FILE] [--seeds S ...] [--quick]
    [--target-gap G]``: every input checked before any work."""
    import contextlib
    import sys

    from ..plumbing.outdir import FolderLock, writable_folder
    from .advise_verify import check_verify

    if args.hostfile and not args.verify:
        raise ConfigError("--hostfile is for the MPI runs of --verify; add --verify (or drop --hostfile)")
    spec, _ = load_advice_spec(args.spec, args.seeds, args.quick)
    out = writable_folder(args.out) if args.out else None
    if args.verify:
        check_verify(spec, args.hostfile)
    with FolderLock(out) if out else contextlib.nullcontext():      # one writer of DIR at a time
        return _advise_into(args, spec, out, sys.stderr.isatty())


def _advise_into(args, spec: Spec, out, progress: bool) -> int:
    """The work of :func:`advise_main` once its inputs are checked: advise, print, verify, write."""
    import tempfile
    from pathlib import Path

    from ..output.advice import advice_text, write_advice
    from .advise_verify import verdict, verify

    advice = advise(args.spec, seeds=args.seeds, quick=args.quick, gap=args.target_gap, progress=progress)
    print(advice_text(advice), flush=True)
    failed = False
    if args.verify:
        where = out / "verify" if out else Path(tempfile.mkdtemp(prefix="gradcode-advise-"))
        print(f"\nverifying the first choices on MPI (seed {advice.seeds[0]}) in {where} ...", flush=True)
        checks = verify(advice, spec, where, args.hostfile)
        advice.verified = verdict(checks)
        failed = any(c.error for c in checks)
        print("\n".join(advice.verified))
    if out:
        written = write_advice(advice, out)
        print(f"\nwrote {', '.join(str(p) for p in written)}")
    return 1 if failed else 0
