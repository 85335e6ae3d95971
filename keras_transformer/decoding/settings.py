"""The valid range of each decoding setting, and the one error for a value outside it.

One rule for every entry point: `Translator` / `translate()`, the `translate` and `evaluate`
commands and the exported SavedModel (whose graph asserts the same ranges and answers a bad
request with InvalidArgument). A value outside its range is an error that names the setting,
the value and the range; nothing is clamped, so a request never silently gets a search other
than the one it asked for.

- `beam_size`: an integer in [1, max_beam_size]; `max_beam_size` is the widest beam
  compiled into a SavedModel (no upper bound in Python).
- `alpha`: a finite number in [0, 10]: the early exit of beam search needs alpha >= 0, and
  lp = ((5 + |Y|) / 6) ** alpha stays finite in float32 for outputs up to 40000 tokens.
- `max_extra_length`: an integer in [0, 65536]: the output cap is min(source length + this,
  the model's max_length), so larger values change nothing but could overflow int32.
- `num_hypotheses`: an integer in [1, beam_size].
- `top_p`: a finite number in (0, 1]: sampling keeps the smallest set of most probable tokens
  whose mass reaches top_p, which is empty for 0; 1 keeps every token (plain sampling).
- `batch_tokens`: an integer of at least 1, the padded source tokens of one inference batch
  (`keras_transformer.decoding.batches`); Python only, a SavedModel takes whole batches.
- `length_penalty`: one of "gnmt" (the paper's) and "power" (`length_penalty.py`).
- `batch_size`: an integer of at least 1, the most sentences of one inference batch.

`check_translator_settings` adds what only a `Translator` (and the commands that make one)
takes: the search ("beam", "greedy", "sample"), sampling's temperature and top-k, the
too-long policy and the compilation flags. `Translator`, `Translator.load` (before its slow
load) and the `translate` and `evaluate` commands all run it: one error for one setting,
named as the caller names it (`labels`: the commands' flags).

Backend-neutral (plain Python); the SavedModel's graph checks in
`keras_transformer/export/signatures.py` build their messages from `MESSAGE` and `RANGES`.
"""

import math
import numbers

from keras_transformer.errors import UserInputError

MAX_ALPHA = 10.0
# The forms of the length penalty (`keras_transformer.decoding.length_penalty`).
LENGTH_PENALTIES = ("gnmt", "power")
# name -> its allowed values, for settings that are a choice rather than a number.
CHOICES = {"length_penalty": LENGTH_PENALTIES}
# The searches of a `Translator`, and what it does with a source longer than its model takes.
SEARCHES = ("beam", "greedy", "sample")
TOO_LONG_POLICIES = ("truncate", "error")
# The message of a value that is not one of a setting's `CHOICES`.
MESSAGE_CHOICE = "{name}={value} is not a choice: it must be one of {choices}"
MAX_EXTRA_LENGTH = 65536

# name -> (what the value must be, lowest, highest); None: set per call (see `ranges`).
RANGES = {
    "beam_size": ("an integer", 1, None),
    "alpha": ("a finite number", 0.0, MAX_ALPHA),
    "max_extra_length": ("an integer", 0, MAX_EXTRA_LENGTH),
    "num_hypotheses": ("an integer", 1, None),
    "top_p": ("a finite number", 0.0, 1.0),
    "batch_tokens": ("an integer", 1, None),
    "batch_size": ("an integer", 1, None),
}
# Settings whose lowest value is excluded from their range.
LOW_EXCLUSIVE = frozenset({"top_p"})

# The one message; the graph fills `value` (and a `high` that is a tensor) at run time.
MESSAGE = "{name}={value} is out of range: it must be {kind} in [{low}, {high}]"


def ranges(max_beam_size=None, beam_size=None):
    """`RANGES` with the per-call bounds filled in: beam_size <= max_beam_size (unbounded
    when None, written "inf") and num_hypotheses <= beam_size."""
    filled = dict(RANGES)
    filled["beam_size"] = ("an integer", 1, "inf" if max_beam_size is None else max_beam_size)
    filled["num_hypotheses"] = ("an integer", 1, beam_size)
    return filled


# The message of a range without an upper bound.
MESSAGE_AT_LEAST = "{name}={value} is out of range: it must be {kind} of at least {low}"
# The message of a range that excludes its lowest value (`LOW_EXCLUSIVE`).
MESSAGE_LOW_EXCLUSIVE = "{name}={value} is out of range: it must be {kind} in ({low}, {high}]"


def out_of_range_message(name, value, kind, low, high, label=None):
    """The error text; `label` names the input as the caller knows it (e.g. "--beam-size")."""
    if name in LOW_EXCLUSIVE:
        template = MESSAGE_LOW_EXCLUSIVE
    elif high in (None, "inf", math.inf):
        template = MESSAGE_AT_LEAST
    else:
        template = MESSAGE
    return template.format(name=label or name, value=value, kind=kind, low=low, high=high)


