"""Tests of keras_transformer.parsing.parser (and corpus): presets, `Parser` on a stand-in
translator, and a tiny end-to-end parser trained with the project's trainer on a toy grammar."""

import random

import pytest

import keras_transformer as kt
from keras_transformer.config import TransformerConfig
from keras_transformer.errors import UserInputError
from keras_transformer.parsing.evalb import evaluate
from keras_transformer.parsing.linearization import Linearizer
from keras_transformer.parsing.parser import PAPER_DECODING, Parser, parse, read_parsing_settings
from keras_transformer.parsing.trees import parse_tree


def test_paper_presets_and_decoding_settings():
    # Section 6.3: 4 layers, d_model 1024, otherwise base; 16K / 32K vocabulary.
    for name, vocab in (("parsing_wsj", 16000), ("parsing_semi", 32000)):
        config = TransformerConfig.from_preset(name)
        assert (
            config.num_layers,
            config.d_model,
            config.d_ff,
            config.num_heads,
            config.vocab_size,
        ) == (4, 1024, 2048, 8, vocab)
        # By hand: per layer, encoder 4*(d*d+d) + 2*d*d_ff + d_ff + d + 4d = 8,401,920,
        # decoder one more attention block and LayerNorm: 12,601,344; times 4 layers, plus
        # the shared vocab x d embedding.
        encoder = 4 * (1024 * 1024 + 1024) + 2 * 1024 * 2048 + 2048 + 1024 + 4 * 1024
        decoder = encoder + 4 * (1024 * 1024 + 1024) + 2 * 1024
        assert config.parameter_count() == 4 * (encoder + decoder) + vocab * 1024
    assert PAPER_DECODING == {"beam_size": 21, "alpha": 0.3, "max_extra_length": 300}


class _StandInTranslator:
    """Returns fixed decoder outputs and records what it was given."""

    def __init__(self, outputs):
        self.outputs, self.inputs = outputs, None

    def translate(self, texts):
        self.inputs = list(texts)
        return self.outputs[: len(texts)]


def test_parser_escapes_brackets_repairs_and_counts():
    translator = _StandInTranslator(["(S (NP XX )NP (VP XX XX )VP )S", "(S XX", ""])
    parser = Parser(translator, Linearizer(), constrained=False)  # the repair is under test
    trees = parser.parse([["(", "it", ":-)"], "works .", []])
    # As the treebank spells them, inside words too (Stanford's PTB tokenizer: ':-RRB-').
    assert translator.inputs == ["-LRB- it :--RRB-", "works .", ""]
    assert [str(t) for t in trees] == [
        "(TOP (S (NP (XX -LRB-)) (VP (XX it) (XX :--RRB-))))",
        "(TOP (S (XX works) (XX .)))",
        "(TOP)",
    ]
    assert parser.last_repaired == 1 and parser.last_repairs == {
        "unclosed_brackets": 1,
        "missing_word_slots": 1,
    }
    with pytest.raises(TypeError, match="sentences\\[0\\]"):
        parser.parse([3])
    with pytest.raises(TypeError, match="wrap it in a list"):
        parser.parse("one sentence")
    # A constituent whose only child has its label is merged, unless asked not to.
    unary = "(S (NP (NP XX XX )NP )NP (VP XX )VP )S"
    for merge, expected in (
        (True, "(TOP (S (NP (XX the) (XX dog)) (VP (XX barks))))"),
        (False, "(TOP (S (NP (NP (XX the) (XX dog))) (VP (XX barks))))"),
    ):
        merging = Parser(
            _StandInTranslator([unary]),
            Linearizer(),
            constrained=False,
            merge_same_label_unaries=merge,
        )
        assert [str(t) for t in merging.parse(["the dog barks"])] == [expected]
        assert merging.last_repaired == 0
    # A constrained parser needs the translator's decoder and vocabulary.
    with pytest.raises(TypeError, match="pass constrained=False"):
        Parser(translator, Linearizer())


