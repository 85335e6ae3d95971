"""An imported OPUS-MT model end to end, against transformers' MarianMTModel: `translate()`,
the commands on its run folder, the SavedModel (TF2 and TF Serving's session loader), the
CTranslate2 export and fine-tuning with `train --init-from`.

One tiny randomized checkpoint (tests/_marian_fixtures.py) is imported once, exported once as a
SavedModel and once for CTranslate2, shared by the module. Its random weights never choose eos,
so every output runs to its length cap: the caps are set alike on both sides (`_generate`).
"""

import json
import sys
import textwrap
import warnings

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from keras_transformer.cli import main as cli_main  # noqa: E402
from keras_transformer.errors import UserInputError  # noqa: E402
from keras_transformer.importers import import_checkpoint  # noqa: E402
from keras_transformer.translation import Translator, translate  # noqa: E402
from tests import _preloaded_python  # noqa: E402
from tests._marian_fixtures import (  # noqa: E402
    GENERATION,
    SOURCE_SENTENCES,
    TARGET_SENTENCES,
    load_marian_model,
    marian_folder,
    marian_tokenizer,
)
from tests._tensorflow_settings import CHILD_PRELUDE  # noqa: E402
from tests._training_fixtures import subprocess_env  # noqa: E402

# A language token, plain text, and a character neither SentencePiece model knows. The
# fixture's eos bias ends some outputs at once: one of these does, the others run long.
SENTENCES = [
    ">>deu<< we read books in the evening",
    "the children play with a red ball",
    "the cat € runs",
    ">>deu<< the cat sat on the mat",
]
MAX_EXTRA = 5
SEARCH = dict(alpha=0.0, max_extra_length=MAX_EXTRA)


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    source = marian_folder(tmp_path_factory)
    run = tmp_path_factory.mktemp("pretrained") / "opus"
    import_checkpoint("marian", str(source), str(run), progress=lambda line: None)
    return source, run


@pytest.fixture(scope="module")
def reference(imported):
    source, _ = imported
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return marian_tokenizer(source), load_marian_model(source)


def _generate(reference, texts, num_beams, max_length):
    """transformers' translations, one sentence at a time so that each has our cap:
    min(source tokens + MAX_EXTRA, the model's max_length) output tokens. transformers counts
    the start token in its `max_length` and forces eos at the last step, so it gets ours + 2.
    """
    tokenizer, model = reference
    outputs = []
    for text in texts:
        batch = tokenizer([text], return_tensors="pt")
        cap = min(batch.input_ids.shape[1] + MAX_EXTRA, max_length)
        with torch.no_grad():
            ids = model.generate(
                **batch, num_beams=num_beams, length_penalty=0.0, max_length=cap + 2
            )
        outputs.append(tokenizer.decode(ids[0], skip_special_tokens=True))
    return outputs


@pytest.fixture(scope="module")
def ours(imported):
    """Our greedy and beam-4 translations of SENTENCES (alpha 0, MAX_EXTRA)."""
    _, run = imported
    greedy = Translator.load(str(run), search="greedy", **SEARCH)
    beam = Translator.load(str(run), beam_size=4, **SEARCH)
    return {
        "greedy": greedy.translate(SENTENCES),
        "beam": beam.translate(SENTENCES),
        "max_length": beam.decoder.max_length,
        "translator": beam,
    }


def test_translate_equals_transformers_generate(ours, reference):
    assert ours["greedy"] == _generate(reference, SENTENCES, 1, ours["max_length"])
    assert ours["beam"] == _generate(reference, SENTENCES, 4, ours["max_length"])
    assert any(ours["greedy"]) and any(ours["beam"])


def test_run_decoding_defaults_are_the_published_ones(imported, ours):
    _, run = imported
    decoding = json.loads((run / "decoding.json").read_text())
    translator = Translator.load(str(run), compile=False)
    search = translator.beam_search
    assert (search.beam_size, search.alpha) == (GENERATION["num_beams"], decoding["alpha"])
    assert translator.max_extra_length == decoding["max_length"]
    # A setting given wins over the run's.
    assert Translator.load(str(run), beam_size=2, compile=False).beam_search.beam_size == 2
    # kt.translate(model=RUN): beam 4 from decoding.json.
    assert translate(SENTENCES[:1], model=str(run), **SEARCH) == ours["beam"][:1]


def _cli(*argv):
    assert cli_main([str(a) for a in argv]) == 0


