"""The model is `keras.ops` only: it imports, builds and runs without TensorFlow, and on the
JAX and PyTorch backends it computes what it computes on TensorFlow.

Each check is a script run with TensorFlow blocked; one child interpreter per backend runs all
of that backend's scripts (`output_without_tensorflow`), since importing JAX or PyTorch is most
of a short child's time."""

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


# Runs several scripts in one interpreter (JAX or PyTorch takes 3-6 s to import), each as its
# own __main__ with its own sys.argv; prints each one's output, or its traceback, by name.
RUN_SCRIPTS = """
    import contextlib, io, json, textwrap, traceback

    results = {}
    for name, script, args in json.load(open(sys.argv[1])):
        sys.argv = [name, *args]
        out = io.StringIO()
        namespace = {"__name__": "__main__", "sys": sys, "tensorflow_loaded": tensorflow_loaded}
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(textwrap.dedent(script), name, "exec"), namespace)
            results[name] = {"stdout": out.getvalue()}
        except BaseException:
            results[name] = {"stdout": out.getvalue(), "error": traceback.format_exc()}
    print("RESULTS " + json.dumps(results))
"""


def run_scripts_without_tensorflow(backend, scripts, folder):
    """`{name: stdout}` of `scripts` (`[(name, script, args)]`), all run in one interpreter
    with KERAS_BACKEND=`backend` and TensorFlow blocked, one after the other; a script that
    raised gives `{"error": traceback}` instead."""
    listing = folder / f"scripts-{backend}.json"
    listing.write_text(
        json.dumps([(name, script, [str(arg) for arg in args]) for name, script, args in scripts])
    )
    stdout = run_without_tensorflow(backend, RUN_SCRIPTS, listing)
    line = next(line for line in stdout.splitlines() if line.startswith("RESULTS "))
    return json.loads(line[len("RESULTS ") :])


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
def test_model_builds_and_runs_without_tensorflow(backend, output_without_tensorflow):
    assert f"OK {backend}" in output_without_tensorflow(backend, "build_and_run")


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
def test_forward_pass_and_searches_equal_tensorflow(
    backend, script_inputs, output_without_tensorflow
):
    model, inputs = script_inputs["forward_model"], script_inputs["forward_inputs"]
    stdout = output_without_tensorflow(backend, "forward_and_search")
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


def test_translate_a_saved_model_on_jax_without_tensorflow(output_without_tensorflow):
    assert "OK" in output_without_tensorflow("jax", "translate")


