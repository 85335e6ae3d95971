"""`keras-transformer translate`: files and stdin/stdout, n-best layout, errors."""

import io

import pytest

from keras_transformer.cli import main
from keras_transformer.translation import Translator
from tests._decoding_fixtures import SENTENCES, tiny_copy_run_folder


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    return tiny_copy_run_folder(tmp_path_factory)


def stdin_of(data):
    """A stand-in for `sys.stdin`: text over bytes, with the `.buffer` a real one has."""
    return io.TextIOWrapper(io.BytesIO(data if isinstance(data, bytes) else data.encode()))


def test_translate_files_in_input_order(run_folder, tmp_path):
    texts = SENTENCES[:4] + [""] + SENTENCES[4:6]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    output = tmp_path / "out.txt"
    assert (
        main(
            [
                "translate",
                "--model",
                str(run_folder),
                "-i",
                str(source),
                "-o",
                str(output),
                "--max-extra-length",
                "4",
                "--batch-size",
                "3",
                "--chunk-size",
                "5",
            ]
        )
        == 0
    )
    expected = Translator.load(str(run_folder), max_extra_length=4).translate(texts)
    assert output.read_text(encoding="utf-8").split("\n")[:-1] == expected
    assert expected[4] == ""


def test_translate_stdin_to_stdout_n_best(run_folder, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", stdin_of("a dog\nhello\n"))
    assert (
        main(["translate", "--model", str(run_folder), "--n-best", "2", "--max-extra-length", "3"])
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" ||| ")[0] for line in lines] == ["0", "0", "1", "1"]
    scores = [float(line.split(" ||| ")[2]) for line in lines]
    assert scores[0] >= scores[1] and scores[2] >= scores[3]


