"""Things that several test files read and that take long to make (a trained run, an
export), made once per test run and shared by every pytest-xdist worker.

The first worker to need one makes it while holding a file lock; the others wait for it and
read that one. It is made in a staging folder renamed into place when whole, so that a worker
that crashed half-way leaves nothing that the next one would take for the finished thing.
"""

import fcntl
import os
import shutil


def common_folder(tmp_path_factory):
    """The run's temporary folder: the one all xdist workers of a run share, else the
    single process's own."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def build_once(tmp_path_factory, name, write):
    """The folder `name` in the run's common temporary folder, made by `write(folder)` unless
    a worker of this run already made it; returns its path."""
    folder = common_folder(tmp_path_factory) / name
    with open(folder.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not folder.exists():
                staging = folder.with_name(f"{name}.staging")
                shutil.rmtree(staging, ignore_errors=True)  # a crashed worker's half
                staging.mkdir()
                write(staging)
                staging.rename(folder)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return folder
