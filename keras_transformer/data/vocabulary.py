"""The shared source-target subword vocabulary of paper section 5.1, as a SentencePiece model.

The paper encodes EN-DE with byte-pair encoding into a shared vocabulary of about 37000 tokens
and EN-FR into 32000 word-pieces. `train_vocabulary` trains one SentencePiece model on source
and target text together: BPE (`model_type="bpe"`) for the EN-DE setting, or the unigram
language model (`model_type="unigram"`), SentencePiece's closest match to word-pieces, for
EN-FR. It calls `sentencepiece` directly because the trainer options that large corpora need
(input sentence sampling, character coverage) are not exposed by keras-hub's
`compute_sentence_piece_proto`.

Ids are fixed for the model: pad 0, unk 1, bos 2, eos 3 (`PAD_ID`, ...). The vocabulary size is
rounded up to a multiple of 8, which keeps the embedding and softmax matrices aligned for
accelerators.

`SubwordVocabulary` is the one vocabulary class of data, translation and export, with three
faces of the same model:

- `encode` / `decode`: plain Python on `sentencepiece`, no TensorFlow (translation on any
  Keras backend);
- `make_tokenizer()`: a tensorflow-text `SentencepieceTokenizer`, imported when asked for: a
  TensorFlow op, so it runs inside `tf.data` maps and inside exported SavedModels (stock TF
  Serving has the SentencePiece ops since 2.2);
- `to_tokenizer()`: a keras-hub `SentencePieceTokenizer` layer, which Keras saves inside a
  `.keras` file (`Transformer(config, tokenizer=...)`), so that a saved model carries its
  vocabulary.

Normalization (documented round trip): text is normalized with SentencePiece's `nmt_nfkc` rule
by default, that is Unicode NFKC plus a few NMT-specific mappings (control characters removed,
unusual spaces made plain spaces), and whitespace is collapsed: leading and trailing spaces
removed, runs of spaces made one. `detokenize(tokenize(text)) == normalize(text)` for all text;
with byte fallback (on by default) even characters never seen in training come back intact
instead of as `<unk>`.
"""

import dataclasses
import io
import logging
import os
import time
from collections.abc import Iterable, Sequence

from keras_transformer.errors import UserInputError
from keras_transformer.files import atomic_write

logger = logging.getLogger(__name__)

# The fixed ids are the model's (config.py): one definition for vocabulary, data and model.
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID  # noqa: E402

SPECIAL_PIECES = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}

MODEL_TYPES = ("bpe", "unigram")
NORMALIZATIONS = ("nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf", "identity")


@dataclasses.dataclass(frozen=True)
class VocabularyPreset:
    """The vocabulary settings of one paper setting.

    Args:
        vocab_size: number of subword pieces (a multiple of 8).
        model_type: `"bpe"` or `"unigram"`.
        description: where the setting comes from.
    """

    vocab_size: int
    model_type: str
    description: str


PRESETS = {
    "en-de": VocabularyPreset(37000, "bpe", "WMT 2014 EN-DE: shared BPE, about 37000 tokens"),
    "en-fr": VocabularyPreset(32000, "unigram", "WMT 2014 EN-FR: 32000 word-pieces"),
}


