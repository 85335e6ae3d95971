"""`Translator` and `translate`: text in, text out, with beam search (paper section 6.1).

A `Translator` holds a model (or an ensemble), its SentencePiece vocabulary and the search
settings. It tokenizes the input, appends eos, sorts the sentences by length and decodes them
in batches of similar length (less padding), then returns the translations in input order.

Where a model comes from (`Translator.load(path)`):

- a training run folder, laid out as `keras_transformer.training.output_dir` defines:
  `averaged.keras` if it exists, else `model.keras`, else the newest checkpoint in
  `checkpoints/` (with `config.json`); the vocabulary is `vocab.model` in the same folder.
  `average_last=N` averages the run's last N checkpoints instead (paper 6.1);
- a `.keras` file (a model or an average saved by `keras-transformer average`); the
  vocabulary is the `vocab.model` beside it unless `vocabulary=` says otherwise;
- a checkpoint prefix `RUN/checkpoints/ckpt-STEP` (TensorFlow backend), with `RUN/config.json`
  and `RUN/vocab.model`.

Input checks: empty or whitespace-only strings translate to "" without reaching the model;
a sentence longer than the model's `max_length` tokens (eos included) is truncated with a
warning that names it (or rejected with `on_too_long="error"`); a non-string raises a
`TypeError` naming its index and type.
"""

import os
import warnings

import keras
import numpy as np

from keras_transformer.decoding import (BeamSearch, EnsembleDecoder, as_decoder, greedy_search,
                                        is_hypothesis, sample)
from keras_transformer.decoding.length_penalty import max_output_lengths
from keras_transformer.errors import UserInputError

SEARCHES = ("beam", "greedy", "sample")
TOO_LONG_POLICIES = ("truncate", "error")
# Source batches are padded to a multiple of this length, so that a compiled search is
# traced for a few shapes only.
LENGTH_MULTIPLE = 8


# -- vocabulary --------------------------------------------------------------------------------


class SentencePieceVocabulary:
    """Text <-> ids with a SentencePiece `.model` (pad 0, unk 1, bos 2, eos 3), in plain Python.

    The same file as `keras_transformer.data.SubwordVocabulary` reads, without TensorFlow, so
    that translation runs on any Keras backend.

    Args:
        path: the `.model` file.

    Example:
    >>> vocabulary = SentencePieceVocabulary("runs/ende/vocab.model")
    >>> vocabulary.decode(vocabulary.encode("Hello world."))
    'Hello world.'
    """

    def __init__(self, path):
        import sentencepiece

        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise UserInputError(f"vocabulary file {self.path!r} does not exist; give the "
                                 "SentencePiece .model the model was trained with")
        self.processor = sentencepiece.SentencePieceProcessor()
        try:
            self.processor.load(self.path)
        except (OSError, RuntimeError) as error:
            raise UserInputError(f"{self.path!r} is not a SentencePiece model ({error})") from None
        ids = (self.processor.pad_id(), self.processor.unk_id(), self.processor.bos_id(),
               self.processor.eos_id())
        if ids != (0, 1, 2, 3):
            raise UserInputError(
                f"{self.path!r} has special ids pad/unk/bos/eos = {ids}, the model expects "
                "(0, 1, 2, 3); use the vocabulary the model was trained with")

    @property
    def size(self):
        return self.processor.get_piece_size()

    def encode(self, text):
        return self.processor.encode(text, out_type=int)

    def decode(self, ids):
        return self.processor.decode([int(i) for i in ids])


def load_vocabulary(vocabulary):
    """A vocabulary from a `.model` path; an object with `encode`/`decode` is returned as is."""
    if isinstance(vocabulary, (str, os.PathLike)):
        return SentencePieceVocabulary(vocabulary)
    if hasattr(vocabulary, "encode") and hasattr(vocabulary, "decode"):
        return vocabulary
    raise TypeError(f"vocabulary must be a .model path or have encode/decode, got "
                    f"{type(vocabulary).__name__}")


# -- where models come from ---------------------------------------------------------------------


