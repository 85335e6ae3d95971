"""MkDocs hook: the configuration reference page, made from the config code at build time.

`configuration.md` is not a file in docs/: it is generated on each build by
`keras_transformer.training.config.reference_markdown()`, so the reference cannot fall behind
the dataclasses it describes (their fields, types, defaults and docstrings).
"""

from mkdocs.structure.files import File

REFERENCE_PAGE = "configuration.md"


def on_files(files, config):
    from keras_transformer.training.config import reference_markdown

    files.append(File.generated(config, REFERENCE_PAGE, content=reference_markdown()))
    return files
