"""Tests of pipelines/ptb_parsing.py without training: data preparation and the recipe."""

import json

import pytest

from keras_transformer.errors import UserInputError
from keras_transformer.parsing.linearization import Linearizer
from keras_transformer.training import TrainingConfig
from tests._training_fixtures import load_pipeline

WSJ = [
    "( (S (NP-SBJ (DT The) (NN dog)) (VP (VBZ barks) (NP (-NONE- *))) (. .)) )",
    "( (S (NP-SBJ (PRP It)) (VP (VBZ works))) )",
]
GUM = ["(ROOT (NP (NNS Cats) (. .)))"]


def _pipeline():
    return load_pipeline("ptb_parsing")


@pytest.fixture
def data_dir(tmp_path):
    (tmp_path / "data" / "treebank").mkdir(parents=True)
    (tmp_path / "data" / "gum").mkdir()
    for name in ("train", "dev"):
        (tmp_path / "data" / "treebank" / f"wsj_sample.{name}.trees").write_text(
            "\n".join(WSJ) + "\n"
        )
    (tmp_path / "data" / "gum" / "gum_const.train.trees").write_text("\n".join(GUM) + "\n")
    return tmp_path / "data"


def test_prepare_corpus_and_the_recipes(tmp_path, data_dir):
    pipeline = _pipeline()
    run = str(tmp_path / "run")
    corpus = pipeline.prepare_corpus(str(data_dir), run, "wsj+gum", Linearizer(), 320)
    assert [open(t).read() for _, t in corpus["train"]] == [
        "(S (NP XX XX )NP (VP XX )VP XX )S\n(S (NP XX )NP (VP XX )VP )S\n",
        "(NP XX XX )NP\n",
    ]
    assert open(corpus["dev"][0]).read() == "The dog barks .\nIt works\n"
    assert json.load(open(tmp_path / "run" / "parsing.json")) == {
        "closing_labels": True,
        "pos_tags": False,
        "word_slots": False,
    }
    # A run folder prepared otherwise is refused, in one message.
    with pytest.raises(UserInputError, match="was prepared with"):
        pipeline.prepare_corpus(str(data_dir), run, "wsj", Linearizer(pos_tags=True), 320)
    # A folder prepared before word_slots existed (its stamp lacks the key) is still taken
    # for XX slots, and refused for word slots.
    stamp_path = tmp_path / "run" / "data" / "PREPARATION.json"
    stamp = json.loads(stamp_path.read_text())
    del stamp["linearizer"]["word_slots"]
    stamp_path.write_text(json.dumps(stamp))
    assert pipeline.prepare_corpus(str(data_dir), run, "wsj+gum", Linearizer(), 320) == corpus
    with pytest.raises(UserInputError, match="was prepared with"):
        pipeline.prepare_corpus(str(data_dir), run, "wsj+gum", Linearizer(word_slots=True), 320)

    paper = pipeline.parsing_config(corpus, run, "wsj+gum")
    assert paper.output_dir == run and paper.data.vocab == corpus["vocab"]
    assert paper.model["preset"] == "parsing_semi"
    assert paper.schedule.tokens_per_update == 25000
    cpu = pipeline.parsing_config(corpus, run, "wsj+gum", cpu=True, gum_weight=0.5)
    assert cpu.model["d_model"] == 256
    assert [c.weight for c in cpu.data.train] == [1.0, 0.5]
    model = cpu.transformer_config(vocab_size=320)
    # The CPU recipes: dropout 0.1 with the GUM trees, 0.2 on WSJ alone; attention dropout
    # with the GUM trees only; none in the paper's size.
    assert (model.num_layers, model.d_model, model.dropout) == (4, 256, 0.1)
    assert model.attention_dropout == 0.1
    assert paper.transformer_config(vocab_size=320).attention_dropout == 0.0
    # Updates of 2048 tokens; 20000 of them with the GUM trees, 18000 without; peak rate
    # 0.2 x 256^-0.5 x 500^-0.5 with the GUM trees, 0.3 x ... without.
    assert (
        cpu.schedule.train_steps,
        cpu.schedule.tokens_per_update,
        cpu.data.token_budget,
        cpu.schedule.warmup_steps,
        cpu.schedule.learning_rate_scale,
    ) == (20000, 2048, 2048, 500, 0.2)
    wsj_only = pipeline.parsing_config(corpus, run, "wsj", cpu=True)
    assert (wsj_only.schedule.train_steps, wsj_only.schedule.learning_rate_scale) == (18000, 0.3)
    # The checkpoints (500 updates apart, 20 kept) of the last 35% of the updates trained are
    # averaged, however many the time limit allowed; the paper size averages the last 5.
    assert (
        cpu.checkpoints.every_steps,
        cpu.checkpoints.average_last,
        cpu.checkpoints.keep_last,
        cpu.checkpoints.average_last_fraction,
    ) == (500, 20, 20, 0.35)
    assert wsj_only.checkpoints.average_last_fraction == 0.35
    assert (paper.checkpoints.average_last, paper.checkpoints.average_last_fraction) == (5, None)
    assert wsj_only.transformer_config(vocab_size=320).dropout == 0.2
    assert wsj_only.transformer_config(vocab_size=320).attention_dropout == 0.0
    shortened = pipeline.parsing_config(corpus, run, "wsj+gum", cpu=True, train_steps=600)
    assert shortened.schedule.train_steps == 600
    # 2 hours of training bound the CPU recipes on any machine; the paper size has no limit;
    # both take an explicit one, or none.
    assert (
        wsj_only.schedule.max_train_minutes,
        cpu.schedule.max_train_minutes,
        paper.schedule.max_train_minutes,
    ) == (120, 120, None)
    for given, expected in ((None, None), (30.0, 30.0)):
        limited = pipeline.parsing_config(corpus, run, "wsj", cpu=True, max_train_minutes=given)
        assert limited.schedule.max_train_minutes == expected
    # Linear decay to 0 for the CPU recipes; the paper size keeps the paper's.
    assert (cpu.schedule.decay, wsj_only.schedule.decay, paper.schedule.decay) == (
        "linear",
        "linear",
        "rsqrt",
    )
    rsqrt = pipeline.parsing_config(corpus, run, "wsj", cpu=True, decay="rsqrt")
    assert rsqrt.schedule.decay == "rsqrt"
    # --set KEY=VALUE applies last.
    overridden = pipeline.parsing_config(corpus, run, "wsj", overrides=["data.max_length=300"])
    assert overridden.data.max_length == 300


