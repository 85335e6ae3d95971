"""`keras-transformer attention`: the pictures, the layer/head numbering, and the errors."""

import numpy as np
import pytest
from keras import ops
from PIL import Image

import keras_transformer.visualization as visualization
from keras_transformer.cli import main
from keras_transformer.translation import Translator
from tests._decoding_fixtures import tiny_model, tiny_run_folder, train_char_vocabulary

SENTENCE = "the cat sat on the mat"


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    vocabulary = train_char_vocabulary(folder)
    model = tiny_model(vocab_size=40, max_length=48, seed=5, num_layers=2)
    return tiny_run_folder(folder / "run", vocabulary, model)


@pytest.fixture
def drawn(monkeypatch):
    """What the command handed to the drawing functions, by function name."""
    calls = {}

    def recording(function):
        def record(weights, queries, keys=None, **kwargs):
            calls[function.__name__] = (np.asarray(weights), queries, keys, kwargs)
            return function(weights, queries, keys, **kwargs)

        return record

    for name in ("draw_attention_lines", "draw_attention_heatmaps"):
        monkeypatch.setattr(visualization, name, recording(getattr(visualization, name)))
    return calls


@pytest.fixture(scope="module")
def translator(run_folder):
    return Translator.load(str(run_folder), compile=False)


def _expected(translator, sentence, target=None, **kwargs):
    vocabulary, model = translator.vocabulary, translator.model
    source = vocabulary.encode(sentence) + [3]
    pieces = [vocabulary.processor.id_to_piece(i) for i in source]
    target_ids = None if target is None else np.array([[2] + vocabulary.encode(target)], "int32")
    weights = ops.convert_to_numpy(
        model.attention_weights(np.array([source], "int32"), target_ids, **kwargs)
    )[0]
    return weights, pieces


def _assert_png(path):
    with Image.open(path) as image:
        assert image.format == "PNG" and min(image.size) > 200
        image.verify()