CONSTRAINED_PARSE = """
    import numpy as np
    import keras
    import keras_transformer as kt
    from keras_transformer.decoding import BeamSearch, as_decoder
    from keras_transformer.parsing.constrained_decoding import (TreeConstrainedDecoder,
                                                                TreeConstraint)
    from keras_transformer.parsing.linearization import Linearizer
    from keras_transformer.decoding.compiled import compile_search

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
def test_constrained_parsing_search_compiles_without_tensorflow(backend, output_without_tensorflow):
    # An untrained model's outputs are arbitrary: only the constraint makes them trees. On JAX
    # the search runs under jax.jit, as Translator runs it.
    assert f"OK {backend}" in output_without_tensorflow(backend, "constrained_parse")


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


def test_padding_masks_skip_the_cudnn_attention_that_refuses_them(output_without_tensorflow):
    # On a GPU, cuDNN refused [batch, 1, 1, keys] masks and Keras logged a traceback at every
    # trace before using XLA's attention.
    assert "OK jax" in output_without_tensorflow("jax", "no_cudnn_try_for_padding_masks")


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


def keras_file_with_its_vocabulary(folder):
    """A `.keras` file saved into a run folder as training saves it (carrying the run's
    vocabulary), alone in its folder, and its translations on TensorFlow."""
    from keras_transformer.runs.models import atomic_save_model
    from keras_transformer.translation import Translator
    from tests._decoding_fixtures import SENTENCES, train_char_vocabulary

    run = folder / "run"
    run.mkdir()
    os.replace(train_char_vocabulary(run), run / "vocab.model")
    model = tiny_model(vocab_size=25, max_length=48, seed=21, sharpen=2.0)
    atomic_save_model(model, run / "model.keras")
    (run / "vocab.model").unlink()
    sources = SENTENCES[:3]
    translator = Translator.load(str(run / "model.keras"), max_extra_length=5)
    expected = {"sources": sources, "translations": translator.translate(sources)}
    return run / "model.keras", json.dumps(expected)


def saved_model_and_vocabulary(folder):
    """A random model saved as a `.keras` file and a 40-piece SentencePiece vocabulary."""
    import sentencepiece

    import keras_transformer as kt

    text = folder / "text.txt"
    text.write_text("hello world\na b c d e f\nthe quick brown fox\n" * 20)
    sentencepiece.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(folder / "vocab"),
        vocab_size=40,
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        model_type="bpe",
        hard_vocab_limit=False,
    )
    config = kt.TransformerConfig(vocab_size=40, num_layers=1, d_model=16, d_ff=32, num_heads=2)
    kt.build_model(config).save(folder / "model.keras")
    return folder / "model.keras", folder / "vocab.model"


def tiny_weights_and_inputs(folder):
    """A tiny model with peaky distributions (sharpen: random weights otherwise give near-ties
    that float round-off can flip between backends), its saved weights, and token inputs."""
    model = tiny_model(vocab_size=11, max_length=16, seed=8, sharpen=2.0)
    model.save_weights(folder / "tiny.weights.h5")
    inputs = {
        "source_ids": [[5, 6, 7, EOS], [8, EOS, PAD, PAD]],
        "target_ids": [[2, 9, 4, 6], [2, 10, PAD, PAD]],
    }
    return model, folder / "tiny.weights.h5", inputs


@pytest.fixture(scope="module")
def script_inputs(tmp_path_factory):
    """What the child scripts read, made on TensorFlow in this process."""
    folder = tmp_path_factory.mktemp("backends")
    model, weights, inputs = tiny_weights_and_inputs(folder)
    return {
        "forward_model": model,
        "forward_inputs": inputs,
        "args": {
            "forward_and_search": (model.config.to_json(), weights, json.dumps(inputs)),
            "translate": saved_model_and_vocabulary(folder),
            "carried_vocabulary": keras_file_with_its_vocabulary(folder),
        },
        "folder": folder,
    }


# name: (script, the backends it runs on), in the order a child runs them. The cuDNN check
# comes last: it patches JAX's attention for the rest of its interpreter.
SCRIPTS = {
    "build_and_run": (BUILD_AND_RUN, ("numpy", "jax", "torch")),
    "forward_and_search": (FORWARD_AND_SEARCH, ("torch",)),
    "translate": (TRANSLATE, ("jax",)),
    "constrained_parse": (CONSTRAINED_PARSE, ("jax", "torch")),
    "carried_vocabulary": (CARRIED_VOCABULARY, ("jax", "torch")),
    "no_cudnn_try_for_padding_masks": (NO_CUDNN_TRY_FOR_PADDING_MASKS, ("jax",)),
}


@pytest.fixture(scope="module")
def output_without_tensorflow(script_inputs):
    """`output(backend, name)`: the stdout of script `name` of SCRIPTS on `backend`, from one
    child per backend that runs all of that backend's scripts (started at the first call)."""
    outputs = {}

    def output(backend, name):
        if backend not in outputs:
            scripts = [
                (script_name, script, script_inputs["args"].get(script_name, ()))
                for script_name, (script, backends) in SCRIPTS.items()
                if backend in backends
            ]
            outputs[backend] = run_scripts_without_tensorflow(
                backend, scripts, script_inputs["folder"]
            )
        result = outputs[backend][name]
        if "error" in result:
            pytest.fail(f"{name} on {backend} raised:\n{result['error'][-3000:]}")
        return result["stdout"]

    return output


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_a_keras_file_translates_with_its_own_vocabulary_without_tensorflow(
    backend, output_without_tensorflow
):
    """On JAX and PyTorch the file translates with nothing beside it, as on TensorFlow."""
    assert f"OK {backend}" in output_without_tensorflow(backend, "carried_vocabulary")
