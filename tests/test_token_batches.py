"""Inference batches under a token budget: the grouping, output order, agreement with sentence
batches, a bounded number of compiled-search traces, bad values and the CLI flags."""

import random

import numpy as np
import pytest

from keras_transformer.cli import main
from keras_transformer.data.vocabulary import SubwordVocabulary
from keras_transformer.decoding.batches import (
    BatchPlan,
    full_rows,
    padded_rows,
    padded_width,
    sentence_batches,
    sequence_lengths,
    token_batches,
)
from keras_transformer.decoding.compiled import compile_search
from keras_transformer.errors import UserInputError
from keras_transformer.translation import LENGTH_MULTIPLE, Translator, translate
from tests._decoding_fixtures import SENTENCES, tiny_copy_run_folder, tiny_model
from tests.test_translation import CopyDecoder


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    return tiny_copy_run_folder(tmp_path_factory)


@pytest.fixture(scope="module")
def vocabulary_path(run_folder):
    return str(run_folder / "vocab.model")


# -- the grouping, by hand ----------------------------------------------------------------------


def test_padded_width_rounds_up_to_the_bucket_and_stops_at_max_length():
    assert [padded_width(n, 8) for n in (1, 8, 9, 16, 17)] == [8, 8, 16, 16, 24]
    assert padded_width(40, 8, max_length=32) == 32
    assert padded_width(5) == 5


def test_token_batches_hand_computed():
    lengths = [5, 17, None, 9, 3, 12, 40, 8]
    # Longest first: 6 (40 -> width 32, the cap), 1 (17 -> 24), 5 (12 -> 16), 3 (9), 7 (8),
    # 0 (5), 4 (3). Budget 32: [6] alone (2 x 32 > 32); [1] alone (2 x 24 > 32); [5, 3] costs
    # 2 x 16 = 32, a third would be 48; [7, 0, 4] costs 3 x 8 = 24.
    assert token_batches(lengths, 32, length_multiple=8, max_length=32) == [
        [6],
        [1],
        [5, 3],
        [7, 0, 4],
    ]
    # batch_size still caps the sentences of a batch.
    assert token_batches(lengths, 32, batch_size=2, length_multiple=8, max_length=32) == [
        [6],
        [1],
        [5, 3],
        [7, 0],
        [4],
    ]
    # Raw lengths (no bucket), the padded count fairseq and CTranslate2 use: [3] alone
    # (2 x 4 > 6); [1, 0] = 2 x 3; [5, 2, 4] = 3 x 2.
    assert token_batches([2, 3, 1, 4, 1, 2], 6) == [[3], [1, 0], [5, 2, 4]]


def test_a_sentence_over_the_budget_is_a_batch_of_its_own():
    assert token_batches([50, 3, 60, 2], 16, length_multiple=8) == [[2], [0], [1, 3]]
    assert token_batches([7], 1) == [[0]]


def test_equal_lengths_keep_input_order_and_a_huge_budget_gives_sentence_batches():
    lengths = [random.Random(seed).randint(1, 30) for seed in range(40)]
    assert sentence_batches(lengths, 7) == token_batches(lengths, 10**9, batch_size=7)
    batches = token_batches([4] * 5, 8)
    assert batches == [[0, 1], [2, 3], [4]]


def test_every_batch_is_within_the_budget_and_every_sentence_is_in_one():
    rng = random.Random(3)
    lengths = [rng.choice([None, *range(1, 70)]) for _ in range(300)]
    batches = token_batches(lengths, 100, batch_size=12, length_multiple=8, max_length=64)
    flat = sorted(i for batch in batches for i in batch)
    assert flat == [i for i, n in enumerate(lengths) if n is not None]
    for batch in batches:
        width = padded_width(max(lengths[i] for i in batch), 8, 64)
        assert len(batch) * width <= 100 or len(batch) == 1
        assert len(batch) <= 12


