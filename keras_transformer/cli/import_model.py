"""`keras-transformer import`: a pretrained checkpoint of another toolkit as a run folder.

The run folder (`--output`) is an ordinary one: `translate`, `score`, `evaluate`,
`attention`, `export` and `train --init-from` take it, with the decoding defaults the model
was published with (`decoding.json`). Nothing is written until every check has passed, and an
existing folder is kept unless `--overwrite`.
"""

import sys

HELP = "import a pretrained checkpoint (OPUS-MT / Marian) as a run folder"
EXAMPLE = (
    "keras-transformer import --format marian --model Helsinki-NLP/opus-mt-en-de "
    "--output runs/opus-mt-en-de"
)


def add_arguments(parser):
    from keras_transformer.importers import FORMATS

    parser.add_argument(
        "--format",
        required=True,
        choices=sorted(FORMATS),
        help="the checkpoint's format: marian (OPUS-MT and other MarianMTModels in the "
        "Hugging Face layout)",
    )
    parser.add_argument(
        "--model",
        required=True,
        metavar="SRC",
        help="a local folder in the Hugging Face layout (config.json, model.safetensors or "
        "pytorch_model.bin, source.spm, target.spm, vocab.json), or a hub id such as "
        "Helsinki-NLP/opus-mt-en-de (needs huggingface_hub: pip install "
        "'keras-nmt-transformer[hub]'; its cache and HF_HUB_OFFLINE are honoured)",
    )
    parser.add_argument(
        "--output", required=True, metavar="RUN", help="the run folder to write (must not exist)"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing RUN (only once the new one is complete)",
    )


def run(args):
    from keras_transformer.importers import import_checkpoint

    def progress(line):
        print(f"keras-transformer import: {line}", file=sys.stderr, flush=True)

    import_checkpoint(
        args.format, args.model, args.output, overwrite=args.overwrite, progress=progress
    )
    print(args.output)
    return 0
