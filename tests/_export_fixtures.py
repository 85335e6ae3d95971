"""One SavedModel export shared by the tests of its signatures.

An export traces the beam search once per width up to `max_beam_size`, a minute or more on
two cores, and every export carries every signature: so the tests of `translate_with_prefix`,
`translate_sample` and `score_pairs` read one export of one tiny model, made once per test
session (`shared_export` in tests/conftest.py).

Under pytest-xdist each worker is its own process: a background process started with the run
writes the export (tests/_shared_builds.py), and the workers load that one (and the same weights)
instead of tracing their own.
"""

import dataclasses
import pathlib

from tests._decoding_fixtures import tiny_model, train_char_vocabulary
from tests._shared_builds import build_once

# The defaults of requests that leave them out; beam 2 is the narrowest that has a beam.
SETTINGS = dict(max_beam_size=2, beam_size=2, alpha=0.6, max_extra_length=6)
# The model: 25 character pieces (train_char_vocabulary), room for 48 tokens, embeddings
# sharpened so that random weights give peaky distributions (no near-ties that the graph's
# and Python's rounding could break differently).
MODEL = dict(vocab_size=25, max_length=48, seed=5, sharpen=2.0)
NAME = "shared"


@dataclasses.dataclass(frozen=True)
class SharedExport:
    """The export, and what a test compares it with: its model and vocabulary in-process."""

    path: pathlib.Path  # the version folder, BASE/shared/1
    vocabulary_path: str
    model: object  # the `Transformer` whose weights the export holds
    loaded: object  # `tf.saved_model.load(path)`


def _write(folder):
    from keras_transformer.export import export_saved_model

    vocabulary_path = train_char_vocabulary(folder)
    model = tiny_model(**MODEL)
    model.save_weights(str(folder / "model.weights.h5"))
    export_saved_model(model, vocabulary_path, NAME, base_dir=folder / "saved_models", **SETTINGS)


def shared_export(tmp_path_factory):
    """Writes the export unless a worker of this run already did, and loads it."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  the SentencePiece ops, for a worker that only loads

    folder = build_once(tmp_path_factory, "shared_export", _write)
    model = tiny_model(**MODEL)
    model.load_weights(str(folder / "model.weights.h5"))
    path = folder / "saved_models" / NAME / "1"
    return SharedExport(path, str(folder / "vocab.model"), model, tf.saved_model.load(str(path)))
