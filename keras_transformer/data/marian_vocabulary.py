"""The vocabulary of OPUS-MT (Marian) models: two SentencePiece models and one id table.

An OPUS-MT model folder holds `source.spm` (the SentencePiece model of the source language),
`target.spm` (the target language's) and `vocab.json`, the table from piece to model id that
both sides share (`target_vocab.json`, where given, is the target side's own table). The
SentencePiece models only cut text into pieces; their own ids are not the model's. Special
ids come from the table: `</s>` (eos), `<unk>`, `<pad>` (the last id, also the decoder's start
token, so `bos_id == pad_id`).

`MarianVocabulary` tokenizes exactly as Hugging Face's `MarianTokenizer`:

- a language token at the very start of a source text (`>>deu<< Hello`: everything from `>>`
  up to the first `<<`) is kept whole as one token; an unknown one is `<unk>`;
- the literal special tokens `</s>`, `<unk>` and `<pad>` in a text are tokens of their own;
- the rest is cut by the side's SentencePiece model (its own normalization, `nmt_nfkc` in
  OPUS-MT's models) and each piece looked up in the table: a piece not in it is `<unk>`;
- eos is appended. `MarianTokenizer` applies no other normalization while tokenizing (its
  Moses punctuation normalizer is only called through its `normalize()`).

Decoding drops the special tokens and joins the pieces: as `MarianTokenizer.decode(ids,
skip_special_tokens=True)` with the SentencePiece model it picks, the source side's for one
shared table and the target side's for a separate target table.

Inside TensorFlow graphs (`tf.data` and exported SavedModels) `make_graph_tokenizer()` does
the same with tensorflow-text's SentencePiece op, core string ops (the language token) and a
constant tables (SentencePiece id -> model id; the text of pieces only the table knows), all of which stock TF Serving runs. One difference: the
graph does not split out literal `</s>`, `<unk>` or `<pad>` written inside a text.
"""

import functools
import json
import os

from keras_transformer.errors import UserInputError

SOURCE_SPM = "source.spm"
TARGET_SPM = "target.spm"
VOCAB = "vocab.json"
TARGET_VOCAB = "target_vocab.json"
FILES = (SOURCE_SPM, TARGET_SPM, VOCAB, TARGET_VOCAB)

EOS_PIECE = "</s>"
UNK_PIECE = "<unk>"
PAD_PIECE = "<pad>"
SPECIAL_PIECES = (EOS_PIECE, UNK_PIECE, PAD_PIECE)
WORD_MARK = "\u2581"


def is_marian_folder(folder) -> bool:
    """Whether `folder` holds an OPUS-MT vocabulary (`source.spm`, `target.spm`,
    `vocab.json`)."""
    return all(
        os.path.isfile(os.path.join(folder, name)) for name in (SOURCE_SPM, TARGET_SPM, VOCAB)
    )


def split_language_token(text: str):
    """`(token, rest)`: a leading `>>xx<<` language token and the text after it, else
    `("", text)`; as `MarianTokenizer.remove_language_code`.

    Example:
        >>> split_language_token(">>deu<< Hello")
        ('>>deu<<', ' Hello')
        >>> split_language_token("Hello >>deu<<")
        ('', 'Hello >>deu<<')
    """
    if text.startswith(">>"):
        end = text.find("<<")
        if end != -1:
            return text[: end + 2], text[end + 2 :]
    return "", text


def _split_special(text: str):
    """The text cut at literal special tokens: a list of (chunk, is_special)."""
    chunks = [(text, False)]
    for special in SPECIAL_PIECES:
        cut = []
        for chunk, is_special in chunks:
            if is_special or special not in chunk:
                cut.append((chunk, is_special))
                continue
            parts = chunk.split(special)
            for index, part in enumerate(parts):
                if index:
                    cut.append((special, True))
                cut.append((part, False))
        chunks = cut
    return [(chunk, is_special) for chunk, is_special in chunks if chunk]


