"""`Translator` and `translate`: text in, text out, with beam search (paper section 6.1).

A `Translator` holds a model (or an ensemble), its SentencePiece vocabulary and the search
settings. It tokenizes the input, appends eos, sorts the sentences by length and decodes them
in batches of similar length (less padding): `batch_size` sentences, or as many as a
`batch_tokens` budget of padded tokens holds; then returns the translations in input order.

Where a model comes from (`Translator.load(path)`):

- a training run folder, laid out as `keras_transformer.runs.layout` defines (found and
  loaded by `keras_transformer.runs.models`: `find_model_files`, `load_model`):
  `averaged.keras` if it exists, else `model.keras`, else the newest checkpoint in
  `checkpoints/` (with `config.json`). `average_last=N` averages the run's last N checkpoints instead (paper 6.1);
- a `.keras` file (a model or an average saved by `keras-transformer average`);
- a checkpoint prefix `RUN/checkpoints/ckpt-STEP` (TensorFlow backend), with `RUN/config.json`
  and `RUN/vocab.model`.

The vocabulary is, in this order: `vocabulary=`; the one a `.keras` file carries (training
saves its models with it, `Transformer.tokenizer`), so that the file translates on its own;
`vocab.model` beside the model (in the run folder).

Input checks: empty or whitespace-only strings translate to "" without reaching the model;
a sentence longer than the model's `max_length` tokens (eos included) is truncated with a
warning that names it (or rejected with `on_too_long="error"`); a non-string raises a
`TypeError` naming its index and type. Inside `input_lines(name, first_line)` those
messages name an input by its line in a file (`line 1025 of 'in.txt'`) instead of its index
in the list given (`texts[0]`): the CLI translates a file in chunks.

`Translator.score(sources, targets)` scores given translations instead of searching: log
P(target | source) by teacher forcing (`keras_transformer.decoding.scoring`), batched as
`translate` is; `target_lines` names the targets as lines of a file in its messages.
"""

import collections
import contextlib
import contextvars
import copy
import inspect
import os
import warnings

import keras
import numpy as np

from keras_transformer.data.marian_vocabulary import FILES as MARIAN_FILES
from keras_transformer.data.vocabulary import SubwordVocabulary, load_vocabulary
from keras_transformer.decoding import (
    BeamSearch,
    EnsembleDecoder,
    as_decoder,
    greedy_search,
    is_hypothesis,
    sample,
)
from keras_transformer.decoding.batches import BatchPlan, sequence_lengths
from keras_transformer.decoding.compiled import compile_search
from keras_transformer.decoding.length_penalty import max_output_lengths
from keras_transformer.decoding.precision import check_precision, with_precision
from keras_transformer.decoding.scoring import score_targets
from keras_transformer.decoding.settings import (
    SEARCHES,  # noqa: F401  (importable from here, as before)
    TOO_LONG_POLICIES,  # noqa: F401
    check_decoding_settings,
    check_translator_settings,
)
from keras_transformer.errors import InputWarning, UserInputError

# Run folders are defined (and their models found and loaded) in runs/, which
# imports without TensorFlow; the names stay importable from here.
from keras_transformer.runs.decoding import (
    DECODING_FILE,
    SETTINGS,
    run_folder_of,
    with_decoding_defaults,
)
from keras_transformer.runs.models import find_model_files, load_model  # noqa: F401

# The translation-side name of the one vocabulary class, kept for existing callers.
SentencePieceVocabulary = SubwordVocabulary

# Source batches are padded to a multiple of this length, so that a compiled search is
# traced for a few shapes only.
LENGTH_MULTIPLE = 8

# (file name, line number of texts[0]) while `input_lines` is in effect.
_INPUT_LINES = contextvars.ContextVar("input_lines", default=None)
# The same for the targets given to `score`, while `target_lines` is in effect.
_TARGET_LINES = contextvars.ContextVar("target_lines", default=None)