def test_padded_rows_repeat_the_last_sentence_up_to_a_power_of_two():
    assert full_rows(8, 64) == 8 and full_rows(8, 64, batch_size=5) == 5
    assert full_rows(100, 64) == 1  # over the budget: one sentence
    assert padded_rows([7, 4, 5], width=8, batch_tokens=64) == [7, 4, 5, 5]
    assert padded_rows([7, 4, 5, 1, 2], width=8, batch_tokens=64) == [7, 4, 5, 1, 2, 2, 2, 2]
    # Never over the full size of the width: 6 sentences of width 16 under 112 fill 7 rows.
    assert padded_rows(list(range(6)), width=16, batch_tokens=112) == [0, 1, 2, 3, 4, 5, 5]
    assert padded_rows([3], width=100, batch_tokens=64) == [3]


def test_batch_plan_groups_pads_rows_and_fills_the_block():
    # The docstring's example: budget 12, widths as they are.
    plan = BatchPlan(batch_size=32, batch_tokens=12, pad_id=0)
    assert plan.groups([3, 9, 5, 2]) == [[1], [2, 0], [3]]
    np.testing.assert_array_equal(
        plan.block([[5, 6], [7]], plan.rows([0, 1], [2, 1])), [[5, 6], [7, 0]]
    )
    # Widths in buckets of 4 (at most the model's 10), three rows padded to four under 64.
    plan = BatchPlan(batch_size=8, batch_tokens=64, length_multiple=4, max_length=10, pad_id=1)
    sequences = [[9] * 5, [8] * 3, [7] * 2]
    rows = plan.rows([0, 1, 2], [len(s) for s in sequences])
    assert rows == [0, 1, 2, 2]  # width 8: 8 rows fit, the next power of two is 4
    expected = np.ones((4, 8), "int32")
    for row, i in enumerate(rows):
        expected[row, : len(sequences[i])] = sequences[i]
    block = plan.block(sequences, rows)
    assert block.dtype == np.int32
    np.testing.assert_array_equal(block, expected)
    # Counted in sentences: groups of batch_size, longest first, no padded rows; empty
    # inputs (None) in none.
    plan = BatchPlan(batch_size=2, pad_id=0)
    assert plan.groups([1, None, 4, 2]) == [[2, 3], [0]]
    assert plan.rows([2, 3], [1, None, 4, 2]) == [2, 3]
    np.testing.assert_array_equal(plan.block([[1], [2, 3, 4, 5, 6]], [1]), [[2, 3, 4, 5, 6]])


# -- the Translator -----------------------------------------------------------------------------


def test_output_is_in_input_order(vocabulary_path):
    vocabulary = SubwordVocabulary(vocabulary_path)
    texts = list(SENTENCES) + ["", "a dog"]
    random.Random(0).shuffle(texts)
    translator = Translator(
        CopyDecoder(vocabulary.size),
        vocabulary_path,
        batch_tokens=48,
        search="greedy",
        max_extra_length=0,
        compile=False,
    )
    assert translator.translate(texts) == texts
    encoded = translator._encode(texts)
    batches = translator.batches.groups(sequence_lengths(encoded))
    assert len(batches) > 2  # the budget really splits the input
    for batch in batches:
        width = padded_width(max(len(encoded[i]) for i in batch), LENGTH_MULTIPLE, 64)
        assert len(batch) * width <= 48 or len(batch) == 1


def test_batch_settings_set_on_a_translator_apply_to_its_next_call(vocabulary_path):
    """`batch_size` and `batch_tokens` set after construction (as the decoding benchmark sets
    the size it measures) batch the next call."""
    vocabulary = SubwordVocabulary(vocabulary_path)
    texts = ["a dog", "it rains", "hello"]
    translator = Translator(
        CopyDecoder(vocabulary.size), vocabulary_path, search="greedy", max_extra_length=0,
        compile=False,
    )  # fmt: skip
    calls = []
    search = translator.translate_ids
    translator.translate_ids = lambda ids, prefix_ids=None: calls.append(len(ids)) or search(ids)
    assert translator.translate(texts) == texts and calls == [3]
    translator.batch_size, calls[:] = 1, []
    assert translator.translate(texts) == texts and calls == [1, 1, 1]
    assert translator.batch_size == translator.batches.batch_size == 1
    # A budget of 16 padded tokens: "it rains" (10 tokens with eos, width 16) alone, the
    # other two (7 tokens, width 8) together.
    translator.batch_size, translator.batch_tokens, calls[:] = 32, 16, []
    assert translator.translate(texts) == texts and calls == [1, 2]
    assert translator.batch_tokens == translator.batches.batch_tokens == 16


