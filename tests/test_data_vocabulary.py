"""Tests of keras_transformer.data.vocabulary and the `keras-transformer vocab` command."""

import json
import unicodedata

import pytest

tf = pytest.importorskip("tensorflow")

from keras_transformer.cli import main as cli_main  # noqa: E402
from keras_transformer.data import vocabulary as vocab  # noqa: E402
from keras_transformer.data.corpora import TextPairCorpus  # noqa: E402
from keras_transformer.errors import UserInputError  # noqa: E402
from tests.data_fixtures import (  # noqa: E402
    TEST_VOCAB_SIZE,
    multi30k_paths,
    multi30k_vocabulary,
    read_text_lines,
    shared_data_dir,
)


def _reference_normalization(text):
    """The documented normalization, written independently: NFKC, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


def test_round_vocab_size():
    assert vocab.round_vocab_size(37000) == 37000
    assert vocab.round_vocab_size(32000) == 32000
    assert vocab.round_vocab_size(1001) == 1008
    assert vocab.round_vocab_size(1008) == 1008
    with pytest.raises(UserInputError, match="too small"):
        vocab.round_vocab_size(3)


def test_presets_are_the_papers():
    assert vocab.PRESETS["en-de"].vocab_size == 37000
    assert vocab.PRESETS["en-de"].model_type == "bpe"
    assert vocab.PRESETS["en-fr"].vocab_size == 32000
    assert vocab.PRESETS["en-fr"].model_type == "unigram"


def test_special_ids_and_size():
    vocabulary = multi30k_vocabulary()
    assert vocabulary.size == TEST_VOCAB_SIZE
    pieces = [vocabulary.processor.id_to_piece(i) for i in range(4)]
    assert pieces == ["<pad>", "<unk>", "<s>", "</s>"]
    assert (vocabulary.pad_id, vocabulary.unk_id, vocabulary.bos_id, vocabulary.eos_id) == (
        0,
        1,
        2,
        3,
    )
    assert int(vocabulary.make_tokenizer().vocab_size()) == TEST_VOCAB_SIZE


@pytest.mark.parametrize("language", ["en", "de"])
def test_round_trip_newstest2013(language):
    """detokenize(tokenize(line)) == normalized line, for every line, in tf.data's op."""
    vocabulary = multi30k_vocabulary()
    lines = read_text_lines(shared_data_dir() / "wmt" / f"newstest2013.{language}")
    assert len(lines) == 3000
    ids = vocabulary.tokenize(tf.constant(lines))
    # News text has characters multi30k never showed the trainer: byte fallback, not <unk>.
    assert int(tf.reduce_sum(tf.cast(ids.flat_values == vocab.UNK_ID, tf.int32))) == 0
    decoded = [text.decode("utf-8") for text in vocabulary.detokenize(ids).numpy()]
    mismatches = [
        (line, out) for line, out in zip(lines, decoded) if out != _reference_normalization(line)
    ]
    assert not mismatches, mismatches[:3]
    # The Python path agrees with the TensorFlow op, and `normalize` documents the result.
    for line in lines[:200]:
        assert vocabulary.decode(vocabulary.encode(line)) == _reference_normalization(line)
        assert vocabulary.normalize(line) == _reference_normalization(line)


def test_detokenize_dense_padded_batch_drops_pad_bos_eos():
    vocabulary = multi30k_vocabulary()
    pieces = vocabulary.encode("A dog runs.")
    dense = tf.constant([[vocab.BOS_ID] + pieces + [vocab.EOS_ID, 0, 0]], tf.int32)
    assert vocabulary.detokenize(dense).numpy().tolist() == [b"A dog runs."]


def test_decode_reads_ids_past_the_last_piece_as_unk():
    """A model may have more rows than its vocabulary has pieces (or be given another run's
    vocabulary): an id with no piece decodes as unk, not as SentencePiece's IndexError."""
    vocabulary = multi30k_vocabulary()
    pieces = vocabulary.encode("A dog runs.")
    unk = vocabulary.decode([vocab.UNK_ID])
    assert unk  # SentencePiece renders unk as a visible mark, never as nothing
    for bad in (vocabulary.size, vocabulary.size + 7, -1):
        assert vocabulary.decode(pieces + [bad]) == vocabulary.decode(pieces + [vocab.UNK_ID])
    assert vocabulary.decode(pieces) == "A dog runs."


