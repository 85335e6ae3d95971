"""benchmarks/opus_mt_check.py, the check a user with network access runs on a hub model,
run here on the tiny local checkpoint (tests/_marian_fixtures.py) given as --model."""

import json

import pytest

from benchmarks import opus_mt_check
from tests._marian_fixtures import SOURCE_SENTENCES, marian_folder

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def sentences(tmp_path_factory):
    path = tmp_path_factory.mktemp("check") / "sentences.txt"
    lines = [">>deu<< " + SOURCE_SENTENCES[0], SOURCE_SENTENCES[3], SOURCE_SENTENCES[6] + " xq"]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return marian_folder(tmp_path_factory)


def run_check(capsys, folder, sentences, *argv):
    # 8 extra tokens: random weights run to the length limit, and each step is a call.
    argv = ["--model", folder, "--sentences", sentences, "--max-extra-length", 8, *argv]
    assert opus_mt_check.main(list(map(str, argv))) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_greedy_check_counts_every_sentence_identical(folder, sentences, capsys):
    record = run_check(capsys, folder, sentences, "-n", 1, "--beam-size", 1)
    assert (record["sentences"], record["identical"], record["fraction"]) == (1, 1, 1.0)
    assert record["beam_size"] == 1 and record["differing"] == []


def test_beam_check_at_the_published_power_penalty(folder, sentences, capsys):
    record = run_check(capsys, folder, sentences, "-n", 2)
    assert (record["beam_size"], record["length_penalty"], record["alpha"]) == (4, "power", 1.0)
    assert (record["sentences"], record["identical"]) == (2, 2)


def test_a_differing_output_is_counted_and_shown(folder, sentences, capsys, monkeypatch):
    real = opus_mt_check.our_search

    def dropping_the_first_token(*args):
        best = real(*args)
        return lambda source_ids: best(source_ids)[1:]

    monkeypatch.setattr(opus_mt_check, "our_search", dropping_the_first_token)
    record = run_check(capsys, folder, sentences, "--beam-size", 1, "-n", 1)
    assert (record["sentences"], record["identical"]) == (1, 0)
    assert [row["source"] for row in record["differing"]] == sentences.read_text().splitlines()[:1]


def test_a_kept_run_is_checked_again_in_a_new_process(folder, sentences, tmp_path):
    from benchmarks import common
    from keras_transformer.importers import import_checkpoint

    run = tmp_path / "run"
    import_checkpoint("marian", str(folder), str(run), progress=lambda line: None)
    # A fresh process finds the kept run and loads it without importing it again.
    argv = ["--model", folder, "--sentences", sentences, "--max-extra-length", 4, "-n", 1,
            "--beam-size", 1, "--output", run]  # fmt: skip
    process = common.run_module("benchmarks.opus_mt_check", *argv, timeout=600)
    assert process.returncode == 0, process.stderr[-2000:]
    assert "# import:" not in process.stderr
    record = json.loads(process.stdout.strip().splitlines()[-1])
    assert (record["sentences"], record["identical"]) == (1, 1)
