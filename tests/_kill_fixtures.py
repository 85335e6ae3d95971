"""Shared machinery of the kill-and-resume tests (tests/test_training_resume.py, one device;
tests/test_training_strategy_resume.py, MirroredStrategy): `train` runs in processes of their
own that a test kills with SIGKILL and restarts with the same command.

To spare each process the TensorFlow import (most of a start-up), a launcher (itself forked
from tests/_preloaded_python.py's server) imports once and forks one child per line of its
stdin (the line names the config; empty: the launcher's default); it forks before any
TensorFlow op has run, so each child starts TensorFlow's runtime afresh, as a new process
does, and can still split the CPU into logical devices. One test-only hook: when the file
PAUSE_REQUEST exists, the next checkpoint save stops between writing its files and listing
them in the `checkpoint` state file (the moment a kill during a write matters) and waits
there to be killed.

The kill schedule (which kill comes when) is drawn anew in every test session from a seed
that each test prints (shown with a failure); `KT_KILL_SEED=N pytest ...` replays schedule N.

Nothing here waits without a deadline: a run that neither reports nor ends within the
launcher's `deadline` is killed and the test fails with a message that says so, instead of
holding the suite until CI gives up.
"""

import os
import pathlib
import queue
import random
import signal
import subprocess
import textwrap
import threading
import time

import pytest

from keras_transformer.runs.checkpoints import list_checkpoints
from tests import _preloaded_python
from tests._tensorflow_settings import CHILD_PRELUDE
from tests._training_fixtures import PYTHON, REPO, subprocess_env

RUNNER = CHILD_PRELUDE + textwrap.dedent("""
    import os, sys, time
    from tensorflow.python.checkpoint import checkpoint_management

    default_config, pause_request, logs = sys.argv[1:4]
    Manager = checkpoint_management.CheckpointManager
    save, record_state = Manager.save, Manager._record_state

    def pausing_save(self, *args, **kwargs):
        # Asked before the save starts: the whole save is the one to interrupt.
        self.pause_in_this_save = os.path.exists(pause_request)
        return save(self, *args, **kwargs)

    def pausing_record_state(self):
        if getattr(self, "pause_in_this_save", False):
            with open(pause_request + ".paused", "w") as file:
                file.write(self._latest_checkpoint)
            time.sleep(600)
        record_state(self)

    Manager.save, Manager._record_state = pausing_save, pausing_record_state
    from keras_transformer.cli import main
    import keras_transformer.data, keras_transformer.model, keras_transformer.training.trainer

    for number, line in enumerate(sys.stdin):
        config = line.strip() or default_config
        pid = os.fork()
        if pid == 0:
            log = os.path.join(logs, f"run{number}")
            with open(log + ".out", "w") as out, open(log + ".err", "w") as err:
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
            code = 1
            try:
                code = main(["train", "--config", config]) or 0
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        print(pid, flush=True)
        print(os.waitpid(pid, 0)[1], flush=True)
""")


def _kill_seed():
    text = os.environ.get("KT_KILL_SEED")
    return int(text) if text else random.SystemRandom().randrange(2**31)


# The seed of the kill schedules: KT_KILL_SEED when set, else a new one per test process.
KILL_SEED = _kill_seed()


@pytest.fixture(autouse=True)
def show_kill_seed():
    """Prints the seed in every test of a module that imports this fixture (pytest shows a
    failed test's output), with the setting that replays its schedule."""
    print(f"kill schedule seed {KILL_SEED}: replay it with KT_KILL_SEED={KILL_SEED}")


