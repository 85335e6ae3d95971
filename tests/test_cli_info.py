import subprocess
import sys

from keras_transformer.cli import main
from keras_transformer.config import TABLE3


def test_info_prints_the_parameter_count_of_a_preset(capsys):
    assert main(["info", "--preset", "base", "--vocab-size", "37000"]) == 0
    assert "63,082,496" in capsys.readouterr().out  # 37000*512 + 6*3,152,384 + 6*4,204,032


def test_table3_lists_every_row_beside_the_papers_column(capsys):
    assert main(["info", "--table3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split() for line in lines[1:] if line.split()[0] in TABLE3}
    assert set(rows) == set(TABLE3)
    assert rows["big"][-3:] == ["214.2", "213", "+0.6%"]
    assert rows["C.N=2"][-2] == "36"


def test_module_entry_point_and_light_start():
    # `python -m keras_transformer info` works and does not import Keras or TensorFlow.
    code = (
        "import sys; from keras_transformer.cli import main; main(['info']); "
        "assert 'keras' not in sys.modules and 'tensorflow' not in sys.modules"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    result = subprocess.run(
        [sys.executable, "-m", "keras_transformer", "info", "--preset", "E.learned"],
        capture_output=True,
        text=True,
    )
    assert "learned" in result.stdout


def test_unknown_preset_is_a_usage_error(capsys):
    try:
        main(["info", "--preset", "huge"])
    except SystemExit as exit:
        assert exit.code == 2
    assert "invalid choice: 'huge'" in capsys.readouterr().err


def test_a_closed_pipe_ends_the_command_quietly():
    # `keras-transformer info --table3 | head -1`: the reader leaves after one line.
    process = subprocess.Popen(
        [sys.executable, "-m", "keras_transformer", "info", "--table3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    process.stdout.close()  # as head does, before the command has written
    stderr = process.stderr.read().decode()
    assert process.wait() == 141
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


def test_an_input_error_is_the_only_line_on_stderr(tmp_path):
    # TensorFlow 2.21 writes its start-up lines (absl logs before InitializeLog) whatever
    # TF_CPP_MIN_LOG_LEVEL says; the CLI drops them, so the error is all a user sees.
    from tests._training_fixtures import subprocess_env

    missing = tmp_path / "nope.yaml"
    result = subprocess.run(
        [sys.executable, "-m", "keras_transformer", "train", "--config", str(missing)],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=240,
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"keras-transformer train: error: training config file "
        f"{str(missing)!r} does not exist; check the path\n"
    )
