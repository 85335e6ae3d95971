"""The model is `keras.ops` only: it imports, builds and runs without TensorFlow, and on the
JAX and PyTorch backends it computes what it computes on TensorFlow."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from keras import ops

from keras_transformer.decoding import BeamSearch, greedy_search
from tests._decoding_fixtures import EOS, PAD, tiny_model

# Prepended to every child script: as if TensorFlow were not installed (`import tensorflow`
# raises ModuleNotFoundError, and importlib.util.find_spec, which torch asks, returns None).
BLOCK_TENSORFLOW = textwrap.dedent("""
    import sys

    sys.modules["tensorflow"] = None

    def tensorflow_loaded():
        return any(name.startswith("tensorflow") and module is not None
                   for name, module in sys.modules.items())
""")

# The package each backend needs (Keras's numpy backend imports jax for some ops).
BACKEND_PACKAGES = {"numpy": "jax", "jax": "jax", "torch": "torch"}


def run_without_tensorflow(backend, script, *args):
    """Runs `script` with KERAS_BACKEND=`backend` and TensorFlow blocked; returns its stdout.
    Skips when the backend's package is not installed."""
    package = BACKEND_PACKAGES[backend]
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed (pip install -e .[test] installs it)")
    env = {**os.environ, "KERAS_BACKEND": backend}
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_TENSORFLOW + textwrap.dedent(script), *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


BUILD_AND_RUN = """
    import numpy as np
    import keras
    import keras_transformer as kt

    config = kt.TransformerConfig(vocab_size=30, num_layers=1, d_model=32, d_ff=64,
                                  num_heads=4, key_dim=8, value_dim=6)
    model = kt.build_model(config)
    source = np.array([[5, 6, 7, 3], [8, 9, 3, 0]], "int32")
    target = np.array([[2, 10, 11], [2, 12, 0]], "int32")
    logits = keras.ops.convert_to_numpy(model({"source_ids": source, "target_ids": target}))
    assert logits.shape == (2, 3, 30) and np.isfinite(logits).all()
    memory, mask = model.encode(source)
    cache = model.init_cache(memory, 3)
    step_logits, cache = model.decode_step(target[:, :1], mask, cache, 0)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(step_logits), logits[:, 0],
                               atol=1e-5)
    assert not tensorflow_loaded()
    print("OK", keras.backend.backend())
"""


@pytest.mark.parametrize("backend", ["numpy", "jax", "torch"])
def test_model_builds_and_runs_without_tensorflow(backend):
    assert f"OK {backend}" in run_without_tensorflow(backend, BUILD_AND_RUN)


# The forward pass and both searches of a model whose weights come from TensorFlow.
FORWARD_AND_SEARCH = """
    import json
    import numpy as np
    import keras
    from keras_transformer import TransformerConfig, build_model
    from keras_transformer.decoding import BeamSearch, greedy_search

    config = TransformerConfig(**json.loads(sys.argv[1]))
    model = build_model(config)
    model.load_weights(sys.argv[2])
    inputs = {name: np.array(value, "int32") for name, value in json.loads(sys.argv[3]).items()}
    out = {"logits": keras.ops.convert_to_numpy(model(inputs)).tolist()}
    searches = {"greedy": greedy_search,
                "beam": BeamSearch(beam_size=3, alpha=0.6, max_extra_length=4)}
    for name, search in searches.items():
        out[name] = [keras.ops.convert_to_numpy(x).tolist()
                     for x in search(model, inputs["source_ids"])]
    assert not tensorflow_loaded()
    print("RESULT " + json.dumps(out))
"""


