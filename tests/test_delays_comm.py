"""Load-independent communication of any shape (``comm_dist``): its mean is ``comm``, the exponential draws are
unchanged, bad distributions are refused; ``exponential`` takes its mean.
"""

from __future__ import annotations

import numpy as np
import pytest

from gradcode.delays import make_delay
from gradcode.errors import ConfigError

MIXTURE = {"name": "mixture", "components": [{"weight": 1, "model": "constant"}]}


@pytest.mark.parametrize("dist", ["exponential", "pareto", "lognormal", "bimodal",
                                  {"name": "exponential", "mean": 7.0}, {"name": "pareto", "alpha": 3.0}])
def test_comm_dist_has_mean_comm(dist):
    d = make_delay({"name": "constant", "comm": 2.0, "comm_dist": dist})
    assert d.mean() == pytest.approx(3.0)
    _, comm = d.sample(0, np.arange(2_500), 16)
    assert comm.mean() == pytest.approx(2.0, rel=0.03 if dist != "pareto" else 0.1)
    assert comm.std() > 0.1


def test_exponential_comm_draws_unchanged():
    """The exponential communication draws what it always drew: -comm log(1 - u) of the comm stream."""
    from gradcode.delays._crn import STREAM_COMM, uniforms

    _, comm = make_delay("constant", comm=0.7, comm_dist="exponential").sample(3, np.arange(4), 5)
    u = uniforms(3, np.arange(4), STREAM_COMM, (), (5,))
    np.testing.assert_array_equal(comm, -0.7 * np.log1p(-u))


@pytest.mark.parametrize("bad", ["gamma", MIXTURE, {"name": "pareto", "alpha": 0.9}, 3])
def test_bad_comm_dist(bad):
    with pytest.raises(ConfigError, match="comm_dist"):
        make_delay({"name": "constant", "comm": 1.0, "comm_dist": bad})


def test_exponential_accepts_mean():
    assert make_delay("exponential", mean=4.0).mu == 0.25
    assert make_delay("exponential", mean=4.0).mean() == pytest.approx(4.0)
    with pytest.raises(ConfigError, match="either mu"):
        make_delay("exponential", mean=4.0, mu=1.0)
