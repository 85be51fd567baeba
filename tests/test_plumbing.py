"""Plumbing: child processes die with their parent, one writer per folder (a lock with the holder's pid, handed to
a child), completion markers written whole or not at all.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import ENV, alive, wait_dead

PARENT = """
import sys, time
from gradcode.plumbing.children import start_child
child = start_child([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)
"""


def test_child_dies_when_its_parent_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=ENV)
    child = int(parent.stdout.readline())
    assert alive(child)
    assert os.getpgid(child) == child          # its own process group: a terminal's Ctrl-C reaches the parent only
    parent.kill()
    parent.wait()
    assert wait_dead([child], 5) == []


def test_a_second_writer_gets_the_pid_of_the_first(tmp_path):
    from gradcode.plumbing.outdir import FolderBusy, FolderLock

    folder = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                               "from gradcode.plumbing.outdir import FolderLock\n"
                               f"FolderLock({str(folder)!r}).acquire(); print('locked', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(FolderBusy, match=rf"{folder}.*pid {holder.pid}"):
            FolderLock(folder).acquire()
    finally:
        holder.kill()
        holder.wait()
    with FolderLock(folder):                   # the holder died: the lock died with it
        pass


def test_a_child_handed_the_lock_adopts_it(tmp_path):
    from gradcode.plumbing.outdir import FolderLock

    folder = tmp_path / "run"
    with FolderLock(folder) as lock:
        code = ("from gradcode.plumbing.outdir import FolderLock\n"
                f"assert FolderLock({str(folder)!r}).acquire().adopted\n")
        proc = subprocess.run([sys.executable, "-c", code], env=lock.child_env(ENV), pass_fds=(lock.fd,))
        assert proc.returncode == 0
        other = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True)
        assert other.returncode != 0 and "FolderBusy" in other.stderr


def test_a_done_marker_is_whole_or_absent(tmp_path, monkeypatch):
    """Completion markers are written whole or not at all (``outdir.write_whole``): a writer killed mid-write must
    not leave a truncated marker (the sweep's resume once redid a cell whose marker another process had seen)."""
    from gradcode.plumbing import outdir

    marker = tmp_path / "CELL_COMPLETE"
    outdir.write_whole(marker, '{"fingerprint": "a"}\n')
    assert marker.read_text() == '{"fingerprint": "a"}\n' and not list(tmp_path.glob("*.tmp"))

    def killed(src, dst):          # the process dies after writing the text, before the rename
        raise KeyboardInterrupt

    monkeypatch.setattr(outdir.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        outdir.write_whole(marker, '{"fingerprint": "b"}\n')
    with pytest.raises(KeyboardInterrupt):
        outdir.write_whole(tmp_path / "COMPLETE", "{}\n")
    assert marker.read_text() == '{"fingerprint": "a"}\n'     # the old marker, whole
    assert not (tmp_path / "COMPLETE").exists()                 # no marker, not an empty one
