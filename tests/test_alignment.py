"""Word alignments (keras_transformer.decoding.alignment): piece-to-word pooling on hand-made
attention, the alignment error rate on hand-computed cases, and a trained model whose
alignment is known (it learns to reverse its input)."""

import keras
import numpy as np
import pytest

from keras_transformer import TransformerConfig, build_model
from keras_transformer.decoding import alignment
from keras_transformer.decoding.alignment import (
    CONTINUES_WORD,
    NO_TEXT,
    OWN_WORD,
    STARTS_WORD,
    alignment_error_rate,
    parse_pharaoh,
    to_pharaoh,
    word_alignment,
    word_indices,
)
from keras_transformer.translation import Translator
from tests._decoding_fixtures import (
    EOS,
    PAD,
    tiny_copy_run_folder,
    tiny_model,
    train_char_vocabulary,
)

S, C, N, U = STARTS_WORD, CONTINUES_WORD, NO_TEXT, OWN_WORD


class _Pieces:
    """A stand-in SentencePiece processor over a list of pieces (ids 0-3 control)."""

    def __init__(self, pieces):
        self.pieces = pieces

    def get_piece_size(self):
        return len(self.pieces)

    def id_to_piece(self, piece_id):
        return self.pieces[piece_id]

    def is_control(self, piece_id):
        return piece_id in (0, 2, 3)

    def is_unknown(self, piece_id):
        return piece_id == 1


def test_piece_classes_read_the_word_mark():
    pieces = ["<pad>", "<unk>", "<s>", "</s>", "\u2581rot", "er", "\u2581", "\u2581Hund", "."]
    classes = alignment.piece_classes(_Pieces(pieces), size=10)
    # The padded id 9 decodes as unk, so it reads as unk does.
    assert classes.tolist() == [N, U, N, N, S, C, N, S, C, U]


def test_piece_classes_need_pieces():
    with pytest.raises(TypeError, match="SubwordVocabulary"):
        alignment.piece_classes(object())


@pytest.mark.parametrize(
    "classes, words",
    [
        # "▁ein ▁rot er </s> <pad>": two words, eos and pad in none.
        ([S, S, C, N, N], [0, 1, 1, -1, -1]),
        # A sentence starting mid-word ("er ▁Hund </s>"): its first piece is word 0.
        ([C, S, N], [0, 1, -1]),
        # A lone "▁" (no text) before a piece without a mark: that piece starts a word.
        ([S, N, C, C, N], [0, -1, 1, 1, -1]),
        # No text at all.
        ([N, N], [-1, -1]),
    ],
)
def test_word_indices(classes, words):
    found = keras.ops.convert_to_numpy(word_indices(np.array([classes], "int32")))
    assert found[0].tolist() == words


def test_unknown_pieces_are_words_of_their_own_in_a_translation_only():
    # "▁ein <unk> er <unk> ▁Hund": SentencePiece decodes it as "ein ⁇ er ⁇ Hund" (5 words);
    # in a source the unk stands for a character of "ein?er?" (2 words).
    classes = np.array([[S, U, C, U, S, N]], "int32")
    translation = keras.ops.convert_to_numpy(word_indices(classes, own_words=True))
    source = keras.ops.convert_to_numpy(word_indices(classes))
    assert translation[0].tolist() == [0, 1, 2, 3, 4, -1]
    assert source[0].tolist() == [0, 0, 0, 0, 1, -1]


def test_pooling_sums_source_pieces_and_averages_target_pieces():
    # Source "▁ein ▁rot er </s>": words 0, 1, 1, none. Target "▁A ▁B c </s>": words 0, 1, 1.
    source_words = np.array([[0, 1, 1, -1]])
    target_words = np.array([[0, 1, 1, -1]])
    weights = np.array(
        [
            [
                # Target word 0: piece 0 peaks on "▁ein" (0.4) but "rot"+"er" hold 0.5.
                [0.4, 0.25, 0.25, 0.1],
                # Target word 1, two pieces: mean on word 0 is (0.5 + 0.1) / 2 = 0.3, on
                # word 1 ((0.2 + 0.2) + (0.3 + 0.5)) / 2 = 0.6.
                [0.5, 0.2, 0.2, 0.1],
                [0.1, 0.3, 0.5, 0.1],
                # eos row: excluded, whatever it attends to.
                [1.0, 0.0, 0.0, 0.0],
            ]
        ],
        "float32",
    )
    source_word, valid = word_alignment(weights, source_words, target_words)
    source_word = keras.ops.convert_to_numpy(source_word)[0]
    valid = keras.ops.convert_to_numpy(valid)[0]
    assert valid.tolist() == [True, True, False, False]
    assert source_word[:2].tolist() == [1, 1]


