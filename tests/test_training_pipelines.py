"""The pipelines/ recipes: multi30k trains end to end on the shared data; the WMT recipes
describe valid configs with the paper's settings."""

import json

import keras
import numpy as np

from keras_transformer.runs.layout import OutputDir
from tests import _preloaded_python
from tests._training_fixtures import PYTHON, REPO, load_pipeline, subprocess_env

TINY = [
    "model.num_layers=1",
    "model.d_model=32",
    "model.d_ff=64",
    "model.num_heads=4",
    "model.key_dim=8",
    "model.value_dim=8",
    "data.vocab_size=1000",
    "data.token_budget=1024",
    "data.shuffle_buffer=2000",
    "schedule.tokens_per_update=1024",
    "schedule.warmup_steps=10",
    "schedule.eval_every_steps=6",
    "checkpoints.every_steps=3",
    "checkpoints.keep_last=2",
    "checkpoints.average_last=2",
    "verbose=0",
]


def test_multi30k_short_schedule_end_to_end(data_dir, tmp_path, capsys):
    multi30k = data_dir / "multi30k"
    output_dir = tmp_path / "multi30k"
    command = [
        PYTHON,
        "pipelines/multi30k.py",
        "--data-dir",
        str(multi30k),
        "--output-dir",
        str(output_dir),
        "--train-steps",
        "6",
        "--test-lines",
        "3",
    ]
    for override in TINY:
        command += ["--set", override]
    completed = _preloaded_python.run(
        command, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, completed.stderr[-6000:]
    assert f"trained to step 6 in {output_dir}" in completed.stdout
    assert "averaged model:" in completed.stdout
    # Then it scores the test set (3 lines here) with the averaged model; trained on
    # lower-cased text by default (Wu et al.), so sacreBLEU is case-insensitive.
    figures = json.loads(completed.stdout.strip().splitlines()[-1])
    assert figures["pipeline"] == "multi30k" and figures["sentences"] == 3
    assert figures["preprocessing"] == "lowercase+moses"
    assert "nrefs:1|case:lc" in figures["bleu_signature"]
    hypotheses = (output_dir / "test_2016_flickr.de.hyp").read_text(encoding="utf-8")
    assert len(hypotheses.splitlines()) == 3 and hypotheses == hypotheses.lower()
    # The figures are those of the written translations, recomputed here with sacreBLEU.
    import gzip

    import sacrebleu

    from keras_transformer.evaluation import moses_lowercase_bleu

    with gzip.open(multi30k / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as file:
        references = file.read().splitlines()[:3]
    lines = hypotheses.splitlines()
    assert figures["bleu"] == round(
        sacrebleu.corpus_bleu(lines, [references], lowercase=True).score, 2
    )
    chrf = sacrebleu.metrics.CHRF(lowercase=True).corpus_score(lines, [references]).score
    assert figures["chrf"] == round(chrf, 2)
    assert figures["moses_lowercase_bleu"] == round(moses_lowercase_bleu(lines, references)[0], 2)

    # The model trained on the prepared text: lower-cased, Moses-tokenized, line for line.
    from sacremoses import MosesTokenizer

    from keras_transformer.data.corpora import read_lines

    raw = [line.decode() for line in read_lines(str(multi30k / "train.de.gz"))]
    prepared = (output_dir / "data" / "train.de.txt").read_text(encoding="utf-8").splitlines()
    assert len(prepared) == len(raw) == 29000
    tokenizer = MosesTokenizer(lang="de")
    for index in (0, 1, 28999):
        assert prepared[index] == tokenizer.tokenize(
            raw[index].lower(), return_str=True, escape=False
        )
    assert prepared[0] == "zwei junge weiße männer sind im freien in der nähe vieler büsche ."

    run = OutputDir(output_dir)
    for path in (
        run.model_config,
        run.vocabulary,
        run.training_config,
        run.final_model,
        run.averaged_model,
        run.history,
    ):
        assert (output_dir / path).exists(), path
    assert run.translation_model == run.averaged_model
    import keras_transformer.model  # noqa: F401  (registers the classes load_model needs)

    model = keras.saving.load_model(run.translation_model)
    with open(run.model_config) as file:
        assert json.load(file)["vocab_size"] == model.config.vocab_size >= 1000
    with open(run.history) as file:
        history = json.load(file)
    assert history[-1]["step"] == 6
    assert np.isfinite(history[-1]["val_perplexity"]) and history[-1]["val_perplexity"] > 1
    # Real Multi30k German, prepared as the training text was, comes out of the vocabulary.
    from keras_transformer.data import SubwordVocabulary

    vocabulary = SubwordVocabulary.from_file(run.vocabulary)
    assert vocabulary.decode(vocabulary.encode("ein mann fährt fahrrad .")) == (
        "ein mann fährt fahrrad ."
    )

    # Resuming the run with another preparation is refused before anything is overwritten.
    before = (output_dir / "data" / "train.de.txt").stat().st_mtime_ns
    # In this process: the refusal comes before any training (a second interpreter and
    # TensorFlow import would cost more than the check).
    assert load_pipeline("multi30k").main(command[2:] + ["--cased"]) == 2
    assert "prepared with preprocessing 'lowercase+moses', not 'moses'" in capsys.readouterr().err
    assert (output_dir / "data" / "train.de.txt").stat().st_mtime_ns == before


def test_test_set_figures_are_those_of_the_written_translations(data_dir, tmp_path, monkeypatch):
    """The scoring step on outputs that score neither 0 nor 100: a stand-in model that answers
    each test sentence with its reference prepared as training text (lower-cased, Moses
    tokens), except one sentence with a few wrong words; the figures are sacreBLEU's of the
    written, detokenized file."""
    import gzip

    import sacrebleu

    import keras_transformer

    multi30k = load_pipeline("multi30k")
    data = data_dir / "multi30k"
    with gzip.open(data / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as file:
        references = file.read().splitlines()[:4]
    preprocessing = multi30k.Preprocessing(True, True, "de")
    prepared = [preprocessing(line, "de") for line in references]
    prepared[2] = "ein hund läuft ."

    class StandIn:
        @classmethod
        def load(cls, *args, **options):
            return cls()

        def translate(self, sources):
            assert len(sources) == len(prepared)
            return prepared

    monkeypatch.setattr(keras_transformer, "Translator", StandIn)
    figures = multi30k.evaluate_test_set(tmp_path, data, lines=4, preprocessing=preprocessing)
    lines = (tmp_path / "test_2016_flickr.de.hyp").read_text(encoding="utf-8").splitlines()
    assert lines[0] == references[0].lower()  # detokenized back
    bleu = sacrebleu.corpus_bleu(lines, [references], lowercase=True).score
    chrf = sacrebleu.metrics.CHRF(lowercase=True).corpus_score(lines, [references]).score
    assert 20 < bleu < 95 and 20 < chrf < 95  # neither bound
    assert (figures["bleu"], figures["chrf"]) == (round(bleu, 2), round(chrf, 2))
    assert figures["sentences"] == 4


def test_multi30k_preprocessing_round_trip():
    multi30k = load_pipeline("multi30k")
    wu = multi30k.Preprocessing(lowercase=True, moses=True, language="de")
    prepared = wu('Ein Mann, der "Hallo" sagt.', "de")
    assert prepared == 'ein mann , der " hallo " sagt .'
    # Model output is Moses-tokenized text; the pipeline hands out detokenized text.
    assert wu.postprocess(prepared) == 'ein mann, der "hallo" sagt.'
    cased = multi30k.Preprocessing(lowercase=False, moses=False, language="de")
    assert cased.name == "none" and cased("Ein Mann.", "de") == "Ein Mann."
    assert cased.postprocess("Ein Mann.") == "Ein Mann."


def test_wmt14_recipes_follow_the_paper(tmp_path, monkeypatch):
    monkeypatch.delenv("KT_DATA_DIR", raising=False)
    en_de = load_pipeline("wmt14_en_de")
    args = en_de.parser_for("", list(en_de.RECIPES)).parse_args(
        ["--preset", "big", "--output-dir", str(tmp_path)]
    )
    config = en_de.recipe_config(args)
    assert config.output_dir == str(tmp_path)
    assert config.data.train[0].tfds == "wmt14_translate/de-en"
    assert config.data.dev is None  # no KT_DATA_DIR, no --dev-source: no dev set
    assert config.data.vocab_size == 37000 and config.data.vocab_model_type == "bpe"
    assert config.schedule.train_steps == 300_000 and config.checkpoints.average_last == 20
    assert config.accumulation_steps(num_replicas=8) == 1  # 8 x 3125 = 25000 tokens
    assert config.transformer_config(37000).dropout == 0.3

    import sys

    sys.path.insert(0, str(REPO / "pipelines"))
    try:
        en_fr = load_pipeline("wmt14_en_fr")
    finally:
        sys.path.remove(str(REPO / "pipelines"))
    args = en_de.parser_for("", list(en_fr.RECIPES)).parse_args(
        ["--preset", "big_en_fr", "--train-source", "a.en", "--train-target", "a.fr", "--xla"]
    )
    config = en_de.recipe_config(args, en_fr.RECIPES)
    assert config.data.train[0].source == "a.en" and config.data.train[0].tfds is None
    assert config.data.vocab_model_type == "unigram" and config.xla
    assert config.transformer_config(32000).dropout == 0.1


def test_multi30k_recipe_is_wu_et_al(tmp_path):
    """Wu et al. (2021) train with `--max-tokens 4096` on two GPUs (8192 tokens an update:
    one batch of 8192 on one device),
    lr 0.005 after 2000 warm-up updates, 8000 updates, average of the last 10."""
    from keras_transformer.schedules import NoamSchedule

    multi30k = load_pipeline("multi30k")
    for precision in ("float32", "mixed_bfloat16"):
        config = multi30k.multi30k_config(
            str(tmp_path), output_dir=str(tmp_path / "run"), precision=precision
        )
        assert config.precision == precision
    assert config.data.token_budget == 8192 and config.schedule.tokens_per_update == 8192
    # Joint BPE of 10k merges (Wu et al.): one shared vocabulary of 10000 pieces.
    assert config.data.vocab_size == 10000 and config.data.vocab_model_type == "bpe"
    assert config.accumulation_steps(num_replicas=1) == 1  # one batch of 8192
    on_two_gpus = multi30k.multi30k_config(
        str(tmp_path), output_dir=str(tmp_path / "run"), replicas=2
    )
    assert on_two_gpus.data.token_budget == 4096  # as Wu et al.'s two GPUs
    assert on_two_gpus.accumulation_steps(num_replicas=2) == 1
    assert config.schedule.train_steps == 8000 and config.checkpoints.average_last == 10
    schedule = NoamSchedule(128, config.schedule.warmup_steps, config.schedule.learning_rate_scale)
    # Keras counts steps from 0: the 2000th update runs at iteration 1999.
    peak = float(schedule(1999))
    assert abs(peak - 0.005) < 0.005 * 1e-3  # fairseq --lr 0.005, inverse_sqrt
    assert float(schedule(999)) == np.float32(peak / 2)  # linear warm-up
    assert abs(float(schedule(7999)) - peak / 2) < 1e-7  # then 1/sqrt(step)
    model = config.transformer_config(8000)
    assert (model.num_layers, model.d_model, model.d_ff, model.num_heads, model.dropout) == (
        4,
        128,
        256,
        4,
        0.3,
    )
