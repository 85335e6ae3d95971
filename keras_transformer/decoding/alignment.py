"""Word alignments from the encoder-decoder attention: which source word each target word
comes from, as Pharaoh `i-j` pairs (source word i, target word j, both 0-based).

How a pair is found:

1. Attention. One teacher-forced pass over (source, target): the decoder reads bos then the
   target's pieces, and row t of a decoder layer's cross-attention is the attention it used
   to predict target piece t (`Transformer.cross_attention_weights`). The pass is exact, not
   an approximation of the search: with dropout off, decoding step t computes the same
   attention from the same prefix (up to float rounding), so the beam search itself need not
   record anything and alignments of its output are recomputed afterwards.
2. Layer and heads. `DEFAULT_LAYER_INDEX` picks the layer and the heads are averaged (see
   its comment); `layer_index=` and `head=` choose others.
3. Words. A SentencePiece piece that starts with "▁" (U+2581) starts a word; other pieces
   continue the current word, so the words are the whitespace-separated words of the
   (normalized) text. Pieces without text (eos, pad, a lone "▁") belong to no word and
   their attention is left out.
4. Pooling. The weight of target word j on source word i is the attention summed over the
   pieces of source word i (the probability mass the word receives) and averaged over the
   pieces of target word j (each piece counts once, so long words do not outweigh short
   ones). Each target word is aligned to its heaviest source word (one link per target
   word, as fairseq's `extract_hard_alignment` links each target token).

`alignment_error_rate` scores alignments against sure and possible gold links (Och and Ney
2003, "A Systematic Comparison of Various Statistical Alignment Models").

The pooling (`word_alignment`) is keras.ops, batched, and runs on every backend and inside
the exported TensorFlow graph; the piece classification is plain Python on the vocabulary.
"""

import numpy as np
from keras import ops

# Layer whose cross-attention aligns: the last decoder layer (-1), heads averaged, fairseq's
# default; Garg et al. 2019's penultimate layer aligned worse on our hand-aligned set, see
# docs/decisions.md#alignment-layer.
DEFAULT_LAYER_INDEX = -1

WORD_MARK = "\u2581"
# Piece classes of `piece_classes`. OWN_WORD: unk (and ids past the vocabulary), which
# SentencePiece decodes as " ⁇ ", a word of its own in a translation.
NO_TEXT, CONTINUES_WORD, STARTS_WORD, OWN_WORD = 0, 1, 2, 3


def piece_classes(vocabulary, size=None):
    """An int32 array `[size]`: for each piece id, `STARTS_WORD` (text after a leading "▁"),
    `CONTINUES_WORD` (text without one, byte pieces), `NO_TEXT` (control pieces, a lone
    "▁") or `OWN_WORD` (unk).

    Args:
        vocabulary: a `SubwordVocabulary` (or anything with a SentencePiece `processor`, or
            `id_to_piece(id)`).
        size: the number of ids (default: the vocabulary's size); ids past the vocabulary's
            pieces (a model with padded rows) read as `OWN_WORD`, as unk: decoding gives unk.
    """
    processor = getattr(vocabulary, "processor", vocabulary)
    if not hasattr(processor, "id_to_piece"):
        raise TypeError(
            f"word alignments need the vocabulary's pieces; {type(vocabulary).__name__} has no "
            "SentencePiece processor: pass a SubwordVocabulary"
        )
    pieces = processor.get_piece_size()
    size = pieces if size is None else size
    classes = np.full([size], OWN_WORD, "int32")
    for piece_id in range(min(size, pieces)):
        piece = processor.id_to_piece(piece_id)
        if processor.is_unknown(piece_id):
            continue
        if processor.is_control(piece_id) or not piece.strip(WORD_MARK):
            classes[piece_id] = NO_TEXT
        elif piece.startswith(WORD_MARK):
            classes[piece_id] = STARTS_WORD
        else:
            classes[piece_id] = CONTINUES_WORD
    return classes


def word_indices(classes, own_words=False):
    """Word index of each piece `[batch, length]` from its class (`piece_classes` gathered
    by id), -1 for pieces of no word. A piece after a lone "▁" also starts a word, and the
    first piece with text is in word 0 even without a "▁" (a sentence starting mid-word).

    Args:
        classes: `[batch, length]` int32.
        own_words: True for a translation, whose unk pieces are words of their own in the
            decoded text (" ⁇ "); False for a source, where unk stands for characters of the
            word it is in.
    """
    classes = ops.convert_to_tensor(classes, "int32")
    if own_words:
        # An unk starts a word, and so does the piece after it.
        previous = ops.pad(classes[:, :-1], [[0, 0], [1, 0]], constant_values=NO_TEXT)
        after_own = ops.logical_and(ops.equal(previous, OWN_WORD), ops.not_equal(classes, NO_TEXT))
        classes = ops.where(
            ops.logical_or(ops.equal(classes, OWN_WORD), after_own), STARTS_WORD, classes
        )
    else:
        classes = ops.where(ops.equal(classes, OWN_WORD), CONTINUES_WORD, classes)
    has_text = ops.not_equal(classes, NO_TEXT)
    # After no text (the sentence's start, a lone "▁") a piece starts a word, marked or not;
    # eos and pad come last, with no text after them.
    previous = ops.pad(classes[:, :-1], [[0, 0], [1, 0]], constant_values=NO_TEXT)
    starts = ops.logical_and(
        has_text, ops.logical_or(ops.equal(classes, STARTS_WORD), ops.equal(previous, NO_TEXT))
    )
    index = ops.cumsum(ops.cast(starts, "int32"), axis=1) - 1
    return ops.where(has_text, index, -1)