def test_pooling_ignores_attention_on_eos_and_padding():
    # Most of the mass on eos (column 2) and pad (column 3): the real words still decide.
    weights = np.array([[[0.1, 0.2, 0.6, 0.1], [0.15, 0.05, 0.5, 0.3], [0.0, 0.0, 1.0, 0.0]]])
    source_word, valid = word_alignment(weights, np.array([[0, 1, -1, -1]]), np.array([[0, 1, -1]]))
    assert keras.ops.convert_to_numpy(source_word)[0, :2].tolist() == [1, 0]
    assert keras.ops.convert_to_numpy(valid)[0].tolist() == [True, True, False]


def test_pharaoh_round_trip():
    assert to_pharaoh([(0, 0), (2, 1), (1, 2)]) == "0-0 2-1 1-2"
    assert to_pharaoh([]) == ""
    assert parse_pharaoh("0-0 2-1 1?2") == {(0, 0), (2, 1), (1, 2)}


def test_alignment_error_rate_hand_computed():
    hypothesis = [{(0, 0), (1, 1), (2, 1)}]
    sure = [{(0, 0), (1, 2)}]
    possible = [{(2, 1)}]
    # |A&S| = 1, |A&P| = 2 (P includes S), |A| = 3, |S| = 2: 1 - 3/5.
    assert alignment_error_rate(hypothesis, sure, possible) == pytest.approx(0.4)
    # Corpus level: counts are summed before dividing (not a mean of sentence rates).
    second = ([{(0, 0)}], [{(0, 0)}], [set()])
    corpus = [a + b for a, b in zip((hypothesis, sure, possible), second)]
    assert alignment_error_rate(*corpus) == pytest.approx(1 - (1 + 2 + 2) / (3 + 2 + 1 + 1))
    assert alignment_error_rate([{(0, 0)}], [{(0, 0)}]) == 0.0
    assert alignment_error_rate([{(1, 0)}], [{(0, 0)}]) == 1.0
    # A possible link found costs nothing; a sure link missed does.
    assert alignment_error_rate([{(0, 0), (1, 1)}], [{(0, 0)}], [{(1, 1)}]) == 0.0
    assert alignment_error_rate([{(0, 0)}], [{(0, 0), (1, 1)}]) == pytest.approx(1 - 2 / 3)
    with pytest.raises(ValueError, match="one of each per sentence"):
        alignment_error_rate([set()], [set(), set()])


# -- a model whose alignment is known ------------------------------------------------------

WORDS = list(range(4, 14))  # ten word ids: the pieces of a word-level vocabulary
NAMES = "alpha bravo charlie delta echo foxtrot golf hotel india juliet".split()


def _reversal_pairs(rng, count):
    sources, targets = [], []
    for _ in range(count):
        words = rng.choice(WORDS, size=rng.integers(3, 6), replace=False).tolist()
        sources.append(words + [EOS])
        targets.append(words[::-1] + [EOS])
    return sources, targets


def _padded(rows, width):
    array = np.full((len(rows), width), PAD, "int32")
    for k, row in enumerate(rows):
        array[k, : len(row)] = row
    return array


def _word_vocabulary(folder):
    """A SentencePiece word model whose ten pieces ("▁alpha", ...) are ids 4-13."""
    import random

    import sentencepiece

    rng = random.Random(0)
    sentences = [" ".join(rng.sample(NAMES, 4)) for _ in range(200)]
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_prefix=str(folder / "words"),
        vocab_size=14,
        model_type="word",
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        minloglevel=2,
    )
    return str(folder / "words.model")


@pytest.fixture(scope="module")
def reversal_model():
    """A one-layer model trained to reverse its input: target word j comes from source word
    n-1-j, and with one layer its cross-attention must fetch that word."""
    keras.utils.set_random_seed(0)
    config = TransformerConfig(
        vocab_size=14, num_layers=1, d_model=32, d_ff=64, num_heads=4, max_length=8, dropout=0.0
    )
    model = build_model(config)
    sources, targets = _reversal_pairs(np.random.default_rng(0), 4096)
    labels = _padded(targets, 6)
    decoder_inputs = np.concatenate([np.full((len(labels), 1), config.bos_id), labels[:, :-1]], 1)
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD),
    )
    model.fit(
        {"source_ids": _padded(sources, 6), "target_ids": decoder_inputs.astype("int32")},
        labels,
        batch_size=64,
        epochs=4,
        verbose=0,
    )
    return model


