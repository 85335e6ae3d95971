"""Tests of the parsing commands: `keras-transformer evaluate --task parsing` and `parse`."""

import json
import pathlib
import shutil

import pytest

from keras_transformer.cli import main
from tests._parsing_fixtures import untrained_parser_run

SAMPLE = pathlib.Path(__file__).parent / "data" / "evalb_sample"


def test_evaluate_task_parsing_prints_the_summary_and_json(capsys):
    assert (
        main(
            [
                "evaluate",
                "--task",
                "parsing",
                "--gold",
                str(SAMPLE / "sample.gld"),
                "--test",
                str(SAMPLE / "sample.tst"),
                "--prm",
                str(SAMPLE / "sample.prm"),
                "--json",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "Bracketing Recall         =  87.76" in out
    assert "Bracketing Precision      =  90.53" in out
    figures = json.loads(out.strip().splitlines()[-1])
    assert (
        figures["recall"],
        figures["precision"],
        figures["error_sentences"],
        figures["skip_sentences"],
    ) == (87.76, 90.53, 5, 2)


def test_evaluate_task_parsing_bad_input_is_one_line(tmp_path, capsys):
    assert main(["evaluate", "--task", "parsing", "--gold", str(SAMPLE / "sample.gld")]) == 2
    assert "needs --gold FILE and --test FILE" in capsys.readouterr().err
    short = tmp_path / "short.tst"
    short.write_text("(S (A (P this)))\n")
    assert (
        main(
            [
                "evaluate",
                "--task",
                "parsing",
                "--gold",
                str(SAMPLE / "sample.gld"),
                "--test",
                str(short),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "24 gold trees but 1 test trees" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "flag",
    [["--reference", "ref.de"], ["--paper-bleu"], ["--beam-size", "3"], ["--model", "runs/x"]],
)
def test_evaluate_task_parsing_refuses_translation_flags(flag, capsys):
    assert (
        main(
            [
                "evaluate",
                "--task",
                "parsing",
                "--gold",
                str(SAMPLE / "sample.gld"),
                "--test",
                str(SAMPLE / "sample.tst"),
                *flag,
            ]
        )
        == 2
    )
    captured = capsys.readouterr()
    assert captured.err.startswith(
        f"keras-transformer evaluate: error: {flag[0]} is a translation flag"
    )
    assert len(captured.err.strip().splitlines()) == 1 and captured.out == ""


def test_evaluate_task_parsing_scores_xx_slots_with_the_gold_tags(tmp_path, capsys):
    # `keras-transformer parse` output has XX slots: EVALB would keep the '.' as a word and
    # call the sentence an error; with the gold tags put in it scores, tags not measured.
    gold, test = tmp_path / "gold.trees", tmp_path / "test.trees"
    gold.write_text(
        "(TOP (S (NP (DT a) (NN b)) (VP (VBZ c)) (. .)))\n(TOP (S (NP (PRP d)) (VP (VBZ e))))\n"
    )
    test.write_text(
        "(TOP (S (NP (XX a) (XX b)) (VP (XX c)) (XX .)))\n(TOP (S (XX d) (VP (XX e))))\n"
    )
    assert (
        main(["evaluate", "--task", "parsing", "--gold", str(gold), "--test", str(test), "--json"])
        == 0
    )
    captured = capsys.readouterr()
    figures = json.loads(captured.out.strip().splitlines()[-1])
    # By hand: gold S NP VP + S NP VP = 6, test S NP VP + S VP = 5, all 5 matched.
    assert (figures["error_sentences"], figures["recall"], figures["precision"]) == (
        0,
        round(100 * 5 / 6, 2),
        100.0,
    )
    assert figures["tagging_accuracy"] is None
    assert "XX word slots" in captured.err


@pytest.fixture(scope="module")
def parser_run(tmp_path_factory):
    return untrained_parser_run(tmp_path_factory.mktemp("parsing_cli") / "run")


def test_parse_command_writes_one_tree_over_the_words_per_line(parser_run, tmp_path, capsys):
    from keras_transformer.parsing.trees import parse_tree

    run = parser_run
    raw = tmp_path / "raw.txt"
    raw.write_text('"It isn\'t (really) done," he said.\n\nShe does.\n', encoding="utf-8")
    output = tmp_path / "trees.txt"
    assert (
        main(
            [
                "parse",
                "--model",
                str(run),
                "--tokenize",
                "--input",
                str(raw),
                "--output",
                str(output),
                "--beam-size",
                "2",
                "--max-extra-length",
                "8",
            ]
        )
        == 0
    )
    lines = output.read_text(encoding="utf-8").splitlines()
    # The PTB tokenization, by hand; brackets as the treebank spells them.
    expected = [
        ["``", "It", "is", "n't", "-LRB-", "really", "-RRB-", "done", ",", "''", "he", "said", "."],
        [],
        ["She", "does", "."],
    ]
    assert [parse_tree(line).leaves() for line in lines] == expected
    assert lines[1] == "(TOP)"
    # An untrained model's outputs are arbitrary, yet the constrained search (the default)
    # gives well-formed trees that need no repair.
    err = capsys.readouterr().err
    assert "parsed 3 sentences" in err and "; 0 output(s) needed repair" in err
    assert (
        main(
            [
                "parse",
                "--model",
                str(run),
                "--tokenize",
                "--input",
                str(raw),
                "--output",
                str(output),
                "--beam-size",
                "2",
                "--max-extra-length",
                "8",
                "--unconstrained",
                "--overwrite",
            ]
        )
        == 0
    )
    assert [
        parse_tree(line).leaves() for line in output.read_text(encoding="utf-8").splitlines()
    ] == expected
    assert "parsed 3 sentences" in capsys.readouterr().err
    assert main(["parse", "--model", str(run), "--input", str(tmp_path / "missing.txt")]) == 2
    assert "cannot open" in capsys.readouterr().err


def test_parse_refuses_a_run_that_is_not_a_parsing_run(parser_run, tmp_path, capsys):
    # The same model without parsing.json stands for a translation run: it is not parsed with
    # a guessed linearization.
    run = tmp_path / "translation_run"
    shutil.copytree(parser_run, run, ignore=shutil.ignore_patterns("parsing.json"))
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("She does .\n", encoding="utf-8")
    output = tmp_path / "trees.txt"
    assert (
        main(["parse", "--model", str(run), "--input", str(sentences), "--output", str(output)])
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith(
        f"keras-transformer parse: error: {str(run)!r} has no parsing.json, "
        "so it is not a parsing run"
    )
    assert "pipelines/ptb_parsing.py" in err and len(err.strip().splitlines()) == 1
    assert not output.exists()


def test_several_models_parse_as_an_ensemble_of_one_linearization(
    parser_run, tmp_path, capsys, monkeypatch
):
    from keras_transformer.parsing.linearization import Linearizer
    from keras_transformer.parsing.parser import write_parsing_settings
    from keras_transformer.translation import Translator

    loaded = []
    real_load = Translator.load.__func__
    monkeypatch.setattr(
        Translator,
        "load",
        classmethod(
            lambda cls, path, **options: loaded.append(path) or real_load(cls, path, **options)
        ),
    )

    twin = tmp_path / "twin"
    shutil.copytree(parser_run, twin)
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("She does .\nIt is n't .\n", encoding="utf-8")
    common = ["--input", str(sentences), "--beam-size", "3", "--max-extra-length", "8"]
    single, pair = tmp_path / "single.txt", tmp_path / "pair.txt"
    assert main(["parse", "--model", str(parser_run), "--output", str(single)] + common) == 0
    assert (
        main(
            ["parse", "--model", str(parser_run), "--model", str(twin), "--output", str(pair)]
            + common
        )
        == 0
    )
    assert loaded == [str(parser_run), [str(parser_run), str(twin)]]
    # The mean of two equal distributions is the distribution: the same trees.
    assert pair.read_text(encoding="utf-8") == single.read_text(encoding="utf-8")
    assert len(single.read_text(encoding="utf-8").splitlines()) == 2
    from keras_transformer.decoding.ensemble import EnsembleDecoder
    from keras_transformer.parsing.parser import Parser

    ensemble = Parser.load([str(parser_run), str(twin)], beam_size=3, max_extra_length=8)
    inner = ensemble.translator.decoder.decoder  # under the tree constraint
    assert isinstance(inner, EnsembleDecoder) and len(inner.decoders) == 2
    assert [str(t) for t in ensemble.parse(["She does .", "It is n't ."])] == single.read_text(
        encoding="utf-8"
    ).splitlines()
    capsys.readouterr()
    # A model of another linearization cannot join: one line, before any model loads.
    write_parsing_settings(str(twin), Linearizer(pos_tags=True))
    assert (
        main(
            [
                "parse",
                "--model",
                str(parser_run),
                "--model",
                str(twin),
                "--output",
                str(tmp_path / "refused.txt"),
            ]
            + common
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "trained on different linearizations" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "refused.txt").exists()


def test_the_run_s_opening_penalty_is_used_and_can_be_overridden(parser_run, tmp_path, capsys):
    from keras_transformer.parsing.linearization import Linearizer
    from keras_transformer.parsing.parser import read_opening_penalty, write_parsing_settings
    from keras_transformer.parsing.trees import parse_tree

    run = tmp_path / "run"
    shutil.copytree(parser_run, run)
    # 50 nats per opening outweighs anything an untrained model prefers: one constituent
    # under TOP, the least the constrained search allows.
    write_parsing_settings(str(run), Linearizer(), opening_penalty=50.0)
    assert read_opening_penalty(str(run)) == 50.0
    assert read_opening_penalty([str(run), str(run / "model.keras")]) == 50.0
    assert read_opening_penalty(str(parser_run)) == 0.0  # none recorded
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("She does .\nIt is n't really done .\n", encoding="utf-8")
    common = ["--input", str(sentences), "--beam-size", "3", "--max-extra-length", "12"]

    def parse(model, *flags):
        output = tmp_path / "trees.txt"
        command = ["parse", "--model", str(model), "--output", str(output), "--overwrite"]
        assert main(command + list(flags) + common) == 0
        return [parse_tree(line) for line in output.read_text(encoding="utf-8").splitlines()]

    def constituents(tree):
        return sum(
            1 + constituents(child)
            for child in tree.children
            if not isinstance(child, str) and not child.is_preterminal()
        )

    flat = parse(run)
    assert [constituents(tree) for tree in flat] == [1, 1]
    assert [tree.leaves() for tree in flat] == [
        ["She", "does", "."],
        ["It", "is", "n't", "really", "done", "."],
    ]
    unpenalized = parse(parser_run)
    assert parse(run, "--opening-penalty", "0") == unpenalized
    assert sum(constituents(tree) for tree in unpenalized) > 2
    capsys.readouterr()
    assert (
        main(
            [
                "parse",
                "--model",
                str(run),
                "--unconstrained",
                "--opening-penalty",
                "1",
                "--output",
                str(tmp_path / "refused.txt"),
            ]
            + common
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "--opening-penalty applies to the constrained search" in err
    assert len(err.strip().splitlines()) == 1
