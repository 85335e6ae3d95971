"""`keras-transformer translate`: files and stdin/stdout, n-best layout, errors."""

import io

import pytest

from tests._decoding_fixtures import SENTENCES, tiny_model, tiny_run_folder, train_char_vocabulary
from keras_transformer.cli import main
from keras_transformer.translation import Translator


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    vocabulary = train_char_vocabulary(folder)
    model = tiny_model(vocab_size=25, max_length=48, seed=21, sharpen=2.0)
    return tiny_run_folder(folder / "run", vocabulary, model)


def test_translate_files_in_input_order(run_folder, tmp_path):
    texts = SENTENCES[:4] + [""] + SENTENCES[4:6]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    output = tmp_path / "out.txt"
    assert main(["translate", "--model", str(run_folder), "-i", str(source), "-o", str(output),
                 "--max-extra-length", "4", "--batch-size", "3", "--chunk-size", "5"]) == 0
    expected = Translator.load(str(run_folder), max_extra_length=4).translate(texts)
    assert output.read_text(encoding="utf-8").split("\n")[:-1] == expected
    assert expected[4] == ""


def test_translate_stdin_to_stdout_n_best(run_folder, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("a dog\nhello\n"))
    assert main(["translate", "--model", str(run_folder), "--n-best", "2",
                 "--max-extra-length", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" ||| ")[0] for line in lines] == ["0", "0", "1", "1"]
    scores = [float(line.split(" ||| ")[2]) for line in lines]
    assert scores[0] >= scores[1] and scores[2] >= scores[3]


def test_translate_errors_are_one_line(run_folder, tmp_path, capsys):
    assert main(["translate", "--model", str(tmp_path / "none")]) == 2
    assert "cannot load a model" in capsys.readouterr().err
    assert main(["translate", "--model", str(run_folder), "--n-best", "5"]) == 2
    assert "--n-best 5 is larger than --beam-size 4" in capsys.readouterr().err