def test_a_trained_reversal_model_aligns_each_word_to_its_source(reversal_model):
    sources, targets = _reversal_pairs(np.random.default_rng(1), 50)
    classes = np.full([14], STARTS_WORD, "int32")
    classes[[0, 1, 2, 3]] = NO_TEXT
    found = alignment.align_pairs(reversal_model, classes, list(zip(sources, targets)))
    gold = [{(len(s) - 2 - j, j) for j in range(len(s) - 1)} for s in sources]
    # A few updates on a CPU: most links right (a random model's AER is about 0.7).
    assert alignment_error_rate([set(links) for links in found], gold) < 0.2
    # Monotone links (source word j to target word j), right only at the middle word,
    # would fail the same bound: the bound tells a reversing model from a copying one.
    monotone = [{(j, j) for j in range(len(s) - 1)} for s in sources]
    assert alignment_error_rate(monotone, gold) > 0.6


# -- through the Translator ----------------------------------------------------------------


@pytest.fixture(scope="module")
def char_translator(tmp_path_factory):
    vocabulary = train_char_vocabulary(tmp_path_factory.mktemp("alignment_vocab"))
    model = tiny_model(vocab_size=25, max_length=48, seed=3, sharpen=2.0)
    return Translator(model, vocabulary, beam_size=2, max_extra_length=8, compile=False)


def test_translate_returns_alignments_of_its_own_output(char_translator):
    texts = ["the cat sat", "", "a dog"]
    plain = char_translator.translate(texts)
    with_links = char_translator.translate(texts, return_alignments=True)
    assert [text for text, _ in with_links] == plain
    assert with_links[1] == ("", [])
    vocabulary = char_translator.vocabulary
    classes = alignment.piece_classes(vocabulary, 25)
    for source, (text, links) in zip(texts, with_links):
        if not source:
            continue
        target_ids = vocabulary.encode(text) + [EOS]
        expected = alignment.align_pairs(
            char_translator.decoder, classes, [(vocabulary.encode(source) + [EOS], target_ids)]
        )[0]
        # Re-encoding the output may split it otherwise than the search did; where it
        # does not, the alignment is the one of the given ids.
        if vocabulary.encode(text) == vocabulary.encode(vocabulary.decode(target_ids)):
            assert links == expected
        # One link per target word, into the source's words, ordered by target word.
        assert [j for _, j in links] == list(range(len(text.split())))
        assert all(0 <= i < len(source.split()) for i, _ in links)


def test_n_best_entries_carry_their_alignments(char_translator):
    (nbest,) = char_translator.translate(["birds sing"], num_hypotheses=2, return_alignments=True)
    assert [(text, score) for text, score, _ in nbest] == char_translator.translate(
        ["birds sing"], num_hypotheses=2
    )[0]
    for text, _, links in nbest:
        assert [j for _, j in links] == list(range(len(text.split())))


def test_translate_aligns_a_reversal_models_output(reversal_model, tmp_path):
    translator = Translator(reversal_model, _word_vocabulary(tmp_path), beam_size=2)
    rng = np.random.default_rng(2)
    texts = [" ".join(rng.choice(NAMES, size=rng.integers(3, 6), replace=False)) for _ in range(30)]
    results = translator.translate(texts, return_alignments=True)
    hypotheses, gold, reversed_ok = [], [], 0
    for text, (translation, links) in zip(texts, results):
        words = text.split()
        # One link per output word, into the source's words, ordered by output word.
        assert [j for _, j in links] == list(range(len(translation.split())))
        assert all(0 <= i < len(words) for i, _ in links)
        if translation.split() == words[::-1]:
            reversed_ok += 1
            hypotheses.append(set(links))
            gold.append({(len(words) - 1 - j, j) for j in range(len(words))})
    assert reversed_ok >= 20, f"the model reversed only {reversed_ok} of 30 sentences"
    assert alignment_error_rate(hypotheses, gold) < 0.2
    # The Pharaoh pairs are those of the output's own ids, found by teacher forcing.
    vocabulary = translator.vocabulary
    classes = alignment.piece_classes(vocabulary, 14)
    pairs = [
        (vocabulary.encode(text) + [EOS], vocabulary.encode(translation) + [EOS])
        for text, (translation, _) in zip(texts, results)
    ]
    assert alignment.align_pairs(reversal_model, classes, pairs) == [links for _, links in results]


# -- keras-transformer translate --alignments ----------------------------------------------


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    return tiny_copy_run_folder(tmp_path_factory)


