"""Progress bars: tqdm on a terminal, plain lines in a log.

tqdm redraws its bar with carriage returns, which a terminal overwrites in place but a log file or a pipe keeps, one
redraw after another on a single endless line. When the stream is not a TTY, :class:`PlainProgress` writes a
newline-terminated line instead, at each tenth of the total (and at the end), so a log stays short and readable.
"""

from __future__ import annotations

import sys
from typing import TextIO

STEPS = 10   # plain lines per bar: one at each tenth of the total


def progress_bar(total: int, *, desc: str | None = None, unit: str = "it", initial: int = 0, disable: bool = False,
                 leave: bool = True, file: TextIO | None = None):
    """A bar with tqdm's ``update`` / ``set_postfix_str`` / ``close`` on ``file`` (default stderr): tqdm when the
    stream is a terminal, :class:`PlainProgress` otherwise."""
    stream = sys.stderr if file is None else file
    if disable or not _is_tty(stream):
        return PlainProgress(total, desc=desc, unit=unit, initial=initial, disable=disable, file=stream)
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, initial=initial, leave=leave, file=stream)


def _is_tty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):   # no isatty, or a closed stream
        return False


class PlainProgress:
    """tqdm's interface, writing ``desc: done/total unit (postfix)`` lines without carriage returns."""

    def __init__(self, total: int, *, desc: str | None = None, unit: str = "it", initial: int = 0,
                 disable: bool = False, file: TextIO | None = None):
        self.total, self.n, self.desc, self.unit = total, initial, desc, unit
        self.disable, self.file = disable, file
        self.postfix = ""
        self._shown = self._step()
        if initial:   # a resumed job: say how much was done before (tqdm shows it in its first bar)
            self._line("already done")

    def _step(self) -> int:
        return self.n * STEPS // self.total if self.total else 0

    def update(self, n: int = 1) -> None:
        self.n += n
        step = self._step()
        if step > self._shown or self.n >= self.total:
            self._shown = step
            self._line()

    def set_postfix_str(self, s: str) -> None:
        self.postfix = s

    def _line(self, postfix: str | None = None) -> None:
        if self.disable:
            return
        head = f"{self.desc}: " if self.desc else ""
        postfix = self.postfix if postfix is None else postfix
        tail = f" ({postfix})" if postfix else ""
        print(f"{head}{self.n}/{self.total} {self.unit}{tail}", file=self.file or sys.stderr, flush=True)

    def close(self) -> None:
        """Nothing to clear: every line is already complete."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
