"""What the OPUS-MT importer refuses, and how it writes: one error naming the field and the
value for a model the `Transformer` cannot hold, nothing written on any failure, an existing
run kept unless --overwrite, a clear error for a hub id without network or package."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from keras_transformer.cli import main
from keras_transformer.errors import UserInputError
from keras_transformer.importers import import_checkpoint
from tests._marian_fixtures import marian_folder


def _quiet(line):
    pass


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return marian_folder(tmp_path_factory, activation="swish")


def edited_copy(folder, target, config=None, generation=None, drop=()):
    """A copy of the checkpoint folder (files linked) with config.json and
    generation_config.json fields changed and files left out."""
    target.mkdir()
    for path in folder.iterdir():
        if path.name not in drop:
            os.symlink(path, target / path.name)
    for name, changes in (("config.json", config), ("generation_config.json", generation)):
        if changes:
            values = json.loads((folder / name).read_text())
            values.update(changes)
            (target / name).unlink()
            (target / name).write_text(json.dumps(values))
    return target


REFUSED_CONFIGS = [
    ("normalize_before", True),
    ("normalize_embedding", True),
    ("layernorm_embedding", True),
    ("add_final_layer_norm", True),
    ("static_position_embeddings", False),
    ("add_bias_logits", True),
    ("scale_embedding", False),
    ("decoder_layers", 3),
    ("decoder_attention_heads", 2),
    ("decoder_ffn_dim", 128),
    ("decoder_vocab_size", 60),
    ("encoder_layerdrop", 0.1),
    ("activation_function", "gelu_new"),
    ("model_type", "bart"),
    ("tie_word_embeddings", False),
    ("tie_encoder_decoder", True),
    ("pruned_heads", {"0": [1]}),
    ("is_encoder_decoder", False),
]


@pytest.mark.parametrize(("field", "value"), REFUSED_CONFIGS)
def test_a_model_the_transformer_cannot_hold_is_refused_naming_field_and_value(
    folder, tmp_path, field, value
):
    source = edited_copy(folder, tmp_path / "source", config={field: value})
    with pytest.raises(UserInputError, match=re.escape(f"config.json {field}={json.dumps(value)}")):
        import_checkpoint("marian", source, tmp_path / "run", progress=_quiet)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["source"]  # nothing written


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("no_repeat_ngram_size", 3),
        ("do_sample", True),
        ("min_length", 5),
        ("bad_words_ids", [[53], [7]]),
    ],
)
def test_published_decoding_our_searches_lack_is_refused(folder, tmp_path, field, value):
    source = edited_copy(folder, tmp_path / "source", generation={field: value})
    with pytest.raises(
        UserInputError, match=re.escape(f"generation_config.json {field}={json.dumps(value)}")
    ):
        import_checkpoint("marian", source, tmp_path / "run", progress=_quiet)


def test_decoding_defaults_come_from_generation_config_then_config(folder, tmp_path):
    source = edited_copy(
        folder,
        tmp_path / "source",
        config={"num_beams": 6, "length_penalty": 0.6, "max_length": 77},
        drop=("generation_config.json",),
    )
    run = import_checkpoint("marian", source, tmp_path / "run", progress=_quiet)
    decoding = json.loads((run / "decoding.json").read_text())
    assert decoding == {"beam_size": 6, "length_penalty": "power", "alpha": 0.6, "max_length": 77}


def test_a_missing_file_is_named(folder, tmp_path):
    source = edited_copy(folder, tmp_path / "source", drop=("target.spm", "model.safetensors"))
    with pytest.raises(UserInputError, match="no target.spm, model.safetensors or"):
        import_checkpoint("marian", source, tmp_path / "run", progress=_quiet)


def test_tensors_without_a_place_and_learned_positions_are_refused(folder, tmp_path):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(folder / "model.safetensors"))
    extra = edited_copy(folder, tmp_path / "extra", drop=("model.safetensors",))
    save_file(
        {**tensors, "model.encoder.layernorm_embedding.weight": np.ones(32, "float32")},
        str(extra / "model.safetensors"),
    )
    with pytest.raises(UserInputError, match="no place for: model.encoder.layernorm_embedding"):
        import_checkpoint("marian", extra, tmp_path / "run", progress=_quiet)

    learned = edited_copy(folder, tmp_path / "learned", drop=("model.safetensors",))
    table = np.random.default_rng(0).normal(size=(64, 32)).astype("float32")
    save_file(
        {**tensors, "model.decoder.embed_positions.weight": table},
        str(learned / "model.safetensors"),
    )
    with pytest.raises(UserInputError, match="model.decoder.embed_positions.weight is not"):
        import_checkpoint("marian", learned, tmp_path / "run", progress=_quiet)


def test_an_existing_run_is_kept_unless_overwrite(folder, tmp_path):
    output = tmp_path / "run"
    output.mkdir()
    (output / "mine.txt").write_text("kept")
    with pytest.raises(UserInputError, match="exists already; give a new folder, or --overwrite"):
        import_checkpoint("marian", folder, output, progress=_quiet)
    assert sorted(p.name for p in output.iterdir()) == ["mine.txt"]
    import_checkpoint("marian", folder, output, overwrite=True, progress=_quiet)
    assert not (output / "mine.txt").exists() and (output / "model.keras").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no staging left


def test_cli_imports_prints_progress_and_refuses_a_second_import(folder, tmp_path, capsys):
    output = tmp_path / "run"
    argv = ["import", "--format", "marian", "--model", str(folder), "--output", str(output)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == str(output)
    assert "keras-transformer import: read 86 tensors" in captured.err
    assert f"keras-transformer import: wrote {output}" in captured.err
    assert main(argv) == 2
    assert f"keras-transformer import: error: --output {output} exists already" in (
        capsys.readouterr().err
    )


def test_a_hub_id_without_huggingface_hub_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(UserInputError, match=r"pip install 'keras-nmt-transformer\[hub\]'"):
        import_checkpoint("marian", "Helsinki-NLP/opus-mt-en-de", tmp_path / "run", progress=_quiet)


def test_a_hub_id_offline_and_not_cached_is_one_clear_error(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    result = subprocess.run(
        [sys.executable, "-m", "keras_transformer", "import", "--format", "marian"]
        + ["--model", "Helsinki-NLP/opus-mt-en-de", "--output", str(tmp_path / "run")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("keras-transformer import: error: --model Helsinki-NLP/opus-mt-en-de")
    assert "HF_HUB_OFFLINE is set" in last and "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


def test_a_path_that_is_neither_folder_nor_hub_id_is_refused(tmp_path):
    with pytest.raises(UserInputError, match="no such folder, and not a hub id"):
        import_checkpoint("marian", tmp_path / "missing" / "x", tmp_path / "run", progress=_quiet)
    with pytest.raises(UserInputError, match="unknown checkpoint format 'fairseq'"):
        import_checkpoint("fairseq", tmp_path, tmp_path / "run", progress=_quiet)


def test_the_importers_documented_examples_run():
    import doctest

    from keras_transformer import importers
    from keras_transformer.importers import _common, marian

    for module in (importers, _common, marian):
        assert doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed == 0


def test_cli_help_shows_an_example(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["import", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "example:\n  keras-transformer import --format marian --model Helsinki-NLP/" in out
    assert "--overwrite" in out and "HF_HUB_OFFLINE" in out