def round_vocab_size(vocab_size: int, multiple: int = 8) -> int:
    """Rounds a vocabulary size up to a multiple of `multiple` (8 by default).

    Args:
        vocab_size: the requested size.
        multiple: the multiple to round to.

    Returns:
        The smallest multiple of `multiple` that is >= `vocab_size`.

    Example:
        >>> round_vocab_size(37000)
        37000
        >>> round_vocab_size(1001)
        1008
    """
    if vocab_size < len(SPECIAL_PIECES) + 1:
        raise UserInputError(
            f"vocabulary size {vocab_size} is too small: it must hold the {len(SPECIAL_PIECES)} "
            "special pieces (pad, unk, bos, eos) and at least one piece of text"
        )
    return -(-vocab_size // multiple) * multiple


def _lines_of(corpora) -> Iterable[str]:
    for corpus in corpora:
        yield from corpus.text_lines()


def sampled_lines(corpora, size: int, seed: int) -> Iterable[str]:
    """The text lines of `corpora`, or, when there are more than `size` (> 0), `size` of them
    drawn uniformly by `seed`, in corpus order; streamed (one counting pass first).

    Hand-written because SentencePiece's own sampling (`input_sentence_size` with
    `shuffle_input_sentence`) draws differently in each process despite
    `set_random_generator_seed`; this one depends on `seed` and the text only.
    """
    import numpy as np

    total = sum(1 for _ in _lines_of(corpora)) if size else 0
    if total <= size:
        yield from _lines_of(corpora)
        return
    chosen = np.sort(np.random.default_rng(seed).choice(total, size, replace=False))
    index = 0
    for position, line in enumerate(_lines_of(corpora)):
        if position == chosen[index]:
            yield line
            index += 1
            if index == size:
                return


def train_vocabulary(
    corpora: Sequence,
    model_prefix: str,
    *,
    vocab_size: int = 37000,
    model_type: str = "bpe",
    character_coverage: float = 1.0,
    input_sentence_size: int = 10_000_000,
    max_sentence_length: int = 4192,
    byte_fallback: bool = True,
    normalization: str = "nmt_nfkc",
    num_threads: int = None,
    seed: int = 0,
) -> "SubwordVocabulary":
    """Trains one SentencePiece model on the source and target sides of `corpora` together.

    Writes `<model_prefix>.model` (the model) and `<model_prefix>.vocab` (one piece and its
    score per line, for reading).

    Args:
        corpora: `ParallelCorpus` objects; both sides of every pair are training text. They are
            checked first, so bad input fails here with a clear message.
        model_prefix: output path without extension, e.g. `vocab/ende`; folders are created.
        vocab_size: number of pieces, rounded up to a multiple of 8 (presets: 37000 EN-DE,
            32000 EN-FR).
        model_type: `"bpe"` (paper EN-DE) or `"unigram"` (word-piece-like, paper EN-FR).
        character_coverage: share of characters the model covers with their own pieces; the
            rest are spelled with byte pieces (byte fallback) or `<unk>`. 1.0 suits European
            languages; 0.9995 suits large alphabets (Chinese, Japanese).
        input_sentence_size: at most this many sentences, sampled at random from the corpora,
            train the model: the memory and time bound for large corpora (0: use all).
        max_sentence_length: longer sentences (in bytes) are left out of training.
        byte_fallback: spell characters outside the vocabulary as UTF-8 byte pieces, so that
            any text round-trips and `<unk>` never appears.
        normalization: a SentencePiece normalization rule; `"nmt_nfkc"` (default), `"nfkc"`,
            `"nmt_nfkc_cf"`, `"nfkc_cf"` (case folding) or `"identity"`.
        num_threads: trainer threads (default: all CPU cores).
        seed: seed of the sentence sampling; the same seed and data give the same model.

    Returns:
        The trained `SubwordVocabulary`.

    Raises:
        UserInputError: on bad corpora, bad settings, or a size the text cannot fill.

    Example:
        >>> from keras_transformer.data.corpora import TextPairCorpus
        >>> corpus = TextPairCorpus("train.en.gz", "train.de.gz")  # doctest: +SKIP
        >>> vocabulary = train_vocabulary([corpus], "vocab/ende", vocab_size=8000)  # doctest: +SKIP
        >>> vocabulary.size  # doctest: +SKIP
        8000
    """
    from keras_transformer.data.corpora import check_corpora

    rounded = _checked_vocab_size(vocab_size, model_type, normalization, character_coverage)
    check_corpora(corpora)
    _make_prefix_folder(model_prefix)
    # A uniform sample, not the first N lines: corpora are often sorted by source or domain.
    lines = sampled_lines(corpora, input_sentence_size, seed)
    started = time.perf_counter()
    model_proto = _train_sentencepiece(
        lines,
        len(corpora),
        vocab_size=rounded,
        model_type=model_type,
        character_coverage=character_coverage,
        input_sentence_size=input_sentence_size,
        max_sentence_length=max_sentence_length,
        byte_fallback=byte_fallback,
        normalization_rule_name=normalization,
        num_threads=num_threads or os.cpu_count() or 1,
        seed=seed,
    )
    elapsed = time.perf_counter() - started
    vocabulary = SubwordVocabulary(model_proto, path=model_prefix + ".model")
    _write_vocabulary_files(vocabulary, model_prefix)
    logger.info(
        "trained a %s vocabulary of %d pieces in %.1f s: %s.model",
        model_type,
        vocabulary.size,
        elapsed,
        model_prefix,
    )
    vocabulary.training_seconds = elapsed
    return vocabulary


def _checked_vocab_size(vocab_size, model_type, normalization, character_coverage):
    """`vocab_size` rounded up to a multiple of 8, once the settings are checked."""
    if model_type not in MODEL_TYPES:
        raise UserInputError(f"model_type must be one of {MODEL_TYPES}, got {model_type!r}")
    if normalization not in NORMALIZATIONS:
        raise UserInputError(
            f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}"
        )
    if not 0.9 <= character_coverage <= 1.0:
        raise UserInputError(
            f"character_coverage must be between 0.9 and 1.0, got {character_coverage}"
        )
    rounded = round_vocab_size(vocab_size)
    if rounded != vocab_size:
        logger.info("vocabulary size %d rounded up to %d (a multiple of 8)", vocab_size, rounded)
    return rounded


