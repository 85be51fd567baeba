"""One registry for codes, schemes, delay models and workloads: names, import paths, plugins (entry points),
``gradcode describe`` / ``gradcode list --params``, and the "Adding a ..." examples of docs/extending.md run as
written."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pytest
import tomli_w
from helpers import cli

import gradcode
from gradcode.cli import main
from gradcode.clusters.sim import simulate
from gradcode.errors import ConfigError
from gradcode.output.report import read_records
from gradcode.plumbing.registry import CODES, DELAYS, KINDS, SCHEMES, WORKLOADS, describe, pythonpath
from gradcode.spec import build, load_spec
from gradcode.study.harness import compare

EXTENDING = Path(__file__).resolve().parents[1] / "docs" / "extending.md"   # its "Adding a ..." examples
TIMEOUT = 180

USER_CLASSES = '''
import numpy as np

from gradcode import Code, DelayModel, Scheme, Workload
from gradcode.codes.cyclic import CyclicRepetition
from gradcode.schemes import Combined
from gradcode.schemes.uncoded import Sync


class MyCode(CyclicRepetition):
    """Cyclic repetition under another name."""


class FirstHalf(Scheme):
    """Wait for the first half of the workers and average them.

    A second paragraph that describe leaves out.
    """

    name = "first_half"
    description = "wait for the first n // 2 workers"

    def __init__(self, n, *, batch=None):
        super().__init__(n, batch=batch)
        self.reset()

    def stop_count(self):
        return max(1, self.n // 2)

    def combine(self, messages, responders, plan):
        return Combined(messages.sum(axis=0) * plan.n_parts / len(responders), method="average")


class NoBatch(FirstHalf):
    """A scheme without a batch parameter: [run] batch is not passed to it."""

    def __init__(self, n, *, m: int = 1):
        super().__init__(n)
        self.m = m


class MySync(Sync):
    """Sync under another name: still the report's baseline."""

    name = "my_sync"


class Twice(DelayModel):
    """Unit time 2, always."""

    name = "twice"

    def __init__(self, *, comm: float = 0.0, comm_dist: str = "constant"):
        super().__init__(comm=comm, comm_dist=comm_dist)

    def _ppf(self, u):
        return np.full_like(u, 2.0)

    def _unit_mean(self):
        return 2.0


class Ones(Workload):
    """F(w) = (1/2N) sum_i ||w - 1||^2 over N samples."""

    name = "ones"

    def __init__(self, n_samples: int = 60, dim: int = 2):
        self.n_samples, self.dim, self.lr = n_samples, dim, 0.5

    def loss(self, w):
        return 0.5 * float(np.sum((np.asarray(w) - 1.0) ** 2))

    def gradients(self, w, t, parts, n_parts, batch=None):
        sizes = np.diff(self.partition_bounds(n_parts))
        return np.stack([sizes[j] / self.n_samples * (np.asarray(w) - 1.0) for j in parts])


class NotAWorkload:
    """Derives from nothing of gradcode's."""


def not_a_class():
    pass
