"""Errors and warnings that point at the input: a too long line is named by its line in the
file (not its index in a chunk), the truncation warning is one line like an error, a range
without an upper bound reads "at least", and `train --output-dir` is named as given."""

import warnings

import pytest

from keras_transformer.cli import main
from keras_transformer.translation import Translator, input_lines
from tests._decoding_fixtures import SENTENCES, tiny_copy_run_folder
from tests._training_fixtures import tiny_config, write_config, write_reverse_corpus


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    return tiny_copy_run_folder(tmp_path_factory)


def _input_with_a_long_line(tmp_path):
    # 5 lines, the 4th of 10,000 words; --chunk-size 2 puts it at index 1 of the 2nd chunk.
    # (Empty lines never reach the model: the first chunk costs no search.)
    lines = ["", "", SENTENCES[0], " ".join(["dog"] * 10_000), SENTENCES[1]]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return source


def test_a_too_long_line_is_named_by_its_line_in_the_file(run_folder, tmp_path, capsys):
    source = _input_with_a_long_line(tmp_path)
    output = tmp_path / "out.txt"
    output.write_text("an earlier translation\n")
    command = ["translate", "--model", str(run_folder), "-i", str(source), "-o", str(output)]
    assert main([*command, "--overwrite", "--chunk-size", "2", "--on-too-long", "error"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"keras-transformer translate: error: line 4 of {str(source)!r} has ")
    assert err.count("\n") == 1 and "texts[" not in err
    assert output.read_text() == "an earlier translation\n"  # nothing replaced


def test_the_truncation_warning_is_one_line(run_folder, tmp_path, capsys):
    source = _input_with_a_long_line(tmp_path)
    output = tmp_path / "out.txt"
    command = ["translate", "--model", str(run_folder), "-i", str(source), "-o", str(output)]
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        assert main([*command, "--chunk-size", "2", "--max-extra-length", "2", "--no-compile"]) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"keras-transformer translate: warning: line 4 of {str(source)!r}")
    assert "UserWarning" not in lines[0] and "tokens are translated" in lines[0]
    assert len(output.read_text().splitlines()) == 5


def test_the_library_names_inputs_by_index_outside_input_lines(run_folder):
    translator = Translator.load(str(run_folder), on_too_long="error", max_extra_length=2)
    too_long = " ".join(["dog"] * 100)
    with pytest.raises(ValueError, match=r"^texts\[1\] has"):
        translator.translate(["a dog", too_long])
    with input_lines("'in.txt'", 41), pytest.raises(ValueError, match=r"^line 42 of 'in.txt'"):
        translator.translate(["a dog", too_long])


def test_an_unbounded_range_reads_at_least(run_folder, capsys):
    assert main(["translate", "--model", str(run_folder), "--beam-size", "0"]) == 2
    err = capsys.readouterr().err
    assert "must be an integer of at least 1" in err and "inf" not in err


@pytest.fixture(scope="module")
def train_config(tmp_path_factory):
    directory = tmp_path_factory.mktemp("train-errors")
    corpus = write_reverse_corpus(directory / "corpus", train_lines=50, dev_lines=5)
    return write_config(directory / "config.json", tiny_config(directory / "run", corpus))


def test_train_names_the_output_dir_flag(train_config, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["train", "--config", train_config, "--output-dir", str(blocker / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"keras-transformer train: error: --output-dir {str(blocker / 'run')!r}")
    assert "--set" not in err and err.count("\n") == 1
    assert main(["train", "--config", train_config, "--output-dir", ""]) == 2
    assert "--output-dir is empty" in capsys.readouterr().err
    both = ["--output-dir", str(tmp_path / "a"), "--set", f"output_dir={tmp_path / 'b'}"]
    assert main(["train", "--config", train_config, *both]) == 2
    assert "give one" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    from keras_transformer import __version__

    assert capsys.readouterr().out == f"keras-transformer {__version__}\n"


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    """An interrupted command says what is kept in one line, with the shell's status for
    SIGINT, instead of a traceback."""
    import keras_transformer.cli.info as info_command

    def interrupted_run(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(info_command, "run", interrupted_run)
    assert main(["info", "--preset", "base"]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("keras-transformer info: interrupted;")
    assert "resumes" in err[0]


@pytest.mark.parametrize("search", ["greedy", "sample"])
def test_n_best_without_beam_search_is_one_error_before_the_load(search, tmp_path, capsys):
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("a b\n")
    output.write_text("an earlier translation\n")
    # The model folder does not exist: the error must come before any load.
    command = ["translate", "--model", str(tmp_path / "run"), "-i", str(source), "-o", str(output)]
    assert main([*command, "--overwrite", "--n-best", "2", "--search", search]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"keras-transformer translate: error: --n-best 2 needs beam search, but the search "
        f"here is {search!r}: leave out --search {search}, or --n-best\n"
    )
    assert output.read_text() == "an earlier translation\n"