# JAX's searches are compared with TensorFlow's in test_beam_search.py.
@pytest.mark.parametrize("backend", ["torch"])
def test_forward_pass_and_searches_equal_tensorflow(backend, tmp_path):
    # Peaky distributions (sharpen): random weights otherwise give near-ties that float
    # round-off can flip between backends.
    model = tiny_model(vocab_size=11, max_length=16, seed=8, sharpen=2.0)
    weights = tmp_path / "tiny.weights.h5"
    model.save_weights(weights)
    inputs = {
        "source_ids": [[5, 6, 7, EOS], [8, EOS, PAD, PAD]],
        "target_ids": [[2, 9, 4, 6], [2, 10, PAD, PAD]],
    }
    stdout = run_without_tensorflow(
        backend, FORWARD_AND_SEARCH, model.config.to_json(), weights, json.dumps(inputs)
    )
    other = json.loads(
        next(line for line in stdout.splitlines() if line.startswith("RESULT "))[len("RESULT ") :]
    )
    inputs = {name: np.array(value, "int32") for name, value in inputs.items()}
    np.testing.assert_allclose(other["logits"], ops.convert_to_numpy(model(inputs)), atol=1e-5)
    searches = {
        "greedy": greedy_search,
        "beam": BeamSearch(beam_size=3, alpha=0.6, max_extra_length=4),
    }
    for name, search in searches.items():
        ids, lengths, log_probs, scores = (
            ops.convert_to_numpy(x) for x in search(model, inputs["source_ids"])
        )
        o_ids, o_lengths, o_log_probs, o_scores = (np.array(x) for x in other[name])
        assert o_ids.tolist() == ids.tolist(), name
        assert o_lengths.tolist() == lengths.tolist(), name
        np.testing.assert_allclose(o_log_probs, log_probs, atol=1e-4)
        np.testing.assert_allclose(o_scores, scores, atol=1e-4)


TRANSLATE = """
    import keras_transformer as kt

    model_path, vocab_path = sys.argv[1], sys.argv[2]
    outputs = kt.translate(["hello world", "", "a b c"], model=model_path,
                           vocabulary=vocab_path, beam_size=2, max_extra_length=3)
    assert len(outputs) == 3 and outputs[1] == "" and all(isinstance(o, str) for o in outputs)
    assert not tensorflow_loaded()
    print("OK")
"""


def test_translate_a_saved_model_on_jax_without_tensorflow(tmp_path):
    import sentencepiece

    import keras_transformer as kt

    text = tmp_path / "text.txt"
    text.write_text("hello world\na b c d e f\nthe quick brown fox\n" * 20)
    sentencepiece.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(tmp_path / "vocab"),
        vocab_size=40,
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        model_type="bpe",
        hard_vocab_limit=False,
    )
    config = kt.TransformerConfig(vocab_size=40, num_layers=1, d_model=16, d_ff=32, num_heads=2)
    kt.build_model(config).save(tmp_path / "model.keras")
    assert "OK" in run_without_tensorflow(
        "jax", TRANSLATE, tmp_path / "model.keras", tmp_path / "vocab.model"
    )


CONSTRAINED_PARSE = """
    import numpy as np
    import keras
    import keras_transformer as kt
    from keras_transformer.decoding import BeamSearch, as_decoder
    from keras_transformer.parsing.constrained_decoding import (TreeConstrainedDecoder,
                                                                TreeConstraint)
    from keras_transformer.parsing.linearization import Linearizer
    from keras_transformer.translation import compile_search

    S = "\\u2581"
    pieces = ["<pad>", "<unk>", "<s>", "</s>", S + "(S", S + ")S", S + "(NP", S + ")NP",
              S + "the", S + "dog", S + "bark", "s"]
    config = kt.TransformerConfig(vocab_size=len(pieces), num_layers=1, d_model=32, d_ff=64,
                                  num_heads=4, key_dim=8, value_dim=8, max_length=64)
    model = kt.build_model(config)
    linearizer = Linearizer(word_slots=True)
    decoder = TreeConstrainedDecoder(model, TreeConstraint(pieces, linearizer), 20)
    search = compile_search(
        lambda s: tuple(BeamSearch(beam_size=3, alpha=0.3, max_extra_length=20)(decoder, s)),
        decoder)
    ids, lengths, _, _ = search(np.array([[8, 9, 10, 11, 3], [9, 10, 11, 3, 0]], "int32"))
    ids, lengths = keras.ops.convert_to_numpy(ids), keras.ops.convert_to_numpy(lengths)
    for row, words in enumerate((["the", "dog", "barks"], ["dog", "barks"])):
        tokens = ids[row, 0, :lengths[row, 0]].tolist()
        assert tokens[-1] == 3, tokens
        text = " ".join(pieces[t][1:] if pieces[t].startswith(S) else "+" + pieces[t]
                        for t in tokens[:-1]).replace(" +", "")
        assert linearizer.delinearize(text, words).repairs == (), text
        assert [t for t in text.split() if t[0] not in "()"] == words, text
    assert not tensorflow_loaded()
    print("OK", keras.backend.backend())
"""


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_constrained_parsing_search_compiles_without_tensorflow(backend):
    # An untrained model's outputs are arbitrary: only the constraint makes them trees. On JAX
    # the search runs under jax.jit, as Translator runs it.
    assert f"OK {backend}" in run_without_tensorflow(backend, CONSTRAINED_PARSE)