def _one_hot_words(word_index, width):
    """`[batch, length, width]` float32: piece k -> its word; rows of -1 pieces are zero."""
    safe = ops.where(ops.less(word_index, 0), width, word_index)
    return ops.one_hot(safe, width + 1)[:, :, :width]


def word_alignment(weights, source_words, target_words):
    """Hard word alignment from piece attention.

    Args:
        weights: `[batch, target_length, source_length]` attention (row t: predicting target
            piece t).
        source_words, target_words: `[batch, source_length]`, `[batch, target_length]` word
            index per piece, -1 for none (`word_indices`).

    Returns:
        `(source_word, valid)`, both `[batch, target_length]`: for target word j (j < the
        number of target words), the source word it is aligned to; `valid[b, j]` is False
        past the sentence's target words, or when the source has no word.
    """
    weights = ops.cast(weights, "float32")
    source_onehot = _one_hot_words(source_words, ops.shape(weights)[2])
    target_onehot = _one_hot_words(target_words, ops.shape(weights)[1])
    # [batch, target words, source words]: summed over source pieces, averaged over target ones.
    summed = ops.matmul(ops.matmul(ops.transpose(target_onehot, (0, 2, 1)), weights), source_onehot)
    pieces_per_word = ops.sum(target_onehot, axis=1)[:, :, None]
    pooled = summed / ops.maximum(pieces_per_word, 1.0)
    source_has_word = ops.any(ops.greater_equal(source_words, 0), axis=1)[:, None]
    valid = ops.logical_and(ops.greater(pieces_per_word[:, :, 0], 0), source_has_word)
    return ops.cast(ops.argmax(pooled, axis=-1), "int32"), valid


def cross_attention(model, source_ids, target_ids, layer_index=None, head=None):
    """Teacher-forced cross-attention for given targets, `[batch, target_length,
    source_length]` float32, row t the attention that predicts `target_ids[:, t]`.

    Args:
        model: a `Transformer`, its `IncrementalDecoder`, or an `EnsembleDecoder` (the
            members' attentions are averaged).
        source_ids: `[batch, source_length]` int32: pieces, eos, pad.
        target_ids: `[batch, target_length]` int32: pieces, eos, pad (the training labels).
        layer_index: decoder layer (default `DEFAULT_LAYER_INDEX`).
        head: one head's index, or None for the average of the heads.
    """
    from keras_transformer.decoding.scoring import _members

    models, _ = _members(model)
    layer_index = DEFAULT_LAYER_INDEX if layer_index is None else layer_index
    source_ids = ops.convert_to_tensor(source_ids, "int32")
    target_ids = ops.convert_to_tensor(target_ids, "int32")
    bos = ops.full((ops.shape(target_ids)[0], 1), models[0].config.bos_id, "int32")
    decoder_inputs = ops.concatenate([bos, target_ids[:, :-1]], axis=1)
    per_model = []
    for member in models:
        weights = ops.cast(
            member.cross_attention_weights(source_ids, decoder_inputs, layer_index), "float32"
        )
        per_model.append(ops.mean(weights, axis=1) if head is None else weights[:, head])
    return ops.mean(ops.stack(per_model, axis=0), axis=0)


def aligned_words(model, classes, source_ids, target_ids, layer_index=None, head=None):
    """`word_alignment` of given (source, target) ids: the tensors behind `align_ids`, also
    what the exported graph turns into Pharaoh strings (`export/alignments.py`).

    Args:
        model, layer_index, head: as `cross_attention`.
        classes: `piece_classes(vocabulary)`.
        source_ids, target_ids: as `cross_attention`.

    Returns:
        `(source_word, valid)`, each `[batch, target_words]`: as `word_alignment`.
    """
    classes = ops.convert_to_tensor(classes, "int32")
    source_ids = ops.convert_to_tensor(source_ids, "int32")
    target_ids = ops.convert_to_tensor(target_ids, "int32")
    weights = cross_attention(model, source_ids, target_ids, layer_index, head)
    source_words = word_indices(ops.take(classes, source_ids, axis=0))
    target_words = word_indices(ops.take(classes, target_ids, axis=0), own_words=True)
    return word_alignment(weights, source_words, target_words)


