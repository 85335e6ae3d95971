"""A run's decoding defaults: `decoding.json`, the search settings a model was published with.

An imported model (`keras-transformer import`) carries the beam, length penalty and maximum
length its publisher decodes with, e.g. OPUS-MT's `{"beam_size": 4, "length_penalty": "power",
"alpha": 1.0, "max_length": 512}`. `translate`, `evaluate`, `export` and `kt.translate` take
them where the user gives none; a run without the file decodes with the paper's settings.

`max_length` (the longest output, as Hugging Face's `generate` counts it) becomes
`max_extra_length`: outputs are then capped by the model's own `max_length` alone.

Example:
    >>> decoding_defaults("runs/opus-en-de")  # doctest: +SKIP
    {'beam_size': 4, 'length_penalty': 'power', 'alpha': 1.0, 'max_extra_length': 512}
"""

import json
import os

from keras_transformer.errors import UserInputError

# The decoding settings a run was published with (an imported model), which its readers take.
DECODING_FILE = "decoding.json"
# decoding.json key -> the search setting it sets (Translator / export argument).
SETTINGS = {
    "beam_size": "beam_size",
    "length_penalty": "length_penalty",
    "alpha": "alpha",
    "max_length": "max_extra_length",
}


def run_folder_of(path) -> str:
    """The run folder that a model path designates: the folder itself, a `.keras` file's
    folder, or a checkpoint prefix's run (`RUN/checkpoints/ckpt-N`)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return path
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.basename(folder) == "checkpoints":
        return os.path.dirname(folder)
    return folder


def decoding_defaults(path) -> dict:
    """The search settings of `decoding.json` in the run of `path` (see `run_folder_of`), as
    `Translator` arguments; `{}` when the run has none.

    Raises:
        UserInputError: when the file is not a JSON object.
    """
    file = os.path.join(run_folder_of(path), DECODING_FILE)
    if not os.path.isfile(file):
        return {}
    try:
        with open(file, encoding="utf-8") as handle:
            found = json.load(handle)
    except (OSError, ValueError) as error:
        raise UserInputError(f"cannot read {file}: {error}; import the model again") from None
    if not isinstance(found, dict):
        raise UserInputError(f"{file} must hold one JSON object of decoding settings")
    return {SETTINGS[key]: value for key, value in found.items() if key in SETTINGS}


def with_decoding_defaults(path, given: dict, fallback: dict) -> dict:
    """`given` settings, where None taking the run's `decoding.json` value, else `fallback`'s.

    Example:
        >>> with_decoding_defaults("runs/ende", {"beam_size": None}, {"beam_size": 4})  # doctest: +SKIP
        {'beam_size': 4}
    """
    defaults = decoding_defaults(path) if path is not None else {}
    settings = {}
    for name, value in given.items():
        if value is None:
            value = defaults.get(name, fallback.get(name))
        if value is not None:
            settings[name] = value
    return settings