class MarianVocabulary:
    """OPUS-MT's vocabulary: a SentencePiece model per side and the model's id table.

    Args:
        source_spm: the source side's SentencePiece model: bytes, or the path of `source.spm`.
        target_spm: the target side's: bytes, or the path of `target.spm`.
        vocab: the id table (piece -> id): a dict, its JSON text or bytes, or the path of
            `vocab.json`.
        target_vocab: the target side's own table (`target_vocab.json`), or None when both
            sides share `vocab`.
        path: where the files were read from, for messages.

    Raises:
        UserInputError: when a file is missing or unreadable, or the table lacks `</s>`,
            `<unk>` or `<pad>`.

    Example:
        >>> vocabulary = MarianVocabulary.from_folder("runs/opus-en-de")  # doctest: +SKIP
        >>> ids = vocabulary.encode_source("Hello world.")  # doctest: +SKIP
        >>> ids[-1] == vocabulary.eos_id  # doctest: +SKIP
        True
        >>> vocabulary.decode_target(ids)  # doctest: +SKIP
        'Hello world.'
    """

    def __init__(self, source_spm, target_spm, vocab, target_vocab=None, path: str = None):
        import sentencepiece

        self.path = path
        self.source_proto = _read_bytes(source_spm, "the source SentencePiece model")
        self.target_proto = _read_bytes(target_spm, "the target SentencePiece model")
        self.vocab_json = _table_bytes(vocab)
        self.target_vocab_json = None if target_vocab is None else _table_bytes(target_vocab)
        self.source_table = _parse_table(self.vocab_json, path or VOCAB)
        self.target_table = (
            self.source_table
            if self.target_vocab_json is None
            else _parse_table(self.target_vocab_json, TARGET_VOCAB)
        )
        self.separate_vocabs = self.target_vocab_json is not None
        processors = []
        for proto, name in ((self.source_proto, SOURCE_SPM), (self.target_proto, TARGET_SPM)):
            processor = sentencepiece.SentencePieceProcessor()
            try:
                processor.load_from_serialized_proto(proto)
            except (RuntimeError, TypeError) as error:
                raise UserInputError(
                    f"{name} of {path or 'the vocabulary'} is not a SentencePiece model "
                    f"({error}); import the model again"
                ) from None
            processors.append(processor)
        self.source_processor, self.target_processor = processors
        # MarianTokenizer decodes with the source model unless the target has its own table.
        self._decoding_processor = (
            self.target_processor if self.separate_vocabs else self.source_processor
        )
        self._pieces = {index: piece for piece, index in self.target_table.items()}
        self.language_tokens = tuple(
            piece for piece in self.source_table if piece.startswith(">>") and piece.endswith("<<")
        )

    @classmethod
    def from_folder(cls, folder) -> "MarianVocabulary":
        """Loads `source.spm`, `target.spm`, `vocab.json` (and `target_vocab.json` if there)
        from `folder`: a Hugging Face OPUS-MT folder or an imported run folder.

        Example:
            >>> vocabulary = MarianVocabulary.from_folder("runs/opus-en-de")  # doctest: +SKIP
        """
        folder = os.fspath(folder)
        missing = [
            name
            for name in (SOURCE_SPM, TARGET_SPM, VOCAB)
            if not os.path.isfile(os.path.join(folder, name))
        ]
        if missing:
            raise UserInputError(
                f"{folder!r} has no {', '.join(missing)}: an OPUS-MT vocabulary is source.spm, "
                "target.spm and vocab.json; give the folder of an imported model"
            )
        target_vocab = os.path.join(folder, TARGET_VOCAB)
        return cls(
            os.path.join(folder, SOURCE_SPM),
            os.path.join(folder, TARGET_SPM),
            os.path.join(folder, VOCAB),
            target_vocab if os.path.isfile(target_vocab) else None,
            path=folder,
        )

    def files(self) -> dict:
        """The vocabulary's files as `{name: bytes}`, byte for byte as read."""
        files = {
            SOURCE_SPM: self.source_proto,
            TARGET_SPM: self.target_proto,
            VOCAB: self.vocab_json,
        }
        if self.target_vocab_json is not None:
            files[TARGET_VOCAB] = self.target_vocab_json
        return files

    def write(self, folder) -> None:
        """Writes the vocabulary's files into `folder` (each written beside and renamed)."""
        from keras_transformer.files import atomic_write

        for name, content in self.files().items():
            with atomic_write(os.path.join(folder, name), "wb") as file:
                file.write(content)

    # -- ids ----------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Number of model ids: one past the largest id of the table."""
        return max(self.source_table.values()) + 1

    @property
    def eos_id(self) -> int:
        return self.source_table[EOS_PIECE]

    @property
    def unk_id(self) -> int:
        return self.source_table[UNK_PIECE]

    @property
    def pad_id(self) -> int:
        return self.source_table[PAD_PIECE]

    @property
    def bos_id(self) -> int:
        """The decoder's start token: OPUS-MT starts decoding from `<pad>`."""
        return self.pad_id

    def _special_ids(self):
        # MarianTokenizer skips the ids of the source table's special pieces on both sides.
        return {self.source_table[piece] for piece in SPECIAL_PIECES}

    # -- Python tokenization ------------------------------------------------------------------

    def _encode(self, text, processor, table, add_eos):
        unk = table[UNK_PIECE]
        ids = []
        for chunk, is_special in _split_special(text):
            if is_special:
                ids.append(table[chunk])
                continue
            token, chunk = split_language_token(chunk)
            if token:
                ids.append(table.get(token, unk))
            ids.extend(table.get(piece, unk) for piece in processor.encode(chunk, out_type=str))
        if add_eos:
            ids.append(table[EOS_PIECE])
        return ids

    def encode_source(self, text: str, add_eos: bool = True) -> list:
        """Model ids of one source text, ending with eos (unless `add_eos=False`); a leading
        language token (`>>deu<<`) is one id."""
        return self._encode(text, self.source_processor, self.source_table, add_eos)

    def encode_target(self, text: str, add_eos: bool = True) -> list:
        """Model ids of one target text (the target SentencePiece model), ending with eos
        (unless `add_eos=False`)."""
        return self._encode(text, self.target_processor, self.target_table, add_eos)

    def target_pieces(self, ids) -> list:
        """The target table's pieces of `ids` (`<unk>` for ids it lacks)."""
        return [self._pieces.get(int(i), UNK_PIECE) for i in ids]

    def decode_target(self, ids) -> str:
        """Text of one sequence of model ids; eos, pad and unk are dropped, as
        `MarianTokenizer.decode(ids, skip_special_tokens=True)`."""
        special = self._special_ids()
        processor = self._decoding_processor
        text, pieces = "", []
        for piece in self.target_pieces(i for i in map(int, ids) if i not in special):
            # With a separate target table, its special ids differ from the skipped (source)
            # ones; MarianTokenizer then writes them out between decoded runs.
            if piece in SPECIAL_PIECES:
                text += processor.decode_pieces(pieces) + piece + " "
                pieces = []
            else:
                pieces.append(piece)
        text += processor.decode_pieces(pieces)
        return text.replace(WORD_MARK, " ").strip()

    # The names `SubwordVocabulary` has, for code that takes either vocabulary.
    def encode(self, text: str) -> list:
        """Source ids of one text without eos (as `SubwordVocabulary.encode`)."""
        return self.encode_source(text, add_eos=False)

    def decode(self, ids) -> str:
        """Target text of one sequence of ids (as `SubwordVocabulary.decode`)."""
        return self.decode_target(ids)

    # Piece kinds, for word alignments (`decoding.alignment.piece_classes`).
    def get_piece_size(self) -> int:
        return self.size

    def id_to_piece(self, piece_id: int) -> str:
        return self._pieces.get(int(piece_id), UNK_PIECE)

    def is_unknown(self, piece_id: int) -> bool:
        return int(piece_id) == self.unk_id or int(piece_id) not in self._pieces

    def is_control(self, piece_id: int) -> bool:
        return self.id_to_piece(piece_id) in (EOS_PIECE, PAD_PIECE) or (
            self.id_to_piece(piece_id) in self.language_tokens
        )

    # -- TensorFlow graphs --------------------------------------------------------------------

    def make_graph_tokenizer(self):
        """A `MarianGraphTokenizer`: the same tokenization on TensorFlow ops, for `tf.data` and
        exported SavedModels. Make it where it is used (see
        `SubwordVocabulary.make_tokenizer`)."""
        return MarianGraphTokenizer(self)

    def __eq__(self, other):
        return isinstance(other, MarianVocabulary) and self.files() == other.files()

    __hash__ = None

    def __repr__(self):
        return f"MarianVocabulary(size={self.size}, path={self.path!r})"


