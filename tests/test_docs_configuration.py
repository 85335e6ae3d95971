"""The configuration reference reads without a build, and the config's "complete file" is one.

docs/configuration.md is committed; it must be exactly what `python -m docs.hooks` writes from
the config code today. The "complete file" in the docstring of
`keras_transformer.training.config` must parse as a config and name every key of every section
(the `model` section takes a preset and overrides of `TransformerConfig`, which the reference
lists; the file shows a few).
"""

import dataclasses
import pathlib
import textwrap
import typing

import yaml

from docs import hooks
from keras_transformer.training import config as config_module
from keras_transformer.training.config import CorpusFiles, TrainingConfig

REPO = pathlib.Path(__file__).resolve().parents[1]
COMPLETE_FILE_INTRO = "works too; a key left out takes its default):\n\n"


def test_the_committed_configuration_page_is_current():
    assert hooks.PAGE == REPO / "docs" / "configuration.md"
    assert hooks.PAGE.read_text(encoding="utf-8") == hooks.reference_page(), (
        "docs/configuration.md is stale: run `python -m docs.hooks` and commit it"
    )


def test_the_page_check_notices_a_stale_page(tmp_path, monkeypatch):
    page = tmp_path / "configuration.md"
    monkeypatch.setattr(hooks, "PAGE", page)
    assert not hooks.page_is_current()  # missing
    hooks.main()
    assert hooks.page_is_current()
    page.write_text(page.read_text(encoding="utf-8").replace("`data.seed`", "`data.sed`"))
    assert not hooks.page_is_current()


def section_keys(cls, prefix=""):
    """Every dotted key of a config dataclass; a corpus and the model section count as one."""
    keys = set()
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        key = prefix + field.name
        kind = hints[field.name]
        if dataclasses.is_dataclass(kind) and kind is not CorpusFiles:
            keys |= section_keys(kind, key + ".")
        else:
            keys.add(key)
    return keys


def file_keys(values, prefix=""):
    keys = set()
    for name, value in values.items():
        key = prefix + name
        if isinstance(value, dict) and name not in ("model", "dev"):
            keys |= file_keys(value, key + ".")
        else:
            keys.add(key)
    return keys


def complete_file():
    text = config_module.__doc__.split(COMPLETE_FILE_INTRO, 1)[1].split("\n\n", 1)[0]
    return yaml.safe_load(textwrap.dedent(text))


def test_the_docstrings_complete_file_parses_and_names_every_key():
    values = complete_file()
    config = TrainingConfig.from_dict(values)
    assert config.schedule.tokens_per_update == 25000 and config.data.vocab_size == 8000
    missing = section_keys(TrainingConfig) - file_keys(values)
    assert missing == set(), f"keys the docstring's complete file leaves out: {sorted(missing)}"


def test_a_key_left_out_of_the_complete_file_is_noticed():
    values = complete_file()
    del values["schedule"]["decay"]
    assert section_keys(TrainingConfig) - file_keys(values) == {"schedule.decay"}