@pytest.mark.parametrize(
    "data, cpu", [("wsj", False), ("wsj+gum", False), ("wsj", True), ("wsj+gum", True)]
)
def test_the_pipeline_trains_what_the_recipe_file_says(tmp_path, data_dir, monkeypatch, data, cpu):
    """Prepared into the recipe's own run folder, the data are where the file expects them,
    so `train --config configs/ptb_*.yaml` trains what the pipeline trains."""
    from keras_transformer.training.config_reading import read_config_file

    pipeline = _pipeline()
    monkeypatch.chdir(tmp_path)
    recipe = pipeline.RECIPES[data, cpu]
    output_dir = read_config_file(recipe)["output_dir"]
    corpus = pipeline.prepare_corpus(str(data_dir), output_dir, data, Linearizer(), 320)
    assert pipeline.parsing_config(corpus, data=data, cpu=cpu) == TrainingConfig.from_file(recipe)
    assert TrainingConfig.from_file(recipe).missing_files() == []


@pytest.mark.parametrize("minutes", ["-1", "nan"])
def test_a_bad_time_limit_is_one_clear_error_before_any_work(tmp_path, data_dir, capsys, minutes):
    code = _pipeline().main(
        [
            "--data",
            "wsj",
            "--cpu",
            "--data-dir",
            str(data_dir),
            "--output-dir",
            str(tmp_path / "run"),
            "--max-train-minutes",
            minutes,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and f"--max-train-minutes {minutes}" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_phrases_add_every_wsj_phrase_as_a_corpus_of_its_own(tmp_path, data_dir):
    pipeline = _pipeline()
    run = str(tmp_path / "run")
    corpus = pipeline.prepare_corpus(str(data_dir), run, "wsj", Linearizer(), 320, phrases=True)
    assert corpus["train_names"] == ["wsj", "wsj_phrases"]
    # WSJ's two trees have one phrase of two words or more below the sentence: "The dog".
    (wsj_words, _), (phrase_words, phrase_trees) = corpus["train"]
    assert open(phrase_words).read() == "The dog\n"
    assert open(phrase_trees).read() == "(NP XX XX )NP\n"
    assert len(open(wsj_words).read().splitlines()) == 2
    config = pipeline.parsing_config(corpus, run, "wsj", cpu=True, phrase_weight=0.5)
    assert [(c.source, c.weight) for c in config.data.train] == [
        (wsj_words, 1.0),
        (phrase_words, 0.5),
    ]
    # The same folder without phrases (or the other way round) is refused.
    with pytest.raises(UserInputError, match="was prepared with"):
        pipeline.prepare_corpus(str(data_dir), run, "wsj", Linearizer(), 320)
    plain = str(tmp_path / "plain")
    assert pipeline.prepare_corpus(str(data_dir), plain, "wsj", Linearizer(), 320)[
        "train_names"
    ] == ["wsj"]
    with pytest.raises(UserInputError, match="was prepared with"):
        pipeline.prepare_corpus(str(data_dir), plain, "wsj", Linearizer(), 320, phrases=True)


def test_predicted_pos_slots_are_also_scored_with_the_gold_tags():
    from keras_transformer.parsing.trees import parse_tree

    gold = [
        parse_tree("(TOP (S (NP (DT a) (NN b)) (VP (VBZ c)) (. .)))"),
        parse_tree("(TOP (S (NP (PRP d)) (VP (VBZ e))))"),
    ]
    # The first parse tags its '.' as NN, so EVALB keeps it as a word there: an error
    # sentence. Its brackets, S NP VP, match the gold's; the second parse misses the NP.
    parsed = [
        parse_tree("(TOP (S (NP (DT a) (NN b)) (VP (VBZ c)) (NN .)))"),
        parse_tree("(TOP (S (PRP d) (VP (VBZ e))))"),
    ]
    report, scored, figures = _pipeline().score_parses(gold, parsed)
    assert scored == parsed and report.all.error_sentences == 1
    # By hand, with the gold tags in: gold brackets S NP VP + S NP VP = 6, test 3 + 2 = 5,
    # matched 5: recall 5/6, precision 1, F1 2 * (5/6) / (11/6) = 10/11.
    assert figures["gold_tags"] == {
        "f1": round(100 * 10 / 11, 2),
        "precision": 100.0,
        "recall": round(100 * 5 / 6, 2),
        "error_sentences": 0,
    }
    # XX slots get the gold tags in the report itself, and no second figure.
    xx = [
        parse_tree(
            str(tree)
            .replace("(DT", "(XX")
            .replace("(NN", "(XX")
            .replace("(VBZ", "(XX")
            .replace("(PRP", "(XX")
        )
        for tree in parsed
    ]
    report, _, figures = _pipeline().score_parses(gold, xx)
    assert "gold_tags" not in figures and report.all.error_sentences == 0
    assert round(report.all.f1, 2) == round(100 * 10 / 11, 2)


def test_the_dev_parse_records_its_opening_penalty_for_parse(tmp_path, capsys):
    from keras_transformer.parsing.parser import Parser, read_opening_penalty
    from keras_transformer.parsing.trees import parse_tree
    from tests._parsing_fixtures import untrained_parser_run

    pipeline = _pipeline()
    run = untrained_parser_run(tmp_path / "run")
    gold = [parse_tree("(TOP (S (NP (PRP She)) (VP (VBZ does) (RB n't)) (. .)))")]
    # 50 nats per opening: one constituent under TOP, whatever the untrained model prefers.
    _, figures = pipeline.evaluate_dev(
        str(run), gold, Linearizer(), beam_size=2, max_extra_length=8, opening_penalty=50.0
    )
    assert figures["opening_penalty"] == 50.0 and read_opening_penalty(str(run)) == 50.0
    (parsed,) = [parse_tree(line) for line in open(run / "dev.parsed.trees")]
    assert [type(child).__name__ for child in parsed.children] == ["Tree"]
    assert all(child.is_preterminal() for child in parsed.children[0].children)
    assert json.load(open(run / "parsing.json"))["word_slots"] is False  # kept
    loaded = Parser.load(str(run), beam_size=2, max_extra_length=8)  # as parse(model=RUN)
    assert loaded.translator.decoder.opening_penalty == 50.0
    # The free search has no penalty to apply: the run then records none.
    _, figures = pipeline.evaluate_dev(
        str(run),
        gold,
        Linearizer(),
        beam_size=2,
        max_extra_length=8,
        constrained=False,
        opening_penalty=50.0,
    )
    assert figures["opening_penalty"] == 0.0 and read_opening_penalty(str(run)) == 0.0
    for flags, message in (
        (["--unconstrained", "--opening-penalty", "1"], "applies to the constrained search"),
        (["--opening-penalty", "inf"], "must be a finite number"),
    ):
        assert (
            pipeline.main(
                ["--data-dir", str(tmp_path), "--output-dir", str(tmp_path / "other")] + flags
            )
            == 2
        )
        assert message in capsys.readouterr().err
    assert not (tmp_path / "other").exists()


def test_vocabulary_sizes_are_the_papers_and_the_cpu_recipes():
    # The paper's 16K (WSJ only) and 32K (semi-supervised); the CPU recipes' were chosen on
    # dev F1 (docs/decisions.md#parsing-cpu-vocab-size).
    pipeline = _pipeline()
    assert pipeline.VOCAB_SIZE == {"wsj": 16000, "wsj+gum": 32000}
    assert pipeline.CPU_VOCAB_SIZE == {"wsj": 2000, "wsj+gum": 8000}