@contextlib.contextmanager
def input_lines(name, first_line):
    """Within this block, messages about the texts given to `translate` name them as lines of
    `name` starting at `first_line` (`line 1025 of 'in.txt'`), not as `texts[0]`.

    Example:
        >>> with input_lines("'in.txt'", 1025):  # doctest: +SKIP
        ...     translator.translate(chunk)
    """
    token = _INPUT_LINES.set((name, first_line))
    try:
        yield
    finally:
        _INPUT_LINES.reset(token)


@contextlib.contextmanager
def target_lines(name, first_line):
    """As `input_lines`, for the targets given to `Translator.score`."""
    token = _TARGET_LINES.set((name, first_line))
    try:
        yield
    finally:
        _TARGET_LINES.reset(token)


def _target_name(index):
    lines = _TARGET_LINES.get()
    if lines is None:
        return f"targets[{index}]"
    name, first_line = lines
    return f"line {first_line + index} of {name}"


def _input_name(index):
    lines = _INPUT_LINES.get()
    if lines is None:
        return f"texts[{index}]"
    name, first_line = lines
    return f"line {first_line + index} of {name}"


# The search settings a run's decoding.json may set (keras_transformer.runs.decoding).
DECODING_SETTINGS = tuple(SETTINGS.values())


# -- the translator -----------------------------------------------------------------------------