def test_encoder_layer_is_counted_from_one_and_both_pictures_are_written(
    run_folder, translator, tmp_path, capsys, drawn
):
    output = tmp_path / "making.png"
    assert (
        main(
            [
                "attention",
                "--model",
                str(run_folder),
                "--layer",
                "2",
                "--head",
                "3",
                "--output",
                str(output),
                SENTENCE,
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    heatmap = tmp_path / "making.heatmap.png"
    assert str(output) in printed and str(heatmap) in printed
    _assert_png(output)
    _assert_png(heatmap)
    # --layer 2 is the second (last) encoder layer, --head 3 the third head.
    weights, pieces = _expected(translator, SENTENCE, layer_index=1)
    first_layer, _ = _expected(translator, SENTENCE, layer_index=0)
    assert not np.allclose(weights, first_layer, atol=1e-3)  # the numbering matters
    for name in ("draw_attention_lines", "draw_attention_heatmaps"):
        drawn_weights, queries, keys, kwargs = drawn[name]
        np.testing.assert_allclose(drawn_weights, weights, atol=1e-6)
        assert queries == keys == pieces and pieces[-1] == "</s>"
        assert kwargs["heads"] == [2] and "layer 2 of 2, head 3" in kwargs["title"]


def test_decoder_cross_attention_goes_from_the_target_to_the_sentence(
    run_folder, translator, tmp_path, drawn
):
    target = "a dog"
    assert (
        main(
            [
                "attention",
                "--model",
                str(run_folder),
                "--layer",
                "1",
                "--stack",
                "decoder",
                "--cross",
                "--target",
                target,
                "--token",
                "2",
                "--head",
                "1",
                "--head",
                "4",
                "--output",
                str(tmp_path / "cross"),
                SENTENCE,
            ]
        )
        == 0
    )
    _assert_png(tmp_path / "cross.png")
    _assert_png(tmp_path / "cross.heatmap.png")
    weights, source_pieces = _expected(
        translator, SENTENCE, target, stack="decoder", kind="cross", layer_index=0
    )
    drawn_weights, queries, keys, kwargs = drawn["draw_attention_lines"]
    np.testing.assert_allclose(drawn_weights, weights, atol=1e-6)
    # Each query is labelled with the token its position predicts: the target, then eos.
    assert keys == source_pieces and queries == _expected(translator, target)[1]
    assert queries[-1] == "</s>" and kwargs["query_index"] == 1 and kwargs["heads"] == [0, 3]
    assert "layer 1 of 2, heads 1, 4" in kwargs["title"]


def test_decoder_self_attention_reads_the_model_translation(
    run_folder, translator, tmp_path, capsys, drawn, monkeypatch
):
    # The random model's own translation runs to max_length; a scripted one keeps this fast.
    monkeypatch.setattr(Translator, "translate", lambda self, texts: ["a dog"])
    assert (
        main(
            [
                "attention",
                "--model",
                str(run_folder),
                "--layer",
                "2",
                "--stack",
                "decoder",
                "--output",
                str(tmp_path / "self.png"),
                "hello",
            ]
        )
        == 0
    )
    assert "translation: a dog" in capsys.readouterr().out
    _assert_png(tmp_path / "self.png")
    weights, _ = _expected(translator, "hello", "a dog", stack="decoder", layer_index=1)
    drawn_weights, queries, keys, _ = drawn["draw_attention_heatmaps"]
    np.testing.assert_allclose(drawn_weights, weights, atol=1e-6)
    # Queries: the tokens predicted (translation, eos); keys: the tokens read (bos first).
    assert keys == ["<s>"] + queries[:-1] and queries[-1] == "</s>"
    assert np.abs(np.triu(drawn_weights[0], 1)).max() < 1e-6  # causal


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--layer", "3"], "--layer 3 is out of range: this model's encoder has 2 layers, 1 to 2"),
        (["--layer", "0"], "--layer 0 is out of range"),
        (
            ["--layer", "1", "--head", "2", "--head", "5"],
            "--head 5 is out of range: this model has 4 heads",
        ),
        (["--layer", "1", "--cross"], "add --stack decoder"),
        (["--layer", "1", "--token", "99"], "--token 99 is out of range"),
    ],
)
def test_bad_input_exits_2_with_one_line(run_folder, tmp_path, capsys, arguments, message):
    output = tmp_path / "bad.png"
    assert (
        main(
            ["attention", "--model", str(run_folder), *arguments, "--output", str(output), SENTENCE]
        )
        == 2
    )
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1
    assert not output.exists()


def test_an_output_folder_gets_the_default_names_inside_it(run_folder, tmp_path, capsys):
    folder = tmp_path / "pictures"
    folder.mkdir()
    assert (
        main(
            [
                "attention",
                "--model",
                str(run_folder),
                "--layer",
                "1",
                "--head",
                "2",
                "--output",
                str(folder),
                SENTENCE,
            ]
        )
        == 0
    )
    assert sorted(p.name for p in folder.iterdir()) == [
        "attention-encoder-layer1-head2.heatmap.png",
        "attention-encoder-layer1-head2.png",
    ]
    _assert_png(folder / "attention-encoder-layer1-head2.png")


def test_an_existing_picture_is_kept_unless_overwrite(run_folder, tmp_path, capsys):
    heatmap = tmp_path / "kept.heatmap.png"
    heatmap.write_bytes(b"earlier")
    arguments = ["attention", "--model", str(run_folder), "--layer", "1"]
    arguments += ["--output", str(tmp_path / "kept.png"), SENTENCE]
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert "kept.heatmap.png' exists already; give --overwrite" in error
    assert len(error.strip().splitlines()) == 1
    # Refused before anything is drawn: neither picture is written, the earlier one survives.
    assert heatmap.read_bytes() == b"earlier" and not (tmp_path / "kept.png").exists()
    assert main([*arguments[:-1], "--overwrite", SENTENCE]) == 0
    _assert_png(tmp_path / "kept.png")
    _assert_png(heatmap)
