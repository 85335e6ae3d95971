"""A SavedModel for TensorFlow Serving: raw text in, beam search in the graph, text out.

Layout: `BASE_DIR/NAME/VERSION/` (TF Serving's model base path and numbered versions).
Versions auto-increment and are never overwritten: the export is written to a hidden
directory beside them (TF Serving only loads numeric names) and renamed into place when
complete, so a failed export leaves nothing that the server would pick up.

Signatures (dense tensors only: a ragged output silently yields a broken signature):

- `serving_default`: `text` `[batch]` string, and per-request decoding settings that default
  to the paper's (stored in the SignatureDef's `defaults`, which TF Serving fills in when a
  request leaves them out): `beam_size` (1 .. the compiled `max_beam_size`), `alpha`,
  `max_extra_length`, `num_hypotheses` (at most `beam_size`), `length_penalty` (a string,
  "gnmt" or "power": `keras_transformer.decoding.length_penalty`). A value outside the ranges of
  `keras_transformer.decoding.settings` fails the request with InvalidArgument naming the
  input, its value and its range. Outputs: `translation` `[batch]` string, `score` `[batch]`
  float, `nbest_translations` `[batch, n]` string, `nbest_scores` `[batch, n]` float.
- `translate`: `text` only, the defaults baked in, for TensorFlow Python callers
  (`tf.saved_model.load(path).translate(["Hello."])`): a loaded signature is a concrete
  function, which needs every input and ignores the SignatureDef's `defaults`.
- `translate_ids`: `source_ids` `[batch, length]` int32 (subword ids then eos, padded with 0)
  and the same settings; outputs `output_ids` `[batch, n, length]` int32 (eos-terminated,
  0-padded), `output_lengths` `[batch, n]` int32, `scores` `[batch, n]` float. Core TF ops
  only, for clients that tokenize themselves.
- `translate_with_prefix`: `text` and `target_prefix` `[batch]` string ("" for no prefix),
  and the same settings with the same defaults; the outputs of `serving_default`, every
  hypothesis starting with its prefix's target tokens. A signature of its own because TF
  Serving's REST API needs every input of the signature it calls: an input added to
  `serving_default` would break every REST request that leaves it out.
- `translate_ids_with_prefix`: `source_ids` and `prefix_ids` `[batch, length]` int32 (target
  subword ids, no eos, right-padded with 0; a row of 0s: no prefix) and the settings; the
  outputs of `translate_ids`. Every other search signature calls it: one search in the graph.
- `score_pairs`: `source` and `target` `[batch]` string; output `score` `[batch]` float32,
  log P(target | source) of the given translations by teacher forcing (the sum over the
  target's tokens, eos included), as `Translator.score` and `keras-transformer score`. The
  `score` of `serving_default` stays the beam's length-penalised score of its own output.
- `translate_with_alignments`: `text` `[batch]` string and `beam_size`, `alpha`,
  `max_extra_length` (same defaults; the export's length penalty); outputs `translation`
  `[batch]` string and `score` `[batch]` float (the best hypothesis, as `serving_default`'s) and `alignment` `[batch]`
  string, its word alignment as Pharaoh pairs `"i-j ..."`
  (`keras_transformer.export.alignments`, as `translate(..., return_alignments=True)`).
- `translate_sample`: `text` `[batch]` string and `top_k` (0: off), `top_p` (1: off),
  `temperature` (1), `max_extra_length` (the export's default) and `seed` int64 (0); outputs
  `translation` `[batch]` string, one sample per text, and `score` `[batch]` float32, its
  log-probability. The same seed gives the same sample (stateless noise,
  `keras_transformer.export.sampling`); out-of-range settings fail with InvalidArgument.

Tokenization and detokenization run in the graph with tensorflow-text's SentencePiece ops,
which the stock TF Serving binary links.
"""

import functools
import json
import pathlib

from keras_transformer.errors import UserInputError
from keras_transformer.files import atomic_directory

# Decoding defaults of section 6.1.
DEFAULT_BEAM_SIZE = 4
DEFAULT_ALPHA = 0.6
DEFAULT_MAX_EXTRA_LENGTH = 50
# Beam width is a tensor shape in the graph: one search is compiled per width up to this.
DEFAULT_MAX_BEAM_SIZE = 8