def test_unigram_model_type_and_determinism(tmp_path):
    source, target = multi30k_paths(shared_data_dir(), "val")
    corpus = TextPairCorpus(source, target)
    first = vocab.train_vocabulary(
        [corpus], str(tmp_path / "a"), vocab_size=1000, model_type="unigram", num_threads=1, seed=3
    )
    second = vocab.train_vocabulary(
        [corpus], str(tmp_path / "b"), vocab_size=1000, model_type="unigram", num_threads=1, seed=3
    )
    assert first.size == 1000  # rounded up from 1000: already a multiple of 8
    assert first.model_proto == second.model_proto
    assert (tmp_path / "a.model").is_file() and (tmp_path / "a.vocab").is_file()
    assert len((tmp_path / "a.vocab").read_text(encoding="utf-8").splitlines()) == 1000
    loaded = vocab.SubwordVocabulary.from_file(tmp_path / "a.model")
    assert loaded.model_proto == first.model_proto


def test_sampled_lines_are_a_seeded_subset_in_corpus_order(tmp_path):
    source, target = tmp_path / "t.en", tmp_path / "t.de"
    source.write_text("".join(f"s{i}\n" for i in range(60)), encoding="utf-8")
    target.write_text("".join(f"t{i}\n" for i in range(60)), encoding="utf-8")
    corpora = [TextPairCorpus(source, target)]
    every = list(vocab._lines_of(corpora))
    assert sorted(every) == sorted([f"s{i}" for i in range(60)] + [f"t{i}" for i in range(60)])
    first = list(vocab.sampled_lines(corpora, 50, seed=1))
    assert len(first) == len(set(first)) == 50 and set(first) <= set(every)
    assert first == [line for line in every if line in set(first)]  # corpus order kept
    assert list(vocab.sampled_lines(corpora, 50, seed=1)) == first
    assert list(vocab.sampled_lines(corpora, 50, seed=2)) != first
    assert list(vocab.sampled_lines(corpora, 120, seed=1)) == every  # no more than there are
    assert list(vocab.sampled_lines(corpora, 0, seed=1)) == every  # 0: all


SAMPLED_SETTINGS = dict(
    vocab_size=600, model_type="bpe", input_sentence_size=800, num_threads=1, seed=5
)
_TRAIN_SAMPLED = f"""
import hashlib, sys
from keras_transformer.data import vocabulary as vocab
from keras_transformer.data.corpora import TextPairCorpus
trained = vocab.train_vocabulary([TextPairCorpus(sys.argv[1], sys.argv[2])], sys.argv[3],
    **{SAMPLED_SETTINGS!r})
print("MD5", hashlib.md5(trained.model_proto).hexdigest())
"""


