"""tests/_preloaded_python.py: a child forked from the preloaded server behaves as the same
command run by `subprocess.run` (the reference), and calls a fork cannot serve faithfully run
as new processes."""

import os
import subprocess
import sys

import pytest

from tests import _preloaded_python
from tests._training_fixtures import subprocess_env

PROGRAMS = {
    "exit status and both streams": (
        ["-c", "import sys; print('out', sys.argv); print('err', file=sys.stderr); sys.exit(3)"],
        {},
    ),
    "an uncaught error": (["-c", "raise ValueError('no')"], {}),
    "stdin, cwd and environment": (
        ["-c", "import os, sys; print(sys.stdin.read(), os.getcwd(), os.environ['KT_X'])"],
        {"input": "given", "KT_X": "set"},
    ),
    "atexit and a non-daemon thread at exit": (
        [
            "-c",
            "import atexit, threading, time\n"
            "atexit.register(print, 'atexit')\n"
            "threading.Thread(target=lambda: (time.sleep(0.5), print('thread'))).start()",
        ],
        {},
    ),
    "a script with its own folder on sys.path": (
        ["{script}", "one", "two"],
        {},
    ),
}


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    folder = tmp_path_factory.mktemp("preloaded")
    (folder / "neighbour.py").write_text("NAME = 'neighbour'\n")
    path = folder / "main.py"
    path.write_text(
        "import sys\nimport neighbour\n"
        "print(__name__, neighbour.NAME, sys.argv[1:])\n"
        "if __name__ == '__main__':\n    sys.exit(7)\n"
    )
    return path


def _run(runner, arguments, settings, cwd):
    settings = dict(settings)
    text_input = settings.pop("input", None)
    return runner(
        [sys.executable, *arguments],
        input=text_input,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=subprocess_env(**settings),
    )


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_forked_child_behaves_as_a_new_process(name, script, tmp_path):
    arguments, settings = PROGRAMS[name]
    arguments = [argument.format(script=script) for argument in arguments]
    forked = _run(_preloaded_python.run, arguments, settings, tmp_path)
    new = _run(subprocess.run, arguments, settings, tmp_path)
    assert (forked.returncode, forked.stdout) == (new.returncode, new.stdout)
    # The traceback's frames differ (the server's runpy frames); its last line does not.
    assert forked.stderr.splitlines()[-1:] == new.stderr.splitlines()[-1:]


def test_a_child_starts_tensorflows_runtime_anew_and_its_cpu_is_counted():
    _preloaded_python.run([sys.executable, "-c", "pass"], env=subprocess_env())  # server up
    before = _preloaded_python.children_cpu()
    code = (
        "import resource\n"
        "import tensorflow as tf\n"
        "cpu = tf.config.list_physical_devices('CPU')[0]\n"
        "tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)\n"
        "print(len(tf.config.list_logical_devices('CPU')), int(tf.constant(6) * 7))\n"
        "usage = resource.getrusage(resource.RUSAGE_SELF)\n"
        "print(usage.ru_utime + usage.ru_stime)"
    )
    result = _preloaded_python.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env()
    )
    assert result.returncode == 0, result.stderr[-2000:]
    devices, answer, own_cpu = result.stdout.split()
    assert (devices, answer) == ("2", "42")  # logical devices can still be set up
    # The time report sees at least what the child measured of itself.
    assert _preloaded_python.children_cpu() - before >= float(own_cpu) > 0


def test_a_timeout_kills_the_child_and_a_signal_is_a_negative_status():
    with pytest.raises(subprocess.TimeoutExpired):
        _preloaded_python.run(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            env=subprocess_env(),
            timeout=1,
        )
    killed = _preloaded_python.run(
        [sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"], env=subprocess_env()
    )
    assert killed.returncode == -9


@pytest.mark.parametrize(
    "arguments, env",
    [
        (["-X", "utf8", "-c", "pass"], {}),  # an interpreter option
        (["-c", "pass"], {"KERAS_BACKEND": "jax"}),  # another Keras backend
    ],
)
def test_what_a_fork_cannot_serve_is_not_requested(arguments, env):
    assert _preloaded_python._request([sys.executable, *arguments], None, env) is None


def test_import_settings_choose_the_server_and_runtime_ones_do_not():
    base = subprocess_env()
    key = _preloaded_python._import_key
    assert key({**base, "TF_CONFIG": "{}", "KT_DATA_DIR": "/data"}) == key(base)
    assert key({**base, "TF_ENABLE_ONEDNN_OPTS": "1"}) != key(base)
    assert key({**base, "PYTHONPATH": os.getcwd()}) != key(base)


def test_kt_test_no_preload_runs_every_child_as_a_new_process(monkeypatch):
    monkeypatch.setenv("KT_TEST_NO_PRELOAD", "1")
    assert _preloaded_python._request([sys.executable, "-c", "pass"], None, {}) is None


def test_popen_pipes_lines_both_ways_and_merges_stderr_into_stdout():
    process = _preloaded_python.Popen(
        [sys.executable, "-c", ECHO],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=subprocess_env(),
    )
    assert isinstance(process, _preloaded_python.ForkedProcess)
    for word in ("one", "two"):
        process.stdin.write(word + "\n")
        process.stdin.flush()
        assert process.stdout.readline() == word.upper() + "\n"  # an answer per line
    assert process.poll() is None
    process.stdin.close()
    assert process.wait(timeout=60) == 0
    assert process.stdout.read() == "err line\n"


ECHO = (
    "import sys\n"
    "for line in sys.stdin:\n"
    "    print(line.strip().upper(), flush=True)\n"
    "print('err line', file=sys.stderr)"
)