def test_translate_command_n_best_prefix_and_alignments(imported, ours, tmp_path):
    _, run = imported
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n")
    flags = ("--alpha", "0", "--max-extra-length", MAX_EXTRA, "--no-compile")
    _cli("translate", "--model", run, "-i", tmp_path / "in.txt", "-o", tmp_path / "out", *flags)
    assert (tmp_path / "out").read_text().splitlines() == ours["beam"]  # beam 4 from decoding.json

    _cli("translate", "--model", run, "-i", tmp_path / "in.txt", "-o", tmp_path / "nbest",
         "--n-best", 2, *flags)  # fmt: skip
    rows = [line.split(" ||| ") for line in (tmp_path / "nbest").read_text().splitlines()]
    assert [row[1] for row in rows[::2]] == ours["beam"]

    prefixes = [ours["beam"][0].split()[0], "", "", ""]
    (tmp_path / "prefixes").write_text("\n".join(prefixes) + "\n")
    _cli("translate", "--model", run, "-i", tmp_path / "in.txt", "-o", tmp_path / "prefixed",
         "--prefix-file", tmp_path / "prefixes", "--alignments", tmp_path / "align", *flags)  # fmt: skip
    prefixed = (tmp_path / "prefixed").read_text().splitlines()
    assert prefixed[0].startswith(prefixes[0]) and prefixed[1:] == ours["beam"][1:]
    links = (tmp_path / "align").read_text().splitlines()
    assert len(links) == 4 and all("-" in pair for pair in links[0].split())

    _cli("translate", "--model", run, "-i", tmp_path / "in.txt", "-o", tmp_path / "sampled",
         "--search", "sample", "--seed", 1, "--max-extra-length", MAX_EXTRA, "--no-compile")  # fmt: skip
    assert len((tmp_path / "sampled").read_text().splitlines()) == 4


def _reference_scores(reference, sources, targets):
    """log P(target | source) by transformers' model: the sum of its labels' log-probs."""
    tokenizer, model = reference
    scores = []
    for source, target in zip(sources, targets):
        batch = tokenizer([source], text_target=[target], return_tensors="pt")
        with torch.no_grad():
            logits = model(**batch).logits
        log_probs = torch.log_softmax(logits[0], dim=-1)
        labels = batch["labels"][0]
        scores.append(float(log_probs[torch.arange(len(labels)), labels].sum()))
    return scores


def test_score_evaluate_and_attention_commands(imported, ours, reference, tmp_path):
    _, run = imported
    (tmp_path / "src").write_text("\n".join(SENTENCES) + "\n")
    (tmp_path / "tgt").write_text("\n".join(TARGET_SENTENCES[:4]) + "\n")
    _cli("score", "--model", run, "--source", tmp_path / "src", "--target", tmp_path / "tgt",
         "-o", tmp_path / "scores")  # fmt: skip
    scores = [float(line) for line in (tmp_path / "scores").read_text().split()]
    expected = _reference_scores(reference, SENTENCES, TARGET_SENTENCES[:4])
    np.testing.assert_allclose(scores, expected, rtol=1e-4)

    _cli("evaluate", "--model", run, "--source", tmp_path / "src", "--reference",
         tmp_path / "tgt", "--alpha", 0, "--max-extra-length", MAX_EXTRA, "--json",
         "--output", tmp_path / "hyp")  # fmt: skip
    assert (tmp_path / "hyp").read_text().splitlines() == ours["beam"]

    _cli("attention", SENTENCES[0], "--model", run, "--layer", 1, "--stack", "decoder",
         "--cross", "--target", TARGET_SENTENCES[0], "--output", tmp_path / "attention.png")  # fmt: skip
    assert (tmp_path / "attention.png").stat().st_size > 0


# -- the SavedModel --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved_model(imported, tmp_path_factory):
    """`export` of the run, beam 2 at most (one trace per width), alpha 0 and MAX_EXTRA."""
    _, run = imported
    base = tmp_path_factory.mktemp("saved_models")
    _cli("export", "--model", run, "--name", "opus", "--base-dir", base, "--max-beam-size", 2,
         "--beam-size", 2, "--alpha", 0, "--max-extra-length", MAX_EXTRA)  # fmt: skip
    return base / "opus" / "1"


def test_saved_model_holds_only_serving_ops(saved_model):
    from keras_transformer.export.graph_ops import check_serving_ops

    ops = set(check_serving_ops(saved_model))
    assert {"SentencepieceTokenizeOp", "SentencepieceStringToIdOp", "StaticRegexReplace"} <= ops


# CHILD_PRELUDE: Grappler off, as in this process, whose Translator the outputs are compared
# with (tests/_tensorflow_settings.py); it imports TensorFlow only, not our package.
LOADER = CHILD_PRELUDE + textwrap.dedent(
    """
    import json, sys
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  the SentencePiece ops, as TF Serving links them
    path, texts = sys.argv[1], json.loads(sys.argv[2])
    loaded = tf.saved_model.load(path)
    v2 = loaded.translate(texts)["translation"].numpy()
    with tf.compat.v1.Session(graph=tf.Graph()) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        signature = meta.signature_def["serving_default"]
        feed = {signature.inputs["text"].name: texts}
        for key, tensor_info in signature.inputs.items():
            if key != "text":
                feed[tensor_info.name] = tf.make_ndarray(signature.defaults[key])
        v1 = session.run(signature.outputs["translation"].name, feed_dict=feed)
    assert not any(m.startswith("keras_transformer") for m in sys.modules)
    print(json.dumps({"v1": [t.decode() for t in v1], "v2": [t.decode() for t in v2]}))
    """
)


