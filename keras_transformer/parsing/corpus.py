"""Treebanks as parallel text for the translation trainer, and their vocabulary.

A parsing corpus is two line-aligned files: the words of each tree (the source side) and its
linearization (the target side, `linearization.Linearizer`), so that
`keras_transformer.training.train` trains a parser exactly as it trains a translation model.

The vocabulary is a SentencePiece BPE model trained on both sides, as the translation
vocabularies are, plus one user-defined piece per bracket and slot token seen in training
(`▁(NP`, `▁)NP`, `▁XX`, ...): SentencePiece would otherwise split `(NP` into `▁(` and `NP`
(different Unicode scripts), and every output would take about 1.6 times as many decoder
steps. Ids are the project's fixed ones (pad 0, unk 1, bos 2, eos 3).

Example:
>>> from keras_transformer.parsing.linearization import Linearizer
>>> from keras_transformer.parsing.trees import parse_tree
>>> write_parallel([parse_tree("(TOP (S (NN hi)))")], Linearizer(), "data/x")  # doctest: +SKIP
('data/x.words', 'data/x.trees.lin')
"""

import io
import os

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.errors import UserInputError
from keras_transformer.files import atomic_write
from keras_transformer.parsing.trees import Tree, escape_brackets

SPACE = "\u2581"  # SentencePiece's word-boundary mark


def write_parallel(trees, linearizer, prefix):
    """Writes `PREFIX.words` (source) and `PREFIX.trees.lin` (target), one tree per line.

    Brackets in words and labels are written as the treebank spells them (`(` -> `-LRB-`,
    `:-)` -> `:--RRB-`, `trees.escape_brackets`), as `parse_tree` reads them from text and as
    `Parser` gives words to the model. Trees read from text hold none (their brackets are
    the tree's); a `Tree` built in code may.

    Args:
        trees: preprocessed `Tree`s (TOP-rooted).
        linearizer: the `Linearizer` of the target side.
        prefix: the output path without extension (folders are created).

    Returns:
        `(source_path, target_path)`.

    Raises:
        UserInputError: a word that is empty or holds whitespace (only a `Tree` built in code
            can have one): the source line would not split back into the tree's words.
    """
    trees = list(trees)
    for number, tree in enumerate(trees, 1):
        for word in tree.leaves():
            if not word or any(character.isspace() for character in word):
                raise UserInputError(
                    f"tree {number} has the word {word!r}: a word must be non-empty and hold "
                    "no whitespace, as each corpus line is the words separated by spaces; "
                    "split it into words, or join them with '_'"
                )
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    source, target = prefix + ".words", prefix + ".trees.lin"
    # A raw bracket would be a bracket token on the target side, and a word the parser is
    # never given (it escapes its input).
    trees = [_escaped(tree) for tree in trees]
    with atomic_write(source) as file:
        file.writelines(" ".join(tree.leaves()) + "\n" for tree in trees)
    with atomic_write(target) as file:
        file.writelines(linearizer.target_text(tree) + "\n" for tree in trees)
    return source, target


def _escaped(node):
    if isinstance(node, str):
        return escape_brackets(node)
    return Tree(escape_brackets(node.label), [_escaped(child) for child in node.children])


def _lines(paths):
    for path in paths:
        with open(path, encoding="utf-8") as file:
            for line in file:
                yield line.rstrip("\n")


def train_parsing_vocabulary(
    source_paths, target_paths, model_path, vocab_size, seed=1, word_slots=False
):
    """Trains the shared BPE vocabulary of a parsing corpus into `model_path`.

    Args:
        source_paths, target_paths: the files of `write_parallel`.
        model_path: where the `.model` goes (a `.vocab` listing is written beside it).
        vocab_size: pieces in all (paper 6.3: 16K WSJ only, 32K semi-supervised); a size the
            text cannot fill is lowered to what it can (logged in the returned tuple).
        word_slots: the targets' word slots are the words (`Linearizer(word_slots=True)`):
            only bracket tokens get their own pieces, and words are split as on the source
            side (one piece per word would not fit the vocabulary and would keep the copied
            word from sharing its pieces with the source).

    Returns:
        `(model_path, size)`.
    """
    import sentencepiece

    tokens = sorted(
        {
            token
            for line in _lines(target_paths)
            for token in line.split()
            if not word_slots or token[:1] in "()"
        }
    )
    lines = list(_lines(list(source_paths) + list(target_paths)))
    sentencepiece.set_random_generator_seed(seed)
    size = -(-vocab_size // 8) * 8
    model = io.BytesIO()
    options = dict(
        sentence_iterator=iter(lines),
        model_writer=model,
        model_type="bpe",
        character_coverage=1.0,
        byte_fallback=True,
        normalization_rule_name="nmt_nfkc",
        user_defined_symbols=[SPACE + token for token in tokens],
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        pad_piece="<pad>",
        unk_piece="<unk>",
        bos_piece="<s>",
        eos_piece="</s>",
        num_threads=os.cpu_count() or 1,
        minloglevel=2,
        # A small treebank cannot fill 16K BPE pieces: then take what it can.
        hard_vocab_limit=False,
    )
    try:
        sentencepiece.SentencePieceTrainer.train(vocab_size=size, **options)
    except RuntimeError as error:
        raise UserInputError(
            f"cannot train a {size}-piece parsing vocabulary: "
            f"{str(error).strip()}; lower the vocabulary size"
        ) from None
    processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    with atomic_write(model_path, "wb") as file:
        file.write(model.getvalue())
    with atomic_write(os.path.splitext(model_path)[0] + ".vocab") as file:
        for piece in range(processor.get_piece_size()):
            file.write(f"{processor.id_to_piece(piece)}\t{processor.get_score(piece):g}\n")
    return model_path, processor.get_piece_size()