def _make_prefix_folder(model_prefix):
    directory = os.path.dirname(os.path.abspath(model_prefix))
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as error:  # a file where a folder should be, or no permission
        raise UserInputError(
            f"cannot make the folder {directory!r} for the vocabulary {model_prefix!r}: "
            f"{error.strerror}; choose another prefix"
        ) from None


def _train_sentencepiece(lines, num_corpora, *, seed, **settings):
    """The serialized SentencePiece model trained on `lines` with the project's special ids;
    SentencePiece's errors become `UserInputError`s that say what to change."""
    import sentencepiece

    sentencepiece.set_random_generator_seed(seed)
    model = io.BytesIO()
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(lines),
            model_writer=model,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            pad_piece=SPECIAL_PIECES[PAD_ID],
            unk_piece=SPECIAL_PIECES[UNK_ID],
            bos_piece=SPECIAL_PIECES[BOS_ID],
            eos_piece=SPECIAL_PIECES[EOS_ID],
            # Large corpora need more than the default 32-bit suffix array.
            train_extremely_large_corpus=(
                settings["input_sentence_size"] == 0 or settings["input_sentence_size"] > 20_000_000
            ),
            minloglevel=2,
            **settings,
        )
    except RuntimeError as error:
        message = str(error)
        if "sentences_.empty()" in message:  # SentencePiece left out every line
            raise UserInputError(
                f"no line of the {num_corpora} corpus(es) is short enough to learn from: "
                "every one is longer than "
                f"max_sentence_length={settings['max_sentence_length']} bytes; "
                "split the long lines, or raise it (`keras-transformer vocab "
                "--max-sentence-length`; train takes the result as data.vocab)"
            ) from None
        if "Vocabulary size" in message or "vocab_size" in message:
            raise UserInputError(
                f"cannot train a vocabulary of {settings['vocab_size']} pieces on "
                f"{num_corpora} corpus(es): {message.strip()}; lower the vocabulary size or "
                "add text"
            ) from None
        raise UserInputError(f"SentencePiece training failed: {message.strip()}") from None
    return model.getvalue()


def _write_vocabulary_files(vocabulary, model_prefix):
    """`<prefix>.model` and `<prefix>.vocab` (one piece and its score a line), each written
    beside and renamed (atomic_write): a kill mid-write leaves earlier files whole."""
    with atomic_write(model_prefix + ".model", "wb") as file:
        file.write(vocabulary.model_proto)
    with atomic_write(model_prefix + ".vocab", encoding="utf-8") as file:
        processor = vocabulary.processor
        for piece_id in range(processor.get_piece_size()):
            file.write(f"{processor.id_to_piece(piece_id)}\t{processor.get_score(piece_id):g}\n")


