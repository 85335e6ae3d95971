"""The OPUS-MT importer against the reference implementation: a tiny randomized
`MarianMTModel` (tests/_marian_fixtures.py) imported, then run beside transformers' own
forward pass, greedy and beam `generate`, and loss."""

import json

import keras
import numpy as np
import pytest

from keras_transformer.decoding import BeamSearch, greedy_search
from keras_transformer.importers import import_checkpoint
from keras_transformer.importers.marian import read_checkpoint
from tests._marian_fixtures import (
    SOURCE_SENTENCES,
    TARGET_SENTENCES,
    load_marian_model,
    marian_folder,
    marian_tokenizer,
)
from tests.test_backends import run_without_tensorflow

torch = pytest.importorskip("torch")

# Equal-length sources (6 tokens and eos), so that transformers' one max_length and our
# per-sentence cap (source length + max_extra_length) are the same: 17 output tokens.
SOURCE_IDS = np.concatenate(
    [np.random.default_rng(0).integers(3, 53, (4, 6)), np.zeros((4, 1), int)], axis=1
).astype("int32")
EXTRA = 10
HF_MAX_LENGTH = SOURCE_IDS.shape[1] + EXTRA + 1  # transformers counts the start token


def _quiet(line):
    pass


@pytest.fixture(scope="module")
def swish_folder(tmp_path_factory):
    return marian_folder(tmp_path_factory, activation="swish")


@pytest.fixture(scope="module")
def swish_run(swish_folder, tmp_path_factory):
    output = tmp_path_factory.mktemp("imported") / "run"
    return import_checkpoint("marian", swish_folder, output, progress=_quiet)


@pytest.fixture(scope="module")
def model(swish_run):
    return keras.saving.load_model(f"{swish_run}/model.keras")


@pytest.fixture(scope="module")
def reference(swish_folder):
    hf = load_marian_model(swish_folder)
    # No eos forced at the length limit: our searches stop there without one.
    hf.generation_config.forced_eos_token_id = None
    return hf


def padded_batch(folder):
    """Source ids, decoder inputs (start token, then the target) and labels of a padded
    batch, tokenized by transformers' MarianTokenizer (unknown characters and a language
    token included)."""
    tokenizer = marian_tokenizer(folder)
    sources = [">>deu<< " + SOURCE_SENTENCES[0], SOURCE_SENTENCES[2] + " xq", SOURCE_SENTENCES[5]]
    targets = [TARGET_SENTENCES[0], TARGET_SENTENCES[2][:12], TARGET_SENTENCES[5] + " xq"]
    source = tokenizer(sources, return_tensors="np", padding=True)["input_ids"]
    labels = tokenizer(text_target=targets, return_tensors="np", padding=True)["input_ids"]
    pad = tokenizer.pad_token_id
    decoder_input = np.concatenate([np.full((len(labels), 1), pad), labels[:, :-1]], axis=1)
    assert (source == pad).any() and (labels == pad).any() and (source == 1).any()
    return source.astype("int32"), decoder_input.astype("int32"), labels.astype("int32")


def reference_logits(hf, source, decoder_input):
    with torch.no_grad():
        return hf(
            input_ids=torch.tensor(source, dtype=torch.long),
            attention_mask=torch.tensor(source != hf.config.pad_token_id, dtype=torch.long),
            decoder_input_ids=torch.tensor(decoder_input, dtype=torch.long),
        ).logits.numpy()


def our_logits(model, source, decoder_input):
    return keras.ops.convert_to_numpy(model({"source_ids": source, "target_ids": decoder_input}))


# -- the permutation and the run folder ---------------------------------------------------------


def test_permutation_maps_marians_position_table_onto_ours():
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    from keras_transformer.importers._common import half_split_to_interleaved
    from keras_transformer.layers.positional import sinusoidal_positional_encoding

    theirs = MarianSinusoidalPositionalEmbedding(50, 32).create_weight().numpy()
    ours = keras.ops.convert_to_numpy(sinusoidal_positional_encoding(np.arange(50), 32))
    np.testing.assert_allclose(theirs[:, half_split_to_interleaved(32)], ours, atol=2e-5)
    assert not np.allclose(theirs, ours, atol=0.1)  # the layouts do differ


