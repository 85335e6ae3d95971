"""A run that goes on under new training settings keeps its old `config.json` and
`training_config.json` beside the new ones. A start killed (SIGKILL) between keeping the old
file and writing the new one must leave the run with a complete file in place: the old one,
not none.

Each kill is a `train` process of its own that kills itself right after a file was kept
aside, the one moment the order of the two writes matters.
"""

import json
import signal
import textwrap

import pytest

from tests import _preloaded_python
from tests._tensorflow_settings import CHILD_PRELUDE
from tests._training_fixtures import (
    PYTHON,
    REPO,
    subprocess_env,
    tiny_config,
    write_config,
    write_reverse_corpus,
)

pytestmark = pytest.mark.timeout(420)

# One interpreter imports TensorFlow once and forks a `train` per start, before any
# TensorFlow op has run (as tests/_kill_fixtures.py does): the first trains, the next two
# kill themselves after keeping the file they name, the last finishes. After each start it
# prints the run files it finds, as one JSON line.
STARTS = CHILD_PRELUDE + textwrap.dedent("""
    import glob, json, os, signal, sys
    from keras_transformer.training import run_files, trainer

    first, again, run_dir = sys.argv[1:4]
    keep_previous = run_files.keep_previous

    def run(config, kill_after):
        def keep_then_die(path):
            kept = keep_previous(path)
            if os.path.basename(path) == kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
            return kept

        run_files.keep_previous = keep_then_die
        result = trainer.train(config)
        print(json.dumps({"resumed_from": result.resumed_from_step, "step": result.step}))

    def read(path):
        if not os.path.exists(path):
            return None
        with open(path) as file:
            return file.read()

    starts = [(first, None), (again, "config.json"), (again, "training_config.json"),
              (again, None)]
    for config, kill_after in starts:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                run(config, kill_after)
                code = 0
            finally:
                sys.stdout.flush()
                os._exit(code)
        status = os.waitpid(pid, 0)[1]
        files = {name: read(os.path.join(run_dir, name))
                 for name in ("config.json", "training_config.json")}
        kept = {name: [read(path) for path in sorted(glob.glob(
                    os.path.join(run_dir, name[:-5] + ".*.json")))] for name in files}
        print(json.dumps({"kill_after": kill_after, "status": status, "files": files,
                          "kept": kept}), flush=True)
""")


def _config(output_dir, corpus, dropout, train_steps):
    return tiny_config(
        output_dir,
        corpus,
        data={"dev": None},
        model={"dropout": dropout},
        schedule={"train_steps": train_steps, "eval_every_steps": 2},
        checkpoints={"every_steps": 1, "keep_last": 2, "average_last": 0},
    )


@pytest.fixture(scope="module")
def starts(tmp_path_factory):
    directory = tmp_path_factory.mktemp("run-files-kill")
    corpus = write_reverse_corpus(directory / "corpus", train_lines=100, dev_lines=4)
    run_dir = directory / "run"
    first = write_config(
        directory / "first.json", _config(run_dir, corpus, dropout=0.0, train_steps=2)
    )
    # The same model under new dropout, trained further: both files change.
    again = write_config(
        directory / "again.json", _config(run_dir, corpus, dropout=0.1, train_steps=4)
    )
    completed = _preloaded_python.run(
        [PYTHON, "-c", STARTS, first, again, str(run_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        env=subprocess_env(),
        cwd=REPO,
    )
    assert completed.returncode == 0, completed.stderr[-6000:]
    lines = [json.loads(line) for line in completed.stdout.splitlines() if line.startswith("{")]
    reports = [line for line in lines if "kill_after" in line]
    assert [report["status"] for report in reports] == [0, signal.SIGKILL, signal.SIGKILL, 0], (
        completed.stderr[-6000:]
    )
    results = [line for line in lines if "step" in line]
    return {"first": reports[0], "killed": reports[1:3], "finished": reports[3], "results": results}


def test_a_kill_after_keeping_config_json_leaves_the_old_one_in_place(starts):
    before, killed = starts["first"]["files"], starts["killed"][0]
    assert killed["kill_after"] == "config.json"
    assert killed["files"] == before  # both files still there, unchanged
    assert killed["kept"]["config.json"] == [before["config.json"]]


def test_a_kill_after_keeping_training_config_json_leaves_the_old_one_in_place(starts):
    before, killed = starts["first"]["files"], starts["killed"][1]
    assert killed["kill_after"] == "training_config.json"
    # config.json was replaced (new dropout) before training_config.json was kept aside.
    assert json.loads(killed["files"]["config.json"])["dropout"] == 0.1
    assert killed["files"]["training_config.json"] == before["training_config.json"]
    assert killed["kept"]["training_config.json"] == [before["training_config.json"]]


def test_the_restart_after_the_kills_goes_on_and_writes_the_new_files(starts):
    before, finished = starts["first"]["files"], starts["finished"]
    assert starts["results"] == [
        {"resumed_from": 0, "step": 2},
        {"resumed_from": 2, "step": 4},
    ]
    assert json.loads(before["config.json"])["dropout"] == 0.0
    assert json.loads(finished["files"]["config.json"])["dropout"] == 0.1
    training_config = json.loads(finished["files"]["training_config.json"])
    assert training_config["schedule"]["train_steps"] == 4
    # Every copy kept aside, by the killed starts and the finished one, is the old file.
    for name, kept in finished["kept"].items():
        assert kept and set(kept) == {before[name]}