class SubwordVocabulary:
    """A trained SentencePiece model with the project's fixed special ids: the one vocabulary
    class of data pipelines, translation and export.

    Plain Python on `sentencepiece` (no TensorFlow), so that translation runs on every Keras
    backend; the TensorFlow parts (`make_tokenizer`, `tokenize`, `detokenize`) import
    tensorflow-text when first called.

    Args:
        model: the SentencePiece model: its serialized bytes, or the path of its `.model` file.
        path: where the bytes were read from, for messages.

    Raises:
        UserInputError: when the model is not a SentencePiece model, or its special ids differ
            from pad 0, unk 1, bos 2, eos 3 (a model trained elsewhere): retrain it with
            `keras-transformer vocab`.

    Example:
        >>> vocabulary = SubwordVocabulary("vocab/ende.model")  # doctest: +SKIP
        >>> vocabulary.decode(vocabulary.encode("Hello world."))  # doctest: +SKIP
        'Hello world.'
        >>> ids = vocabulary.tokenize(["Hello world."])  # tf.RaggedTensor  # doctest: +SKIP
    """

    def __init__(self, model, path: str = None):
        import sentencepiece

        if isinstance(model, (str, os.PathLike)):
            path = os.fspath(model)
            model = _read_model_file(path)
        self.model_proto = bytes(model)
        self.path = path
        self.training_seconds = None
        self.processor = sentencepiece.SentencePieceProcessor()
        try:
            self.processor.load_from_serialized_proto(self.model_proto)
        except (RuntimeError, TypeError) as error:
            raise UserInputError(
                f"{path or 'the given bytes'} is not a SentencePiece model ({error}); "
                "train one with `keras-transformer vocab`"
            ) from None
        found = {
            PAD_ID: self.processor.pad_id(),
            UNK_ID: self.processor.unk_id(),
            BOS_ID: self.processor.bos_id(),
            EOS_ID: self.processor.eos_id(),
        }
        if any(expected != actual for expected, actual in found.items()):
            raise UserInputError(
                f"{path or 'SentencePiece model'} has special ids pad={found[PAD_ID]}, "
                f"unk={found[UNK_ID]}, bos={found[BOS_ID]}, eos={found[EOS_ID]}, but the model "
                f"expects pad={PAD_ID}, unk={UNK_ID}, bos={BOS_ID}, eos={EOS_ID}; use the "
                "vocabulary the model was trained with, or retrain it with "
                "`keras-transformer vocab`"
            )

    @classmethod
    def from_file(cls, path: str) -> "SubwordVocabulary":
        """Loads a `.model` file written by `train_vocabulary` (local path or `gs://...`).

        Args:
            path: the `.model` file.

        Example:
            >>> vocabulary = SubwordVocabulary.from_file("vocab/ende.model")  # doctest: +SKIP
        """
        return cls(os.fspath(path))

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "SubwordVocabulary":
        """The vocabulary of a keras-hub `SentencePieceTokenizer` (e.g. `Transformer.tokenizer`
        of a model loaded from a `.keras` file).

        Example:
            >>> same = SubwordVocabulary.from_tokenizer(vocabulary.to_tokenizer())  # doctest: +SKIP
        """
        if getattr(tokenizer, "proto", None) is None:
            raise UserInputError(
                f"the tokenizer {getattr(tokenizer, 'name', tokenizer)!r} "
                "holds no SentencePiece model"
            )
        return cls(tokenizer.proto, path=f"the tokenizer {tokenizer.name!r}")

    def to_tokenizer(self, **kwargs):
        """This vocabulary as a keras-hub `SentencePieceTokenizer`: a Keras layer that saves the
        SentencePiece model inside `.keras` files (as an asset) and tokenizes in plain Python
        on any backend, without TensorFlow.

        `Transformer(config, tokenizer=...)` carries one, so that a saved model translates with
        no `vocab.model` beside it. For `tf.data` and exported graphs use `make_tokenizer()`:
        the keras-hub layer makes its TensorFlow resource eagerly, when it is created, and
        `keras.utils.set_random_seed` then invalidates it ("Resource ... does not exist").

        Args:
            **kwargs: more `SentencePieceTokenizer` arguments (`name`, `sequence_length`, ...).

        Example:
            >>> tokenizer = vocabulary.to_tokenizer()  # doctest: +SKIP
            >>> tokenizer.detokenize(tokenizer.tokenize("Hello world."))  # doctest: +SKIP
            'Hello world.'
        """
        from keras_hub.tokenizers import SentencePieceTokenizer

        return SentencePieceTokenizer(proto=self.model_proto, **kwargs)

    @property
    def size(self) -> int:
        """Number of pieces: the model's `vocab_size`."""
        return self.processor.get_piece_size()

    pad_id = PAD_ID
    unk_id = UNK_ID
    bos_id = BOS_ID
    eos_id = EOS_ID

    def make_tokenizer(self):
        """A new tensorflow-text `SentencepieceTokenizer` (int32 ids) for graphs and tf.data.

        Make it where it is used: inside a `tf.data` map function, a `tf.function` or the
        `tf.Module` being exported. Its SentencePiece model is a resource owned by a TensorFlow
        kernel; an eagerly made tokenizer stops working ("Resource ... SentencepieceOp ... does
        not exist") after `tf.random.set_seed` or `keras.utils.set_random_seed` clear the eager
        kernel cache, while one made inside a function graph lives as long as the graph.
        Making one costs a parse of the model (milliseconds).

        Example:
            >>> def tokenize(lines):  # a tf.data map function  # doctest: +SKIP
            ...     return vocabulary.make_tokenizer().tokenize(lines)
        """
        import tensorflow as tf
        import tensorflow_text

        return tensorflow_text.SentencepieceTokenizer(model=self.model_proto, out_type=tf.int32)

    def tokenize(self, texts):
        """Subword ids of a batch of strings, without bos/eos, as a `tf.RaggedTensor` (int32)."""
        return self.make_tokenizer().tokenize(texts)

    def detokenize(self, ids):
        """Text of a batch of id sequences (ragged or dense); pad, bos and eos are dropped."""
        import tensorflow as tf

        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.convert_to_tensor(ids, dtype=tf.int32)
            if ids.shape.rank == 2:
                # Dense batches are padded with 0 (pad) to the right: strip it first.
                ids = tf.RaggedTensor.from_tensor(ids, padding=PAD_ID)
        return self.make_tokenizer().detokenize(ids)

    def encode(self, text: str) -> list:
        """Subword ids of one Python string (no bos/eos), for use outside TensorFlow."""
        return self.processor.encode(text, out_type=int)

    def decode(self, ids) -> str:
        """Text of one sequence of ids; pad, bos and eos are dropped.

        An id the file has no piece for (a model built with more rows than the vocabulary has
        pieces, or given another run's vocabulary) reads as unk, where SentencePiece itself
        would raise an IndexError from deep inside the decoder.
        """
        size = self.size
        return self.processor.decode([i if 0 <= i < size else UNK_ID for i in map(int, ids)])

    # The side-named methods that `MarianVocabulary` has (its sides have two models): one
    # model serves both sides here.
    def encode_source(self, text: str, add_eos: bool = True) -> list:
        """Model ids of one source text, ending with eos unless `add_eos=False`."""
        ids = self.encode(text)
        return ids + [EOS_ID] if add_eos else ids

    def encode_target(self, text: str, add_eos: bool = True) -> list:
        """Model ids of one target text, ending with eos unless `add_eos=False`."""
        return self.encode_source(text, add_eos)

    def decode_target(self, ids) -> str:
        """Text of one sequence of target ids (`decode`)."""
        return self.decode(ids)

    def make_graph_tokenizer(self):
        """The graph tokenizer that data and export code use with either vocabulary:
        `tokenize_source`, `tokenize_target` (ragged ids, no eos) and `detokenize_target`, on
        one `make_tokenizer()`. Make it where it is used, as `make_tokenizer`'s."""
        return SharedGraphTokenizer(self.make_tokenizer())

    def normalize(self, text: str) -> str:
        """The text as the model sees it: `decode(encode(text)) == normalize(text)`."""
        # SentencePiece's normalizer marks spaces with U+2581; the decoder turns them back.
        return self.processor.normalize(text).replace("\u2581", " ").strip()

    def __eq__(self, other):
        return isinstance(other, SubwordVocabulary) and self.model_proto == other.model_proto

    __hash__ = None

    def __repr__(self):
        return f"SubwordVocabulary(size={self.size}, path={self.path!r})"


