"""The configuration reference: every key of a training config as a Markdown page (key,
type, default, meaning), generated from the dataclasses of `keras_transformer.training.config`
and the Args sections of their docstrings, and `TransformerConfig`'s for `model.*`. The
documentation site builds its configuration page from it (`docs/hooks.py`), so the page
cannot fall behind the code; `python -m keras_transformer.training.config` prints it.

Example:
    >>> "`data.token_budget`" in reference_markdown()
    True
"""

import dataclasses
import inspect
import json
import re
import types
import typing
from typing import Literal, Union

from keras_transformer.config import PRESETS, TransformerConfig
from keras_transformer.training.config import CorpusFiles, TrainingConfig


def reference_markdown():
    """The reference of every key of a training config, as a Markdown page: key (dotted),
    type, default and meaning, read from the dataclasses and the Args sections of their
    docstrings (`TrainingConfig` and its sections, and `TransformerConfig` for `model.*`).

    Example:
        >>> "`data.token_budget`" in reference_markdown()
        True
    """
    lines = [
        "# Configuration",
        "",
        "Every key of a training config: the YAML (or JSON) file that "
        "`keras-transformer train --config FILE` and `TrainingConfig.from_file(FILE)` read, "
        "as the recipes in `configs/` are. Dotted keys are nested sections: `data.token_budget` "
        "is `token_budget` under `data:`. A key left out takes its default; an unknown key or "
        "a value of the wrong type is an error naming the key, before anything trains "
        "(`keras-transformer train --config FILE --check` checks a file without training). "
        "`--set KEY=VALUE` overrides one key from the command line. A string may name an "
        "environment variable as `${NAME}` (`${KT_DATA_DIR}/multi30k/train.en.gz`).",
        "",
        "This page is generated from `keras_transformer.training.config` "
        "(`python -m keras_transformer.training.config` prints it).",
    ]
    sections = [("", "Top level", TrainingConfig)]
    for field in dataclasses.fields(TrainingConfig):
        kind = typing.get_type_hints(TrainingConfig)[field.name]
        if dataclasses.is_dataclass(kind):
            sections.append((field.name, f"`{field.name}`", kind))
    for prefix, title, cls in sections:
        lines += ["", f"## {title}", "", _first_paragraph(cls), ""]
        lines += _table(
            (f"{prefix}.{name}" if prefix else name, kind, default, meaning)
            for name, kind, default, meaning in _documented_fields(cls)
            if not (dataclasses.is_dataclass(kind) and prefix == "")
        )
    lines += ["", "## Corpora: `data.train[]` and `data.dev`", "", _first_paragraph(CorpusFiles)]
    lines += [
        "",
        "Each item of the `data.train` list, and `data.dev`, takes these keys: "
        + ", ".join(f"`data.dev.{f.name}`" for f in dataclasses.fields(CorpusFiles))
        + " for the dev corpus. One training corpus may be written without the list.",
        "",
    ]
    lines += _table(
        (f"data.train[].{name}", kind, default, meaning)
        for name, kind, default, meaning in _documented_fields(CorpusFiles)
    )
    lines += _model_reference()
    return "\n".join(lines) + "\n"


def _model_reference():
    base = PRESETS["base"]
    lines = [
        "",
        "## `model`",
        "",
        "The model: a `TransformerConfig` preset (`model.preset`) and overrides of its fields "
        "(`keras_transformer.config`). The defaults below are the `base` preset's; another "
        "preset brings its own. A preset whose d_k and d_v are d_model / h keeps them so under "
        "a new `d_model` or `num_heads` unless `key_dim` and `value_dim` are given too.",
        "",
    ]
    rows = [
        (
            "model.preset",
            str,
            "base",
            "the preset the other `model.*` keys override: " + ", ".join(f"`{p}`" for p in PRESETS),
        )
    ]
    for name, kind, default, meaning in _documented_fields(TransformerConfig):
        if name == "vocab_size":
            meaning += " Not set here: it is the size of the vocabulary (`data.vocab`, or "
            meaning += "`data.vocab_size` for one trained by the run)."
            default = _Verbatim("the vocabulary's")
        else:
            default = base.get(name, default)
        rows.append((f"model.{name}", kind, default, meaning))
    return lines + _table(rows)


def _documented_fields(cls):
    """`(name, type, default, meaning)` for each field of dataclass `cls`; the meaning is the
    field's line in the Args section of the class docstring."""
    meanings = _args_section(cls)
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if field.name not in meanings:
            raise ValueError(f"{cls.__name__}'s docstring has no Args line for {field.name}")
        default = field.default
        if field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        yield field.name, hints[field.name], default, meanings[field.name]


def _args_section(cls):
    """`{name: text}` of the `Args:` section of `cls`'s docstring (continuation lines
    joined)."""
    meanings, name, inside = {}, None, False
    for line in (inspect.getdoc(cls) or "").splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            inside, name = line.strip() == "Args:", None
            continue
        if not inside:
            continue
        entry = re.match(r"    (\w+): (.*)", line)
        if entry:
            name = entry.group(1)
            meanings[name] = entry.group(2).strip()
        elif name:  # a continuation; a word broken at a hyphen ("Micro-") is joined whole
            joiner = "" if re.search(r"[a-z]-$", meanings[name]) else " "
            meanings[name] += joiner + line.strip()
    return meanings


def _first_paragraph(cls):
    return " ".join(inspect.getdoc(cls).split("\n\n")[0].split())


def _table(rows):
    lines = ["| Key | Type | Default | Meaning |", "| --- | --- | --- | --- |"]
    for key, kind, default, meaning in rows:
        cells = [f"`{key}`", _type_label(kind), _default_label(default), meaning]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return lines


def _type_label(kind):
    origin = typing.get_origin(kind)
    if origin is Literal:
        return " or ".join(f"`{a}`" for a in typing.get_args(kind))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_label(a) for a in typing.get_args(kind))
    if origin is tuple:
        item = typing.get_args(kind)[0]
        return "list of corpora" if item is CorpusFiles else f"list of {_type_label(item)}"
    if kind is type(None):
        return "null"
    if dataclasses.is_dataclass(kind):
        return "corpus" if kind is CorpusFiles else "section"
    return {int: "integer", float: "number", str: "string", bool: "boolean", dict: "mapping"}[kind]


class _Verbatim(str):
    """A default written as it is in the reference, not as a value."""


def _default_label(value):
    if isinstance(value, _Verbatim):
        return str(value)
    if value is dataclasses.MISSING:
        return "required"
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, dict):
        return "`" + json.dumps(value).replace('"', "") + "`"
    return f"`{value}`"


if __name__ == "__main__":
    print(reference_markdown(), end="")
