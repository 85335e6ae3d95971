"""What every importer shares: the imported model's description, the permutation of the model
dimension, and writing the run folder (all checks first, then one rename into place)."""

import dataclasses
import json
import os
import shutil

import numpy as np

from keras_transformer.errors import UserInputError
from keras_transformer.runs.decoding import DECODING_FILE
from keras_transformer.runs.layout import CONFIG_FILE, FINAL_MODEL_FILE

# The key of `ImportedModel.weights` for the logits bias (`Transformer.output_bias`).
OUTPUT_BIAS = "output_bias"


@dataclasses.dataclass
class ImportedModel:
    """A checkpoint read and checked by an importer, ready to be written as a run folder.

    Args:
        config: the `TransformerConfig` that computes what the checkpoint computes.
        weights: float32 arrays keyed by the `Transformer`'s variable paths (e.g.
            `encoder/layer_0/self_attention/query/kernel`), already in this project's layout
            (kernels `[input, output]`, the model dimension in the paper's order); the logits
            bias under `OUTPUT_BIAS`.
        files: files copied byte for byte into the run folder: run name -> source path.
        decoding: the published decoding defaults, written as `decoding.json`.
        source: what was imported, for progress lines.
    """

    config: object
    weights: dict
    files: dict
    decoding: dict
    source: str


def half_split_to_interleaved(d_model):
    """The permutation `p` of the model dimension with `ours = theirs[..., p]`: their
    positional encoding has the sines of all frequencies in the first half and the cosines in
    the second (Marian, fairseq, tensor2tensor's concatenation), the paper interleaves them
    (sin at 2i, cos at 2i + 1, as `sinusoidal_positional_encoding`).

    Example:
    >>> half_split_to_interleaved(6).tolist()
    [0, 3, 1, 4, 2, 5]
    """
    if d_model % 2:
        raise UserInputError(f"d_model={d_model}: a sinusoidal encoding needs an even width")
    half = d_model // 2
    return np.stack([np.arange(half), np.arange(half, d_model)], axis=1).reshape(-1)


def check_output(output, overwrite):
    """Refuses an existing `output` unless `overwrite`, and an `output` that is a file."""
    output = os.fspath(output)
    if os.path.isfile(output):
        raise UserInputError(f"--output {output} is a file; give a folder for the new run")
    if os.path.exists(output) and not overwrite:
        raise UserInputError(
            f"--output {output} exists already; give a new folder, or --overwrite to replace it"
        )


def build_model(config, weights):
    """A `Transformer` of `config` holding `weights` (see `ImportedModel.weights`); every
    variable must get exactly one array of its shape, and every array must be used."""
    from keras_transformer.model import Transformer

    model = Transformer(config)
    unused = set(weights)
    for variable in model.weights:
        key = OUTPUT_BIAS if OUTPUT_BIAS in variable.path else variable.path
        if key not in weights:
            raise RuntimeError(f"the importer gave no value for the model's {variable.path}")
        value = weights[key]
        if tuple(value.shape) != tuple(variable.shape):
            raise RuntimeError(
                f"{variable.path}: the importer's value is {value.shape}, the model's "
                f"variable {tuple(variable.shape)}"
            )
        variable.assign(value.astype("float32"))
        unused.discard(key)
    if unused:
        raise RuntimeError(f"the model has no variables for the imported {sorted(unused)}")
    return model


def write_run(imported, output, overwrite=False, progress=print):
    """Writes `imported` as a run folder at `output`: `config.json`, `model.keras`, the
    vocabulary files and `decoding.json`. Everything is written into a temporary folder beside
    `output` and renamed into place at the end (`atomic_directory`), so a failure leaves no
    partial run and, with `overwrite`, the old run stays until the new one is complete.

    Returns:
        `output`.
    """
    from keras_transformer.files import atomic_directory

    check_output(output, overwrite)
    model = build_model(imported.config, imported.weights)
    progress(f"built the model: {model.count_params():,} parameters")
    with atomic_directory(output) as staging:
        (staging / CONFIG_FILE).write_text(imported.config.to_json() + "\n")
        model.save(staging / FINAL_MODEL_FILE)
        for name, source in imported.files.items():
            shutil.copyfile(source, staging / name)
        decoding = json.dumps(imported.decoding, indent=2, sort_keys=True)
        (staging / DECODING_FILE).write_text(decoding + "\n")
        check_output(output, overwrite)  # created meanwhile: refused as at the start
    progress(f"wrote {output}")
    return output