class Translator:
    """Translates text with a Transformer (or an ensemble) and its SentencePiece vocabulary.

    Args:
        model: a `Transformer`, a list of them (an ensemble, `EnsembleDecoder`), or a decoder.
        vocabulary: a `SubwordVocabulary`, the SentencePiece `.model` path, a keras-hub
            `SentencePieceTokenizer`, or any object with `encode(text) -> ids` and
            `decode(ids) -> text`.
        beam_size: hypotheses kept per sentence (paper: 4).
        alpha: length penalty strength (paper: 0.6).
        length_penalty: "gnmt" (((5 + |Y|) / 6) ** alpha, the paper's) or "power"
            (|Y| ** alpha, as Marian, OPUS-MT and Hugging Face;
            `keras_transformer.decoding.length_penalty`).
        max_extra_length: output tokens beyond the source length (paper: 50).
        num_hypotheses: 1 returns strings; n > 1 returns n-best lists of `(text, score)`.
        search: "beam" (default), "greedy" or "sample".
        top_k, temperature, top_p, seed: sampling settings (`search="sample"`); `top_p` in
            (0, 1] is nucleus sampling, applied after temperature and top-k
            (`keras_transformer.decoding.sampling`).
        batch_size: sentences decoded together (with `batch_tokens`: at most this many).
        batch_tokens: a budget of padded source tokens per batch (sentences x the padded
            longest length) instead of a fixed sentence count, for inputs of mixed lengths
            (`keras_transformer.decoding.batches`); None: batches of `batch_size` sentences.
        on_too_long: "truncate" (with a warning) or "error" for sentences longer than the
            model's `max_length` tokens.
        compile: compile the search (`tf.function` / `jax.jit`).
        jit_compile: on TensorFlow, search batches of one sentence with an XLA-compiled
            graph (`compile_search`): about 2x lower latency at `batch_size=1` on a CPU, the
            same translations (scores may differ in the last float digits); each input width
            compiles once, for seconds. Larger batches are unaffected; JAX compiles every
            search with XLA anyway. Off by default (not a paper setting); needs `compile`.
        ensemble_combine: how an ensemble combines its models (see `EnsembleDecoder`).

    Example:
    >>> translator = Translator.load("runs/ende")
    >>> translator.translate(["A small test.", "Hello."])
    ['Ein kleiner Test.', 'Hallo.']
    """

    def __init__(
        self,
        model,
        vocabulary,
        *,
        beam_size=4,
        alpha=0.6,
        max_extra_length=50,
        num_hypotheses=1,
        search="beam",
        top_k=0,
        temperature=1.0,
        top_p=1.0,
        seed=None,
        batch_size=32,
        on_too_long="truncate",
        compile=True,
        ensemble_combine="log_probs",
        batch_tokens=None,
        jit_compile=False,
        length_penalty="gnmt",
    ):
        check_translator_settings(
            search=search,
            beam_size=beam_size,
            alpha=alpha,
            max_extra_length=max_extra_length,
            num_hypotheses=num_hypotheses,
            length_penalty=length_penalty,
            top_k=top_k,
            temperature=temperature,
            top_p=top_p,
            batch_size=batch_size,
            batch_tokens=batch_tokens,
            on_too_long=on_too_long,
            compile=compile,
            jit_compile=jit_compile,
        )
        if isinstance(model, (list, tuple)):
            self.decoder = EnsembleDecoder(model, combine=ensemble_combine)
        else:
            self.decoder = as_decoder(model)
        self.model = model
        if isinstance(vocabulary, (str, bytes, os.PathLike)) or not (
            hasattr(vocabulary, "encode") and hasattr(vocabulary, "decode")
        ):
            vocabulary = load_vocabulary(vocabulary)
        self.vocabulary = vocabulary  # a SubwordVocabulary, or a stand-in with encode/decode
        vocabulary_size = getattr(self.vocabulary, "size", None)
        if isinstance(vocabulary_size, int) and vocabulary_size > self.decoder.vocab_size:
            raise UserInputError(
                f"the vocabulary has {vocabulary_size} pieces but the model only "
                f"{self.decoder.vocab_size}: use the vocabulary the model was trained with"
            )
        self.search = search
        self.beam_search = BeamSearch(
            beam_size, alpha, max_extra_length, num_hypotheses, length_penalty=length_penalty
        )
        self.length_penalty = length_penalty
        self.num_hypotheses = num_hypotheses  # the default n-best of `translate`
        self.max_extra_length = max_extra_length
        self.alpha = alpha
        self.top_k, self.temperature, self.top_p = top_k, temperature, top_p
        self._rng = np.random.default_rng(seed)
        self.on_too_long = on_too_long
        self.max_source_length = self.decoder.max_length
        self.batches = BatchPlan(
            batch_size, batch_tokens, LENGTH_MULTIPLE, self.max_source_length, self.decoder.pad_id
        )
        self._compile_enabled = compile
        self._jit_compile = jit_compile
        self._compiled = self._compile_search(self.decoder)
        self._compiled_score = None  # compiled on the first `score` call

    # The batch settings live in the plan alone; setting them here changes the next call.
    @property
    def batch_size(self):
        return self.batches.batch_size

    @batch_size.setter
    def batch_size(self, value):
        self.batches.batch_size = value

    @property
    def batch_tokens(self):
        return self.batches.batch_tokens

    @batch_tokens.setter
    def batch_tokens(self, value):
        self.batches.batch_tokens = value

    @classmethod
    def load(cls, path, vocabulary=None, average_last=None, precision="float32", **options):
        """A `Translator` for a run folder, a `.keras` file or a checkpoint prefix.

        Args:
            path: see the module docstring; a list of paths makes an ensemble.
            vocabulary: the `.model` file (or a `SubwordVocabulary`); default: the one the
                model carries, else `vocab.model` beside it (an imported model's
                `source.spm`, `target.spm` and `vocab.json`).
            average_last: average the run's last N checkpoints (paper 6.1: 5 base, 20 big).
            precision: "float32", or "bf16" to decode with the weights cast to bfloat16 (on
                a CPU with AVX512-BF16 or AMX; `keras_transformer.decoding.precision`).
            **options: `Translator` arguments (beam_size, alpha, ...); a search setting left
                out (or None) takes the run's `decoding.json` value where it has one (an
                imported model's published settings), else `Translator`'s default.

        Example:
        >>> translator = Translator.load("runs/ende", beam_size=4, alpha=0.6)
        """
        paths = list(path) if isinstance(path, (list, tuple)) else [path]
        # Before the (slow) load.
        check_precision(precision)
        given = {name: options.pop(name, None) for name in DECODING_SETTINGS}
        options.update(with_decoding_defaults(paths[0], given, {}))
        settings = inspect.signature(check_translator_settings).parameters
        check_translator_settings(**{k: v for k, v in options.items() if k in settings})
        models, found = [], []
        for one_path in paths:
            model, files = load_model(one_path, average_last=average_last)
            models.append(with_precision(model, precision))
            if files["vocabulary"] is not None:
                found.append((one_path, files["vocabulary"]))
        if vocabulary is None:
            if not found:
                raise UserInputError(
                    f"{paths[0]!r} carries no vocabulary and has no vocab.model beside it; "
                    "pass the SentencePiece .model the model was trained with (--vocab / "
                    "vocabulary=)"
                )
            (first_path, vocabulary), *others = [(p, load_vocabulary(v)) for p, v in found]
            for other_path, other in others:
                if other != vocabulary:
                    raise UserInputError(
                        f"the ensemble's models have different vocabularies ({first_path!r} "
                        f"and {other_path!r}); ensemble models trained with one vocabulary"
                    )
        return cls(models if len(models) > 1 else models[0], vocabulary, **options)

    # -- input -----------------------------------------------------------------------------

    def _encode(self, texts):
        """Token ids (eos-terminated) per non-empty text; None for empty ones."""
        if isinstance(texts, (str, bytes)) or not hasattr(texts, "__iter__"):
            raise TypeError(f"texts must be a list of strings, got {type(texts).__name__}")
        encoded = []
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(
                    f"{_input_name(index)} is {type(text).__name__}, not str: {text!r:.60}"
                )
            if not text.strip():
                encoded.append(None)
                continue
            ids = self._pieces(text, "source")
            if len(ids) + 1 > self.max_source_length:
                message = (
                    f"{_input_name(index)} has {len(ids) + 1} tokens (eos included), more "
                    f"than the model's maximum of {self.max_source_length}"
                )
                if self.on_too_long == "error":
                    raise UserInputError(message + "; shorten or split it")
                warnings.warn(
                    message + f"; its first {self.max_source_length - 1} tokens are translated",
                    InputWarning,
                    stacklevel=3,
                )
                ids = ids[: self.max_source_length - 1]
            encoded.append(ids + [self.decoder.eos_id])
        return encoded

    def _encode_prefixes(self, target_prefix, encoded, single):
        """Target token ids per text (an empty list for no prefix), or None when no text has
        a prefix. A prefix that cannot fit its text's output cap is an error."""
        if target_prefix is None:
            return None
        if single:
            if not isinstance(target_prefix, str):
                raise TypeError(f"target_prefix must be a string, got {target_prefix!r:.60}")
            target_prefix = [target_prefix]
        elif isinstance(target_prefix, (str, bytes)) or not hasattr(target_prefix, "__len__"):
            raise TypeError(
                f"target_prefix must be a list of strings, got {type(target_prefix).__name__}"
            )
        if len(target_prefix) != len(encoded):
            raise UserInputError(
                f"{len(encoded)} texts but {len(target_prefix)} target prefixes: give one "
                'prefix per text ("" for none)'
            )
        prefixes = []
        for index, (prefix, source) in enumerate(zip(target_prefix, encoded)):
            if not isinstance(prefix, str):
                raise TypeError(
                    f"the target prefix of {_input_name(index)} is {type(prefix).__name__}, "
                    f"not str: {prefix!r:.60}"
                )
            if source is None or not prefix.strip():
                prefixes.append([])
                continue
            ids = self._pieces(prefix, "target")
            cap = min(len(source) + self.max_extra_length, self.max_source_length)
            if len(ids) >= cap:
                raise UserInputError(
                    f"the target prefix of {_input_name(index)} has {len(ids)} tokens, but "
                    f"the output is capped at {cap} tokens, eos included (the input's "
                    f"{len(source)} tokens + max_extra_length {self.max_extra_length}, at "
                    f"most the model's {self.max_source_length}): shorten the prefix or "
                    "raise max_extra_length"
                )
            prefixes.append(ids)
        return prefixes if any(prefixes) else None

    def _prefix_batch(self, prefixes, indices):
        """The rows' prefix ids padded as a source batch is (a prefix is shorter than the
        model's `max_length`), or None when no row has a prefix."""
        if prefixes is None or not any(prefixes[i] for i in indices):
            return None
        return self.batches.block(prefixes, indices)

    # -- search ----------------------------------------------------------------------------

    def _search(self, source_ids, noise=None, prefix_ids=None):
        if self.search == "greedy":
            result = greedy_search(
                self.decoder,
                source_ids,
                self.max_extra_length,
                self.alpha,
                prefix_ids=prefix_ids,
                length_penalty=self.length_penalty,
            )
        elif self.search == "sample":
            result = sample(
                self.decoder,
                source_ids,
                self.top_k,
                self.temperature,
                self.max_extra_length,
                noise=noise,
                alpha=self.alpha,
                top_p=self.top_p,
                prefix_ids=prefix_ids,
                length_penalty=self.length_penalty,
            )
        else:
            result = self.beam_search(self.decoder, source_ids, prefix_ids)
        return tuple(result)

    def _compile_search(self, decoder):
        return compile_search(
            self._search, decoder, enabled=self._compile_enabled, jit_single=self._jit_compile
        )

    def with_decoder(self, decoder):
        """A copy of this translator (same vocabulary and search settings) that searches with
        `decoder`, e.g. a wrapper around `self.decoder` that constrains its outputs
        (`keras_transformer.parsing.constrained_decoding`)."""
        other = copy.copy(self)
        other.decoder = decoder
        other._compiled = other._compile_search(decoder)
        other._compiled_score = None
        return other

    def translate_ids(self, source_ids, prefix_ids=None):
        """Searches one batch of source ids `[batch, length]`; returns NumPy
        `(ids, lengths, log_probs, scores)` shaped as `SearchResult`. `prefix_ids`
        `[batch, prefix_length]` (pad-padded) forces the start of each output
        (`keras_transformer.decoding.prefix`)."""
        source_ids = np.asarray(source_ids, "int32")
        args = (source_ids,)
        if self.search == "sample":
            _, buffer_length = max_output_lengths(
                source_ids, self.decoder.pad_id, self.max_extra_length, self.max_source_length
            )
            args += (self._rng.random((buffer_length, len(source_ids)), "float32"),)
        if prefix_ids is not None:  # none: the search traced without a prefix, bit for bit
            args += (None,) * (2 - len(args)) + (np.asarray(prefix_ids, "int32"),)
        return tuple(np.asarray(keras.ops.convert_to_numpy(x)) for x in self._compiled(*args))

    def _text(self, ids, length):
        ids = [int(t) for t in ids[:length]]
        if ids and ids[-1] == self.decoder.eos_id:
            ids = ids[:-1]
        decode = getattr(self.vocabulary, "decode_target", None) or self.vocabulary.decode
        return decode(ids)

    def _pieces(self, text, side):
        """The ids of one text's pieces (no eos), by the vocabulary's model for `side`
        ("source" or "target"): an imported model's vocabulary has one per side."""
        encode = getattr(self.vocabulary, f"encode_{side}", None)
        if encode is None:  # a stand-in with encode/decode only
            return list(self.vocabulary.encode(text))
        return list(encode(text, add_eos=False))

    def translate(self, texts, num_hypotheses=None, return_alignments=False, target_prefix=None):
        """Translates a list of strings (or one string).

        Args:
            texts: a string or a list of strings.
            num_hypotheses: n-best size for this call (default: the translator's).
            return_alignments: also return each translation's word alignment
                (`keras_transformer.decoding.alignment`): a list of `(i, j)` pairs, source
                word i to target word j (0-based, whitespace-separated words), ordered by j;
                `alignment.to_pharaoh(pairs)` writes them as `"i-j ..."`.
            target_prefix: optional, one string per text ("" for none; one string for one
                text): every hypothesis of that text starts with the prefix's target tokens
                (its SentencePiece pieces, no eos) and the search finishes the sentence. The
                forced tokens' log-probabilities count in the score, which stays log P(whole
                output) / length penalty (`keras_transformer.decoding.prefix`). An empty text
                still gives "". None, or only empty prefixes, decode exactly as without.

        Returns:
            Strings in input order; with `num_hypotheses > 1`, one list of `(text, score)` per
            input, best first (score = log-probability / length penalty). An empty input gives
            "" (or `[("", 0.0)]`). With `return_alignments=True` each string becomes
            `(text, pairs)` and each n-best entry `(text, score, pairs)`; an empty input
            has no pairs (`("", [])`, `[("", 0.0, [])]`).

        Raises:
            TypeError: for a non-string element (its index and type are named).
            UserInputError: for a too long input with `on_too_long="error"`.
        """
        single = isinstance(texts, str)
        texts = [texts] if single else texts
        n_best = self.num_hypotheses if num_hypotheses is None else num_hypotheses
        check_decoding_settings(beam_size=self.beam_search.beam_size, num_hypotheses=n_best)
        if n_best != self.beam_search.num_hypotheses:
            if self.search != "beam" or n_best > self.beam_search.beam_size or n_best < 1:
                raise ValueError(
                    f"num_hypotheses must be in [1, beam_size="
                    f"{self.beam_search.beam_size}] with beam search, got "
                    f"{n_best!r}"
                )
            if n_best > self.beam_search.num_hypotheses:
                # The compiled search returns only its own n-best: widen it (one retrace) so
                # that a call asking for more hypotheses gets them, not silently fewer.
                search = self.beam_search
                self.beam_search = BeamSearch(
                    search.beam_size,
                    search.alpha,
                    search.max_extra_length,
                    n_best,
                    search.min_length,
                    search.length_penalty,
                )
                self._compiled = self._compile_search(self.decoder)
        encoded = self._encode(texts)
        prefixes = self._encode_prefixes(target_prefix, encoded, single)
        outputs = [[("", 0.0)] for _ in encoded]
        source_lengths = sequence_lengths(encoded)
        output_ids = {}  # input index -> ids of its hypotheses, for the alignments
        for indices in self.batches.groups(source_lengths):
            rows = self.batches.rows(indices, source_lengths)
            ids, lengths, _, scores = self.translate_ids(
                self.batches.block(encoded, rows), self._prefix_batch(prefixes, rows)
            )
            for row, i in enumerate(indices):
                outputs[i] = [
                    (self._text(ids[row, j], lengths[row, j]), float(scores[row, j]))
                    for j in range(min(n_best, scores.shape[1]))
                    if is_hypothesis(scores[row, j])
                ]
                if return_alignments:
                    output_ids[i] = [
                        ids[row, j, : lengths[row, j]].tolist() for j in range(len(outputs[i]))
                    ]
        if return_alignments:
            outputs = self._with_alignments(encoded, outputs, output_ids)
        if n_best == 1:
            outputs = [
                (hypotheses[0][0], hypotheses[0][2]) if return_alignments else hypotheses[0][0]
                for hypotheses in outputs
            ]
        else:
            outputs = [hypotheses[:n_best] for hypotheses in outputs]
        return outputs[0] if single else outputs

    __call__ = translate

    def _with_alignments(self, encoded, outputs, output_ids):
        """`outputs` with each `(text, score)` extended to `(text, score, pairs)`: the
        hypotheses' alignments, from a teacher-forced pass over the search's own ids."""
        from keras_transformer.decoding import alignment

        if getattr(self, "_piece_classes", None) is None:
            self._piece_classes = alignment.piece_classes(self.vocabulary, self.decoder.vocab_size)
        keys = [(i, j) for i, hypotheses in output_ids.items() for j in range(len(hypotheses))]
        pairs = alignment.align_pairs(
            self.decoder,
            self._piece_classes,
            [(encoded[i], output_ids[i][j]) for i, j in keys],
            batch_size=self.batch_size,
            pad_id=self.decoder.pad_id,
        )
        links = dict(zip(keys, pairs))
        return [
            [(text, score, links.get((i, j), [])) for j, (text, score) in enumerate(hypotheses)]
            for i, hypotheses in enumerate(outputs)
        ]

    # -- scoring ---------------------------------------------------------------------------

    def _encode_targets(self, targets, sources):
        """Label ids (pieces, then eos) per target; an over-long target is an error, since a
        truncated target would get another sentence's score."""
        if isinstance(targets, (str, bytes)) or not hasattr(targets, "__len__"):
            raise TypeError(f"targets must be a list of strings, got {type(targets).__name__}")
        if len(targets) != len(sources):
            raise UserInputError(
                f"{len(sources)} sources but {len(targets)} targets: score() needs one target "
                "per source"
            )
        encoded = []
        for index, text in enumerate(targets):
            if not isinstance(text, str):
                raise TypeError(
                    f"{_target_name(index)} is {type(text).__name__}, not str: {text!r:.60}"
                )
            ids = self._pieces(text, "target") + [self.decoder.eos_id]
            if len(ids) > self.max_source_length:
                raise UserInputError(
                    f"{_target_name(index)} has {len(ids)} tokens (eos included), more than the "
                    f"model's maximum of {self.max_source_length}; it cannot be scored whole"
                )
            encoded.append(ids)
        return encoded

    def _score(self, source_ids, target_ids):
        return score_targets(self.decoder, source_ids, target_ids)

    def score(self, sources, targets, normalize=False):
        """log P(target | source) of given translations, by teacher forcing (as in training).

        Args:
            sources: a list of strings (or one string).
            targets: one translation per source.
            normalize: return the per-token average (eos counted) instead of the sum.

        Returns:
            One float per pair, in input order (a float for one string): the sum of the
            target's token log-probabilities, eos included, or their mean with `normalize`.
            An empty source is scored as eos alone, as the model would read it.

        Example:
        >>> translator.score(["Hello."], ["Hallo."])
        [-0.31]
        """
        single = isinstance(sources, str)
        sources, targets = ([sources], [targets]) if single else (sources, targets)
        encoded = [
            ids or [self.decoder.eos_id] for ids in self._encode(sources)
        ]  # the source as translate() reads it
        labels = self._encode_targets(targets, encoded)
        if self._compiled_score is None:
            self._compiled_score = compile_search(self._score, self.decoder, self._compile_enabled)
        scores = np.zeros(len(encoded), "float64")
        longest = [max(len(a), len(b)) for a, b in zip(encoded, labels)]
        for indices in self.batches.groups(longest):
            rows = self.batches.rows(indices, longest)
            total, count = self._compiled_score(
                self.batches.block(encoded, rows), self.batches.block(labels, rows)
            )
            total = keras.ops.convert_to_numpy(total)[: len(indices)]
            count = keras.ops.convert_to_numpy(count)[: len(indices)]
            scores[indices] = total / count if normalize else total
        scores = [float(score) for score in scores]
        return scores[0] if single else scores