NO_CUDNN_TRY_FOR_PADDING_MASKS = """
    import numpy as np
    import jax
    import keras
    from keras.src.backend.jax import nn as jax_nn

    from keras_transformer.layers import ScaledDotProductAttention

    # As on a GPU with cuDNN: Keras would try cuDNN's attention first. Record what is tried.
    # (Keras's private check, patched to fake the GPU; a rename must fail here, not pass.)
    assert hasattr(jax_nn, "_can_use_flash_attention"), "Keras renamed _can_use_flash_attention"
    jax_nn._can_use_flash_attention = lambda *args, **kwargs: True
    tried = []
    original = jax.nn.dot_product_attention

    def recording(*args, implementation=None, **kwargs):
        tried.append(implementation)
        return original(*args, implementation=implementation, **kwargs)

    jax.nn.dot_product_attention = recording
    attention = ScaledDotProductAttention()
    q = np.random.default_rng(0).normal(size=(2, 3, 2, 8)).astype("float32")
    kv = np.random.default_rng(1).normal(size=(2, 4, 2, 8)).astype("float32")
    padding = np.array([[True, True, True, False], [True, True, False, False]])[:, None, None]
    attention(q, kv, kv, attention_mask=padding)
    assert tried == ["xla"], tried
    tried.clear()
    causal = np.tril(np.ones((3, 4), bool))[None, None]
    attention(q, kv, kv, attention_mask=causal)
    assert tried[0] == "cudnn", tried  # a full mask still gets the fused kernel's try
    print("OK", keras.backend.backend())
"""


def test_padding_masks_skip_the_cudnn_attention_that_refuses_them():
    # On a GPU, cuDNN refused [batch, 1, 1, keys] masks and Keras logged a traceback at every
    # trace before using XLA's attention.
    assert "OK jax" in run_without_tensorflow("jax", NO_CUDNN_TRY_FOR_PADDING_MASKS)


CARRIED_VOCABULARY = """
    import json
    import keras
    from keras_transformer.translation import Translator

    model_path, expected = sys.argv[1], json.loads(sys.argv[2])
    translator = Translator.load(model_path, max_extra_length=5)  # nothing beside the file
    assert translator.translate(expected["sources"]) == expected["translations"]
    assert not tensorflow_loaded()
    print("OK", keras.backend.backend())
"""


@pytest.fixture(scope="module")
def keras_file_with_its_vocabulary(tmp_path_factory):
    """A `.keras` file saved into a run folder as training saves it (carrying the run's
    vocabulary), alone in its folder, and its translations on TensorFlow."""
    from keras_transformer.runs.models import atomic_save_model
    from keras_transformer.translation import Translator
    from tests._decoding_fixtures import SENTENCES, train_char_vocabulary

    run = tmp_path_factory.mktemp("run")
    os.replace(train_char_vocabulary(run), run / "vocab.model")
    model = tiny_model(vocab_size=25, max_length=48, seed=21, sharpen=2.0)
    atomic_save_model(model, run / "model.keras")
    (run / "vocab.model").unlink()
    sources = SENTENCES[:3]
    translator = Translator.load(str(run / "model.keras"), max_extra_length=5)
    expected = {"sources": sources, "translations": translator.translate(sources)}
    return run / "model.keras", json.dumps(expected)


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_a_keras_file_translates_with_its_own_vocabulary_without_tensorflow(
    backend, keras_file_with_its_vocabulary
):
    """On JAX and PyTorch the file translates with nothing beside it, as on TensorFlow."""
    path, expected = keras_file_with_its_vocabulary
    assert f"OK {backend}" in run_without_tensorflow(backend, CARRIED_VOCABULARY, path, expected)