def existing_versions(model_dir):
    """Numeric version directories under `model_dir`, ascending."""
    model_dir = pathlib.Path(model_dir)
    if not model_dir.is_dir():
        return []
    return sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())


def next_version(model_dir):
    """One more than the highest existing version (1 for a new model)."""
    versions = existing_versions(model_dir)
    return versions[-1] + 1 if versions else 1


def _precision(model):
    """The precision of `model`'s weights, as `keras-transformer export --precision` names it:
    "bf16" for a `with_precision(model, "bf16")` copy, else "float32"."""
    return "bf16" if any(w.dtype == "bfloat16" for w in model.weights) else "float32"


def export_saved_model(
    model,
    vocabulary,
    name,
    version=None,
    base_dir="saved_models",
    max_beam_size=DEFAULT_MAX_BEAM_SIZE,
    beam_size=DEFAULT_BEAM_SIZE,
    alpha=DEFAULT_ALPHA,
    max_extra_length=DEFAULT_MAX_EXTRA_LENGTH,
    length_penalty="gnmt",
):
    """Writes `base_dir/name/version/` and returns its path.

    Args:
        model: a `keras_transformer.Transformer` (TensorFlow backend); a
            `with_precision(model, "bf16")` copy exports in bfloat16 (`--precision bf16`).
        vocabulary: the vocabulary the model was trained with: a `SubwordVocabulary`, the
            path of its `.model` file, or the `tokenizer` a loaded `.keras` model carries.
        name: the model name, TF Serving's `--model_name`.
        version: a positive integer; None takes the next free one. An existing version is
            never overwritten.
        base_dir: TF Serving's model base path is `base_dir/name`.
        max_beam_size: the widest beam a request may ask for.
        beam_size, alpha, max_extra_length, length_penalty: the defaults of requests that
            leave them out (`length_penalty`: "gnmt", the paper's, or "power").

    Example:
        >>> path = export_saved_model(model, "run/vocab.model", "ende")  # doctest: +SKIP
        >>> path.name
        '1'
    """
    # Imported here: the CLI reads this module's defaults for --help without Keras.
    from keras_transformer.data.vocabulary import load_vocabulary
    from keras_transformer.export.signatures import ServingFunctions

    _check_backend()
    vocabulary = load_vocabulary(vocabulary)
    _check_settings(
        model, vocabulary, max_beam_size, beam_size, alpha, max_extra_length, length_penalty
    )
    final_dir = _version_dir(base_dir, name, version)
    functions = ServingFunctions(
        model,
        vocabulary,
        max_beam_size=max_beam_size,
        beam_size=beam_size,
        alpha=alpha,
        max_extra_length=max_extra_length,
        length_penalty=length_penalty,
    )
    archive = _serving_archive(model, vocabulary, functions)
    # Renamed into place when whole: TF Serving sees the version complete or not at all (the
    # hidden staging name is not a number, so the server never loads it).
    with atomic_directory(final_dir) as staging:
        archive.write_out(str(staging), verbose=False)
        extra = staging / "assets.extra"
        extra.mkdir(exist_ok=True)
        metadata = _metadata(
            model, max_beam_size, beam_size, alpha, max_extra_length, length_penalty
        )
        (extra / "keras_transformer.json").write_text(json.dumps(metadata, indent=2))
    return final_dir


def _check_backend():
    import keras

    if keras.backend.backend() != "tensorflow":
        raise UserInputError(
            f"exporting a SavedModel needs the TensorFlow backend (KERAS_BACKEND=tensorflow); "
            f"this process runs {keras.backend.backend()!r}"
        )


def _check_settings(
    model, vocabulary, max_beam_size, beam_size, alpha, max_extra_length, length_penalty
):
    """The vocabulary against the model, and the search defaults against their ranges."""
    from keras_transformer.decoding.settings import check_decoding_settings

    if vocabulary.size != model.config.vocab_size:
        raise UserInputError(
            f"the vocabulary has {vocabulary.size} pieces but the model was built for "
            f"vocab_size={model.config.vocab_size}; export the model with the vocabulary it "
            "was trained with"
        )
    if not (isinstance(max_beam_size, int) and max_beam_size >= 1):
        raise UserInputError(f"max_beam_size={max_beam_size!r} must be an integer >= 1")
    check_decoding_settings(
        beam_size=beam_size,
        alpha=alpha,
        max_extra_length=max_extra_length,
        max_beam_size=max_beam_size,
        length_penalty=length_penalty,
    )