def translate(
    texts,
    model,
    vocabulary=None,
    beam_size=None,
    alpha=None,
    max_extra_length=None,
    num_hypotheses=1,
    target_prefix=None,
    length_penalty=None,
    **options,
):
    """Translates `texts` with beam search (paper 6.1: beam 4, alpha 0.6, input length + 50).

    Args:
        texts: a string or a list of strings.
        model: a `Translator`, a path (run folder, `.keras` file, checkpoint prefix), or a
            `Transformer` (then `vocabulary` is required).
        vocabulary: the SentencePiece `.model` (default: `vocab.model` beside the model).
        beam_size, alpha, max_extra_length, num_hypotheses, length_penalty: the search
            (ignored when `model` is a `Translator`, which has its own settings, except
            `num_hypotheses`); `length_penalty` is "gnmt" (the paper's) or "power". Left out,
            the run's `decoding.json` settings where a path's run has them, else the paper's
            (beam 4, alpha 0.6, gnmt, max_extra_length 50).
        target_prefix: one string per text that its translation must start with ("" for
            none), as `Translator.translate`.
        **options: other `Translator` arguments (`batch_size`, `batch_tokens`, ...).

    Returns:
        As `Translator.translate`: strings, or n-best lists of `(text, score)`.

    A path's translator (with its compiled searches) is kept for the next call with the same
    path, vocabulary and settings while its files are unchanged (the last
    `KEPT_TRANSLATORS`); sampling (`search="sample"`) loads anew each call, so that a seed
    gives the same samples every call.

    Example:
    >>> translate(["Hello world."], model="runs/ende")
    ['Hallo Welt.']
    """
    if isinstance(model, Translator):
        translator = model
    else:
        search = dict(
            beam_size=beam_size,
            alpha=alpha,
            max_extra_length=max_extra_length,
            length_penalty=length_penalty,
        )
        settings = dict(
            {name: value for name, value in search.items() if value is not None},
            num_hypotheses=max(num_hypotheses, 1),
            **options,
        )
        translator = _translator_of(model, vocabulary, settings)
    return translator.translate(texts, num_hypotheses=num_hypotheses, target_prefix=target_prefix)


