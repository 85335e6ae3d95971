"""From a YAML or JSON file to a checked config: reading the file, `${NAME}` environment
variables, `--set KEY=VALUE` overrides and a program's changes, and building the dataclasses
of `keras_transformer.training.config` from nested dicts with every key and type checked.

Written here rather than with pydantic, whose messages speak Python ("a valid tuple") where
these speak YAML ("a list"): docs/decisions.md#config-checking-without-pydantic. Messages
name the dotted key (`data.token_budget`), what was found and what is expected.

Example:
    >>> apply_overrides({"schedule": {"train_steps": 10}}, ["schedule.train_steps=20"])
    {'schedule': {'train_steps': 20}}
"""

import copy
import dataclasses
import json
import os
import re
import types
import typing
from typing import Literal, Union

import yaml

from keras_transformer.errors import UserInputError


def load_config_file(cls, path, overrides=(), changes=None):
    """`cls.from_dict` of a YAML or JSON file with `changes`, then `overrides`, applied and the
    `${NAME}` environment variables put in (`TrainingConfig.from_file`).

    Args:
        cls: the config class (`TrainingConfig`).
        path: the file.
        overrides: `KEY=VALUE` strings (`apply_overrides`).
        changes: `{dotted key: value}` with Python values (`apply_changes`).

    Raises:
        UserInputError: that starts with where the bad value came from: the file, or the
            `--set KEY=VALUE` that gave it.
    """
    path = os.fspath(path)
    values = read_config_file(path)
    try:
        if changes:
            values = apply_changes(values, changes)
        if overrides:
            values = apply_overrides(values, overrides)
        return cls.from_dict(expand_variables(values))
    except UserInputError as error:
        # A value from the command line is named as the user gave it, not as the file's.
        assignments = {a.partition("=")[0]: a for a in overrides}
        given = [
            key
            for key in assignments
            if str(error).startswith(key)
            or re.match(rf"unknown key\(s\) .*\b{re.escape(key)}\b", str(error))
            or _names_field_of_section(str(error), key)
        ]
        where = f"--set {assignments[max(given, key=len)]}" if given else path
        raise UserInputError(f"{where}: {error}") from None