def _is_integer(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_decoding_settings(
    beam_size=None,
    alpha=None,
    max_extra_length=None,
    num_hypotheses=None,
    max_beam_size=None,
    labels=None,
    top_p=None,
    batch_tokens=None,
    length_penalty=None,
    batch_size=None,
):
    """Raises `UserInputError` for the first setting outside its range (see the table above).

    Args:
        beam_size: the beam width; each setting given as None is skipped.
        alpha: the length penalty's exponent.
        max_extra_length: output tokens beyond the source length.
        num_hypotheses: the n-best size, checked against `beam_size` when both are given.
        top_p: the nucleus sampling mass.
        batch_tokens: the padded source tokens of an inference batch.
        length_penalty: "gnmt" or "power".
        batch_size: the most sentences of an inference batch.
        max_beam_size: the widest beam allowed (a SavedModel's compiled width), or None.
        labels: optional `{name: label}` to name inputs as the caller does (CLI flags).

    Example:
    >>> check_decoding_settings(beam_size=4, alpha=0.6, max_extra_length=50, num_hypotheses=1)
    >>> check_decoding_settings(beam_size=0)
    Traceback (most recent call last):
    ...
    keras_transformer.errors.UserInputError: beam_size=0 is out of range: it must be an integer of at least 1
    """
    labels = labels or {}
    if length_penalty is not None:
        _choice("length_penalty", length_penalty, LENGTH_PENALTIES, labels)
    values = {
        "beam_size": beam_size,
        "alpha": alpha,
        "max_extra_length": max_extra_length,
        "num_hypotheses": num_hypotheses,
        "top_p": top_p,
        "batch_tokens": batch_tokens,
        "batch_size": batch_size,
    }
    bounds = ranges(max_beam_size, beam_size if _is_integer(beam_size) else None)
    for name, value in values.items():
        if value is None:
            continue
        kind, low, high = bounds[name]
        if high is None:  # num_hypotheses without a beam_size to compare with
            high = "inf"
        if kind == "an integer":
            valid = _is_integer(value) and low <= value <= (math.inf if high == "inf" else high)
        else:
            valid = (
                isinstance(value, numbers.Real)
                and not isinstance(value, bool)
                and math.isfinite(value)
                and (low < value if name in LOW_EXCLUSIVE else low <= value)
                and value <= high
            )
        if not valid:
            raise UserInputError(
                out_of_range_message(name, value, kind, low, high, labels.get(name))
            )


def _choice(name, value, choices, labels):
    """Raises `UserInputError` unless `value` is one of `choices` (`MESSAGE_CHOICE`)."""
    if value not in choices:
        raise UserInputError(
            MESSAGE_CHOICE.format(
                name=labels.get(name, name), value=value, choices=", ".join(choices)
            )
        )


def check_translator_settings(
    search="beam",
    beam_size=4,
    alpha=0.6,
    max_extra_length=50,
    num_hypotheses=1,
    length_penalty="gnmt",
    top_k=0,
    temperature=1.0,
    top_p=1.0,
    batch_size=32,
    batch_tokens=None,
    on_too_long="truncate",
    compile=True,
    jit_compile=False,
    labels=None,
):
    """Raises `UserInputError` for the first setting a `Translator` cannot take: the ranges
    and choices of `check_decoding_settings`, then the search, sampling's temperature and
    top-k (with `search="sample"`), the too-long policy and the compilation flags.

    Args:
        the `Translator` arguments of the same names (defaults: its defaults).
        labels: optional `{name: label}` to name inputs as the caller does (CLI flags;
            "compile" labels `compile=False`, as `--no-compile`).

    Example:
    >>> check_translator_settings(search="greedy", num_hypotheses=1)
    >>> check_translator_settings(search="greedy", num_hypotheses=2)
    Traceback (most recent call last):
    ...
    keras_transformer.errors.UserInputError: num_hypotheses=2 needs beam search, but the search here is 'greedy': use search='beam', or num_hypotheses=1
    """
    labels = labels or {}
    _choice("search", search, SEARCHES, labels)
    _choice("on_too_long", on_too_long, TOO_LONG_POLICIES, labels)
    check_decoding_settings(
        beam_size=beam_size,
        alpha=alpha,
        max_extra_length=max_extra_length,
        num_hypotheses=num_hypotheses,
        top_p=top_p,
        batch_tokens=batch_tokens,
        length_penalty=length_penalty,
        batch_size=batch_size,
        labels=labels,
    )
    if search == "sample":
        if not _is_real(temperature) or not temperature > 0:
            raise UserInputError(
                f"{labels.get('temperature', 'temperature')}={temperature} is out of range: "
                "it must be a finite number > 0"
            )
        if not _is_integer(top_k) or top_k < 0:
            raise UserInputError(
                out_of_range_message("top_k", top_k, "an integer", 0, "inf", labels.get("top_k"))
            )
    if not isinstance(jit_compile, bool):
        raise UserInputError(f"jit_compile must be True or False, got {jit_compile!r}")
    if jit_compile and not compile:
        raise UserInputError(
            f"{labels.get('jit_compile', 'jit_compile=True')} compiles the search with XLA, "
            f"{labels.get('compile', 'compile=False')} runs it eagerly: give one of them"
        )
    if search != "beam" and num_hypotheses != 1:
        if "num_hypotheses" in labels:
            flag = labels["num_hypotheses"]
            fix = f"leave out {labels.get('search', 'search')} {search}, or {flag}"
            named = f"{flag} {num_hypotheses}"
        else:
            fix = "use search='beam', or num_hypotheses=1"
            named = f"num_hypotheses={num_hypotheses}"
        raise UserInputError(f"{named} needs beam search, but the search here is {search!r}: {fix}")


def _is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