def _read_bytes(value, what):
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    path = os.fspath(value)
    if not os.path.isfile(path):
        raise UserInputError(f"{what} {path!r} does not exist; import the model again")
    with open(path, "rb") as file:
        return file.read()


def _table_bytes(value):
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, indent=2).encode("utf-8")
    if isinstance(value, str) and value.lstrip().startswith("{"):
        return value.encode("utf-8")
    return _read_bytes(value, "the id table")


def _parse_table(content: bytes, name: str) -> dict:
    try:
        table = json.loads(content.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserInputError(f"{name} is not a JSON table of piece -> id ({error})") from None
    if not isinstance(table, dict) or not all(isinstance(v, int) for v in table.values()):
        raise UserInputError(f"{name} must be one JSON object from piece to integer id")
    missing = [piece for piece in SPECIAL_PIECES if piece not in table]
    if missing:
        raise UserInputError(
            f"{name} has no {', '.join(missing)}: an OPUS-MT table holds </s>, <unk> and <pad>"
        )
    return table


def MarianGraphTokenizer(vocabulary):
    """`MarianVocabulary`'s tokenization on TensorFlow ops (see the module docstring).

    `tokenize_source` / `tokenize_target` give `[batch, None]` int32 ragged model ids without
    eos; `detokenize_target` turns ragged or padded ids back into text. A `tf.Module`, so that
    an export tracks and saves its SentencePiece models and tables.

    Args:
        vocabulary: the `MarianVocabulary`.

    Example:
        >>> ids = vocabulary.make_graph_tokenizer().tokenize_source(["Hello."])  # doctest: +SKIP
    """
    return _graph_tokenizer_class()(vocabulary)


@functools.cache
def _graph_tokenizer_class():
    """The `tf.Module` class, made on first use: TensorFlow is imported only for graphs."""
    import tensorflow as tf
    import tensorflow_text

    class _MarianGraphTokenizer(tf.Module):
        def __init__(self, vocabulary):
            super().__init__(name="marian_tokenizer")
            # Named apart: the SentencePiece op's resource is shared by node name, so two
            # unnamed ones become one (the last loaded) in a loaded SavedModel.
            self.source_spm = tensorflow_text.SentencepieceTokenizer(
                model=vocabulary.source_proto, out_type=tf.string, name="source_spm"
            )
            self.target_spm = tensorflow_text.SentencepieceTokenizer(
                model=vocabulary.target_proto, out_type=tf.string, name="target_spm"
            )
            self.source_side = _side_tables(vocabulary.source_processor, vocabulary.source_table)
            self.target_side = _side_tables(vocabulary.target_processor, vocabulary.target_table)
            self.source_unk = vocabulary.source_table[UNK_PIECE]
            self.target_unk = vocabulary.target_table[UNK_PIECE]
            size = max(vocabulary.target_table.values()) + 1
            special = vocabulary._special_ids()
            # Special ids read as "" so that joining the pieces drops them.
            self.pieces = tf.constant(
                ["" if i in special else vocabulary.id_to_piece(i) for i in range(size)]
            )

        def _tokenize(self, texts, spm, side, unk):
            texts = tf.convert_to_tensor(texts, tf.string)
            # A leading ">>...<<" (up to the first "<<") is one token, as in Python.
            pattern = r"(?s)^(>>.*?<<)(.*)$"
            has_token = tf.strings.regex_full_match(texts, pattern)
            tokens = tf.strings.regex_replace(texts, pattern, r"\1")
            rest = tf.where(has_token, tf.strings.regex_replace(texts, pattern, r"\2"), texts)
            pieces = spm.tokenize(rest)
            spm_ids = spm.string_to_id(pieces.flat_values)
            ids = tf.gather(side["by_spm_id"], spm_ids)
            # A piece the model does not know (spm's unk, its text kept) may still be in the
            # table, from the other side: look its text up there.
            unknown = tf.where(tf.equal(spm_ids, side["spm_unk"]))
            found = _match(tf.gather_nd(pieces.flat_values, unknown), side["extra"], unk)
            ids = tf.tensor_scatter_nd_update(ids, unknown, found)
            token_ids = _match(tf.boolean_mask(tokens, has_token), side["tokens"], unk)
            leading = tf.RaggedTensor.from_row_lengths(
                token_ids, tf.cast(has_token, pieces.row_splits.dtype)
            )
            return tf.concat([leading, pieces.with_flat_values(ids)], axis=1)

        def tokenize_source(self, texts):
            return self._tokenize(texts, self.source_spm, self.source_side, self.source_unk)

        def tokenize_target(self, texts):
            return self._tokenize(texts, self.target_spm, self.target_side, self.target_unk)

        def detokenize_target(self, ids):
            if not isinstance(ids, tf.RaggedTensor):
                ids = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(ids, tf.int32))
            values = ids.flat_values
            inside = (values >= 0) & (values < tf.shape(self.pieces, out_type=values.dtype)[0])
            pieces = tf.where(inside, tf.gather(self.pieces, tf.where(inside, values, 0)), "")
            text = tf.strings.reduce_join(ids.with_flat_values(pieces), axis=-1)
            return tf.strings.strip(tf.strings.regex_replace(text, WORD_MARK, " "))

    return _MarianGraphTokenizer