def test_token_batches_translate_as_sentence_batches(vocabulary_path):
    vocabulary = SubwordVocabulary(vocabulary_path)
    model = tiny_model(vocab_size=vocabulary.size, max_length=48, seed=11, sharpen=2.0)
    # Short sentences (7 and 10 tokens: widths 8 and 16), decoded eagerly: the batching is
    # the same compiled or not, and a search of few steps keeps the test quick.
    texts = ["a dog", "it rains", "hello", "green", "it rains", "a dog", "green", "hello"]
    settings = dict(beam_size=2, max_extra_length=3, num_hypotheses=2, compile=False)
    # Longest first: 1, 4 (width 16), then 0, 2, 3, 5, 6, 7 (width 8). Three sentences a
    # batch, or up to 32 tokens: 2 x 16, then 4 x 8.
    by_sentences = Translator(model, vocabulary_path, batch_size=3, **settings)
    by_tokens = Translator(model, vocabulary_path, batch_tokens=32, **settings)
    encoded = by_tokens._encode(texts)
    assert by_sentences.batches.groups(sequence_lengths(encoded)) == [[1, 4, 0], [2, 3, 5], [6, 7]]
    assert by_tokens.batches.groups(sequence_lengths(encoded)) == [[1, 4], [0, 2, 3, 5], [6, 7]]
    expected, got = by_sentences.translate(texts), by_tokens.translate(texts)
    for hypotheses, reference in zip(got, expected):
        assert [text for text, _ in hypotheses] == [text for text, _ in reference]
        np.testing.assert_allclose(
            [score for _, score in hypotheses], [score for _, score in reference], atol=1e-4
        )
    # The top-level function takes the same argument.
    top_level = translate(texts[:3], model, vocabulary_path, batch_tokens=16, **settings)
    assert [[text for text, _ in n_best] for n_best in top_level] == [
        [text for text, _ in n_best] for n_best in expected[:3]
    ]


def test_scores_by_token_batches_equal_sentence_batches(vocabulary_path):
    vocabulary = SubwordVocabulary(vocabulary_path)
    model = tiny_model(vocab_size=vocabulary.size, max_length=48, seed=5, sharpen=2.0)
    sources = list(SENTENCES)
    targets = sources[3:] + sources[:3]
    by_sentences = Translator(model, vocabulary_path, batch_size=3, compile=False)
    by_tokens = Translator(model, vocabulary_path, batch_tokens=50, compile=False)
    np.testing.assert_allclose(
        by_tokens.score(sources, targets), by_sentences.score(sources, targets), atol=1e-4
    )


def _counting(search):
    """`search`, counting its Python calls: under `tf.function` / `jax.jit` one per trace."""

    def counted(*args):
        counted.calls += 1
        return search(*args)

    counted.calls = 0
    return counted