class Launcher:
    """Starts runs (forked children of the launcher), one at a time, and reports on them.

    Args:
        directory: where the launcher keeps its script and the runs' logs.
        config: the config file a run trains on by default.
        pause_request: the file whose existence pauses the next checkpoint save.
        deadline: seconds a run may take to start, or to end once waited for, before it is
            killed and the test fails.
        prelude: code the launcher runs first (a test's patch of the library, in every run).
        env: environment variables of the runs (TF_CONFIG of a worker).
    """

    def __init__(self, directory, config, pause_request, deadline=240, prelude="", env=None):
        directory.mkdir(parents=True, exist_ok=True)
        runner = directory / "runner.py"
        runner.write_text(textwrap.dedent(prelude) + RUNNER)
        self.logs = directory / "logs"
        self.logs.mkdir()
        self.stderr = open(directory / "launcher.err", "w")
        self.process = _preloaded_python.Popen(
            [PYTHON, str(runner), config, str(pause_request), str(self.logs)],
            cwd=REPO,
            env=subprocess_env(**(env or {})),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        self.pause_request = pathlib.Path(pause_request)
        self.deadline = deadline
        self.runs = 0
        self.pid = None
        # The launcher's lines, read by a thread so that each read can have a deadline.
        self._lines = queue.Queue()
        threading.Thread(target=self._read_lines, daemon=True).start()

    def _read_lines(self):
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put("")  # the launcher ended

    def _line(self, waiting_for):
        """The launcher's next line; fails the test (killing the run) after `deadline` s."""
        try:
            return self._lines.get(timeout=self.deadline)
        except queue.Empty:
            pass
        if self.pid is not None and self.alive():
            os.kill(self.pid, signal.SIGKILL)
        self.process.kill()
        run = "" if self.pid is None else f" (run {self.number}, pid {self.pid}, now killed)"
        stderr = "" if self.pid is None else self.log(self.number, "err")[-3000:]
        raise AssertionError(
            f"no {waiting_for} within the launcher's deadline of {self.deadline} s{run}: "
            f"a hung training process?\n{stderr}\nlauncher: {self.log(None, 'err')}"
        )

    def start(self, config=""):
        """Starts `train` on `config` (default: the launcher's)."""
        self.process.stdin.write(f"{config}\n")
        self.process.stdin.flush()
        line = self._line("start of a run")
        assert line.strip(), "the launcher failed: " + self.log(None, "err")
        self.pid, self.number = int(line), self.runs
        self.runs += 1
        return self

    def alive(self):
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def kill(self):
        os.kill(self.pid, signal.SIGKILL)
        return self.wait()

    def wait(self):
        """The run's wait status (0: exit code 0)."""
        line = self._line("end of the run")
        assert line.strip(), "the launcher failed: " + self.log(None, "err")
        return int(line)

    def log(self, number, stream):
        if number is None:
            self.stderr.flush()
            return (self.logs.parent / "launcher.err").read_text()[-3000:]
        return (self.logs / f"run{number}.{stream}").read_text()

    def close(self):
        if self.pid is not None and self.alive():  # a run left behind by a failed assertion
            os.kill(self.pid, signal.SIGKILL)
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.stderr.close()


def kill_runs(launcher, modes, rng, checkpoint_dir, new_checkpoints=(1, 3), startup=(0.3, 2.0)):
    """Starts a run per mode, one after the other, and kills each with SIGKILL.

    Modes: "startup", a random time (`startup` seconds) after the start, before or while it
    restores; "steps", a random time after a random number (`new_checkpoints`) of new
    checkpoints; "write", inside the next checkpoint write after those (the pause hook).

    Returns:
        One dict per kill: `mode`, `resumed_from` (the newest checkpoint at the start),
        `listed` (the checkpoints listed after the kill); for "write" also `paused_in` (the
        checkpoint being written) and `unlisted_files` (whether its files were there).
    """
    pause_request = launcher.pause_request
    paused = pause_request.with_name(pause_request.name + ".paused")
    kills = []
    for mode in modes:
        before = checkpoint_steps(checkpoint_dir)
        resume_step = before[-1] if before else 0
        run = launcher.start()
        if mode == "startup":
            time.sleep(rng.uniform(*startup))
        else:
            target = resume_step + rng.randint(*new_checkpoints)
            alive = wait_for(
                lambda target=target: (checkpoint_steps(checkpoint_dir) or [0])[-1] >= target,
                run,
            )
            assert alive, "the run ended before its kill: " + launcher.log(run.number, "err")
            if mode == "write":
                pause_request.write_text("pause")
                alive = wait_for(paused.exists, run)
                assert alive, "the run ended before its kill: " + launcher.log(run.number, "err")
                time.sleep(0.05)
            else:
                time.sleep(rng.uniform(0.0, 0.3))
        assert run.alive(), launcher.log(run.number, "err")[-3000:]
        assert run.kill() == signal.SIGKILL  # killed by the signal, not ended
        kill = {
            "mode": mode,
            "resumed_from": resume_step,
            "listed": checkpoint_steps(checkpoint_dir),
        }
        if mode == "write":
            kill["paused_in"] = paused.read_text()
            kill["unlisted_files"] = os.path.exists(kill["paused_in"] + ".index")
            pause_request.unlink()
            paused.unlink()
        kills.append(kill)
    return kills


def checkpoint_steps(checkpoint_dir):
    """The steps of the listed checkpoints in `checkpoint_dir` (none when it is absent)."""
    if not os.path.isdir(checkpoint_dir):
        return []
    return [int(path.rsplit("-", 1)[1]) for path in list_checkpoints(checkpoint_dir)]


def wait_for(predicate, run, seconds=300):
    """Waits until `predicate()` holds (True) or `run` ends (False)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        if not run.alive():
            return False
        time.sleep(0.01)
    raise AssertionError(f"the training process made no progress in {seconds} s")