def _side_tables(processor, table):
    """The constants one side's graph tokenization needs: `by_spm_id`, the model id of each
    SentencePiece id's piece (unk where the table lacks it); `extra`, the table's pieces the
    SentencePiece model lacks (looked up by text); `tokens`, its language tokens."""
    import tensorflow as tf

    unk = table[UNK_PIECE]
    own = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    extra = sorted(set(table) - set(own))
    tokens = [piece for piece in table if piece.startswith(">>") and piece.endswith("<<")]
    return {
        "by_spm_id": tf.constant([table.get(piece, unk) for piece in own], tf.int32),
        "spm_unk": processor.unk_id(),
        "extra": (tf.constant(extra, tf.string), tf.constant([table[p] for p in extra], tf.int32)),
        "tokens": (
            tf.constant(tokens, tf.string),
            tf.constant([table[p] for p in tokens], tf.int32),
        ),
    }


def _match(strings, keys_and_ids, default):
    """The id of each of `strings` `[n]` among `keys_and_ids` (`[k]` strings, `[k]` ids), or
    `default`: an elementwise comparison, cheap for the few strings it gets."""
    import tensorflow as tf

    keys, ids = keys_and_ids
    keys = tf.concat([keys, tf.constant([""])], 0)  # never matched: a non-empty k for argmax
    ids = tf.concat([ids, tf.constant([default], tf.int32)], 0)
    equal = tf.equal(tf.expand_dims(strings, 1), tf.expand_dims(keys, 0))
    index = tf.argmax(tf.cast(equal, tf.int32), axis=1, output_type=tf.int32)
    return tf.where(tf.reduce_any(equal, axis=1), tf.gather(ids, index), default)
