"""Output folders: checked before any work starts, and written by one process at a time.

:func:`writable_folder` turns ``--out`` naming a file, a folder under a file or a read-only place into a
:class:`ConfigError` before a simulation or an MPI job starts (not a traceback after it).

:class:`FolderLock` is an exclusive ``fcntl.flock`` on ``FOLDER/.lock``, held by the process that writes the folder
for as long as it writes; the file names the holder's pid. A second writer (a resume started while an earlier
command, or a child it left behind, is still writing) gets :class:`FolderBusy` naming the folder and that pid.
The lock belongs to the open file, not to the process: a child started with the descriptor (``pass_fds``) and
``GRADCODE_LOCK_FD`` in its environment holds the same lock, and adopts it instead of taking a second one, so the
folder stays locked until the last process of the run has ended, even if its parent was killed.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

from ..errors import ConfigError, GradcodeError

LOCK_NAME = ".lock"
LOCK_ENV = "GRADCODE_LOCK_FD"


class FolderBusy(GradcodeError):
    """Another live process is writing this folder."""


def writable_folder(path: str | Path, what: str = "--out") -> Path:
    """``path`` as a folder that exists (created if needed) and accepts new files; :class:`ConfigError` if not."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{what} {str(path)!r} is a file, not a folder; name a folder (it is created if needed)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as err:
        raise ConfigError(f"{what} {str(path)!r} cannot be written: {err.strerror or err}; name a folder you can "
                          "write to") from None
    return path


class FolderLock:
    """An exclusive lock on ``folder`` for the lifetime of a run (``with FolderLock(folder): ...``)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.fd: int | None = None
        self.adopted = False

    def acquire(self) -> FolderLock:
        self.folder.mkdir(parents=True, exist_ok=True)
        inherited = _inherited(self.path)
        if inherited is not None:       # our parent holds it and handed it down: the same lock
            self.fd, self.adopted = inherited, True
            os.write(inherited, f"{os.getpid()}\n".encode())   # O_APPEND: the holders, parent first
            return self
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            holder = _read_pid(fd)
            os.close(fd)
            if err.errno not in (errno.EWOULDBLOCK, errno.EACCES, errno.EAGAIN):
                raise
            raise FolderBusy(f"{self.folder} is being written by another gradcode process (pid {holder}); wait for "
                             "it to finish or stop it, then run the command again") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return self

    def release(self) -> None:
        """Let go of the lock (the lock file stays: deleting it would let a third process lock a new file)."""
        if self.fd is not None and not self.adopted:
            os.close(self.fd)
        self.fd = None

    def child_env(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` plus what a child needs to adopt this lock (start it with ``pass_fds=(lock.fd,)``)."""
        return {**env, LOCK_ENV: str(self.fd)}

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _inherited(path: Path) -> int | None:
    """The descriptor named by ``$GRADCODE_LOCK_FD`` if it is open on ``path`` (the same file), else ``None``."""
    value = os.environ.get(LOCK_ENV, "")
    if not value.isdigit():
        return None
    try:
        mine, theirs = os.fstat(int(value)), os.stat(path)
    except OSError:
        return None
    return int(value) if (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino) else None


def _read_pid(fd: int) -> str:
    """The live holders named in the lock file (a killed parent's pid is left out), e.g. ``"812"``."""
    try:
        pids = [int(x) for x in os.pread(fd, 256, 0).decode().split() if x.isdigit()]
    except (OSError, UnicodeDecodeError):
        return "unknown"
    return ", ".join(str(p) for p in pids if _alive(p)) or "unknown"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that it is there whole or not at all: into ``PATH.tmp``, then renamed (atomic on
    one file system). For the markers that say a piece of work is done: a process killed while writing one must not
    leave a truncated marker, which a resume would read as "not done" after another process had seen it there."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def remove_results(folder: Path, names) -> None:
    """Delete the files or folders ``names`` of ``folder`` that exist (a results folder being replaced)."""
    for name in names:
        path = folder / name
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)


def remove_folders(parent: Path, keep) -> None:
    """Delete every sub-folder of ``parent`` whose name ``keep(name)`` rejects, each under its :class:`FolderLock`
    (never what a live process is writing)."""
    for folder in sorted(parent.iterdir()) if parent.is_dir() else []:
        if folder.is_dir() and not keep(folder.name):
            with FolderLock(folder):
                shutil.rmtree(folder)