def _read_model_file(path):
    """The bytes of a `.model` file: local paths in plain Python, `scheme://` paths (GCS, ...)
    through TensorFlow's file system, imported only for them."""
    if "://" in path:
        import tensorflow as tf

        exists, open_file = tf.io.gfile.exists, tf.io.gfile.GFile
    else:
        exists, open_file = os.path.isfile, open
    if not exists(path):
        raise UserInputError(
            f"vocabulary file {path!r} does not exist; give the SentencePiece .model the model "
            "was trained with (`keras-transformer vocab` trains one), or check the path"
        )
    with open_file(path, "rb") as file:
        return file.read()


class SharedGraphTokenizer:
    """One tensorflow-text SentencePiece tokenizer under the side-named graph methods of
    `MarianVocabulary.make_graph_tokenizer()`: source and target share the model.

    Args:
        tokenizer: a `tensorflow_text.SentencepieceTokenizer` (`make_tokenizer()`).
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def tokenize_source(self, texts):
        return self.tokenizer.tokenize(texts)

    def tokenize_target(self, texts):
        return self.tokenizer.tokenize(texts)

    def detokenize_target(self, ids):
        return self.tokenizer.detokenize(ids)


def load_vocabulary(vocabulary):
    """The vocabulary that `vocabulary` designates: a `SubwordVocabulary`, or the
    `MarianVocabulary` of an imported OPUS-MT model.

    Args:
        vocabulary: a `SubwordVocabulary` or `MarianVocabulary` (returned as is), the path of
            a `.model` file, its bytes, a keras-hub `SentencePieceTokenizer`, or a folder: a
            run folder (its `vocab.model`, or the `source.spm`, `target.spm` and `vocab.json`
            of an imported model).

    Raises:
        UserInputError: for a missing file, a folder with no vocabulary, or a model with
            other special ids.
        TypeError: for anything else.

    Example:
        >>> load_vocabulary("runs/ende/vocab.model").size  # doctest: +SKIP
        37000
        >>> load_vocabulary("runs/opus-en-de")  # doctest: +SKIP
        MarianVocabulary(size=58101, path='runs/opus-en-de')
    """
    from keras_transformer.data.marian_vocabulary import MarianVocabulary, is_marian_folder

    if isinstance(vocabulary, (SubwordVocabulary, MarianVocabulary)):
        return vocabulary
    if isinstance(vocabulary, (str, os.PathLike)) and os.path.isdir(vocabulary):
        if is_marian_folder(vocabulary):
            return MarianVocabulary.from_folder(vocabulary)
        model_file = os.path.join(vocabulary, "vocab.model")
        if os.path.isfile(model_file):
            return SubwordVocabulary(model_file)
        raise UserInputError(
            f"{os.fspath(vocabulary)!r} holds no vocabulary: a run folder has vocab.model, or "
            "source.spm, target.spm and vocab.json for an imported model"
        )
    if isinstance(vocabulary, (str, os.PathLike, bytes)):
        return SubwordVocabulary(vocabulary)
    if hasattr(vocabulary, "proto") and hasattr(vocabulary, "detokenize"):
        return SubwordVocabulary.from_tokenizer(vocabulary)
    raise TypeError(
        f"vocabulary must be a SubwordVocabulary, a MarianVocabulary, a .model path, a run "
        f"folder or a keras-hub SentencePieceTokenizer, got {type(vocabulary).__name__}"
    )