def test_length_penalty_flag_picks_the_form(run_folder, monkeypatch, capsys):
    flags = ["--n-best", "2", "--max-extra-length", "3", "--alpha", "1.5"]
    monkeypatch.setattr("sys.stdin", stdin_of("a dog\n"))
    assert main(["translate", "--model", str(run_folder), "--length-penalty", "power", *flags]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = Translator.load(
        str(run_folder), num_hypotheses=2, max_extra_length=3, alpha=1.5, length_penalty="power"
    ).translate(["a dog"])[0]
    assert [line.split(" ||| ")[1] for line in lines] == [text for text, _ in expected]
    scores = [float(line.split(" ||| ")[2]) for line in lines]
    assert scores == pytest.approx([score for _, score in expected], abs=1e-4)


def test_translate_errors_are_one_line(run_folder, tmp_path, capsys):
    assert main(["translate", "--model", str(tmp_path / "none")]) == 2
    assert "cannot load a model" in capsys.readouterr().err
    assert main(["translate", "--model", str(run_folder), "--n-best", "5"]) == 2
    assert capsys.readouterr().err == (
        "keras-transformer translate: error: --n-best=5 is out "
        "of range: it must be an integer in [1, 4]\n"
    )


# The cases of tests/test_decoding_settings.py, as flags: the same rule, named by the flag.
@pytest.mark.parametrize(
    "flags,message",
    [
        (
            ["--beam-size", "0"],
            "--beam-size=0 is out of range: it must be an integer of at least 1",
        ),
        (
            ["--alpha", "nan"],
            "--alpha=nan is out of range: it must be a finite number in [0.0, 10.0]",
        ),
        (
            ["--alpha", "inf"],
            "--alpha=inf is out of range: it must be a finite number in [0.0, 10.0]",
        ),
        (
            ["--alpha", "-0.5"],
            "--alpha=-0.5 is out of range: it must be a finite number in [0.0, 10.0]",
        ),
        (
            ["--max-extra-length", "-1"],
            "--max-extra-length=-1 is out of range: it must be an integer in [0, 65536]",
        ),
        (
            ["--max-extra-length", "2147483647"],
            "--max-extra-length=2147483647 is out of range: it must be an integer in [0, 65536]",
        ),
        (["--n-best", "0"], "--n-best=0 is out of range: it must be an integer in [1, 4]"),
        (
            ["--beam-size", "2", "--n-best", "3"],
            "--n-best=3 is out of range: it must be an integer in [1, 2]",
        ),
    ],
)
def test_out_of_range_settings_are_one_line_errors(
    run_folder, flags, message, capsys, monkeypatch, tmp_path
):
    output = tmp_path / "out.txt"
    monkeypatch.setattr("sys.stdin", stdin_of("a dog\n"))
    assert main(["translate", "--model", str(run_folder), "-o", str(output), *flags]) == 2
    assert capsys.readouterr().err == f"keras-transformer translate: error: {message}\n"
    assert not output.exists()  # stopped before opening (or truncating) the output


def test_jit_compile_with_no_compile_is_one_error(run_folder, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", stdin_of("a dog\n"))
    flags = ["--jit-compile", "--no-compile"]
    assert main(["translate", "--model", str(run_folder), *flags]) == 2
    assert capsys.readouterr().err == (
        "keras-transformer translate: error: --jit-compile compiles the search with XLA, "
        "--no-compile runs it eagerly: give one of them\n"
    )


def test_settings_at_their_bounds_translate(run_folder, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", stdin_of("a dog\n"))
    assert (
        main(
            [
                "translate",
                "--model",
                str(run_folder),
                "--beam-size",
                "2",
                "--n-best",
                "2",
                "--alpha",
                "10",
                "--max-extra-length",
                "0",
            ]
        )
        == 0
    )
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_a_line_that_is_not_utf8_is_named_and_an_earlier_output_survives(
    run_folder, tmp_path, capsys, monkeypatch
):
    source = tmp_path / "bad.en"
    source.write_bytes(b"a dog\n\xff bad\nhello\n")
    output = tmp_path / "out.de"
    output.write_text("an earlier translation\n", encoding="utf-8")
    assert (
        main(
            [
                "translate",
                "--model",
                str(run_folder),
                "-i",
                str(source),
                "-o",
                str(output),
                "--overwrite",
                "--chunk-size",
                "1",
            ]
        )
        == 2
    )
    error = capsys.readouterr().err
    assert f"{str(source)!r} line 2 is not valid UTF-8 (byte 0xff at byte offset 0)" in error
    assert error.count("\n") == 1 and "Traceback" not in error
    # The first line was translated and written before the bad one was read: not onto out.de.
    assert output.read_text(encoding="utf-8") == "an earlier translation\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.en", "out.de"]

    monkeypatch.setattr("sys.stdin", stdin_of(b"a dog\nhello \xe9t\xe9\n"))
    assert main(["translate", "--model", str(run_folder)]) == 2
    assert "stdin line 2 is not valid UTF-8 (byte 0xe9 at byte offset 6)" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize("flag", ["-o", "--alignments"])
def test_an_existing_output_is_refused_before_the_model_loads(flag, tmp_path, capsys):
    source, output = tmp_path / "in.en", tmp_path / "out.de"
    source.write_text("a dog\n", encoding="utf-8")
    output.write_text("an earlier translation\n", encoding="utf-8")
    # The model folder does not exist: the refusal must come before any load.
    command = ["translate", "--model", str(tmp_path / "run"), "-i", str(source), flag, str(output)]
    assert main(command) == 2
    name = "--output" if flag == "-o" else flag
    assert capsys.readouterr().err == (
        f"keras-transformer translate: error: {name} {str(output)!r} exists already; give "
        f"--overwrite to replace it, or another {name}\n"
    )
    assert output.read_text(encoding="utf-8") == "an earlier translation\n"


def test_an_existing_output_is_replaced_with_overwrite_when_the_run_succeeds(run_folder, tmp_path):
    source = tmp_path / "in.en"
    source.write_text("a dog\n\nhello\n", encoding="utf-8")
    output = tmp_path / "out.de"
    output.write_text("an earlier translation\n", encoding="utf-8")
    command = ["translate", "--model", str(run_folder), "-i", str(source), "-o", str(output)]
    assert main([*command, "--overwrite", "--max-extra-length", "3"]) == 0
    expected = Translator.load(str(run_folder), max_extra_length=3).translate(
        ["a dog", "", "hello"]
    )
    assert output.read_text(encoding="utf-8").split("\n")[:-1] == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.en", "out.de"]


def test_an_output_that_cannot_be_written_is_one_line(run_folder, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", stdin_of("a dog\n"))
    output = tmp_path / "no_such_folder" / "out.de"
    assert main(["translate", "--model", str(run_folder), "-o", str(output)]) == 2
    error = capsys.readouterr().err
    assert f"cannot write {str(output)!r}: No such file or directory" in error


def test_the_run_folder_is_as_train_leaves_it(run_folder, tmp_path):
    # model.keras carries the run's vocabulary (training saves it so): alone, it translates.
    alone = tmp_path / "model.keras"
    alone.write_bytes((run_folder / "model.keras").read_bytes())
    translator = Translator.load(str(alone), max_extra_length=3)
    assert translator.vocabulary.model_proto == (run_folder / "vocab.model").read_bytes()
    assert {"config.json", "vocab.model", "model.keras", "checkpoints"} <= {
        path.name for path in run_folder.iterdir()
    }