def _version_dir(base_dir, name, version):
    """`base_dir/name/version`, checked to be new (its parent created); `version` None takes
    the next free one."""
    if not name or not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
        raise UserInputError(
            f"model name {name!r} must be letters, digits, '-', '_' or '.' (a directory name "
            "that TF Serving's --model_name can use)"
        )
    model_dir = pathlib.Path(base_dir) / name
    if version is None:
        version = next_version(model_dir)
    elif not isinstance(version, int) or version < 1:
        raise UserInputError(f"version must be a positive integer, got {version!r}")
    final_dir = model_dir / str(version)
    if final_dir.exists():
        raise UserInputError(
            f"{final_dir} already exists and exports never overwrite a version; pass another "
            f"--version or leave it out to take the next one ({next_version(model_dir)})"
        )
    try:
        model_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserInputError(f"cannot create {model_dir}: {error.strerror}") from None
    return final_dir


def _serving_archive(model, vocabulary, functions):
    """The `ExportArchive` of the model and its serving signatures (see the module docstring)."""
    import keras

    from keras_transformer.decoding.alignment import piece_classes
    from keras_transformer.export import alignments, sampling

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.track(functions.tokenizer)
    # Every search goes through translate_ids_with_prefix, the text signatures through
    # translate_ids or it, and translate calls serving_default: one copy of the search in
    # the graph (TF2 callers: concrete functions ignore the SignatureDef's defaults, so
    # the text-only endpoint passes them).
    search = _add_traced_endpoint(
        archive,
        "translate_ids_with_prefix",
        functions.translate_ids_with_prefix,
        functions.ids_prefix_signature(),
    )
    translate_ids = _add_traced_endpoint(
        archive, "translate_ids", functions.translate_ids(search), functions.ids_signature()
    )
    serving_default = _add_traced_endpoint(
        archive,
        "serving_default",
        functions.translate_text(translate_ids),
        functions.text_signature(),
    )
    _add_traced_endpoint(
        archive,
        "translate",
        functions.text_only(serving_default),
        functions.text_signature()[:1],
    )
    _add_traced_endpoint(
        archive,
        "translate_with_prefix",
        functions.translate_with_prefix(search),
        functions.prefix_signature(),
    )
    _add_traced_endpoint(archive, "score_pairs", functions.score_pairs, functions.pair_signature())
    _add_traced_endpoint(
        archive,
        "translate_with_alignments",
        alignments.translate_with_alignments(
            functions,
            translate_ids,
            piece_classes(vocabulary, model.config.vocab_size),
        ),
        alignments.alignment_signature(),
    )
    _add_traced_endpoint(
        archive,
        "translate_sample",
        sampling.translate_sample(functions),
        sampling.sampling_signature(),
    )
    return archive


def _add_traced_endpoint(archive, name, fn, input_signature):
    """Adds endpoint `name` to `archive` as `fn` traced once for `input_signature`, and
    returns that concrete function, for the endpoints that call it.

    `tf.saved_model.save` traces every `tf.function` it saves once more, under its own
    context (another cache key): an endpoint that is a `tf.function` of `fn` would trace
    each search twice. Calling a concrete function, that second trace is one call op
    (docs/decisions.md#endpoints-traced-once).
    """
    import tensorflow as tf

    concrete = tf.function(
        fn, input_signature=input_signature, autograph=False
    ).get_concrete_function()

    # `fn`'s signature, so that its default settings become the SignatureDef's defaults.
    @functools.wraps(fn)
    def endpoint(*args, **kwargs):
        return concrete(*args, **kwargs)

    archive.add_endpoint(name, endpoint, input_signature=input_signature)
    return concrete


def _metadata(model, max_beam_size, beam_size, alpha, max_extra_length, length_penalty):
    """`assets.extra/keras_transformer.json`: the model config and the export's settings."""
    return {
        "model_config": model.config.to_dict(),
        "max_beam_size": max_beam_size,
        "precision": _precision(model),
        "defaults": {
            "beam_size": beam_size,
            "alpha": alpha,
            "max_extra_length": max_extra_length,
            "num_hypotheses": 1,
            "length_penalty": length_penalty,
        },
    }
