"""benchmarks/marian_reference.py (a MarianMTModel trained by transformers alone) and the checks
of benchmarks/opus_mt_acceptance.py, on a few sentences of a Multi30k-like corpus."""

import contextlib
import gzip
import io
import json
import math

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from benchmarks import marian_reference, opus_mt_acceptance  # noqa: E402
from tests._marian_fixtures import SOURCE_SENTENCES, TARGET_SENTENCES  # noqa: E402


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A checkpoint folder that marian_reference trained (a d_model 32, 1 + 1 layer model, 200
    steps of 8 pairs), the data folder it read (multi30k/train.* and val.*) and its JSON line."""
    data = tmp_path_factory.mktemp("data")
    (data / "multi30k").mkdir()
    for split in ("train", "val"):
        for side, lines in (("en", SOURCE_SENTENCES), ("de", TARGET_SENTENCES)):
            with gzip.open(data / "multi30k" / f"{split}.{side}.gz", "wt") as file:
                file.write("\n".join(lines) + "\n")
    folder = tmp_path_factory.mktemp("reference") / "marian"
    argv = ["--output", folder, "--data-dir", data, "--steps", 200, "--batch-size", 8,
            "--vocab-size", 40, "--d-model", 32, "--layers", 1]  # fmt: skip
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert marian_reference.main(list(map(str, argv))) == 0
    return folder, data, json.loads(printed.getvalue().strip().splitlines()[-1])


def test_the_reference_is_an_opus_mt_style_checkpoint_that_learned(trained):
    from transformers import MarianMTModel, MarianTokenizer

    folder, _, record = trained
    vocab = json.loads((folder / "vocab.json").read_text())
    assert vocab["</s>"] == 0 and vocab["<unk>"] == 1 and vocab["<pad>"] == len(vocab) - 1
    model = MarianMTModel.from_pretrained(folder)
    assert model.config.activation_function == "swish"
    assert model.config.decoder_start_token_id == model.config.pad_token_id == len(vocab) - 1
    # 200 steps on 8 sentences fall well below a uniform guess over the vocabulary.
    assert (
        record["steps"] == 200
        and record["d_model"] == 32
        and record["last_loss"] < 0.5 * math.log(len(vocab))
    )
    tokenizer = MarianTokenizer.from_pretrained(folder)
    assert tokenizer(SOURCE_SENTENCES[0])["input_ids"][-1] == 0  # eos appended


def test_the_reference_folder_is_never_overwritten(trained):
    folder, data, _ = trained
    with pytest.raises(SystemExit, match="exists"):
        marian_reference.main(["--output", str(folder), "--data-dir", str(data)])


def test_generate_and_ctranslate2_checks_on_the_imported_reference(trained, tmp_path):
    pytest.importorskip("ctranslate2")
    from keras_transformer.importers import import_checkpoint
    from keras_transformer.translation import Translator

    folder, data, _ = trained
    run = tmp_path / "run"
    import_checkpoint("marian", str(folder), str(run), progress=lambda line: None)
    paths = opus_mt_acceptance.dev_text(str(data), 4, str(tmp_path))
    shares = opus_mt_acceptance.against_generate(str(folder), str(run), paths["en"])
    assert set(shares) == {label for label, *_ in opus_mt_acceptance.GENERATE_SETTINGS}
    assert all(share == 1.0 for share in shares.values()), shares
    translator = Translator.load(str(run))
    ct2 = opus_mt_acceptance.ctranslate2_shares(str(run), paths["en"], translator, str(tmp_path))
    # At alpha 0 CTranslate2 decodes as we do. With a length penalty its beam search keeps a
    # fixed number of finished candidates (no early exit) where transformers and we stop once
    # no running beam can win, so it may choose another output: that share is only reported.
    assert ct2["alpha0"] == 1.0 and set(ct2) == {"alpha0", "published"}
