"""The model is `keras.ops` only: it imports, builds and runs without TensorFlow."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import sys

    class BlockTensorFlow:
        def find_spec(self, name, path=None, target=None):
            if name == "tensorflow" or name.startswith("tensorflow."):
                raise ImportError("tensorflow is blocked in this test")

    sys.meta_path.insert(0, BlockTensorFlow())

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
    assert not any(m.startswith("tensorflow") for m in sys.modules)
    print("OK", keras.backend.backend())
""")


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_model_builds_and_runs_without_tensorflow(backend):
    # Keras's numpy backend imports jax for some ops, so both need jax installed.
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed (pip install -e .[test] installs it)")
    env = {**os.environ, "KERAS_BACKEND": backend}
    result = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"OK {backend}" in result.stdout


TRANSLATE_WITHOUT_TF = """
import sys

class BlockTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ImportError("tensorflow is blocked in this test")

sys.meta_path.insert(0, BlockTensorFlow())
import keras_transformer as kt

model_path, vocab_path = sys.argv[1], sys.argv[2]
outputs = kt.translate(["hello world", "", "a b c"], model=model_path, vocabulary=vocab_path,
                       beam_size=2, max_extra_length=3)
assert len(outputs) == 3 and outputs[1] == "" and all(isinstance(o, str) for o in outputs)
# The .keras file carries its vocabulary (a keras-hub tokenizer layer): none needs giving.
assert kt.translate(["hello world", "", "a b c"], model=model_path, beam_size=2,
                    max_extra_length=3) == outputs
assert not any(m.startswith("tensorflow") for m in sys.modules)
print("OK")
"""


def test_translate_a_saved_model_on_jax_without_tensorflow(tmp_path):
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed (pip install -e .[test] installs it)")
    import sentencepiece

    import keras_transformer as kt

    text = tmp_path / "text.txt"
    text.write_text("hello world\na b c d e f\nthe quick brown fox\n" * 20)
    sentencepiece.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(tmp_path / "vocab"), vocab_size=40, pad_id=0,
        unk_id=1, bos_id=2, eos_id=3, model_type="bpe", hard_vocab_limit=False)
    from keras_transformer.data.vocabulary import SubwordVocabulary

    config = kt.TransformerConfig(vocab_size=40, num_layers=1, d_model=16, d_ff=32, num_heads=2)
    model = kt.build_model(config)
    model.tokenizer = SubwordVocabulary(tmp_path / "vocab.model").to_tokenizer()
    (tmp_path / "saved").mkdir()  # no vocab.model beside the model
    model.save(tmp_path / "saved" / "model.keras")
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    result = subprocess.run(
        [sys.executable, "-c", TRANSLATE_WITHOUT_TF, str(tmp_path / "saved" / "model.keras"),
         str(tmp_path / "vocab.model")], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK" in result.stdout