def test_saved_model_text_equals_translate(saved_model, imported):
    result = _preloaded_python.run(
        [sys.executable, "-c", LOADER, str(saved_model), json.dumps(SENTENCES)],
        capture_output=True,
        text=True,
        timeout=600,
        env=subprocess_env(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = json.loads(result.stdout.strip().splitlines()[-1])
    expected = Translator.load(str(imported[1]), beam_size=2, **SEARCH).translate(SENTENCES)
    assert outputs["v2"] == expected  # TF2 loading, the export's defaults
    assert outputs["v1"] == expected  # TF Serving's session loader, the SignatureDef's


# -- CTranslate2 -----------------------------------------------------------------------------


def test_ctranslate2_export_translates_as_we_do(imported, ours, tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    from keras_transformer.data.marian_vocabulary import MarianVocabulary

    _, run = imported
    _cli("export", "--model", run, "--format", "ctranslate2", "--output", tmp_path / "ct2")
    vocabulary = MarianVocabulary.from_folder(tmp_path / "ct2")  # the files it carries
    translator = ctranslate2.Translator(str(tmp_path / "ct2"))
    table = {index: piece for piece, index in vocabulary.source_table.items()}
    outputs = []
    for text in SENTENCES:
        # CTranslate2 appends eos itself (add_source_eos): the tokens without it.
        tokens = [table[i] for i in vocabulary.encode_source(text, add_eos=False)]
        cap = min(len(tokens) + 1 + MAX_EXTRA, ours["max_length"])
        result = translator.translate_batch(
            [tokens],
            beam_size=4,
            length_penalty=0.0,
            min_decoding_length=0,  # CTranslate2's default, 1, forbids an empty output
            max_decoding_length=cap,
        )
        ids = [vocabulary.source_table[token] for token in result[0].hypotheses[0]]
        outputs.append(vocabulary.decode_target(ids))
    assert outputs == ours["beam"]


# -- fine-tuning -----------------------------------------------------------------------------


def test_train_init_from_the_imported_run(imported, tmp_path):

    _, run = imported
    sources = [">>deu<< " + line for line in SOURCE_SENTENCES]
    (tmp_path / "train.en").write_text("\n".join(sources) + "\n")
    (tmp_path / "train.de").write_text("\n".join(TARGET_SENTENCES) + "\n")
    # Data, schedule and output only: the model and vocabulary come from the imported run.
    config = {
        "output_dir": str(tmp_path / "tuned"),
        "data": {
            "train": [{"source": str(tmp_path / "train.en"), "target": str(tmp_path / "train.de")}],
            "dev": None,
            "token_budget": 128,
            "max_length": 32,
            "shuffle_buffer": 16,
        },
        "schedule": {
            "train_steps": 8,
            "warmup_steps": 4,
            "tokens_per_update": 128,
            "eval_every_steps": 4,
            "log_every_steps": 4,
        },
        "checkpoints": {"every_minutes": None, "every_steps": 8, "average_last": 1},
        "verbose": 0,
    }
    (tmp_path / "tune.json").write_text(json.dumps(config))
    _cli("train", "--config", tmp_path / "tune.json", "--init-from", run)
    tuned = tmp_path / "tuned"
    for name in ("source.spm", "target.spm", "vocab.json", "decoding.json"):
        assert (tuned / name).read_bytes() == (run / name).read_bytes()
    history = json.loads((tuned / "history.json").read_text())
    losses = [entry["loss"] for entry in history]
    assert len(losses) == 2 and losses[-1] < losses[0]
    assert json.loads((tuned / "config.json").read_text()) == json.loads(
        (run / "config.json").read_text()
    )
    # The tuned run translates with the imported vocabulary (its run folder's copy).
    tuned_translator = Translator.load(str(tuned), compile=False)
    assert tuned_translator.vocabulary == Translator.load(str(run), compile=False).vocabulary
    assert len(tuned_translator.translate(SENTENCES)) == len(SENTENCES)


def test_model_fields_in_a_tuning_config_are_refused(imported, tmp_path):
    from keras_transformer.training import train

    _, run = imported
    (tmp_path / "a").write_text("x\n")
    config = {
        "output_dir": str(tmp_path / "tuned"),
        "init_from": str(run),
        "model": {"d_model": 64},
        "data": {"train": [{"source": str(tmp_path / "a"), "target": str(tmp_path / "a")}]},
    }
    with pytest.raises(UserInputError, match="model.d_model"):
        train(config)


def test_second_import_into_the_run_is_refused(imported):
    source, run = imported
    with pytest.raises(UserInputError, match="exists"):
        import_checkpoint("marian", str(source), str(run), progress=lambda line: None)