def align_ids(model, classes, source_ids, target_ids, layer_index=None, head=None):
    """Pharaoh pairs per sentence for a batch of given (source, target) ids.

    Args:
        model: as `cross_attention`.
        classes: `piece_classes(vocabulary)`.
        source_ids, target_ids: as `cross_attention` (eos and pad are in no word).
        layer_index, head: as `cross_attention`.

    Returns:
        One list of `(i, j)` per sentence (source word i, target word j), ordered by j.

    Example:
    >>> align_ids(model, piece_classes(vocabulary), [[7, 9, 3]], [[12, 3]])  # doctest: +SKIP
    [[(1, 0)]]
    """
    source_word, valid = aligned_words(model, classes, source_ids, target_ids, layer_index, head)
    source_word = ops.convert_to_numpy(source_word)
    valid = ops.convert_to_numpy(valid)
    return [
        [(int(source_word[b, j]), j) for j in range(source_word.shape[1]) if valid[b, j]]
        for b in range(source_word.shape[0])
    ]


def to_pharaoh(pairs):
    """`[(0, 0), (2, 1)]` -> `"0-0 2-1"`."""
    return " ".join(f"{i}-{j}" for i, j in pairs)


def parse_pharaoh(text):
    """`"0-0 2-1"` -> `{(0, 0), (2, 1)}`; `"0?1"` (a possible link) counts as `(0, 1)`."""
    pairs = set()
    for link in text.split():
        i, j = link.replace("?", "-").split("-")
        pairs.add((int(i), int(j)))
    return pairs


def alignment_error_rate(hypotheses, sure, possible=None):
    """Och and Ney (2003)'s AER over a corpus: 1 - (|A&S| + |A&P|) / (|A| + |S|).

    Args:
        hypotheses: one set of `(i, j)` links per sentence (A).
        sure: one set of sure gold links per sentence (S).
        possible: one set of possible gold links per sentence (P); sure links count as
            possible whether listed or not. Default: the sure links alone.

    Returns:
        A float in [0, 1]; 0 when every hypothesis link is possible and every sure link found.
    """
    if possible is None:
        possible = [set() for _ in sure]
    if not len(hypotheses) == len(sure) == len(possible):
        raise ValueError(
            f"{len(hypotheses)} hypotheses, {len(sure)} sure and {len(possible)} possible "
            "alignments: give one of each per sentence"
        )
    found_sure = found_possible = size_a = size_s = 0
    for a, s, p in zip(hypotheses, sure, possible):
        a, s = set(a), set(s)
        p = set(p) | s
        found_sure += len(a & s)
        found_possible += len(a & p)
        size_a += len(a)
        size_s += len(s)
    if size_a + size_s == 0:
        return 0.0
    return 1.0 - (found_sure + found_possible) / (size_a + size_s)


def align_pairs(model, classes, pairs, batch_size=32, pad_id=0, layer_index=None, head=None):
    """`align_ids` over a list of `(source ids, target ids)` (each ending with eos), batched
    by length; one list of `(i, j)` per pair, in the order given."""
    results = [None] * len(pairs)
    order = sorted(range(len(pairs)), key=lambda k: -max(len(pairs[k][0]), len(pairs[k][1])))
    for start in range(0, len(order), batch_size):
        indices = order[start : start + batch_size]
        batch = []
        for side in (0, 1):
            width = max(len(pairs[k][side]) for k in indices)
            ids = np.full((len(indices), width), pad_id, "int32")
            for row, k in enumerate(indices):
                ids[row, : len(pairs[k][side])] = pairs[k][side]
            batch.append(ids)
        for k, links in zip(indices, align_ids(model, classes, *batch, layer_index, head)):
            results[k] = links
    return results


def align_texts(model, vocabulary, sources, targets, layer_index=None, head=None, batch_size=32):
    """Pharaoh pairs of given translations (forced alignment): one list of `(i, j)` per
    (source, target) pair, with the words of the texts as given (whitespace-separated).

    Args:
        model: a `Transformer`, an `IncrementalDecoder` or an `EnsembleDecoder`.
        vocabulary: the model's `SubwordVocabulary` (or its `.model` path).
        sources, targets: lists of strings, one target per source.
        layer_index, head: as `cross_attention`.
        batch_size: pairs per teacher-forced pass.

    Example:
    >>> align_texts(model, "runs/quickstart/vocab.model", ["one red dog"], ["ein roter Hund"])
    [[(0, 0), (1, 1), (2, 2)]]
    """
    from keras_transformer.data.vocabulary import load_vocabulary

    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets: give one each")
    vocabulary = load_vocabulary(vocabulary)
    from keras_transformer.decoding.scoring import _members

    config = _members(model)[0][0].config
    classes = piece_classes(vocabulary, config.vocab_size)
    pairs = [
        (
            vocabulary.encode_source(source, add_eos=False) + [config.eos_id],
            vocabulary.encode_target(target, add_eos=False) + [config.eos_id],
        )
        for source, target in zip(sources, targets)
    ]
    return align_pairs(
        model, classes, pairs, batch_size, config.pad_id, layer_index=layer_index, head=head
    )