def test_run_folder_holds_config_vocabulary_and_published_decoding(swish_run, swish_folder):
    config = json.loads((swish_run / "config.json").read_text())
    vocab = json.loads((swish_folder / "vocab.json").read_text())
    assert config["activation"] == "swish" and config["output_bias"] is True
    assert config["pad_id"] == config["bos_id"] == vocab["<pad>"] == len(vocab) - 1
    assert (config["eos_id"], config["unk_id"]) == (vocab["</s>"], vocab["<unk>"]) == (0, 1)
    assert config["layer_norm_epsilon"] == 1e-5 and config["shared_embeddings"] == "all"
    assert (config["num_layers"], config["d_model"], config["num_heads"], config["d_ff"]) == (
        2,
        32,
        4,
        64,
    )
    for name in ("source.spm", "target.spm", "vocab.json"):
        assert (swish_run / name).read_bytes() == (swish_folder / name).read_bytes()
    assert not (swish_run / "target_vocab.json").exists()
    decoding = json.loads((swish_run / "decoding.json").read_text())
    assert decoding == {"beam_size": 4, "length_penalty": "power", "alpha": 1.0, "max_length": 40}
    assert sorted(p.name for p in swish_run.parent.iterdir()) == ["run"]  # no staging left


# -- the function: logits, searches, loss ---------------------------------------------------------


def test_logits_equal_transformers_on_a_padded_batch(model, reference, swish_folder):
    source, decoder_input, _ = padded_batch(swish_folder)
    expected = reference_logits(reference, source, decoder_input)
    np.testing.assert_allclose(our_logits(model, source, decoder_input), expected, atol=1e-4)


@pytest.mark.parametrize("weights", ["bin", "safetensors"])
def test_relu_and_pickled_checkpoints_import_exactly(tmp_path_factory, tmp_path, weights):
    folder = marian_folder(tmp_path_factory, activation="relu", weights=weights)
    run = import_checkpoint("marian", folder, tmp_path / "run", progress=_quiet)
    assert json.loads((run / "config.json").read_text())["activation"] == "relu"
    source, decoder_input, _ = padded_batch(folder)
    expected = reference_logits(load_marian_model(folder), source, decoder_input)
    loaded = keras.saving.load_model(f"{run}/model.keras")
    np.testing.assert_allclose(our_logits(loaded, source, decoder_input), expected, atol=1e-4)


@pytest.mark.parametrize(
    ("share", "tie", "shared_embeddings"), [(False, True, "target"), (False, False, "none")]
)
def test_untied_embeddings_import_exactly(
    tmp_path_factory, tmp_path, share, tie, shared_embeddings
):
    folder = marian_folder(
        tmp_path_factory, share_encoder_decoder_embeddings=share, tie_word_embeddings=tie
    )
    run = import_checkpoint("marian", folder, tmp_path / "run", progress=_quiet)
    assert json.loads((run / "config.json").read_text())["shared_embeddings"] == shared_embeddings
    source, decoder_input, _ = padded_batch(folder)
    expected = reference_logits(load_marian_model(folder), source, decoder_input)
    loaded = keras.saving.load_model(f"{run}/model.keras")
    np.testing.assert_allclose(our_logits(loaded, source, decoder_input), expected, atol=1e-4)


OTHER_BACKEND_LOGITS = """
    import sys
    import keras
    import numpy as np
    from keras_transformer.model import Transformer  # noqa: F401  registers the classes

    run, inputs, output = sys.argv[1:]
    batch = np.load(inputs)
    model = keras.saving.load_model(run + "/model.keras")
    logits = model({"source_ids": batch["source"], "target_ids": batch["target"]})
    np.save(output, keras.ops.convert_to_numpy(logits))
    assert not tensorflow_loaded()
"""


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_logits_equal_transformers_on_other_backends(
    backend, swish_run, reference, swish_folder, tmp_path
):
    source, decoder_input, _ = padded_batch(swish_folder)
    np.savez(tmp_path / "batch.npz", source=source, target=decoder_input)
    run_without_tensorflow(
        backend, OTHER_BACKEND_LOGITS, swish_run, tmp_path / "batch.npz", tmp_path / "out.npy"
    )
    expected = reference_logits(reference, source, decoder_input)
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, atol=1e-4)


def _ended(ids, eos=0):
    """A hypothesis as a list: up to its eos (included), or its whole length."""
    ids = [int(token) for token in ids]
    return ids[: ids.index(eos) + 1] if eos in ids else ids


def test_greedy_equals_transformers_generate(model, reference):
    with torch.no_grad():
        expected = reference.generate(
            input_ids=torch.tensor(SOURCE_IDS, dtype=torch.long),
            num_beams=1,
            do_sample=False,
            max_length=HF_MAX_LENGTH,
        ).numpy()[:, 1:]
    result = greedy_search(model, SOURCE_IDS, max_extra_length=EXTRA)
    ours = keras.ops.convert_to_numpy(result.ids)[:, 0]
    assert [_ended(row) for row in ours] == [_ended(row) for row in expected]