def _translator_of(model, vocabulary, settings):
    """The `Translator` of `model` (a path, or a `Transformer` with its `vocabulary`)."""
    if isinstance(model, (str, os.PathLike)):
        return _loaded_translator(model, vocabulary, settings)
    if vocabulary is None:
        raise UserInputError(
            "translate(model=<Transformer>) needs vocabulary=, the "
            "SentencePiece .model the model was trained with"
        )
    return Translator(model, vocabulary, **settings)


# translate(model=PATH) keeps the translators it loaded: a load and its searches' first traces
# take seconds, and scripts call translate() in loops.
KEPT_TRANSLATORS = 2
_kept_translators = collections.OrderedDict()


def _loaded_translator(path, vocabulary, settings):
    """`Translator.load(path, vocabulary, **settings)`, or the one an earlier call loaded
    from the same files (`_load_key`)."""
    key = _load_key(path, vocabulary, settings)
    if key is None:
        return Translator.load(path, vocabulary=vocabulary, **settings)
    translator = _kept_translators.pop(key, None)
    if translator is None:
        translator = Translator.load(path, vocabulary=vocabulary, **settings)
    _kept_translators[key] = translator
    while len(_kept_translators) > KEPT_TRANSLATORS:
        _kept_translators.popitem(last=False)
    return translator


def _load_key(path, vocabulary, settings):
    """What a load depends on: each file `path` designates (and the vocabulary file) with its
    size and modification time, and the settings; None for a load that is not kept (averaged
    checkpoints, sampling, a vocabulary object, settings that cannot be compared)."""
    if settings.get("average_last") or settings.get("search") == "sample":
        return None
    if vocabulary is not None and not isinstance(vocabulary, (str, os.PathLike)):
        return None
    try:
        frozen = tuple(sorted(settings.items()))
        hash(frozen)
    except TypeError:
        return None
    files = find_model_files(path)
    model_file = files["model"] + (".index" if files["kind"] == "checkpoint" else "")
    stamps = []
    names = [model_file, files["config"], files["vocabulary"], vocabulary]
    names.append(os.path.join(run_folder_of(path), DECODING_FILE))
    if files["vocabulary"] is not None and os.path.isdir(files["vocabulary"]):
        names += [os.path.join(files["vocabulary"], name) for name in MARIAN_FILES]
    for name in names:
        if name is not None and os.path.isfile(name):
            status = os.stat(name)
            stamps.append((os.path.abspath(name), status.st_size, status.st_mtime_ns))
    return tuple(stamps), frozen