def test_a_sampled_vocabulary_is_the_same_in_another_process(tmp_path):
    # SentencePiece's own sampling gave each process another vocabulary for the same seed:
    # this process (after whatever its earlier tests sampled) and a fresh one agree.
    import hashlib
    import subprocess
    import sys

    source, target = multi30k_paths(shared_data_dir(), "val")  # 2028 lines, 800 sampled
    completed = subprocess.run(
        [sys.executable, "-c", _TRAIN_SAMPLED, str(source), str(target), str(tmp_path / "a")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    trained = vocab.train_vocabulary(
        [TextPairCorpus(source, target)], str(tmp_path / "b"), **SAMPLED_SETTINGS
    )
    assert (
        completed.stdout.split("MD5 ")[-1].strip() == hashlib.md5(trained.model_proto).hexdigest()
    )


def test_size_the_text_cannot_fill_is_a_user_error(tmp_path):
    path_en, path_de = tmp_path / "t.en", tmp_path / "t.de"
    path_en.write_text("a b\n", encoding="utf-8")
    path_de.write_text("c d\n", encoding="utf-8")
    with pytest.raises(UserInputError, match="lower the vocabulary size"):
        vocab.train_vocabulary(
            [TextPairCorpus(path_en, path_de)],
            str(tmp_path / "v"),
            vocab_size=5000,
            byte_fallback=False,
        )


def test_loading_errors(tmp_path):
    with pytest.raises(UserInputError, match="does not exist"):
        vocab.SubwordVocabulary.from_file(tmp_path / "missing.model")
    (tmp_path / "junk.model").write_bytes(b"not a model")
    with pytest.raises(UserInputError, match="not a SentencePiece model"):
        vocab.SubwordVocabulary.from_file(tmp_path / "junk.model")


def test_model_with_other_special_ids_is_refused(tmp_path):
    import io

    import sentencepiece

    text = read_text_lines(multi30k_paths(shared_data_dir(), "val")[0])
    model = io.BytesIO()
    # SentencePiece's own defaults: unk 0, bos 1, eos 2, no pad.
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(text), model_writer=model, vocab_size=500, minloglevel=2
    )
    with pytest.raises(UserInputError, match=r"pad=-1, unk=0, bos=1, eos=2.*retrain"):
        vocab.SubwordVocabulary(model.getvalue(), path="other.model")


def test_cli_vocab_trains_and_reports(tmp_path, capsys):
    source, target = multi30k_paths(shared_data_dir(), "val")
    prefix = tmp_path / "cli" / "ende"
    status = cli_main(
        [
            "vocab",
            "--pair",
            str(source),
            str(target),
            "--vocab-size",
            "1001",
            "--model-type",
            "unigram",
            "--output",
            str(prefix),
            "--threads",
            "1",
        ]
    )
    assert status == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["vocab_size"] == 1008 and summary["model_type"] == "unigram"
    assert summary["pairs"] == 1014
    assert summary["special_ids"] == {"pad": 0, "unk": 1, "bos": 2, "eos": 3}
    assert vocab.SubwordVocabulary.from_file(str(prefix) + ".model").size == 1008


def test_cli_vocab_bad_input_is_one_clear_line(tmp_path, capsys):
    (tmp_path / "a.en").write_text("x\ny\n", encoding="utf-8")
    (tmp_path / "a.de").write_text("x\n", encoding="utf-8")
    status = cli_main(
        [
            "vocab",
            "--pair",
            str(tmp_path / "a.en"),
            str(tmp_path / "a.de"),
            "--output",
            str(tmp_path / "v"),
        ]
    )
    assert status == 2
    error = capsys.readouterr().err
    assert "a.en" in error and "a.de" in error and "2 lines" in error and "1 lines" in error
    assert "Traceback" not in error
    assert cli_main(["vocab", "--output", str(tmp_path / "v")]) == 2
    assert "at least one corpus" in capsys.readouterr().err
    # 0 is the user's value, refused as too small (not taken as "unset": the preset's 37000).
    (tmp_path / "a.de").write_text("x\ny\n", encoding="utf-8")
    assert (
        cli_main(
            [
                "vocab",
                "--pair",
                str(tmp_path / "a.en"),
                str(tmp_path / "a.de"),
                "--vocab-size",
                "0",
                "--output",
                str(tmp_path / "v"),
            ]
        )
        == 2
    )
    assert "vocabulary size 0 is too small" in capsys.readouterr().err
    # A file where the output's folder should be: one line, not a FileExistsError traceback.
    (tmp_path / "afile").write_text("not a folder")
    assert (
        cli_main(
            [
                "vocab",
                "--pair",
                str(tmp_path / "a.en"),
                str(tmp_path / "a.de"),
                "--vocab-size",
                "8",
                "--output",
                str(tmp_path / "afile" / "v"),
            ]
        )
        == 2
    )
    error = capsys.readouterr().err
    assert f"cannot make the folder {str(tmp_path / 'afile')!r}" in error
    assert "Traceback" not in error


def test_one_vocabulary_class_under_every_name():
    import keras_transformer.data
    import keras_transformer.translation

    vocabulary = multi30k_vocabulary()
    assert keras_transformer.translation.SentencePieceVocabulary is vocab.SubwordVocabulary
    assert keras_transformer.data.SubwordVocabulary is vocab.SubwordVocabulary
    # A path, the file's bytes and the loader give the same vocabulary.
    with open(vocabulary.path, "rb") as file:
        model_bytes = file.read()
    assert vocab.SubwordVocabulary(vocabulary.path) == vocabulary
    assert vocab.load_vocabulary(model_bytes) == vocabulary
    assert vocab.load_vocabulary(vocabulary) is vocabulary
    with pytest.raises(TypeError, match="vocabulary must be"):
        vocab.load_vocabulary(42)


def test_keras_hub_tokenizer_layer_is_the_same_vocabulary():
    """`to_tokenizer()` (the layer a saved model carries) tokenizes as `encode` does, in
    Python and as TensorFlow ops, and gives the same vocabulary back."""
    vocabulary = multi30k_vocabulary()
    tokenizer = vocabulary.to_tokenizer()
    assert tokenizer.vocabulary_size() == vocabulary.size
    assert vocab.SubwordVocabulary.from_tokenizer(tokenizer) == vocabulary
    assert vocab.load_vocabulary(tokenizer) == vocabulary
    lines = read_text_lines(shared_data_dir() / "wmt" / "newstest2013.de")[:100]
    expected = [vocabulary.encode(line) for line in lines]
    assert [list(map(int, ids)) for ids in tokenizer.tokenize(lines)] == expected
    graph_ids = tf.function(tokenizer.tokenize)(tf.constant(lines))
    assert graph_ids.to_list() == expected
    assert vocabulary.tokenize(tf.constant(lines)).to_list() == expected
    assert tokenizer.detokenize(expected) == [vocabulary.decode(ids) for ids in expected]