def test_mixed_lengths_trace_a_bounded_number_of_shapes(vocabulary_path):
    vocabulary = SubwordVocabulary(vocabulary_path)
    model = tiny_model(vocab_size=vocabulary.size, max_length=48, seed=2)
    translator = Translator(
        model, vocabulary_path, search="greedy", max_extra_length=1, batch_tokens=32, batch_size=8
    )
    search = _counting(translator._search)
    translator._compiled = compile_search(search, translator.decoder)
    shapes, translate_ids = [], translator.translate_ids

    def recording_translate_ids(source_ids, *args):
        shapes.append(np.shape(source_ids))
        return translate_ids(source_ids, *args)

    translator.translate_ids = recording_translate_ids
    mixed = ["a dog", "hello", "green", "it rains", "the cat sat on the mat"]
    rng = random.Random(4)
    for _ in range(12):  # chunks of a file: each ends in a partial batch of its own size
        translator.translate([rng.choice(mixed) for _ in range(rng.randint(1, 12))])
    # 7, 10 and 24 tokens (eos included): widths 8, 16 and 24. Rows per width: powers of two
    # up to min(8, 32 // width): 8 -> {1, 2, 4}, 16 -> {1, 2}, 24 -> {1}: at most 6 shapes,
    # however many chunks and batches (without the bucketing, any count from 1 to 4).
    allowed = {(1, 8), (2, 8), (4, 8), (1, 16), (2, 16), (1, 24)}
    assert set(shapes) <= allowed
    assert search.calls == len(set(shapes)) <= len(allowed)
    assert len(shapes) > 2 * search.calls  # many more batches than traces


# -- bad values and the CLI ---------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -5, 2.5, True, "64"])
def test_bad_budgets_are_one_clear_error(vocabulary_path, value):
    vocabulary = SubwordVocabulary(vocabulary_path)
    message = f"batch_tokens={value} is out of range: it must be an integer of at least 1"
    with pytest.raises(UserInputError, match=f"^{message}$"):
        Translator(CopyDecoder(vocabulary.size), vocabulary_path, batch_tokens=value)
    with pytest.raises(UserInputError, match=f"^{message}$"):
        token_batches([3, 4], value)


def test_cli_batch_tokens_writes_what_sentence_batches_write(run_folder, tmp_path):
    texts = ["a dog", "it rains", "", "hello", "green", "it rains", "a dog", "hello"]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    outputs = {}
    for name, flags in (("sentences", ["--batch-size", "3"]), ("tokens", ["--batch-tokens", "24"])):
        outputs[name] = tmp_path / f"{name}.txt"
        command = ["translate", "--model", str(run_folder), "-i", str(source), "--no-compile"]
        command += ["-o", str(outputs[name]), "--max-extra-length", "2", "--chunk-size", "5"]
        command += ["--search", "greedy"]
        assert main(command + flags) == 0
    lines = outputs["tokens"].read_text(encoding="utf-8").split("\n")[:-1]
    assert lines == outputs["sentences"].read_text(encoding="utf-8").split("\n")[:-1]
    assert len(lines) == len(texts) and lines[2] == ""


def test_cli_score_batch_tokens(run_folder, tmp_path, capsys):
    source, target = tmp_path / "src.txt", tmp_path / "tgt.txt"
    source.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    target.write_text("\n".join(SENTENCES[::-1]) + "\n", encoding="utf-8")
    command = ["score", "--model", str(run_folder), "--source", str(source)]
    command += ["--target", str(target), "--no-compile"]
    assert main(command) == 0
    by_sentences = [float(x) for x in capsys.readouterr().out.split()]
    assert main(command + ["--batch-tokens", "60"]) == 0
    by_tokens = [float(x) for x in capsys.readouterr().out.split()]
    np.testing.assert_allclose(by_tokens, by_sentences, atol=1e-4)


@pytest.mark.parametrize("command", ["translate", "score"])
def test_cli_bad_budget_is_one_line(run_folder, tmp_path, capsys, monkeypatch, command):
    from tests.test_cli_translate import stdin_of

    monkeypatch.setattr("sys.stdin", stdin_of("a dog\n"))
    output = tmp_path / "out.txt"
    flags = ["--source", "-", "--target", "-"] if command == "score" else []
    argv = [command, "--model", str(run_folder), "-o", str(output), *flags]
    assert main(argv + ["--batch-tokens", "0"]) == 2
    assert capsys.readouterr().err == (
        f"keras-transformer {command}: error: --batch-tokens=0 is out of range: it must be an "
        "integer of at least 1\n"
    )
    assert not output.exists()
    with pytest.raises(SystemExit) as stop:
        main(argv + ["--batch-tokens", "1.5"])
    assert stop.value.code == 2
    assert "--batch-tokens: invalid int value: '1.5'" in capsys.readouterr().err
