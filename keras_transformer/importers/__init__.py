"""Pretrained checkpoints of other toolkits as ordinary run folders.

`import_checkpoint(format, source, output)` reads a checkpoint, checks that this project's
`Transformer` computes exactly what it computes (refusing, with the field and its value, what
it cannot hold), and writes a run folder that `translate`, `score`, `evaluate`, `export` and
`train --init-from` take. One module per format (`FORMATS`): each defines
`read_checkpoint(source, progress) -> ImportedModel`; writing the run folder is shared
(`keras_transformer.importers._common`).

Example:
    >>> from keras_transformer.importers import import_checkpoint
    >>> import_checkpoint("marian", "Helsinki-NLP/opus-mt-en-de", "runs/opus-mt-en-de")  # doctest: +SKIP
    'runs/opus-mt-en-de'
"""

import importlib

from keras_transformer.errors import UserInputError
from keras_transformer.importers._common import ImportedModel, check_output, write_run

# Format name -> module under keras_transformer.importers.
FORMATS = {"marian": "marian"}


def import_checkpoint(format, source, output, overwrite=False, progress=print):
    """Imports a checkpoint as a run folder.

    Args:
        format: a key of `FORMATS` ("marian": OPUS-MT and other `MarianMTModel`s).
        source: what the format reads (for "marian": a folder in the Hugging Face layout, or a
            hub id such as `Helsinki-NLP/opus-mt-en-de`).
        output: the run folder to write; it must not exist unless `overwrite`.
        overwrite: replace an existing `output` (only once the new run is complete).
        progress: called with one line per stage (`print` by default).

    Returns:
        `output`.

    Raises:
        UserInputError: an unknown format, an existing output, an unreadable source, or a
            model the `Transformer` cannot hold.
    """
    if format not in FORMATS:
        raise UserInputError(
            f"unknown checkpoint format {format!r}; choose one of: {', '.join(FORMATS)}"
        )
    check_output(output, overwrite)  # before any download
    module = importlib.import_module(f"keras_transformer.importers.{FORMATS[format]}")
    imported = module.read_checkpoint(source, progress=progress)
    write_run(imported, output, overwrite=overwrite, progress=progress)
    return output


__all__ = ["FORMATS", "ImportedModel", "import_checkpoint"]
