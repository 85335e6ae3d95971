"""`export_ctranslate2` and `keras-transformer export --format ctranslate2`: CTranslate2 (fp32)
decodes the exported weights to our outputs token for token, greedy and beam 4 at alpha 0
(its length penalty, length^alpha, and ours, GNMT's, agree only there), for post- and
pre-norm, tied and untied embeddings, learned positions, and heads whose width is not
d_model / h; the directory alone translates raw text; bad input is one error."""

import json
import pathlib
import shutil
import sys

import keras
import numpy as np
import pytest

from keras_transformer import TransformerConfig, build_model
from keras_transformer.cli import main
from keras_transformer.decoding import BeamSearch
from keras_transformer.errors import UserInputError
from keras_transformer.export import export_ctranslate2
from keras_transformer.export.ctranslate2 import INSTALL_HINT, ctranslate2_spec
from keras_transformer.translation import Translator
from tests._decoding_fixtures import SENTENCES, tiny_run_folder, train_char_vocabulary

ctranslate2 = pytest.importorskip("ctranslate2")

EXTRA = 8  # output tokens beyond the source length, ours and CTranslate2's cap alike
TOKENS = ["<pad>", "<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(4, 40)]


def improbable_pad_and_bos(model):
    """Gives pad and bos a logit 30 below their random one at every position, as training
    does (they are never targets). Our search forbids them after the softmax and the export
    before it (a bias); the scores then agree to ~1e-13 instead of by log(1 - p(pad) -
    p(bos)) per token, which reorders a random model's beams. One output of the decoder's
    last LayerNorm is made a constant 1 (gamma 0, beta 1), read by pad and bos only."""
    config = model.config
    decoder = model.decoder
    norm = (
        decoder.final_norm
        if config.norm_position == "pre"
        else decoder.transformer_layers[-1].feed_forward_residual.layer_norm
    )
    gamma, beta = keras.ops.convert_to_numpy(norm.gamma), keras.ops.convert_to_numpy(norm.beta)
    gamma[0], beta[0] = 0.0, 1.0
    norm.gamma.assign(gamma)
    norm.beta.assign(beta)
    projection = model.output_projection.embeddings
    rows = keras.ops.convert_to_numpy(projection)
    rows[:, 0] = 0.0
    rows[[config.pad_id, config.bos_id], 0] = -30.0
    projection.assign(rows)
    return model


def random_model(vocab_size=40, seed=0, **overrides):
    """Two layers of random weights, sharpened (peaky distributions, few near-ties)."""
    keras.utils.set_random_seed(seed)
    values = dict(
        vocab_size=vocab_size,
        num_layers=2,
        d_model=32,
        d_ff=64,
        num_heads=4,
        max_length=48,
        dropout=0.0,
    )
    model = build_model(TransformerConfig(**{**values, **overrides}))
    for embedding in {id(e): e for e in (model.target_embedding, model.output_projection)}.values():
        embedding.embeddings.assign(embedding.embeddings * 2.0)
    if model.output_bias is not None:  # zeros at first: make it matter
        model.output_bias.assign(0.5 * np.random.default_rng(seed).normal(size=vocab_size))
    return improbable_pad_and_bos(model)


def ours(model, source_ids, beam_size):
    result = BeamSearch(beam_size, alpha=0.0, max_extra_length=EXTRA)(model, source_ids)
    ids = keras.ops.convert_to_numpy(result.ids)[:, 0]
    lengths = keras.ops.convert_to_numpy(result.lengths)[:, 0]
    outputs = []
    for row, length in zip(ids, lengths):
        output = [int(t) for t in row[:length]]
        outputs.append(output[:-1] if output and output[-1] == model.config.eos_id else output)
    return outputs


@pytest.mark.parametrize(
    "overrides",
    [
        dict(),  # the paper's: post-norm, one matrix for both embeddings and the projection
        dict(norm_position="pre", shared_embeddings="none", key_dim=16, value_dim=16),
        dict(shared_embeddings="target", key_dim=4, value_dim=12, positional="learned"),
        # Pre-norm over tied random embeddings repeats the previous token: untied here.
        dict(norm_position="pre", shared_embeddings="none", key_dim=12, value_dim=4),
        # OPUS-MT's: swish, a bias on the logits, decoding from pad.
        dict(activation="swish", output_bias=True, bos_id=0, seed=1),
        dict(activation="gelu", output_bias=True),
    ],
    ids=[
        "post-tied",
        "pre-untied-wide-heads",
        "post-dk<dv-learned",
        "pre-dk>dv",
        "swish-bias-from-pad",
        "gelu-bias",
    ],
)
def test_ctranslate2_decodes_as_ours(overrides, tmp_path):
    model = random_model(**overrides)
    spec = ctranslate2_spec(model, TOKENS)
    spec.optimize()
    spec.save(str(tmp_path))
    translator = ctranslate2.Translator(str(tmp_path), device="cpu", compute_type="float32")
    # One source length, so that ours (one cap per sentence) and CTranslate2 (one per batch)
    # stop at the same length: the source with its eos + EXTRA.
    words = np.random.default_rng(1).integers(4, 40, size=(12, 6))
    source_ids = np.concatenate([words, np.full((12, 1), 3)], axis=1).astype("int32")
    for beam_size in (1, 4):
        expected = ours(model, source_ids, beam_size)
        results = translator.translate_batch(
            [[TOKENS[i] for i in row] for row in words],  # eos: the config's add_source_eos
            beam_size=beam_size,
            length_penalty=0.0,
            min_decoding_length=0,
            max_decoding_length=7 + EXTRA,
        )
        got = [[TOKENS.index(t) for t in r.hypotheses[0]] for r in results]
        assert got == expected, f"beam {beam_size}"
        assert len({tuple(output) for output in expected}) > 6  # not one repeated output


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ct2-run")
    vocabulary = train_char_vocabulary(folder)
    model = random_model(vocab_size=25, seed=3, key_dim=16, value_dim=16)
    return tiny_run_folder(folder / "run", vocabulary, model)


def export(run_folder, output, *flags):
    return main(
        ["export", "--model", str(run_folder), "--format", "ctranslate2", "--output", str(output)]
        + list(flags)
    )


def test_cli_export_translates_raw_text_alone(run_folder, tmp_path, capsys):
    import sentencepiece

    output = tmp_path / "exported" / "ct2"
    assert export(run_folder, output) == 0
    assert f"to {output}" in capsys.readouterr().out
    assert sorted(p.name for p in output.parent.iterdir()) == ["ct2"]  # no staging left
    # The directory alone, elsewhere: its files and nothing of ours.
    alone = shutil.copytree(output, tmp_path / "elsewhere")
    assert sorted(p.name for p in alone.iterdir()) == [
        "config.json",
        "model.bin",
        "sentencepiece.model",
        "shared_vocabulary.json",
    ]
    assert json.loads((alone / "config.json").read_text())["add_source_eos"] is True
    translator = ctranslate2.Translator(str(alone), device="cpu", compute_type="float32")
    pieces = sentencepiece.SentencePieceProcessor(model_file=str(alone / "sentencepiece.model"))
    texts = SENTENCES
    for beam_size in (1, 4):
        expected = Translator.load(
            str(run_folder), beam_size=beam_size, alpha=0.0, max_extra_length=EXTRA
        ).translate(texts)
        got = []
        for text in texts:  # one at a time: CTranslate2's cap is one per batch
            source = pieces.encode(text, out_type=str)
            (result,) = translator.translate_batch(
                [source],
                beam_size=beam_size,
                length_penalty=0.0,
                min_decoding_length=0,
                # Ours stops at the model's max_length too: it has no later positions.
                max_decoding_length=min(len(source) + 1 + EXTRA, 48),
            )
            got.append(pieces.decode(result.hypotheses[0]))
        assert got == expected, f"beam {beam_size}"
        assert sum(bool(text) for text in expected) > len(texts) // 2


def test_quantized_export_is_smaller_and_translates(run_folder, tmp_path, capsys):
    assert export(run_folder, tmp_path / "fp32") == 0
    assert export(run_folder, tmp_path / "int8", "--quantization", "int8") == 0
    fp32, int8 = ((tmp_path / name / "model.bin").stat().st_size for name in ("fp32", "int8"))
    assert int8 < 0.5 * fp32  # the matrices in 1 byte instead of 4
    translator = ctranslate2.Translator(str(tmp_path / "int8"), device="cpu")
    (result,) = translator.translate_batch([["▁", "h", "e", "l", "l", "o"]], max_decoding_length=9)
    assert 0 < len(result.hypotheses[0]) <= 9


def _error_line(capsys):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("keras-transformer export: error: "), err
    return lines[0]


def test_cli_refusals_are_one_line_and_keep_what_exists(run_folder, tmp_path, capsys):
    output = tmp_path / "ct2"
    # --name (a TF Serving name) has no meaning here, and is an error rather than ignored.
    assert export(run_folder, output, "--name", "ende") == 2
    assert "--name does not apply to --format ctranslate2" in _error_line(capsys)
    assert main(["export", "--model", str(run_folder), "--format", "ctranslate2"]) == 2
    assert "needs --output DIR" in _error_line(capsys)
    assert main(["export", "--model", str(run_folder), "--output", str(output)]) == 2
    assert "--output does not apply to --format saved_model" in _error_line(capsys)
    assert not output.exists()

    # An existing directory: refused without --overwrite; with it, replaced only if it holds
    # a CTranslate2 model (or nothing).
    output.mkdir()
    (output / "notes.txt").write_text("mine")
    assert export(run_folder, output) == 2
    assert "already exists; pass --overwrite" in _error_line(capsys)
    assert export(run_folder, output, "--overwrite") == 2
    assert "not a CTranslate2 model directory" in _error_line(capsys)
    assert [p.name for p in output.iterdir()] == ["notes.txt"]
    (output / "notes.txt").unlink()
    assert export(run_folder, output, "--overwrite") == 0  # empty: replaced
    capsys.readouterr()
    first = (output / "model.bin").read_bytes()
    assert export(run_folder, output, "--overwrite", "--quantization", "int16") == 0
    assert (output / "model.bin").read_bytes() != first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ct2"]  # no staging, no old copy


def test_missing_ctranslate2_says_how_to_install_before_loading(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # `import ctranslate2` fails
    # The model path does not exist: the install hint comes first, without loading anything.
    assert export(tmp_path / "no-such-run", tmp_path / "ct2") == 2
    assert _error_line(capsys).endswith(INSTALL_HINT)
    assert 'pip install "keras-nmt-transformer[ctranslate2]"' in INSTALL_HINT
    assert not (tmp_path / "ct2").exists()


def test_library_refusals_name_the_problem(run_folder, tmp_path):
    model = random_model(vocab_size=25)
    vocabulary = run_folder / "vocab.model"
    with pytest.raises(UserInputError, match="quantization 'int4' is not one of int8"):
        export_ctranslate2(model, tmp_path / "a", quantization="int4", vocabulary=vocabulary)
    with pytest.raises(UserInputError, match="carries no vocabulary"):
        export_ctranslate2(model, tmp_path / "a")
    with pytest.raises(UserInputError, match="40 pieces but the model was built for"):
        ctranslate2_spec(model, TOKENS)
    with pytest.raises(UserInputError, match="got Sequential"):
        export_ctranslate2(keras.Sequential([]), tmp_path / "a", vocabulary=vocabulary)
    # A shape the export does not write: one layer's activation other than the config's.
    model.decoder.transformer_layers[1].feed_forward.inner_dense.activation = keras.activations.gelu
    with pytest.raises(UserInputError, match="decoder/layer_1/feed_forward has the activation"):
        export_ctranslate2(model, tmp_path / "a", vocabulary=vocabulary)
    assert not any(tmp_path.iterdir())


def test_unscaled_source_embedding_exports_as_such(tmp_path):
    """Each stack's embedding scale is its own (CTranslate2's scale_embeddings per stack)."""
    model = random_model(shared_embeddings="target")
    model.source_embedding.scale = False
    spec = ctranslate2_spec(model, TOKENS)
    spec.optimize()
    spec.save(str(tmp_path))
    translator = ctranslate2.Translator(str(tmp_path), device="cpu", compute_type="float32")
    words = np.random.default_rng(2).integers(4, 40, size=(8, 6))
    source_ids = np.concatenate([words, np.full((8, 1), 3)], axis=1).astype("int32")
    results = translator.translate_batch(
        [[TOKENS[i] for i in row] for row in words],
        beam_size=1,
        min_decoding_length=0,
        max_decoding_length=7 + EXTRA,
    )
    got = [[TOKENS.index(t) for t in r.hypotheses[0]] for r in results]
    assert got == ours(model, source_ids, 1)


def test_failed_export_keeps_the_previous_one(run_folder, tmp_path, capsys, monkeypatch):
    from ctranslate2.specs import transformer_spec

    output = tmp_path / "ct2"
    assert export(run_folder, output) == 0
    before = {p.name: p.read_bytes() for p in output.iterdir()}

    def save_half_then_fail(spec, directory):
        (tmp_path / "ct2-half").write_text(directory)  # where it wrote
        with open(f"{directory}/model.bin", "wb") as file:
            file.write(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(transformer_spec.TransformerSpec, "save", save_half_then_fail)
    with pytest.raises(OSError, match="No space left"):
        export(run_folder, output, "--overwrite")
    assert {p.name: p.read_bytes() for p in output.iterdir()} == before
    staging = (tmp_path / "ct2-half").read_text()
    assert staging != str(output) and not pathlib.Path(staging).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ct2", "ct2-half"]


# -- the quickstart's model ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def quickstart_ct2(quickstart_run, tmp_path_factory):
    """The shortened quickstart's run exported to CTranslate2 twice, fp32 and int8, and its
    first 100 test sentences as pieces."""
    import sentencepiece

    folder = tmp_path_factory.mktemp("quickstart-ct2")
    run = quickstart_run.run
    assert export(run, folder / "fp32") == 0
    assert export(run, folder / "int8", "--quantization", "int8") == 0
    pieces = sentencepiece.SentencePieceProcessor(model_file=str(run / "vocab.model"))
    sources = (run / "corpus" / "test.en").read_text(encoding="utf-8").splitlines()[:100]
    return run, folder, pieces, sources


def test_int8_translates_the_quickstart_test_set_as_fp32_does(quickstart_ct2):
    _, folder, pieces, sources = quickstart_ct2
    source_pieces = [pieces.encode(text, out_type=str) for text in sources]
    outputs = {}
    for name, compute_type in (("fp32", "float32"), ("int8", "int8")):
        translator = ctranslate2.Translator(
            str(folder / name), device="cpu", compute_type=compute_type
        )
        results = translator.translate_batch(source_pieces, beam_size=1, max_decoding_length=40)
        outputs[name] = [pieces.decode(result.hypotheses[0]) for result in results]
    identical = sum(a == b for a, b in zip(outputs["fp32"], outputs["int8"])) / len(sources)
    assert identical >= 0.9, list(zip(outputs["fp32"], outputs["int8"]))[:5]


def test_ctranslate2_token_scores_are_ours_at_1e_4(quickstart_ct2):
    """CTranslate2's log-probability of each target piece is ours, normalized over the pieces
    it may emit: the export gives pad and bos no probability before the softmax (a bias),
    where our search forbids them after it."""
    from keras_transformer.data.vocabulary import load_vocabulary
    from keras_transformer.translation import load_model

    run, folder, pieces, sources = quickstart_ct2
    sources = sources[:20]
    references = (run / "corpus" / "test.de").read_text(encoding="utf-8").splitlines()[:20]
    translator = ctranslate2.Translator(str(folder / "fp32"), device="cpu", compute_type="float32")
    scored = translator.score_batch(
        [pieces.encode(text, out_type=str) for text in sources],
        [pieces.encode(text, out_type=str) for text in references],
    )
    model, _ = load_model(str(run))
    vocabulary = load_vocabulary(str(run / "vocab.model"))
    config = model.config
    for source, reference, result in zip(sources, references, scored):
        source_ids = np.array([vocabulary.encode(source) + [config.eos_id]], "int32")
        target = vocabulary.encode(reference) + [config.eos_id]
        inputs = np.array([[config.bos_id] + target[:-1]], "int32")
        logits = keras.ops.convert_to_numpy(
            model({"source_ids": source_ids, "target_ids": inputs}, training=False)
        )[0].astype("float64")
        logits[:, [config.pad_id, config.bos_id]] = -np.inf
        log_probs = (
            logits
            - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1))[:, None]
            - logits.max(-1, keepdims=True)
        )
        ours = log_probs[np.arange(len(target)), target]
        assert len(result.log_probs) == len(target)
        np.testing.assert_allclose(result.log_probs, ours, atol=1e-4, err_msg=reference)