def _cli(*args):
    from keras_transformer.cli import main

    return main(["translate", *args])


def test_cli_writes_one_pharaoh_line_per_output_line(run_folder, tmp_path):
    texts = ["the cat sat", "", "a dog walks"]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    settings = ["--max-extra-length", "4"]
    for n_best in (1, 2):
        output, links = tmp_path / f"out{n_best}.txt", tmp_path / f"links{n_best}.txt"
        common = ["--model", str(run_folder), "-i", str(source), "-o", str(output)]
        assert _cli(*common, "--alignments", str(links), "--n-best", str(n_best), *settings) == 0
        translator = Translator.load(str(run_folder), max_extra_length=4, num_hypotheses=n_best)
        expected = translator.translate(texts, return_alignments=True)
        if n_best == 1:
            lines = [alignment.to_pharaoh(pairs) for _, pairs in expected]
        else:
            lines = [alignment.to_pharaoh(p) for hyps in expected for _, _, p in hyps]
        found = links.read_text(encoding="utf-8").split("\n")
        assert found == [*lines, ""]
        assert len(found) == len(output.read_text(encoding="utf-8").split("\n"))


def test_cli_refuses_an_existing_alignments_file(run_folder, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("a dog\n", encoding="utf-8")
    links, output = tmp_path / "links.txt", tmp_path / "out.txt"
    links.write_text("kept\n", encoding="utf-8")
    args = ["--model", str(run_folder), "-i", str(source), "-o", str(output)]
    assert _cli(*args, "--alignments", str(links)) != 0
    assert "--alignments" in capsys.readouterr().err
    assert links.read_text(encoding="utf-8") == "kept\n" and not output.exists()
    assert _cli(*args, "--alignments", str(output)) != 0
    assert "same file" in capsys.readouterr().err


def test_cli_writes_no_alignments_file_when_the_run_fails(run_folder, tmp_path):
    source = tmp_path / "in.txt"
    source.write_bytes(b"a dog\n\xff\n")
    links = tmp_path / "links.txt"
    assert _cli("--model", str(run_folder), "-i", str(source), "--alignments", str(links)) != 0
    assert not links.exists()


# -- the SavedModel's translate_with_alignments ----------------------------------------------


def test_saved_model_serves_alignments_as_translate_gives_them(reversal_model, tmp_path):
    import tensorflow as tf

    from keras_transformer.export import export_saved_model

    vocabulary = _word_vocabulary(tmp_path)
    settings = dict(beam_size=2, alpha=0.6, max_extra_length=4)
    path = export_saved_model(
        reversal_model,
        vocabulary,
        "reverse",
        base_dir=tmp_path / "saved",
        max_beam_size=2,
        **settings,
    )
    # TensorFlow's own loader, without our code's help (as TF Serving would).
    serve = tf.saved_model.load(str(path)).signatures["translate_with_alignments"]
    inputs = dict(beam_size=tf.constant(2), alpha=tf.constant(0.6), max_extra_length=tf.constant(4))
    texts = ["alpha bravo charlie", "", "delta echo foxtrot golf", "  ", "hotel india"]
    found = serve(text=tf.constant(texts), **inputs)
    expected = Translator(reversal_model, vocabulary, **settings).translate(
        texts, return_alignments=True
    )
    translations = [t.decode("utf-8") for t in found["translation"].numpy()]
    assert translations == [text for text, _ in expected]
    links = [t.decode("utf-8") for t in found["alignment"].numpy()]
    assert links == [alignment.to_pharaoh(pairs) for _, pairs in expected]
    assert links[0] and links[1] == "" and links[3] == ""
    empty = serve(text=tf.constant([], tf.string), **inputs)
    assert empty["alignment"].shape == (0,) and empty["translation"].shape == (0,)
    # The TF1 session loader (TF Serving's C++ loader does the same), fed `text` alone and
    # the SignatureDef's defaults for the rest, as TF Serving fills them in.
    with tf.compat.v1.Session(graph=tf.Graph()) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(path))
        signature = meta.signature_def["translate_with_alignments"]
        feed = {signature.inputs["text"].name: texts}
        for key, tensor_info in signature.inputs.items():
            if key != "text":
                feed[tensor_info.name] = tf.make_ndarray(signature.defaults[key])
        served = session.run(signature.outputs["alignment"].name, feed_dict=feed)
    assert sorted(signature.defaults) == ["alpha", "beam_size", "max_extra_length"]
    assert [t.decode("utf-8") for t in served] == links
