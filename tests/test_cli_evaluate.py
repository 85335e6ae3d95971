"""`keras-transformer evaluate`: scores with signature, --json headline line, translation."""

import json

import sacrebleu

from keras_transformer.cli import main
from tests._decoding_fixtures import SENTENCES, tiny_model, tiny_run_folder, train_char_vocabulary

HYPOTHESES = ["Der Hund bellt laut im Garten.", "Das ist ein Know-how-Transfer."]
REFERENCES = ["Der Hund bellt im Garten laut.", "Das ist ein Know-how-Transfer."]


def test_evaluate_existing_hypotheses_json(tmp_path, capsys):
    hypotheses, reference = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hypotheses.write_text("\n".join(HYPOTHESES) + "\n", encoding="utf-8")
    reference.write_text("\n".join(REFERENCES) + "\n", encoding="utf-8")
    assert (
        main(
            [
                "evaluate",
                "--hypotheses",
                str(hypotheses),
                "--reference",
                str(reference),
                "--paper-bleu",
                "--json",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    figures = json.loads(out[-1])
    assert figures["bleu"] == round(sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES]).score, 2)
    assert figures["chrf"] == round(sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score, 2)
    assert any(line.strip().startswith("signature: nrefs:1|case:mixed") for line in out)
    assert any("NOT comparable with sacreBLEU" in line for line in out)


def test_evaluate_translates_the_source(tmp_path, capsys):
    vocabulary = train_char_vocabulary(tmp_path)
    run = tiny_run_folder(
        tmp_path / "run", vocabulary, tiny_model(vocab_size=25, max_length=48, seed=22, sharpen=2.0)
    )
    source, reference = tmp_path / "src.txt", tmp_path / "ref.txt"
    source.write_text("\n".join(SENTENCES[:3]) + "\n", encoding="utf-8")
    reference.write_text("\n".join(SENTENCES[:3]) + "\n", encoding="utf-8")
    output = tmp_path / "hyp.txt"
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(run),
                "--source",
                str(source),
                "--reference",
                str(reference),
                "--output",
                str(output),
                "--max-extra-length",
                "3",
                "--json",
            ]
        )
        == 0
    )
    figures = json.loads(capsys.readouterr().out.splitlines()[-1])
    hypotheses = output.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(hypotheses) == 3
    expected = sacrebleu.corpus_bleu(hypotheses, [SENTENCES[:3]]).score
    assert figures["bleu"] == round(expected, 2) and figures["sentences"] == 3
    assert figures["sentences_per_second"] > 0


def test_evaluate_errors(tmp_path, capsys):
    reference = tmp_path / "ref.txt"
    reference.write_text("a\nb\n", encoding="utf-8")
    assert main(["evaluate", "--reference", str(reference)]) == 2
    assert "give --model and --source" in capsys.readouterr().err
    hypotheses = tmp_path / "hyp.txt"
    hypotheses.write_text("a\n", encoding="utf-8")
    assert main(["evaluate", "--hypotheses", str(hypotheses), "--reference", str(reference)]) == 2
    assert "2 lines but there are 1 hypotheses" in capsys.readouterr().err


def test_a_misaligned_reference_is_refused_before_the_model_is_loaded(
    tmp_path, capsys, monkeypatch
):
    import keras_transformer.cli.evaluate as cli_evaluate

    def no_model(args):
        raise AssertionError("the model was loaded before the line counts were checked")

    monkeypatch.setattr(cli_evaluate, "translator_from_args", no_model)
    source, reference = tmp_path / "src.txt", tmp_path / "ref.txt"
    source.write_text("a\nb\nc\n", encoding="utf-8")
    reference.write_text("a\nb\n", encoding="utf-8")
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(tmp_path / "run"),
                "--source",
                str(source),
                "--reference",
                str(reference),
            ]
        )
        == 2
    )
    error = capsys.readouterr().err
    assert f"--reference {str(reference)!r} has 2 lines but --source {str(source)!r} has 3" in (
        error
    )


def test_an_earlier_output_survives_a_write_that_fails_midway(tmp_path, monkeypatch):
    import pytest

    import keras_transformer.cli.evaluate as cli_evaluate

    class Translator:  # the second hypothesis breaks the write after the first was written
        def translate(self, sources):
            return ["a", None]

    monkeypatch.setattr(cli_evaluate, "translator_from_args", lambda args: Translator())
    source, reference = tmp_path / "src.txt", tmp_path / "ref.txt"
    source.write_text("a\nb\n", encoding="utf-8")
    reference.write_text("a\nb\n", encoding="utf-8")
    output = tmp_path / "hyp.txt"
    output.write_text("an earlier output\n", encoding="utf-8")
    with pytest.raises(TypeError):
        main(
            [
                "evaluate",
                "--model",
                str(tmp_path / "run"),
                "--source",
                str(source),
                "--reference",
                str(reference),
                "--output",
                str(output),
                "--overwrite",
            ]
        )
    assert output.read_text(encoding="utf-8") == "an earlier output\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hyp.txt", "ref.txt", "src.txt"]
