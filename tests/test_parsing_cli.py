"""Tests of the parsing commands: `keras-transformer evaluate --task parsing` and `parse`."""

import json
import pathlib

from keras_transformer.cli import main

SAMPLE = pathlib.Path(__file__).parent / "data" / "evalb_sample"


def test_evaluate_task_parsing_prints_the_summary_and_json(capsys):
    assert main(["evaluate", "--task", "parsing", "--gold", str(SAMPLE / "sample.gld"),
                 "--test", str(SAMPLE / "sample.tst"), "--prm", str(SAMPLE / "sample.prm"),
                 "--json"]) == 0
    out = capsys.readouterr().out
    assert "Bracketing Recall         =  87.76" in out
    assert "Bracketing Precision      =  90.53" in out
    figures = json.loads(out.strip().splitlines()[-1])
    assert (figures["recall"], figures["precision"], figures["error_sentences"],
            figures["skip_sentences"]) == (87.76, 90.53, 5, 2)


def test_evaluate_task_parsing_bad_input_is_one_line(tmp_path, capsys):
    assert main(["evaluate", "--task", "parsing", "--gold", str(SAMPLE / "sample.gld")]) == 2
    assert "needs --gold FILE and --test FILE" in capsys.readouterr().err
    short = tmp_path / "short.tst"
    short.write_text("(S (A (P this)))\n")
    assert main(["evaluate", "--task", "parsing", "--gold", str(SAMPLE / "sample.gld"),
                 "--test", str(short)]) == 2
    err = capsys.readouterr().err
    assert "24 gold trees but 1 test trees" in err and len(err.strip().splitlines()) == 1
