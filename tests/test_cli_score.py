"""`keras-transformer score`: one score per line pair, as `Translator.score` gives them, and
the misaligned-files error before the model loads."""

import pytest

from keras_transformer.cli import main
from keras_transformer.translation import Translator
from tests._decoding_fixtures import SENTENCES, tiny_copy_run_folder


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    return tiny_copy_run_folder(tmp_path_factory)


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_scores_per_line_equal_translator_score(run_folder, tmp_path, capsys):
    sources = SENTENCES[:5]
    targets = SENTENCES[:5][::-1]
    targets[2] = ""  # an empty target is eos alone
    source = write_lines(tmp_path / "src.txt", sources)
    target = write_lines(tmp_path / "tgt.txt", targets)
    translator = Translator.load(str(run_folder))
    for normalize in (False, True):
        output = tmp_path / f"scores-{normalize}.txt"
        argv = ["score", "--model", str(run_folder), "--source", source, "--target", target]
        argv += ["-o", str(output), "--batch-size", "2", "--chunk-size", "3"]
        assert main(argv + (["--normalize"] if normalize else [])) == 0
        written = [float(line) for line in output.read_text().splitlines()]
        expected = translator.score(sources, targets, normalize=normalize)
        # Other batches sum in another order: float32 rounding (one ulp of -46 is 3.8e-6),
        # plus the file's 6 decimals.
        assert written == pytest.approx(expected, rel=1e-6, abs=1e-6)
    # Normalized scores are the sums over the token counts (eos included).
    vocabulary = translator.vocabulary
    counts = [len(vocabulary.encode(text)) + 1 for text in targets]
    sums = translator.score(sources, targets)
    assert translator.score(sources, targets, normalize=True) == pytest.approx(
        [s / c for s, c in zip(sums, counts)], rel=1e-6
    )
    # stdout by default
    assert main(["score", "--model", str(run_folder), "--source", source, "--target", target]) == 0
    printed = [float(line) for line in capsys.readouterr().out.splitlines()]
    assert printed == pytest.approx(sums, rel=1e-6, abs=1e-6)


def test_misaligned_files_are_one_error_naming_both_before_the_model_loads(tmp_path, capsys):
    source = write_lines(tmp_path / "src.txt", ["a", "b", "c"])
    target = tmp_path / "tgt.txt"
    target.write_text("x\ny", encoding="utf-8")  # two lines, the last without a newline
    output = tmp_path / "scores.txt"
    absent_model = str(tmp_path / "no-such-run")  # loading it would be another error
    argv = ["score", "--model", absent_model, "--source", source, "--target", str(target)]
    assert main(argv + ["-o", str(output)]) == 2
    error = capsys.readouterr().err.strip()
    assert error == (
        f"keras-transformer score: error: --source {source!r} has 3 lines but --target "
        f"{str(target)!r} has 2; give one target line per source line"
    )
    assert not output.exists()
