"""Tests of keras_transformer.parsing.corpus: treebanks as parallel text and their vocabulary."""

import pytest
import sentencepiece
from sentencepiece import sentencepiece_model_pb2

from keras_transformer.errors import UserInputError
from keras_transformer.parsing.corpus import train_parsing_vocabulary, write_parallel
from keras_transformer.parsing.linearization import Linearizer
from keras_transformer.parsing.trees import Tree, parse_tree

TREES = [
    parse_tree("(TOP (S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .)))"),
    parse_tree("(TOP (NP (NP (NNS Cats)) (PP (IN on) (NP (NNS mats)))))"),
]


def test_write_parallel_and_a_vocabulary_with_one_piece_per_bracket_token(tmp_path):
    source, target = write_parallel(TREES * 20, Linearizer(), str(tmp_path / "d" / "train"))
    lines = open(source, encoding="utf-8").read().splitlines()
    assert lines[:2] == ["The dog barks .", "Cats on mats"]
    targets = open(target, encoding="utf-8").read().splitlines()
    assert targets[1] == "(NP (NP XX )NP (PP XX (NP XX )NP )PP )NP"
    model, size = train_parsing_vocabulary([source], [target], str(tmp_path / "v.model"), 320)
    assert size <= 320 and (tmp_path / "v.vocab").is_file()
    processor = sentencepiece.SentencePieceProcessor(model_file=model)
    assert processor.pad_id() == 0 and processor.eos_id() == 3
    for line in targets[:2]:
        # Every bracket and slot token is exactly one piece, and the text comes back whole.
        pieces = processor.encode(line, out_type=str)
        assert pieces == ["\u2581" + token for token in line.split()]
        assert processor.decode(processor.encode(line)) == line


def test_word_slot_vocabulary_splits_words_as_the_source_side(tmp_path):
    source, target = write_parallel(
        TREES * 20, Linearizer(word_slots=True), str(tmp_path / "train")
    )
    targets = open(target, encoding="utf-8").read().splitlines()
    assert targets[1] == "(NP (NP Cats )NP (PP on (NP mats )NP )PP )NP"
    model, _ = train_parsing_vocabulary(
        [source], [target], str(tmp_path / "v.model"), 320, word_slots=True
    )
    processor = sentencepiece.SentencePieceProcessor(model_file=model)
    vocabulary = {processor.id_to_piece(i) for i in range(processor.get_piece_size())}
    # Brackets are one piece each; words are user pieces no more, and a word is split in the
    # target exactly as in the source.
    assert {"\u2581(NP", "\u2581)NP", "\u2581(PP"} <= vocabulary
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(open(model, "rb").read())
    user_defined = {
        p.piece
        for p in proto.pieces
        if p.type == sentencepiece_model_pb2.ModelProto.SentencePiece.USER_DEFINED
    }
    assert user_defined == {
        "\u2581(NP",
        "\u2581)NP",
        "\u2581(PP",
        "\u2581)PP",
        "\u2581(S",
        "\u2581)S",
        "\u2581(VP",
        "\u2581)VP",
    }
    sources = open(source, encoding="utf-8").read().splitlines()
    for words, line in zip(sources[:2], targets[:2]):
        pieces = processor.encode(line, out_type=str)
        word_pieces = [p for p in pieces if p.lstrip("\u2581")[:1] not in "()"]
        assert word_pieces == processor.encode(words, out_type=str)
        assert processor.decode(processor.encode(line)) == line


def test_write_parallel_spells_brackets_in_words_and_tags_as_the_treebank(tmp_path):
    # Built in code, so the words and one tag hold raw brackets; parse_tree could not give
    # these (its brackets are the tree's).
    tree = Tree(
        "TOP",
        [
            Tree(
                "S",
                [
                    Tree("NP", [Tree("(", ["("]), Tree("NN", [":-)"])]),
                    Tree("VP", [Tree("VBZ", ["works"])]),
                ],
            )
        ],
    )
    source, target = write_parallel(
        [tree], Linearizer(pos_tags=True, closing_labels=False), str(tmp_path / "x")
    )
    assert open(source, encoding="utf-8").read() == "-LRB- :--RRB- works\n"
    assert open(target, encoding="utf-8").read() == "(S (NP -LRB- NN ) (VP VBZ ) )\n"
    # The same as for the tree read back from its text, as the treebank files are read.
    again = write_parallel(
        [parse_tree(str(tree))],
        Linearizer(pos_tags=True, closing_labels=False),
        str(tmp_path / "y"),
    )
    assert [open(p, encoding="utf-8").read() for p in again] == [
        open(p, encoding="utf-8").read() for p in (source, target)
    ]


def test_write_parallel_refuses_a_word_with_whitespace_and_writes_nothing(tmp_path):
    tree = Tree("TOP", [Tree("NP", [Tree("NNP", ["New York"]), Tree("NN", ["city"])])])
    with pytest.raises(UserInputError, match=r"tree 3 has the word 'New York'"):
        write_parallel(TREES + [tree], Linearizer(), str(tmp_path / "d" / "train"))
    assert not (tmp_path / "d").exists()
