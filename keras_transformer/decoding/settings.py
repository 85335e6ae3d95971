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

Backend-neutral (plain Python); the SavedModel's graph checks in
`keras_transformer/export/signatures.py` build their messages from `MESSAGE` and `RANGES`.
"""

import math
import numbers

from keras_transformer.errors import UserInputError

MAX_ALPHA = 10.0
MAX_EXTRA_LENGTH = 65536

# name -> (what the value must be, lowest, highest); None: set per call (see `ranges`).
RANGES = {
    "beam_size": ("an integer", 1, None),
    "alpha": ("a finite number", 0.0, MAX_ALPHA),
    "max_extra_length": ("an integer", 0, MAX_EXTRA_LENGTH),
    "num_hypotheses": ("an integer", 1, None),
    "top_p": ("a finite number", 0.0, 1.0),
    "batch_tokens": ("an integer", 1, None),
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
):
    """Raises `UserInputError` for the first setting outside its range (see the table above).

    Args:
        beam_size, alpha, max_extra_length, num_hypotheses, top_p, batch_tokens: the
            settings; None skips one.
            `num_hypotheses` is checked against `beam_size` when both are given.
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
    values = {
        "beam_size": beam_size,
        "alpha": alpha,
        "max_extra_length": max_extra_length,
        "num_hypotheses": num_hypotheses,
        "top_p": top_p,
        "batch_tokens": batch_tokens,
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
