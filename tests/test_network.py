"""Bytes in the model: what each message carries, the ``[network]`` table, and what links do to an iteration."""

import json

import numpy as np
import pytest
import tomllib
from helpers import cli, mpi_spec, run_mpi, simulate_spec

from gradcode import simulate
from gradcode.errors import ConfigError
from gradcode.network import Network, parse_rate
from gradcode.schemes import make_scheme
from gradcode.spec import load_spec


@pytest.mark.parametrize("name, params, floats", [
    ("sync", {}, 600),
    ("fastest_k", {"k": 4}, 600),
    ("coded", {"code": "cyclic_repetition", "s": 2}, 600),
    ("coded", {"code": "cyclic_mds", "s": 2}, 1200),        # n - s even: complex, two reals an entry
    ("partial_coded", {"s": 2, "l": 2}, 300),
    ("dropcompute", {"tau": 1.0}, 601),                     # the All-Reduce's sum and its count
])
def test_message_bytes(name, params, floats):
    assert make_scheme(name, n=6, **params).message_bytes(600) == 8 * floats


def test_rates_and_table_errors():
    assert parse_rate("link", "1gbit") == 1.25e8
    assert parse_rate("link", "100mbps") == 1e8
    assert parse_rate("link", 5e6) == 5e6
    base = {"cluster": {"workers": 4}, "delay": {"name": "constant"}, "scheme": {"name": "sync"}}
    for table, words in [({"link": "fast", "d": 10}, ["link", "tc's units", "1gbit"]),
                         ({"latency": 0.001, "d": 10}, ["link is missing"]),
                         ({"link": "1gbit", "d": 10, "bandwidth": 3}, ["unknown key", "bandwidth", "slots"]),
                         ({"link": "1gbit", "d": 10, "links": {"x": "1gbit"}}, ["links", "host number"]),
                         ({"link": "1gbit", "d": 10, "slots": [2, 2]}, ["place 4 ranks", "the run has 5"]),
                         ({"link": "1gbit", "d": 10, "slots": 2, "links": {5: "1gbit"}}, ["host(s) [5]", "0..2"]),
                         ({"link": "1gbit"}, ["d is needed", "timing-only"])]:
        with pytest.raises(ConfigError) as err:
            load_spec({**base, "network": table})
        assert all(w in str(err.value) for w in words), err.value
    with pytest.raises(ConfigError, match="the workload's"):
        load_spec({**base, "workload": {"name": "least_squares"}, "network": {"link": "1gbit", "d": 10}})


def test_links_queue_and_units():
    """One message: latency + bytes / rate, in units of time_scale seconds; n messages into one master take n b / r;
    a worker on the master's host crosses no link."""
    net = Network.of({"link": 1e6, "latency": 0.002, "slots": [2, 1, 1, 1], "d": 1000})   # 8000-byte messages
    for scale in (0.01, 0.001):
        links = net.bind(4, None, scale)     # worker 0 on the master's host, 1-3 one host each
        send = np.zeros(4)
        arrive = links.messages(send, np.arange(4), 8000)
        wire = 8000 / 1e6 / scale
        assert arrive[0] == 0.0
        np.testing.assert_allclose(np.sort(arrive[1:]), 0.002 / scale + wire * np.array([1, 2, 3]))
        np.testing.assert_allclose(links.plans(send, 8000), arrive)     # the plans: the same queues, outward


def test_all_reduce_cost():
    """MPICH's algorithms among the hosts: Rabenseifner for long vectors, with the extra step off powers of two."""
    alpha, rate, m = 0.001, 1e8, 8 * 100_001
    for hosts, p, extra in [(4, 4, 0), (3, 2, 1)]:
        links = Network.of({"link": rate, "latency": alpha, "slots": 2, "d": 1}).bind(2 * hosts - 1, None, 1.0)
        want = 2 * np.log2(p) * alpha + 2 * (p - 1) / p * m / rate + extra * 2 * (alpha + m / rate)
        assert links.all_reduce(m) == pytest.approx(want)
    one = Network.of({"link": rate, "slots": 9, "d": 1}).bind(8, None, 1.0)
    assert one.all_reduce(m) == 0.0
    assert links.all_reduce(800) == pytest.approx(np.log2(2) * (alpha + 800 / rate) + 2 * (alpha + 800 / rate))


