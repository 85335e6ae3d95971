"""The quickstart: a shortened run end to end (every output exists, the SavedModel translates),
its demo expectations, and its pictures drawn from a fake history."""

import json

import pytest


def _quickstart():
    from tests._training_fixtures import load_pipeline

    return load_pipeline("quickstart")


def test_short_quickstart_produces_every_output(quickstart_run):
    # The shared shortened run (tests/_quickstart_fixtures.py): 8 updates, 8 test sentences,
    # beam 1, a tiny model.
    run, exports, stdout = quickstart_run.run, quickstart_run.exports, quickstart_run.stdout
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["steps"] == 8
    for path in (
        "vocab.model",
        "config.json",
        "model.keras",
        "averaged.keras",
        "history.json",
        "learning_curve.png",
        "attention.png",
        "test.hyp.de",
        "logs",
    ):
        assert (run / path).exists(), path
    assert len(list((run / "checkpoints").glob("ckpt-*.index"))) >= 2
    assert (run / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert (exports / "quickstart" / "1" / "saved_model.pb").is_file()
    # The exact match it printed is that of the translations it wrote.
    hypotheses = (run / "test.hyp.de").read_text(encoding="utf-8").splitlines()
    references = (run / "corpus" / "test.de").read_text(encoding="utf-8").splitlines()[:8]
    assert len(hypotheses) == 8
    exact = sum(h == r for h, r in zip(hypotheses, references)) / 8
    assert summary["exact_match"] == round(exact, 4)


def test_the_served_translations_are_those_of_translate(quickstart_run):
    """The SavedModel, loaded in a fresh process by the TF1 session loader as TF Serving does,
    answered one line per sample, each the one `translate()` gave: the pipeline notes a
    difference on the line, and a noted difference fails here."""
    quickstart = _quickstart()
    served = [line for line in quickstart_run.stdout.splitlines() if " -> " in line]
    assert len(served) == len(quickstart.SAMPLES)
    for line, (source, _) in zip(served, quickstart.SAMPLES):
        assert line.strip().startswith(repr(source)), line
        assert "translate() gave" not in line, line


def test_a_difference_between_the_served_and_translate_is_printed(monkeypatch, capsys, tmp_path):
    """What the check above reads: `export_and_serve` notes a sentence on which the
    signature and `translate()` disagree (here `translate()` made to differ on one)."""
    import keras_transformer.export as export
    import keras_transformer.translation as translation

    quickstart = _quickstart()
    samples = [english for english, _ in quickstart.SAMPLES]

    class Served:  # what the fresh process prints: the expected German of each sample
        stdout = json.dumps([german for _, german in quickstart.SAMPLES])

    monkeypatch.setattr(export, "export_saved_model", lambda *a, **k: tmp_path / "1")
    monkeypatch.setattr(quickstart.subprocess, "run", lambda *a, **k: Served)
    answers = [german for _, german in quickstart.SAMPLES]
    answers[2] = "anders"
    monkeypatch.setattr(translation, "translate", lambda texts, model: answers)

    class Run:
        vocabulary = "vocab.model"

    class Translator:
        model = None

    quickstart.export_and_serve(Translator, Run, tmp_path, 1, 8)
    lines = [line for line in capsys.readouterr().out.splitlines() if " -> " in line]
    assert [("translate() gave" in line) for line in lines] == [i == 2 for i in range(6)]
    assert "translate() gave 'anders'" in lines[2] and repr(samples[2]) in lines[2]


def test_demo_expectations_are_the_corpus_renderings():
    """The quickstart marks a demo translation that differs from its expected German; those
    expectations must be what the corpus generator itself renders for the same English."""
    from keras_transformer.data.number_expressions import number_expressions_corpus

    quickstart = _quickstart()
    generated = {}
    for seed in range(4):
        for split in number_expressions_corpus(seed=seed).values():
            generated.update(split)
    found = [english for english, _ in quickstart.SAMPLES if english in generated]
    assert len(found) >= 4, found  # most samples occur in some corpus: the check has teeth
    for english, expected in quickstart.SAMPLES:
        assert generated.get(english, expected) == expected, english


def test_learning_curve_has_every_logged_point_and_the_legend_clear_of_test_bleu(tmp_path):
    import tensorflow as tf

    logged = [(step, 6.0 / step**0.5) for step in range(25, 201, 25)]  # every 25 updates
    writer = tf.summary.create_file_writer(str(tmp_path / "logs" / "train"))
    with writer.as_default():
        for step, loss in logged:
            tf.summary.scalar("loss", loss, step=step)
    writer.close()
    history = [
        {"step": 100, "loss": 0.9, "val_loss": 0.8, "val_bleu": 80.0},
        {"step": 200, "loss": 0.5, "val_loss": 0.6, "val_bleu": 95.0},
    ]
    (tmp_path / "history.json").write_text(json.dumps(history))
    png = tmp_path / "learning_curve.png"
    figure = _quickstart().plot_learning_curve(
        tmp_path / "history.json", tmp_path / "logs", [(200, 97.7)], png
    )
    assert png.read_bytes()[:4] == b"\x89PNG"
    loss_axis, bleu_axis = figure.axes
    train, dev = loss_axis.get_lines()[:2]
    # A point per logged interval (8), not one per evaluation (2).
    assert list(train.get_xdata()) == [s for s, _ in logged]
    assert list(train.get_ydata()) == pytest.approx([v for _, v in logged], rel=1e-6)
    assert list(dev.get_xdata()) == [100, 200]
    figure.draw_without_rendering()
    point = bleu_axis.transData.transform((200, 97.7))
    assert bleu_axis.bbox.contains(*point)  # visible inside the axes
    legend = (figure.legends or [loss_axis.get_legend()])[0]
    assert not legend.get_window_extent().contains(*point)


def test_attention_heat_map_has_a_colour_bar(tmp_path):
    import sentencepiece

    from tests._decoding_fixtures import tiny_model, train_char_vocabulary

    class Vocabulary:  # what plot_attention uses of a vocabulary
        processor = sentencepiece.SentencePieceProcessor(model_file=train_char_vocabulary(tmp_path))

        def encode(self, text):
            return self.processor.encode(text)

    png = tmp_path / "attention.png"
    figure = _quickstart().plot_attention(
        tiny_model(vocab_size=40), Vocabulary(), "the cat", "a dog", png
    )
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert [axis.get_ylabel() for axis in figure.axes].count("attention weight") == 1
    panels = [axis for axis in figure.axes if axis.images and axis.get_title()]
    assert len(panels) == 4 and panels[0].images[0].get_array().shape == (7, 9)  # pieces + eos


def test_seed_draws_weights_dropout_and_batch_order_but_not_the_corpus(tmp_path):
    import dataclasses

    from keras_transformer.training.config import TrainingConfig

    quickstart = _quickstart()
    corpus = {
        split: (tmp_path / f"{split}.en", tmp_path / f"{split}.de") for split in ("train", "dev")
    }
    default = quickstart.training_config(tmp_path, corpus, 1800)
    # The recipe's seeds are the config classes' defaults.
    defaults = {f.name: f.default for f in dataclasses.fields(TrainingConfig)}
    data_defaults = {f.name: f.default for f in dataclasses.fields(type(default.data))}
    assert default.seed == defaults["seed"] == 1
    assert default.data.seed == data_defaults["seed"] == 1
    other = quickstart.training_config(tmp_path, corpus, 1800, seed=7)
    assert (other.seed, other.data.seed) == (7, 7)
    assert other.data.train == default.data.train and other.data.dev == default.data.dev


def _config_main_trains_with(monkeypatch, tmp_path, *args):
    """The TrainingConfig `quickstart.main(args)` hands to `train` (which is stubbed out)."""
    import keras_transformer.training as training
    from keras_transformer.training.config import TrainingConfig

    seen = []

    class Stop(Exception):
        pass

    def fake_train(config):
        seen.append(TrainingConfig.from_dict(config))  # a TrainingConfig, or its dict
        raise Stop

    monkeypatch.setattr(training, "train", fake_train)
    with pytest.raises(Stop):
        _quickstart().main(["--output-dir", str(tmp_path / "run"), *args])
    return seen[0]


def test_training_ends_at_the_steps_or_the_time_limit_with_the_rate_at_zero(monkeypatch, tmp_path):
    # The default: 1800 updates or 6 minutes, the rate falling linearly to 0 at whichever
    # end comes first, after a 300-update warm-up (configs/quickstart.yaml).
    config = _config_main_trains_with(monkeypatch, tmp_path)
    schedule = config.schedule
    assert (schedule.train_steps, schedule.warmup_steps) == (1800, 300)
    assert (schedule.decay, schedule.max_train_minutes) == ("linear", 6.0)
    # The average is of the last 3 of checkpoints every 180 updates: with the rate falling to
    # 0, the last 5 reached back into the high rate and scored lower.
    assert (config.checkpoints.every_steps, config.checkpoints.average_last) == (180, 3)
    # 0 lifts the limit; the paper's schedule stays one option away.
    schedule = _config_main_trains_with(
        monkeypatch, tmp_path, "--max-train-minutes", "0", "--decay", "rsqrt"
    ).schedule
    assert (schedule.decay, schedule.max_train_minutes) == ("rsqrt", None)
    # A shortened run (the tests' 8 updates) warms up for a sixth of it, so that the linear
    # line has updates left to fall over (a longer warm-up is refused).
    schedule = _config_main_trains_with(monkeypatch, tmp_path, "--steps", "8").schedule
    assert (schedule.train_steps, schedule.warmup_steps, schedule.decay) == (8, 1, "linear")
    schedule = _config_main_trains_with(monkeypatch, tmp_path, "--steps", "900").schedule
    assert schedule.warmup_steps == 150


@pytest.mark.parametrize(
    "args, message",
    [
        (["--max-train-minutes", "-1"], "--max-train-minutes -1.0: give minutes > 0, or 0"),
        (["--max-train-minutes", "nan"], "--max-train-minutes nan"),
        (["--steps", "1"], "--steps 1: give at least 2 updates"),
        (["--steps", "0", "--decay", "rsqrt"], "--steps 0: give at least 2 updates"),
        (["--set", "model.no_such=1"], "--set model.no_such=1: model: unknown TransformerConfig"),
    ],
)
def test_a_bad_option_is_one_line_before_any_work(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        _quickstart().main(["--output-dir", str(tmp_path / "run"), *args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
