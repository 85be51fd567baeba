"""Repetition codes: every worker sends the plain sum of its partitions (``B`` is 0/1, ``n_parts = n``).

Uncoded (the identity), fractional repetition (groups of ``s + 1`` workers hold the same ``s + 1`` partitions,
Tandon et al., ICML 2017) and ErasureHead (the same layout, stopped early: an approximate code). The group layout
decodes without floating-point algebra: one message per group. Cyclic repetition, whose coefficients are not all
1, is in :mod:`gradcode.codes.cyclic`. See ``docs/references.md#gradient-codes``.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError, NotDecodableError
from ._base import Code


class Uncoded(Code):
    r"""No coding: ``B = I_n``, worker ``i`` computes partition ``i``; exact only when every worker answers.

    Only ``s = 0`` is accepted (the identity tolerates no straggler). The exact decode is ``a = 1`` on all
    workers.

    Examples
    --------
    >>> import numpy as np, gradcode
    >>> n, s = 4, 0
    >>> code = gradcode.make_code("uncoded", n, s)
    >>> B = code.B; B.shape
    (4, 4)
    >>> partials = np.arange(4.0).reshape(4, 1)
    >>> F = [0, 1, 2, 3]
    >>> float(code.combine(code.encode(partials)[F], F)[0])
    6.0
    """

    name = "uncoded"
    description = "identity, s = 0: every worker one partition, wait for all (exact)"
    early_decoding = False   # n - s = n: every worker

    def _check(self) -> None:
        if self.s != 0:
            raise ConfigError(
                f"uncoded tolerates no stragglers: s must be 0, got s = {self.s}; use a code such as "
                "'fractional_repetition' or 'cyclic_repetition' for s > 0"
            )

    def _build(self, rng: np.random.Generator) -> np.ndarray:
        return np.eye(self.n)

    def _exact_weights(self, F: np.ndarray) -> np.ndarray:
        if len(F) < self.n:
            raise self._not_decodable(F)
        return np.ones(self.n)


class FractionalRepetition(Code):
    r"""Fractional repetition (Tandon, Lei, Dimakis, Karampatziakis, "Gradient Coding", ICML 2017).

    Needs ``(s + 1) | n``. Workers form ``n / (s + 1)`` groups of ``s + 1`` consecutive workers; every member
    of group ``g`` holds partitions ``g(s+1), ..., g(s+1) + s`` with coefficient 1:

        B[i, j] = 1  if  floor(i / (s+1)) == floor(j / (s+1))  else 0,      n_parts = n.

    Decode (no linear algebra): from each group take its lowest-indexed responder with weight 1 (all members
    send the same message, so which one is immaterial; this choice makes the weights a function of the set).
    Any ``s`` stragglers leave every group covered, and so does any larger set of stragglers that spares one
    worker per group. A set that leaves a group uncovered raises :class:`NotDecodableError` naming the group
    and its workers.

    Examples
    --------
    >>> import numpy as np, gradcode
    >>> n, s = 6, 2
    >>> code = gradcode.make_code("fractional_repetition", n, s)
    >>> code.B.astype(int)
    array([[1, 1, 1, 0, 0, 0],
           [1, 1, 1, 0, 0, 0],
           [1, 1, 1, 0, 0, 0],
           [0, 0, 0, 1, 1, 1],
           [0, 0, 0, 1, 1, 1],
           [0, 0, 0, 1, 1, 1]])
    >>> partials = np.arange(6.0).reshape(6, 1)
    >>> F = [2, 4]                          # 4 stragglers, yet both groups are covered
    >>> float(code.combine(code.encode(partials)[F], F)[0])
    15.0
    >>> code.decode(F).tolist()
    [0.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    """

    name = "fractional_repetition"
    description = "groups of s + 1 workers share s + 1 partitions; decode without algebra (exact)"
    early_decoding = True   # one responder per group is enough, often fewer than n - s

    def _check(self) -> None:
        g = self.s + 1
        if self.n % g:
            below = (self.n // g) * g
            above = below + g
            valid = ([f"n = {below}"] if below > 0 else []) + [f"n = {above}"]
            raise ConfigError(
                f"{self.name} needs (s + 1) to divide n: s + 1 = {g} does not divide n = {self.n}; "
                f"nearest valid: {' or '.join(valid)} (or choose s with s + 1 dividing {self.n})"
            )

    def _build(self, rng: np.random.Generator) -> np.ndarray:
        group = np.arange(self.n) // (self.s + 1)
        return (group[:, None] == group[None, :]).astype(float)

    def _first_per_group(self, F: np.ndarray) -> np.ndarray:
        """Weight 1 on the lowest-indexed responder of every covered group, 0 elsewhere."""
        # F is sorted, so the first index of each group in F is its lowest-indexed responder. Any member would do
        # (their messages are identical); the lowest keeps the weights a function of the set, whatever the order.
        _, first = np.unique(F // (self.s + 1), return_index=True)
        a = np.zeros(len(F))
        a[first] = 1.0
        return a

    def _exact_weights(self, F: np.ndarray) -> np.ndarray:
        g = self.s + 1
        uncovered = np.setdiff1d(np.arange(self.n // g), F // g)
        if uncovered.size:
            raise self._uncovered(F, uncovered)
        return self._first_per_group(F)

    def _uncovered(self, F: np.ndarray, uncovered: np.ndarray) -> NotDecodableError:
        g = self.s + 1
        groups = {int(u): list(range(u * g, (u + 1) * g)) for u in uncovered}
        missing = tuple(int(u) * g for u in uncovered)
        return NotDecodableError(
            f"fractional_repetition(n={self.n}, s={self.s}): no responder in group(s) "
            + "; ".join(f"{u} (workers {w})" for u, w in groups.items())
            + f"; one answer from each of these groups is needed (got {len(F)} responders)",
            needed=len(F) + len(groups),
            missing=missing,
        )


class ErasureHead(FractionalRepetition):
    """ErasureHead: the fractional-repetition layout, decoded by summing one message per covered group.

    Needs ``(s+1) | n``; ``n_parts = n``. Workers ``g(s+1) .. g(s+1)+s`` form group ``g`` and all send
    ``sum_{j = g(s+1)}^{g(s+1)+s} g_j``. The master stops early (a deadline or a count, decided by the scheme)
    and sums the first responder of every covered group with weight 1; uncovered groups are simply missing
    (biased, a small noise floor). This is also the optimal decoder for the layout: a group's partitions
    appear only in that group's identical rows, so a covered group's coefficients can be made exactly 1 and an
    uncovered group's are 0 whatever the weights. Source: Wang, Charles, Papailiopoulos, "ErasureHead:
    Distributed gradient descent without delays using approximate gradient coding" (1901.09671).

        >>> from gradcode import make_code
        >>> code = make_code("erasurehead", n=6, s=1)
        >>> code.decode([1, 2, 3], "one_step").tolist()      # groups {0,1}, {2,3} covered, {4,5} missing
        [0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
        >>> round(code.residual([1, 2, 3]) ** 2 * code.n_parts, 6)  # two partitions missing
        2.0
    """

    name = "erasurehead"
    description = "fractional repetition, stop early and sum one message per covered group (approximate)"
    exact = False

    _optimal_weights = FractionalRepetition._first_per_group
    _one_step_weights = FractionalRepetition._first_per_group