def beam_reference(hf, length_penalty):
    with torch.no_grad():
        output = hf.generate(
            input_ids=torch.tensor(SOURCE_IDS, dtype=torch.long),
            num_beams=4,
            num_return_sequences=4,
            length_penalty=length_penalty,
            do_sample=False,
            max_length=HF_MAX_LENGTH,
            output_scores=True,
            return_dict_in_generate=True,
        )
    ids = output.sequences.numpy()[:, 1:].reshape(len(SOURCE_IDS), 4, -1)
    return [[_ended(row) for row in rows] for rows in ids], output.sequences_scores.numpy()


def assert_same_n_best(result, expected_ids, expected_scores):
    ids = keras.ops.convert_to_numpy(result.ids)
    assert [[_ended(row) for row in rows] for rows in ids] == expected_ids
    scores = keras.ops.convert_to_numpy(result.scores).reshape(-1)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-4)


def test_beam_n_best_equals_transformers_without_length_penalty(model, reference):
    expected_ids, expected_scores = beam_reference(reference, length_penalty=0.0)
    # Some hypotheses end with eos, some at the length limit: both kinds are compared.
    lengths = [len(row) for rows in expected_ids for row in rows]
    assert min(lengths) < EXTRA + SOURCE_IDS.shape[1] == max(lengths)
    search = BeamSearch(beam_size=4, alpha=0.0, max_extra_length=EXTRA, num_hypotheses=4)
    assert_same_n_best(search(model, SOURCE_IDS), expected_ids, expected_scores)


def test_beam_n_best_equals_transformers_at_the_power_penalty(model, reference):
    expected_ids, expected_scores = beam_reference(reference, length_penalty=1.0)
    search = BeamSearch(
        beam_size=4,
        alpha=1.0,
        length_penalty="power",
        max_extra_length=EXTRA,
        num_hypotheses=4,
    )
    assert_same_n_best(search(model, SOURCE_IDS), expected_ids, expected_scores)


# -- training ------------------------------------------------------------------------------------


def _training_loss(run, label_smoothing, source, decoder_input, labels):
    """The loss of one `train_on_batch` step of the imported model (dropout off, as
    transformers' eval mode), computed before the step's update."""
    from keras_transformer.config import TransformerConfig
    from keras_transformer.losses import LabelSmoothedCrossEntropy
    from keras_transformer.model import Transformer

    config = TransformerConfig.from_json((run / "config.json").read_text())
    imported = keras.saving.load_model(f"{run}/model.keras")
    model = Transformer(config.replace(dropout=0.0))
    model.set_weights(imported.get_weights())
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=LabelSmoothedCrossEntropy(label_smoothing=label_smoothing, pad_id=config.pad_id),
    )
    inputs = {"source_ids": source, "target_ids": decoder_input}
    loss = float(model.train_on_batch(inputs, labels))
    assert not np.allclose(model.get_weights()[0], imported.get_weights()[0])  # it trained
    return loss


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_one_training_steps_loss_equals_transformers(
    swish_run, reference, swish_folder, label_smoothing
):
    source, decoder_input, labels = padded_batch(swish_folder)
    pad = reference.config.pad_token_id
    masked = torch.tensor(np.where(labels == pad, -100, labels), dtype=torch.long)
    logits = torch.tensor(reference_logits(reference, source, decoder_input))
    # Ours and torch's smoothing are the same: (1 - eps) one-hot + eps / V over all V
    # classes, averaged over the real tokens.
    expected = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        masked.reshape(-1),
        label_smoothing=label_smoothing,
        ignore_index=-100,
    ).item()
    if label_smoothing == 0.0:  # and transformers' own loss, without smoothing
        with torch.no_grad():
            own = reference(
                input_ids=torch.tensor(source, dtype=torch.long),
                attention_mask=torch.tensor(source != pad, dtype=torch.long),
                labels=masked,
            ).loss.item()
        assert own == pytest.approx(expected, abs=1e-5)
    loss = _training_loss(swish_run, label_smoothing, source, decoder_input, labels)
    assert loss == pytest.approx(expected, abs=1e-4)


def test_keras_file_round_trip_keeps_every_weight(swish_folder, model, tmp_path):
    from keras_transformer.importers._common import build_model

    imported = read_checkpoint(swish_folder, progress=_quiet)
    built = build_model(imported.config, imported.weights)
    assert [v.path for v in built.weights] == [v.path for v in model.weights]
    for ours, loaded in zip(built.weights, model.weights):
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(ours), keras.ops.convert_to_numpy(loaded)
        )
    model.save(tmp_path / "again.keras")
    again = keras.saving.load_model(tmp_path / "again.keras")
    source, decoder_input = SOURCE_IDS, np.full((4, 3), 53, "int32")
    np.testing.assert_array_equal(
        our_logits(again, source, decoder_input), our_logits(model, source, decoder_input)
    )
