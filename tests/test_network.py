"""Bytes in the model: what each message carries, the ``[network]`` table, and what links do to an iteration."""

import pytest

from gradcode.schemes import make_scheme


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
