"""Things that several test files read and that take long to make (a trained run, an
export), made once per test run and shared by every pytest-xdist worker.

The first process to need one makes it while holding a file lock; the others wait for it and
read that one. It is made in a staging folder renamed into place when whole, so that a worker
that crashed half-way leaves nothing that the next one would take for the finished thing.

One process per run (the first xdist worker, or the only process) also starts a background
process that makes them at the start of the run (`start_in_background`, from tests/conftest.py):
a worker that needs one later finds it made, or waits only for the rest of it, instead of one
core idling on the lock while the other makes it.
"""

import fcntl
import os
import shutil
import subprocess
import sys

# name: (the fixture that reads it, the module whose `_write(folder)` makes it), in the order the
# background makes them: the quickstart run first, the longest and read by the files that come
# first.
BUILDS = {
    "quickstart": ("quickstart_run", "tests._quickstart_fixtures"),
    "shared_export": ("shared_export", "tests._export_fixtures"),
}


def common_folder(tmp_path_factory):
    """The run's temporary folder: the one all xdist workers of a run share, else the
    single process's own."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def build_once(tmp_path_factory, name, write):
    """The folder `name` in the run's common temporary folder, made by `write(folder)` unless
    a process of this run already made it; returns its path."""
    return build_once_in(common_folder(tmp_path_factory), name, write)


def build_once_in(common, name, write):
    """`build_once` in the folder `common`."""
    folder = common / name
    with open(folder.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not folder.exists():
                staging = folder.with_name(f"{name}.staging")
                shutil.rmtree(staging, ignore_errors=True)  # a crashed process's half
                staging.mkdir()
                write(staging)
                staging.rename(folder)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return folder


def needed_builds(items):
    """The names in BUILDS that the collected test `items` read, in BUILDS' order."""
    wanted = set()
    for item in items:
        wanted.update(getattr(item, "fixturenames", ()))
    return [name for name, (fixture, _) in BUILDS.items() if fixture in wanted]


def start_in_background(tmp_path_factory, names):
    """Starts a process that makes `names` (build_once_in, one after the other) in the run's
    common folder; returns it (None when there is nothing to make). Its output goes to
    background-builds.log there."""
    if not names:
        return None
    from tests._training_fixtures import REPO, subprocess_env

    common = common_folder(tmp_path_factory)
    with open(common / "background-builds.log", "w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tests._shared_builds", str(common), *names],
            cwd=REPO,
            env=subprocess_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # so that stopping it stops the quickstart it started
        )


def stop(process):
    """Stops a background build that is still running (a run that ended before needing it);
    what it left half made is a staging folder, which the next build removes."""
    if process is not None and process.poll() is None:
        os.killpg(process.pid, 9)
        process.wait()


def _main(common, names):
    import importlib
    import pathlib

    from tests import _tensorflow_settings

    # The test processes' settings (tests/conftest.py), so that what is made here is what a
    # worker would have made.
    _tensorflow_settings.for_test_process()
    _tensorflow_settings.turn_off_grappler()
    for name in names:
        _, module = BUILDS[name]
        build_once_in(pathlib.Path(common), name, importlib.import_module(module)._write)


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2:])