def read_config_file(path):
    """The nested dict of a YAML or JSON config file, as written (no `${NAME}` put in)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise UserInputError(f"training config file {path!r} does not exist; check the path")
    with open(path, encoding="utf-8") as file:
        text = file.read()
    if path.endswith(".json"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise UserInputError(f"{path} is not valid JSON: {error}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise UserInputError(f"{path} is not valid YAML: {error}") from None


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_variables(values, environ=None, key=""):
    """A copy of `values` (nested dicts, lists, strings) with every `${NAME}` in a string
    replaced by the environment variable NAME; an unset or empty one raises `UserInputError`
    naming the key and the variable.

    Example:
        >>> expand_variables({"data": {"vocab": "${HOME_DIR}/v.model"}}, {"HOME_DIR": "/d"})
        {'data': {'vocab': '/d/v.model'}}
    """
    environ = os.environ if environ is None else environ
    if isinstance(values, dict):
        return {
            name: expand_variables(value, environ, f"{key}.{name}" if key else str(name))
            for name, value in values.items()
        }
    if isinstance(values, list):
        return [expand_variables(item, environ, f"{key}[{i}]") for i, item in enumerate(values)]
    if not isinstance(values, str):
        return values

    def value_of(match):
        name = match.group(1)
        if not environ.get(name):
            raise UserInputError(
                f"{key}: the environment variable {name} in {values!r} is not set; set it "
                f"(e.g. `export {name}=...`) or write the path itself"
            )
        return environ[name]

    return _VARIABLE.sub(value_of, values)


def apply_changes(values, changes):
    """A copy of nested dict `values` with `{dotted key: value}` set (values taken as given).

    Example:
        >>> apply_changes({"schedule": {"train_steps": 10}}, {"schedule.warmup_steps": 2})
        {'schedule': {'train_steps': 10, 'warmup_steps': 2}}
    """
    values = copy.deepcopy(values) if isinstance(values, dict) else {}
    for key, value in changes.items():
        _set_dotted(values, key, copy.deepcopy(value), f"{key}={value!r}")
    return values


def _set_dotted(values, key, value, assignment):
    node = values
    parts = key.split(".")
    for depth, part in enumerate(parts[:-1], 1):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if isinstance(child, list):
            raise UserInputError(
                f"override {assignment!r}: {part!r} is a list; set it whole, e.g. "
                f"{'.'.join(parts[:depth])}=[{{source: a.en, target: a.de}}] for a list of "
                "corpora"
            )
        if not isinstance(child, dict):
            raise UserInputError(f"override {assignment!r}: {part!r} is not a section")
        node = child
    node[parts[-1]] = value


def _names_field_of_section(message, key):
    """Whether an error about a section (`model: unknown ... ['dmodel']`) is about the field
    that the dotted `key` (`model.dmodel`) set."""
    section, _, field = key.rpartition(".")
    return (
        bool(section)
        and message.startswith(section + ":")
        and bool(re.search(rf"\b{re.escape(field)}\b", message))
    )


def apply_overrides(values, overrides):
    """A copy of nested dict `values` with `KEY=VALUE` assignments applied (dotted keys).

    Example:
        >>> apply_overrides({"schedule": {"train_steps": 10}}, ["schedule.train_steps=20"])
        {'schedule': {'train_steps': 20}}
    """
    values = copy.deepcopy(values) if isinstance(values, dict) else {}
    for assignment in overrides:
        key, separator, text = assignment.partition("=")
        if not separator or not key:
            raise UserInputError(
                f"override {assignment!r} must look like KEY=VALUE, e.g. schedule.train_steps=200"
            )
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = text
        _set_dotted(values, key, value, assignment)
    return values


def _type_name(kind):
    origin = typing.get_origin(kind)
    if origin is Literal:
        return " or ".join(repr(a) for a in typing.get_args(kind))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(kind))
    if origin in (tuple, tuple):
        return f"a list of {_type_name(typing.get_args(kind)[0])}"
    if kind is type(None):
        return "null"
    if dataclasses.is_dataclass(kind):
        return "a mapping"
    return {
        int: "an integer",
        float: "a number",
        str: "a string",
        bool: "true or false",
        dict: "a mapping",
    }.get(kind, getattr(kind, "__name__", str(kind)))


def _convert(kind, value, key):
    """`value` as `kind`, or raises UserInputError naming `key`."""
    origin = typing.get_origin(kind)
    if origin is Literal:
        if value in typing.get_args(kind) and type(value) is not bool:
            return value
    elif origin in (Union, types.UnionType):
        for option in typing.get_args(kind):
            try:
                return _convert(option, value, key)
            except UserInputError:
                continue
    elif origin in (tuple, tuple):
        item_kind = typing.get_args(kind)[0]
        if isinstance(value, (dict,)) and dataclasses.is_dataclass(item_kind):
            value = [value]  # one corpus may be written without the list
        if isinstance(value, (list, tuple)):
            return tuple(_convert(item_kind, item, f"{key}[{i}]") for i, item in enumerate(value))
    elif kind is type(None):
        if value is None:
            return None
    elif dataclasses.is_dataclass(kind):
        if isinstance(value, dict):
            return build_config(kind, value, key)
    elif kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif kind is str:
        if isinstance(value, str):
            return value
        if isinstance(value, os.PathLike):
            return os.fspath(value)
    elif kind is dict:
        if isinstance(value, dict):
            return dict(value)
    raise UserInputError(
        f"{key} must be {_type_name(kind)}, got {value!r} ({type(value).__name__})"
    )


def build_config(cls, values, prefix=""):
    """An instance of dataclass `cls` from nested dict `values`, every key and type checked.

    Args:
        cls: a dataclass whose fields are typed (`int`, `str | None`, `Literal`, a tuple of
            dataclasses, a nested dataclass, ...).
        values: the mapping, as read from a file (an instance of `cls` is returned as is).
        prefix: the dotted key of `values` in the whole file, for messages ("" at the top).

    Raises:
        UserInputError: naming the dotted key of an unknown, missing or mistyped value.

    Example:
        >>> build_config(DevBleuSettings, {"beam_size": "four"})  # doctest: +SKIP
        UserInputError: beam_size must be an integer, got 'four' (str)
    """
    where = prefix or "the training config"
    if isinstance(values, cls):
        return values
    if not isinstance(values, dict):
        raise UserInputError(
            f"{where} must be a mapping of keys to values, got {type(values).__name__}"
        )
    fields = {field.name: field for field in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        names = ", ".join(f"{prefix}.{k}" if prefix else str(k) for k in unknown)
        raise UserInputError(f"unknown key(s) {names} in {where}; valid keys: {', '.join(fields)}")
    hints = typing.get_type_hints(cls)
    converted = {}
    for name, field in fields.items():
        key = f"{prefix}.{name}" if prefix else name
        if name not in values:
            if (
                field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING
            ):
                raise UserInputError(f"{key} is required in {where}")
            continue
        converted[name] = _convert(hints[name], values[name], key)
    return cls(**converted)