def find_model_files(path):
    """The model and vocabulary files that `path` designates (see the module docstring).

    Args:
        path: a training run folder, a `.keras` file or a checkpoint prefix.

    Returns:
        A dict with `kind` ("keras" or "checkpoint"), `model` (the file or prefix), `config`
        (the `config.json` a checkpoint needs, else None) and `vocabulary` (the `vocab.model`
        path, or None when there is none where the convention puts it).

    Raises:
        UserInputError: when `path` is none of these.

    Example:
    >>> find_model_files("runs/ende")["model"]
    'runs/ende/averaged.keras'
    """
    from keras_transformer.training.output_dir import VOCAB_FILE, OutputDir

    path = os.fspath(path)

    def vocabulary_in(folder):
        candidate = os.path.join(folder, VOCAB_FILE)
        return candidate if os.path.isfile(candidate) else None

    if os.path.isdir(path):
        run = OutputDir(path)
        if os.path.isfile(run.translation_model):
            return {"kind": "keras", "model": run.translation_model, "config": None,
                    "vocabulary": vocabulary_in(path)}
        checkpoints = _list_checkpoints(run.checkpoint_dir)
        if checkpoints:
            return {"kind": "checkpoint", "model": checkpoints[-1], "config": run.model_config,
                    "vocabulary": vocabulary_in(path)}
        raise UserInputError(
            f"{path!r} holds no averaged.keras, model.keras nor checkpoints/: give a training "
            "output_dir, a .keras file or a checkpoint prefix such as RUN/checkpoints/ckpt-1000")
    if path.endswith(".keras") and os.path.isfile(path):
        folder = os.path.dirname(os.path.abspath(path))
        return {"kind": "keras", "model": path, "config": None,
                "vocabulary": vocabulary_in(folder)}
    if os.path.isfile(path + ".index"):
        run_dir = os.path.dirname(os.path.dirname(os.path.abspath(path)))
        return {"kind": "checkpoint", "model": path, "config": OutputDir(run_dir).model_config,
                "vocabulary": vocabulary_in(run_dir)}
    raise UserInputError(
        f"cannot load a model from {path!r}: it is not a training output_dir, an existing "
        ".keras file nor a checkpoint prefix (RUN/checkpoints/ckpt-STEP with a .index file)")


def _list_checkpoints(directory):
    if not os.path.isfile(os.path.join(directory, "checkpoint")):
        return []
    from keras_transformer.training.checkpoints import list_checkpoints

    return list_checkpoints(directory)


def load_model(path, average_last=None):
    """A `Transformer` from a run folder, a `.keras` file or a checkpoint prefix.

    Args:
        path: see `find_model_files`.
        average_last: with a run folder, average its last N checkpoints instead (paper 6.1).

    Returns:
        `(model, files)`: the `Transformer` and the dict of `find_model_files`.
    """
    if average_last:
        from keras_transformer.training import average_checkpoints
        from keras_transformer.training.output_dir import VOCAB_FILE

        model = average_checkpoints(path, last=average_last)
        vocabulary = os.path.join(os.fspath(path), VOCAB_FILE)
        return model, {"kind": "average", "model": path, "config": None,
                       "vocabulary": vocabulary if os.path.isfile(vocabulary) else None}
    files = find_model_files(path)
    if files["kind"] == "keras":
        import keras_transformer.model  # noqa: F401  (registers the serializable classes)

        return keras.saving.load_model(files["model"], compile=False), files
    if keras.backend.backend() != "tensorflow":
        raise UserInputError(
            f"{files['model']} is a TensorFlow checkpoint: load it with KERAS_BACKEND="
            "tensorflow, or save the model as .keras (keras-transformer average writes one)")
    import tensorflow as tf

    from keras_transformer.config import TransformerConfig
    from keras_transformer.model import build_model

    if not os.path.isfile(files["config"]):
        raise UserInputError(f"cannot find {files['config']!r}, the model config of checkpoint "
                             f"{files['model']}")
    with open(files["config"], encoding="utf-8") as file:
        model = build_model(TransformerConfig.from_json(file.read()))
    from keras_transformer.training.checkpoints import model_variables

    # Training's checkpoints key the weights by variable path (see model_variables).
    status = tf.train.Checkpoint(model=model_variables(model)).read(files["model"])
    status.expect_partial()  # the optimizer state is not needed to translate
    status.assert_existing_objects_matched()
    return model, files