'''


def _module(folder: Path, text: str = USER_CLASSES) -> str:
    """Write ``text`` as a new module (a fresh name: modules and registry lookups are cached) into ``folder``."""
    name = f"usermod_{uuid.uuid4().hex[:10]}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(text)
    return name


@pytest.fixture
def mod(tmp_path, monkeypatch) -> str:
    """A user module on sys.path, holding one subclass of each public base class (and things that are not)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    return _module(tmp_path)


def _spec(**tables) -> dict:
    spec = {"cluster": {"workers": 4}, "workload": {"name": "least_squares", "n_samples": 80, "dim": 3},
            "delay": {"name": "exponential"}, "scheme": {"name": "fastest_k", "k": 3}, "run": {"iterations": 4}}
    spec.update(tables)
    return {key: table for key, table in spec.items() if table is not None}   # scheme=None: drop [scheme]


# --- names ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_builtin_name_is_a_subclass_of_its_base(kind):
    reg = KINDS[kind]
    assert reg.names() and len(set(reg.names())) == len(reg.names())
    for name in reg.names():
        cls = reg.get(name)
        assert issubclass(cls, reg.base) and reg.get(name) is cls
        assert getattr(cls, "name", name) == name
        assert reg.list()[name]     # a one-line description


def test_public_base_classes():
    assert (CODES.base, SCHEMES.base, DELAYS.base, WORKLOADS.base) == (
        gradcode.Code, gradcode.Scheme, gradcode.DelayModel, gradcode.Workload)
    assert {"Code", "Scheme", "DelayModel", "Workload", "describe"} <= set(gradcode.__all__)


# --- import paths ---------------------------------------------------------------------------------------------
def test_import_paths_for_every_kind(mod):
    assert gradcode.make_code(f"{mod}:MyCode", n=6, s=2).__class__.__name__ == "MyCode"
    scheme = gradcode.make_scheme({"name": f"{mod}:FirstHalf"}, n=6)
    assert scheme.stop_count() == 3
    delay = gradcode.make_delay(f"{mod}:Twice", comm=0.5)
    assert delay.sample(0, 0, 3)[0].tolist() == [[2.0, 2.0, 2.0]] and delay.comm == 0.5
    wl = gradcode.make_workload(f"{mod}:Ones", dim=3)
    assert np.allclose(wl.gradients(np.zeros(3), 0, range(7), 7).sum(axis=0), -np.ones(3))
    assert repr(wl)     # a subclass without `params` still prints


def test_import_paths_in_a_spec_nested_too(mod):
    spec = load_spec(_spec(
        workload={"name": f"{mod}:Ones"},
        delay={"name": "persistent", "base": {"name": f"{mod}:Twice"}, "workers": [0], "slowdown": 2.0},
        scheme=None, schemes=[{"name": f"{mod}:FirstHalf"}, {"name": "coded", "code": f"{mod}:MyCode", "s": 1}],
        run={"iterations": 3, "batch": 5}))
    schemes, delay, workload = build(spec)
    assert type(delay.base).__name__ == "Twice" and type(workload).__name__ == "Ones"
    assert type(schemes[1].code).__name__ == "MyCode" and schemes[0].batch == 5
    res = simulate(schemes[0], delay, workload, spec.options)
    assert [r["end"] - r["start"] for r in res.records] == [2.0, 2.0, 2.0]   # the first half: unit time 2
    mixture = {"name": "mixture", "components": [{"weight": 1, "model": f"{mod}:Twice"}]}
    assert build(load_spec(_spec(delay=mixture)))[1].sample(0, 0, 3)[0].tolist() == [[2.0, 2.0, 2.0]]


def test_run_batch_goes_only_to_schemes_that_take_it(mod):
    spec = load_spec(_spec(schemes=[{"name": f"{mod}:NoBatch", "m": 2}, {"name": "fastest_k", "k": 2},
                                    {"name": "adaptive_k_load", "max_batch": 8}], scheme=None, run={"batch": 4}))
    no_batch, fastest, akl = build(spec)[0]
    assert no_batch.m == 2 and no_batch.batch is None and fastest.batch == 4
    # adaptive_k_load picks its mini-batch itself, up to max_batch, which is also its unit of load
    assert (akl.max_batch, akl.batch, akl.samples_per_unit) == (8, None, 8)


@pytest.mark.parametrize("path, words", [
    ("nomodule_xyz:Thing", ["cannot import module 'nomodule_xyz'", "accepted: least_squares", "gradcode.Workload"]),
    ("{mod}:Missing", ["has no attribute 'Missing'", "accepted:"]),
    ("{mod}:NotAWorkload", ["not a subclass of gradcode.Workload"]),
    ("{mod}:not_a_class", ["not a subclass of gradcode.Workload"]),
    ("{mod}:Twice", ["not a subclass of gradcode.Workload"]),
    ("{mod}:", ["must look like 'package.module:ClassName'"]),
    (":Ones", ["must look like 'package.module:ClassName'"]),
])
def test_bad_import_paths_are_config_errors(mod, path, words):
    with pytest.raises(ConfigError) as err:
        gradcode.make_workload(path.format(mod=mod))
    for word in words:
        assert word in str(err.value)


def test_a_module_that_fails_on_import(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    broken = _module(tmp_path, "raise RuntimeError('no data here')\n")
    with pytest.raises(ConfigError, match=f"importing module '{broken}' failed: RuntimeError: no data here"):
        gradcode.make_delay(f"{broken}:Anything")


@pytest.mark.parametrize("table, change, words", [
    ("[workload]", lambda s, m: s["workload"].update(name=f"{m}:Nope"), ["has no attribute 'Nope'", "Workload"]),
    ("[delay]", lambda s, m: s["delay"].update(name=f"{m}:Ones"), ["not a subclass of gradcode.DelayModel"]),
    ("[delay]", lambda s, m: s.update(delay={"name": "persistent", "base": "nomod_q:X"}), ["nomod_q"]),
    ("[scheme", lambda s, m: s["scheme"].update(name=f"{m}:MyCode"), ["not a subclass of gradcode.Scheme"]),
    ("[scheme", lambda s, m: s.update(scheme={"name": "coded", "code": f"{m}:Twice", "s": 1}),
     ["not a subclass of gradcode.Code"]),
])
def test_spec_errors_name_the_table(mod, table, change, words):
    spec = _spec()
    change(spec, mod)
    with pytest.raises(ConfigError) as err:
        load_spec(spec)
    assert str(err.value).startswith(table)
    for word in words:
        assert word in str(err.value)


def test_module_found_next_to_the_spec(tmp_path, monkeypatch):
    """Not on sys.path, not in the working directory: the spec's own folder."""
    name = _module(tmp_path / "project")
    spec = tmp_path / "project" / "spec.toml"
    spec.write_text(tomli_w.dumps(_spec(workload={"name": f"{name}:Ones"})))
    monkeypatch.chdir(tmp_path)
    assert type(build(load_spec(spec))[2]).__name__ == "Ones"
    assert str((tmp_path / "project").resolve()) in pythonpath("").split(os.pathsep)


# --- plugins (entry points) -----------------------------------------------------------------------------------
def _plugin(tmp_path: Path, monkeypatch, entries: dict[str, str]) -> str:
    """An installed distribution in a folder on sys.path, with entry points ``{"group": "name = module:Class"}``."""
    mod = _module(tmp_path)
    dist = tmp_path / f"{mod}_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {mod}-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("".join(f"[{group}]\n{line.format(mod=mod)}\n"
                                                   for group, line in entries.items()))
    monkeypatch.syspath_prepend(str(tmp_path))
    return mod


def test_entry_points_register_plain_names(tmp_path, monkeypatch):
    tag = uuid.uuid4().hex[:6]
    _plugin(tmp_path, monkeypatch, {"gradcode.workloads": f"ones_{tag} = {{mod}}:Ones",
                                    "gradcode.delays": f"twice_{tag} = {{mod}}:Twice"})
    assert f"ones_{tag}" in WORKLOADS.names() and f"twice_{tag}" in DELAYS.names()
    assert f"ones_{tag}" in gradcode.list_workloads()
    spec = load_spec(_spec(workload={"name": f"ones_{tag}", "dim": 4}, delay={"name": f"twice_{tag}"}))
    _, delay, workload = build(spec)
    assert workload.dim == 4 and delay.mean() == 2.0
    assert "F(w) = (1/2N)" in describe(f"ones_{tag}")[0].text()


def test_a_broken_plugin_is_a_config_error(tmp_path, monkeypatch):
    tag = uuid.uuid4().hex[:6]
    _plugin(tmp_path, monkeypatch, {"gradcode.schemes": f"gone_{tag} = {{mod}}:Gone",
                                    "gradcode.codes": f"wrong_{tag} = {{mod}}:Ones"})
    with pytest.raises(ConfigError, match=f"scheme 'gone_{tag}': the plugin entry point .* failed to load"):
        gradcode.make_scheme(f"gone_{tag}", n=3)
    with pytest.raises(ConfigError, match="not a subclass of gradcode.Code"):
        gradcode.make_code(f"wrong_{tag}", n=3, s=1)
    assert "failed to load" in SCHEMES.list()[f"gone_{tag}"]     # `gradcode list` still lists everything else
    assert main(["list", "--params"]) == 0


# --- describe / list ------------------------------------------------------------------------------------------
def test_describe_one_of_each_kind(mod):
    pareto = describe("pareto")[0].text()
    assert pareto.startswith("pareto (delay model, ") and "alpha: float  (default 1.3)" in pareto
    assert "comm_dist: str  (default 'constant')" in pareto and "P(U > x) = (t_m/x)^alpha" in pareto
    code = describe("cyclic_mds", "code")[0].text()
    assert "tol: float  (default 1e-08)" in code
    assert not {"n", "s"} & {p.name for p in describe("cyclic_mds", "code")[0].params}   # set by the cluster
    coded = describe("coded")[0].text()
    assert "code  (required)" in coded and "any other key: passed on to the code" in coded
    assert "--kind code" in coded
    wl = describe("least_squares")[0]
    assert [p.name for p in wl.params] == ["n_samples", "dim", "noise", "condition", "seed", "data", "test_fraction"]
    user = describe(f"{mod}:FirstHalf")[0]
    assert user.kind == "scheme" and user.summary == "wait for the first n // 2 workers"
    assert user.doc == "Wait for the first half of the workers and average them."   # the first paragraph only
    assert [p.text() for p in user.params] == ["batch  (default None)"]


@pytest.mark.parametrize("name, kind, words", [
    ("nope", None, ["nothing is registered as 'nope'", "least_squares", "pareto", "cyclic_mds", "sync"]),
    ("pareto", "scheme", ["nothing is registered as 'pareto' (scheme)", "fastest_k"]),
    ("{mod}:NotAWorkload", None, ["not a subclass of gradcode.Code or gradcode.Scheme"]),
    ("pareto", "shape", ["unknown kind 'shape'"]),
])
def test_describe_errors(mod, name, kind, words):
    with pytest.raises(ConfigError) as err:
        describe(name.format(mod=mod), kind)
    for word in words:
        assert word in str(err.value)


def test_cli_describe_and_list(mod, capsys):
    assert main(["describe", "shifted_exponential"]) == 0
    out = capsys.readouterr().out
    assert "a: float  (default 1.0)" in out and "comm: float  (default 0.0)" in out
    assert main(["describe", f"{mod}:Twice", "--kind", "delay"]) == 0
    assert f"{mod}:Twice (delay model, {mod}:Twice)" in capsys.readouterr().out
    assert main(["list", "--params"]) == 0
    out = capsys.readouterr().out
    for line in ("      alpha=1.3, t_m=1.0, comm=0.0, comm_dist='constant'", "      k, batch=None",
                 "      n_samples=2000, dim=20, noise=0.1, condition=1.0, seed=0, data=None, test_fraction=0.0"):
        assert line in out.splitlines()
    assert "any other key: passed on to the code" in out
    assert main(["list"]) == 0
    assert "comm_dist" not in capsys.readouterr().out


def test_cli_exit_codes():
    bad = subprocess.run([sys.executable, "-m", "gradcode", "describe", "nothing_here"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "gradcode describe: error: nothing is registered as 'nothing_here'; accepted:" in bad.stderr
    bad = subprocess.run([sys.executable, "-m", "gradcode", "describe", "missing_mod_q:X"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "cannot import module 'missing_mod_q'" in bad.stderr
    assert "Traceback" not in bad.stderr
    with pytest.raises(SystemExit) as err:
        main(["describe", "pareto", "--kind", "shape"])
    assert err.value.code == 2


# --- docs/extending.md's examples, as written ------------------------------------------------------------------------
def readme_examples() -> dict[str, dict]:
    """Per "Adding a ..." section: its files (code blocks starting with ``# FILENAME``) and its commands."""
    text = EXTENDING.read_text()
    out = {}
    for title in ("Adding a workload", "Adding a delay model"):
        section = text.split(f"## {title}\n")[1].split("\n## ")[0]
        blocks = re.findall(r"```(\w+)\n(.*?)```", section, re.S)
        files = {body.split("\n")[0][2:]: body for _, body in blocks if body.startswith("# ")}
        commands = [line for lang, body in blocks if lang == "sh" for line in body.splitlines() if line]
        out[title] = {"files": files, "commands": commands}
    return out


def _gradcode(line: str, cwd: Path) -> subprocess.CompletedProcess:
    args = shlex.split(line)
    assert args[0] == "gradcode"
    return cli(*args[1:], cwd=cwd, timeout=TIMEOUT, env=os.environ)   # the user's environment as it is


@pytest.mark.parametrize("title", [pytest.param("Adding a workload", marks=pytest.mark.mpi),   # its gradcode run
                                   "Adding a delay model"])
def test_readme_examples_run_as_written(title, tmp_path):
    example = readme_examples()[title]
    assert len(example["files"]) == 2 and example["commands"][0].startswith("gradcode describe")
    for name, body in example["files"].items():
        (tmp_path / name).write_text(body)
    for line in example["commands"]:      # the workload's include `gradcode run`: a real MPI job
        proc = _gradcode(line, tmp_path)
        assert proc.returncode == 0, (line, proc.stderr)
        if "describe" in line:
            assert "parameters:" in proc.stdout
        else:
            out = tmp_path / shlex.split(line)[shlex.split(line).index("--out") + 1]
            records, whole = read_records(out / "records.jsonl")
            assert whole and len(records) == load_spec(tmp_path / shlex.split(line)[2]).run["iterations"]
    if title == "Adding a workload":   # mean estimation: the loss falls to the variance term, d/2 = 1.5
        losses = [r["loss"] for r in read_records(tmp_path / "results/mean/records.jsonl")[0]]
        assert losses[0] > 2 * losses[-1] and abs(losses[-1] - 1.5) < 0.2


# --- every process of a run finds the user's module ----------------------------------------------------------
DELAY_ONLY = textwrap.dedent('''
    import numpy as np
    from gradcode import DelayModel


    class Steps(DelayModel):
        """Worker i takes 1 + i/10 units: a fixed order of arrival."""

        def _unit(self, seed, t_arr, n, path):
            return np.tile(1.0 + np.arange(n) / 10.0, (len(t_arr), 1))