def test_simulated_network():
    """On one host the network changes nothing, to the bit; across hosts sync waits for the plans and messages the
    links carry (constant delays: every number known), and DropCompute for its All-Reduce."""
    delay = {"name": "constant", "value": 1.0, "comm": 0.0}
    plain = simulate(make_scheme("sync", n=4), delay, None, iterations=3)
    local = simulate(make_scheme("sync", n=4), delay, None, iterations=3,
                     network={"link": "1gbit", "slots": 5, "d": 10**6})
    assert [r["end"] for r in local.records] == [r["end"] for r in plain.records]
    wide = simulate(make_scheme("sync", n=4), delay, None, iterations=3, time_scale=0.01,
                    network={"link": 8e8, "slots": 1, "d": 10**6})      # 8 MB a plan and a message: 1 unit each
    # worker i's plan leaves the master's link after the others before it and arrives at i + 1; it computes 1 unit
    # and its message takes 1 more: the last arrives at 4 + 1 + 1
    assert wide.records[0]["end"] == pytest.approx(6.0)
    drop = simulate(make_scheme("dropcompute", n=3, tau=10.0), delay, None, iterations=2, time_scale=0.01,
                    network={"link": 8e8, "slots": 1, "d": 10**6})
    # 4 ranks (the master's takes part, as on MPI) on 4 hosts: 2 (p - 1) / p m beta, m beta = 8 (d + 1) bytes' unit
    assert drop.records[0]["end"] == pytest.approx(1.0 + 2 * 3 / 4 * (10**6 + 1) / 10**6)


@pytest.mark.mpi
@pytest.mark.slow
def test_cluster_measure_writes_a_network_table(tmp_path):
    """`gradcode cluster measure` between two ranks (here both on this machine: the mechanics, not a real link)
    prints and writes a [network] table that a spec accepts."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost:1\nlocalhost:2\n")
    out = cli("cluster", "measure", "--hostfile", str(hostfile), "--bytes", str(1 << 20), "--out",
              str(tmp_path / "net.toml"), timeout=120)
    assert out.returncode == 0, out.stderr
    table = tomllib.loads((tmp_path / "net.toml").read_text())["network"]
    assert out.stdout == (tmp_path / "net.toml").read_text()
    network = Network.of({**table, "d": 10})
    assert network.link > 1e6 and network.latency > 0 and network.slots == (1, 2)


@pytest.mark.slow
def test_regime_sweep_over_bytes_carries_the_network(tmp_path):
    """examples/regimes_network.toml: 4 x 3 cells over [network] d and the added delay; a reduced sweep (two sizes,
    sync, 3 iterations) passes the table to every run and its report states it."""
    import copy
    import csv
    from pathlib import Path

    from gradcode.study.sweep import expand, read_sweep
    from gradcode.study.sweep_run import sweep

    raw = read_sweep(Path(__file__).resolve().parents[1] / "examples" / "regimes_network.toml")
    assert len(expand(raw).cells) == 12
    small = copy.deepcopy(raw)
    small["sweep"] = {"network.d": [1000, 1000000]}
    small["schemes"] = small["schemes"][:1]
    small["run"].update(iterations=3, seeds=[0])
    sweep(small, tmp_path / "out", jobs=1, progress=False)
    rows = {r["network.d"]: float(r["mean_iteration_time"])
            for r in csv.DictReader(open(tmp_path / "out" / "sweep.csv"))}
    # the plans alone: 6 of 8 MB (workers 2-7 are off the master's host) through its link at 1.25 MB a unit
    assert rows["1000000"] > rows["1000"] + 6 * 6.4, rows
    assert "Network: links of 1000 Mbit/s" in (tmp_path / "out" / "cells" / "000" / "report.md").read_text()


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("scheme", [{"name": "sync"}, {"name": "dropcompute", "tau": 10.0, "M": 2, "warmup": 0}])
def test_mpi_ideal_uses_the_network(scheme, tmp_path):
    """The MPI runtime's ideal time is the simulator's with the same [network]: 50 ms latency a transfer (2.5 units)
    shows in both, to rounding (constant delays: every iteration lasts the same on both clocks)."""
    spec = mpi_spec(scheme, n=3, iterations=3, delay={"name": "constant", "value": 1.0, "comm": 0.0})
    spec["network"] = {"link": 1e8, "latency": 0.05, "slots": 1}
    proc, out = run_mpi(spec, tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ideal = json.loads((out / "summary.json").read_text())["ideal_total_time"]
    simulated = simulate_spec(spec).summary["total_time"]
    assert simulated > 3 * (1.0 + 2.5)      # the latency is in the model: at least one transfer an iteration
    assert ideal == pytest.approx(simulated, rel=1e-6)