# -- compiled search ----------------------------------------------------------------------------


def compile_search(search_fn, decoder, enabled=True):
    """`search_fn(source_ids, *extra) -> tuple of tensors`, compiled for the current backend.

    TensorFlow: `tf.function` (the while loop becomes one graph op; XLA was slower on CPU in
    our measurements). JAX: `jax.jit`, with the model weights passed as arguments through a
    `keras.StatelessScope`, so that they are not baked into the program as constants. Other
    backends (and `enabled=False`) run eagerly.

    Example:
    >>> run = compile_search(lambda s: tuple(BeamSearch()(model, s)), as_decoder(model))
    """
    backend = keras.backend.backend()
    if not enabled or backend not in ("tensorflow", "jax"):
        return search_fn
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(search_fn)
    import jax

    variables = list(getattr(decoder, "variables", []))

    def stateless(values, *args):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return search_fn(*args)

    jitted = jax.jit(stateless)
    return lambda *args: jitted([variable.value for variable in variables], *args)


# -- the translator -----------------------------------------------------------------------------


class Translator:
    """Translates text with a Transformer (or an ensemble) and its SentencePiece vocabulary.

    Args:
        model: a `Transformer`, a list of them (an ensemble, `EnsembleDecoder`), or a decoder.
        vocabulary: the SentencePiece `.model` path, or an object with `encode(text) -> ids`
            and `decode(ids) -> text`.
        beam_size: hypotheses kept per sentence (paper: 4).
        alpha: length penalty (paper: 0.6).
        max_extra_length: output tokens beyond the source length (paper: 50).
        num_hypotheses: 1 returns strings; n > 1 returns n-best lists of `(text, score)`.
        search: "beam" (default), "greedy" or "sample".
        top_k, temperature, seed: sampling settings (`search="sample"`).
        batch_size: sentences decoded together.
        on_too_long: "truncate" (with a warning) or "error" for sentences longer than the
            model's `max_length` tokens.
        compile: compile the search (`tf.function` / `jax.jit`).
        ensemble_combine: how an ensemble combines its models (see `EnsembleDecoder`).

    Example:
    >>> translator = Translator.load("runs/ende")
    >>> translator.translate(["A small test.", "Hello."])
    ['Ein kleiner Test.', 'Hallo.']
    """

    def __init__(self, model, vocabulary, *, beam_size=4, alpha=0.6, max_extra_length=50,
                 num_hypotheses=1, search="beam", top_k=0, temperature=1.0, seed=None,
                 batch_size=32, on_too_long="truncate", compile=True,
                 ensemble_combine="log_probs"):
        if search not in SEARCHES:
            raise ValueError(f"search must be one of {SEARCHES}, got {search!r}")
        if on_too_long not in TOO_LONG_POLICIES:
            raise ValueError(f"on_too_long must be one of {TOO_LONG_POLICIES}, got "
                             f"{on_too_long!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if search != "beam" and num_hypotheses != 1:
            raise ValueError(f"num_hypotheses > 1 needs search='beam', got search={search!r}")
        if isinstance(model, (list, tuple)):
            self.decoder = EnsembleDecoder(model, combine=ensemble_combine)
        else:
            self.decoder = as_decoder(model)
        self.model = model
        self.vocabulary = load_vocabulary(vocabulary)
        vocabulary_size = getattr(self.vocabulary, "size", None)
        if isinstance(vocabulary_size, int) and vocabulary_size > self.decoder.vocab_size:
            raise UserInputError(
                f"the vocabulary has {vocabulary_size} pieces but the model only "
                f"{self.decoder.vocab_size}: use the vocabulary the model was trained with")
        self.search = search
        self.beam_search = BeamSearch(beam_size, alpha, max_extra_length, num_hypotheses)
        self.max_extra_length = max_extra_length
        self.alpha = alpha
        self.top_k, self.temperature = top_k, temperature
        self._rng = np.random.default_rng(seed)
        self.batch_size = batch_size
        self.on_too_long = on_too_long
        self.max_source_length = self.decoder.max_length
        self._compiled = compile_search(self._search, self.decoder, enabled=compile)

    @classmethod
    def load(cls, path, vocabulary=None, average_last=None, **options):
        """A `Translator` for a run folder, a `.keras` file or a checkpoint prefix.

        Args:
            path: see the module docstring; a list of paths makes an ensemble.
            vocabulary: the `.model` file; default: `vocab.model` beside the model.
            average_last: average the run's last N checkpoints (paper 6.1: 5 base, 20 big).
            **options: `Translator` arguments (beam_size, alpha, ...).

        Example:
        >>> translator = Translator.load("runs/ende", beam_size=4, alpha=0.6)
        """
        paths = list(path) if isinstance(path, (list, tuple)) else [path]
        models, found_vocabulary = [], None
        for one_path in paths:
            model, files = load_model(one_path, average_last=average_last)
            models.append(model)
            found_vocabulary = found_vocabulary or files["vocabulary"]
        vocabulary = vocabulary or found_vocabulary
        if vocabulary is None:
            raise UserInputError(
                f"no vocab.model found beside {paths[0]!r}; pass the SentencePiece .model "
                "the model was trained with (--vocab / vocabulary=)")
        return cls(models if len(models) > 1 else models[0], vocabulary, **options)

    # -- input -----------------------------------------------------------------------------

    def _encode(self, texts):
        """Token ids (eos-terminated) per non-empty text; None for empty ones."""
        if isinstance(texts, (str, bytes)) or not hasattr(texts, "__iter__"):
            raise TypeError(f"texts must be a list of strings, got {type(texts).__name__}")
        encoded = []
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts[{index}] is {type(text).__name__}, not str: "
                                f"{text!r:.60}")
            if not text.strip():
                encoded.append(None)
                continue
            ids = list(self.vocabulary.encode(text))
            if len(ids) + 1 > self.max_source_length:
                message = (f"texts[{index}] has {len(ids) + 1} tokens (eos included), more "
                           f"than the model's maximum of {self.max_source_length}")
                if self.on_too_long == "error":
                    raise UserInputError(message + "; shorten or split it")
                warnings.warn(message + f"; its first {self.max_source_length - 1} tokens are "
                              "translated", stacklevel=3)
                ids = ids[:self.max_source_length - 1]
            encoded.append(ids + [self.decoder.eos_id])
        return encoded

    def _batches(self, encoded):
        """Indices of the non-empty inputs, grouped by length (longest first)."""
        order = sorted((i for i, ids in enumerate(encoded) if ids is not None),
                       key=lambda i: -len(encoded[i]))
        return [order[start:start + self.batch_size]
                for start in range(0, len(order), self.batch_size)]

    def _source_batch(self, encoded, indices):
        longest = max(len(encoded[i]) for i in indices)
        width = -(-longest // LENGTH_MULTIPLE) * LENGTH_MULTIPLE
        width = min(width, self.max_source_length)
        batch = np.full((len(indices), width), self.decoder.pad_id, "int32")
        for row, i in enumerate(indices):
            batch[row, :len(encoded[i])] = encoded[i]
        return batch

    # -- search ----------------------------------------------------------------------------

    def _search(self, source_ids, noise=None):
        if self.search == "greedy":
            result = greedy_search(self.decoder, source_ids, self.max_extra_length, self.alpha)
        elif self.search == "sample":
            result = sample(self.decoder, source_ids, self.top_k, self.temperature,
                            self.max_extra_length, noise=noise, alpha=self.alpha)
        else:
            result = self.beam_search(self.decoder, source_ids)
        return tuple(result)

    def translate_ids(self, source_ids):
        """Searches one batch of source ids `[batch, length]`; returns NumPy
        `(ids, lengths, log_probs, scores)` shaped as `SearchResult`."""
        source_ids = np.asarray(source_ids, "int32")
        args = (source_ids,)
        if self.search == "sample":
            _, buffer_length = max_output_lengths(source_ids, self.decoder.pad_id,
                                                  self.max_extra_length, self.max_source_length)
            args += (self._rng.random((buffer_length, len(source_ids)), "float32"),)
        return tuple(np.asarray(keras.ops.convert_to_numpy(x)) for x in self._compiled(*args))

    def _text(self, ids, length):
        ids = [int(t) for t in ids[:length]]
        if ids and ids[-1] == self.decoder.eos_id:
            ids = ids[:-1]
        return self.vocabulary.decode(ids)

    def translate(self, texts, num_hypotheses=None):
        """Translates a list of strings (or one string).

        Args:
            texts: a string or a list of strings.
            num_hypotheses: n-best size for this call (default: the translator's).

        Returns:
            Strings in input order; with `num_hypotheses > 1`, one list of `(text, score)` per
            input, best first (score = log-probability / length penalty). An empty input gives
            "" (or `[("", 0.0)]`).

        Raises:
            TypeError: for a non-string element (its index and type are named).
            UserInputError: for a too long input with `on_too_long="error"`.
        """
        single = isinstance(texts, str)
        texts = [texts] if single else texts
        n_best = self.beam_search.num_hypotheses if num_hypotheses is None else num_hypotheses
        if n_best != self.beam_search.num_hypotheses:
            if self.search != "beam" or n_best > self.beam_search.beam_size or n_best < 1:
                raise ValueError(f"num_hypotheses must be in [1, beam_size="
                                 f"{self.beam_search.beam_size}] with beam search, got "
                                 f"{n_best!r}")
        encoded = self._encode(texts)
        outputs = [[("", 0.0)] for _ in encoded]
        for indices in self._batches(encoded):
            ids, lengths, _, scores = self.translate_ids(self._source_batch(encoded, indices))
            for row, i in enumerate(indices):
                outputs[i] = [(self._text(ids[row, j], lengths[row, j]), float(scores[row, j]))
                              for j in range(min(n_best, scores.shape[1]))
                              if is_hypothesis(scores[row, j])]
        if n_best == 1:
            outputs = [hypotheses[0][0] for hypotheses in outputs]
        else:
            outputs = [hypotheses[:n_best] for hypotheses in outputs]
        return outputs[0] if single else outputs

    __call__ = translate


def translate(texts, model, vocabulary=None, beam_size=4, alpha=0.6, max_extra_length=50,
              num_hypotheses=1, **options):
    """Translates `texts` with beam search (paper 6.1: beam 4, alpha 0.6, input length + 50).

    Args:
        texts: a string or a list of strings.
        model: a `Translator`, a path (run folder, `.keras` file, checkpoint prefix), or a
            `Transformer` (then `vocabulary` is required).
        vocabulary: the SentencePiece `.model` (default: `vocab.model` beside the model).
        beam_size, alpha, max_extra_length, num_hypotheses: the search (ignored when `model`
            is a `Translator`, which has its own settings, except `num_hypotheses`).
        **options: other `Translator` arguments.

    Returns:
        As `Translator.translate`: strings, or n-best lists of `(text, score)`.

    Example:
    >>> translate(["Hello world."], model="runs/ende")
    ['Hallo Welt.']
    """
    if isinstance(model, Translator):
        translator = model
    else:
        settings = dict(beam_size=beam_size, alpha=alpha, max_extra_length=max_extra_length,
                        num_hypotheses=max(num_hypotheses, 1), **options)
        if isinstance(model, (str, os.PathLike)):
            translator = Translator.load(model, vocabulary=vocabulary, **settings)
        else:
            if vocabulary is None:
                raise UserInputError("translate(model=<Transformer>) needs vocabulary=, the "
                                     "SentencePiece .model the model was trained with")
            translator = Translator(model, vocabulary, **settings)
    return translator.translate(texts, num_hypotheses=num_hypotheses)