''')


@pytest.mark.mpi
def test_gradcode_run_imports_the_users_module_on_every_rank(tmp_path):
    """A real MPI job started elsewhere: the module is only next to the spec, and every rank builds the model."""
    name = _module(tmp_path / "project", DELAY_ONLY)
    spec = _spec(delay={"name": f"{name}:Steps"}, scheme={"name": "fastest_k", "k": 2},
                 run={"iterations": 3, "time_scale": 0.01})
    path = tmp_path / "project" / "spec.toml"
    path.write_text(tomli_w.dumps(spec))
    (tmp_path / "elsewhere").mkdir()
    proc = _gradcode(f"gradcode run {path} --out {tmp_path / 'out'}", tmp_path / "elsewhere")
    assert proc.returncode == 0, proc.stderr
    records, whole = read_records(tmp_path / "out" / "records.jsonl")
    assert whole and len(records) == 3 and all(len(r["responders"]) == 2 for r in records)


@pytest.mark.mpi
def test_compare_on_mpi_imports_the_users_module(tmp_path):
    """`gradcode compare` runs each MPI run from a spec copied into the results folder: the experiment spec's
    folder reaches the ranks through PYTHONPATH."""
    name = _module(tmp_path / "project", DELAY_ONLY)
    spec = _spec(delay={"name": f"{name}:Steps"}, scheme=None, schemes=[{"name": "sync"}],
                 run={"iterations": 2, "time_scale": 0.01})
    path = tmp_path / "project" / "exp.toml"
    path.write_text(tomli_w.dumps(spec))
    out = compare(path, tmp_path / "results", cluster="mpi", progress=False, figures=False, mpi=(True, "test"))
    rows = json.loads((out / "summary.json").read_text())
    assert [(r["cluster"], r["status"], r["iterations"]) for r in rows] == [("mpi", "complete", 2)]