def test_a_run_without_parsing_json_is_refused_before_its_model_loads(tmp_path):
    # A translation run: a model file (never read: the check comes first), no parsing.json.
    run = tmp_path / "translation_run"
    run.mkdir()
    (run / "model.keras").write_bytes(b"not a model")
    for call in (
        lambda: read_parsing_settings(run),
        lambda: Parser.load(str(run)),
        lambda: kt.parse([["It", "works"]], model=str(run)),
        lambda: Parser.load(str(run / "model.keras")),
    ):
        with pytest.raises(
            UserInputError, match="has no parsing.json, so it is not a parsing run"
        ) as info:
            call()
        assert "ptb_parsing.py" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(UserInputError, match="does not exist"):
        read_parsing_settings(tmp_path / "missing")
    # An explicit linearizer needs no parsing.json: the model load is what fails here.
    with pytest.raises(Exception) as info:
        Parser.load(str(run), linearizer=Linearizer())
    assert "parsing.json" not in str(info.value)


# A toy grammar: three sentence patterns, the tree fixed by the pattern.
DETERMINERS, NOUNS = ["the", "a"], ["dog", "cat", "bird", "fish", "man"]
INTRANSITIVE, TRANSITIVE, PREPOSITIONS = ["barks", "sleeps"], ["sees", "likes"], ["with", "near"]


def _toy_tree(rng):
    def np_():
        return f"(NP (DT {rng.choice(DETERMINERS)}) (NN {rng.choice(NOUNS)}))"

    kind = rng.randrange(3)
    if kind == 0:
        vp = f"(VP (VBZ {rng.choice(INTRANSITIVE)}))"
    elif kind == 1:
        vp = f"(VP (VBZ {rng.choice(TRANSITIVE)}) {np_()})"
    else:
        vp = (
            f"(VP (VBZ {rng.choice(TRANSITIVE)}) {np_()} "
            f"(PP (IN {rng.choice(PREPOSITIONS)}) {np_()}))"
        )
    return parse_tree(f"(TOP (S {np_()} {vp} (. .)))")


def test_tiny_parser_learns_a_toy_grammar_to_f1_1(tmp_path):
    from keras_transformer.parsing.corpus import train_parsing_vocabulary, write_parallel
    from keras_transformer.parsing.parser import write_parsing_settings
    from keras_transformer.training import train

    rng = random.Random(7)
    train_trees = [_toy_tree(rng) for _ in range(600)]
    dev_trees = [_toy_tree(rng) for _ in range(24)]
    # POS-tag slots: at this size the tags tie each slot to its word, and 1 layer learns the
    # grammar in a couple of hundred updates (XX slots took several times more).
    linearizer = Linearizer(pos_tags=True)
    source, target = write_parallel(train_trees, linearizer, str(tmp_path / "data" / "train"))
    dev_source, dev_target = write_parallel(dev_trees, linearizer, str(tmp_path / "data" / "dev"))
    vocab, size = train_parsing_vocabulary([source], [target], str(tmp_path / "v.model"), 320)
    assert size <= 320
    run = tmp_path / "run"
    run.mkdir()
    write_parsing_settings(str(run), linearizer)
    train(
        {
            "output_dir": str(run),
            "model": {
                "preset": "base",
                "num_layers": 1,
                "d_model": 64,
                "d_ff": 128,
                "num_heads": 4,
                "dropout": 0.0,
                "label_smoothing": 0.0,
                "max_length": 128,
            },
            "data": {
                "train": [{"source": source, "target": target}],
                "dev": {"source": dev_source, "target": dev_target},
                "vocab": vocab,
                "token_budget": 512,
                "max_length": 64,
                "shuffle_buffer": 1000,
            },
            "schedule": {
                "train_steps": 200,
                "warmup_steps": 50,
                "learning_rate_scale": 0.5,
                "tokens_per_update": 512,
                "eval_every_steps": 200,
                "log_every_steps": 50,
            },
            "checkpoints": {
                "every_minutes": None,
                "every_steps": 50,
                "keep_last": 2,
                "average_last": 2,
            },
            "verbose": 0,
        }
    )
    assert read_parsing_settings(str(run)) == linearizer
    parser = Parser.load(str(run))  # beam 21, alpha 0.3, input + 300
    assert parser.translator.beam_search.beam_size == 21
    parsed = parse([tree.leaves() for tree in dev_trees], model=parser)
    assert [t.leaves() for t in parsed] == [t.leaves() for t in dev_trees]
    report = evaluate(dev_trees, parsed)
    assert report.all.error_sentences == report.all.skip_sentences == 0
    assert report.all.f1 == 100.0, report.format()
    assert report.all.tagging_accuracy == 100.0
    assert parser.last_repaired == 0
