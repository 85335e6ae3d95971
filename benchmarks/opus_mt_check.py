"""How many sentences an imported OPUS-MT model translates exactly as transformers' generate.

For a user with network access: imports a Hugging Face `MarianMTModel` (a hub id such as
`Helsinki-NLP/opus-mt-en-de`, or a local folder) with `keras-transformer import`, then
translates N sentences with our beam search on the imported weights and with transformers'
`generate` on the original ones, and counts the sentences whose output tokens are identical.
Both sides tokenize with transformers' `MarianTokenizer` and decode with the same settings:
the model's published ones (`decoding.json`: beam, length penalty, alpha) unless given, one
sentence at a time, both stopping at the same length (transformers' eos forced at the limit is
off: our searches stop there without one). Not run in CI (it downloads a model); a test runs
it on a tiny local checkpoint.

    python -m benchmarks.opus_mt_check --model Helsinki-NLP/opus-mt-en-de -n 100

Ends with one JSON line: model, sentences, identical, fraction, the settings, and up to five
sentences that differ.
"""

import argparse
import json
import os
import sys
import tempfile

# English sentences for the default check; any file of one sentence a line replaces them.
DEFAULT_SENTENCES = [
    "The cat sat on the mat.",
    "I would like to book a table for two people tonight.",
    "The weather will be cold and rainy tomorrow morning.",
    "Please send me the report before the meeting on Friday.",
    "She has lived in this city for more than ten years.",
    "How much does a ticket to the museum cost?",
    "The new library opens next month near the station.",
    "We need more time to finish the project.",
    "He forgot his keys at the office again.",
    "Children learn languages faster than adults.",
    "The train to Berlin is delayed by twenty minutes.",
    "Could you explain the rules of the game once more?",
]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="a hub id or a local checkpoint folder")
    parser.add_argument("--sentences", metavar="FILE", help="one source sentence a line")
    parser.add_argument("-n", type=int, default=None, help="check the first N sentences")
    parser.add_argument("--output", metavar="RUN", help="keep the imported run here")
    parser.add_argument("--beam-size", type=int, default=None, help="default: decoding.json")
    parser.add_argument("--alpha", type=float, default=None, help="default: decoding.json")
    parser.add_argument(
        "--length-penalty", choices=["power", "gnmt"], default=None, help="default: decoding.json"
    )
    parser.add_argument(
        "--max-extra-length",
        type=int,
        default=50,
        help="output tokens beyond the source length, on both sides (default 50)",
    )
    return parser.parse_args(argv)


def read_sentences(path, limit):
    if path is None:
        sentences = list(DEFAULT_SENTENCES)
    else:
        with open(path, encoding="utf-8") as file:
            sentences = [line.rstrip("\n") for line in file if line.strip()]
    return sentences[:limit] if limit is not None else sentences


def settings_of(run, args):
    """The search settings: the flags given, else the run's decoding.json."""
    with open(os.path.join(run, "decoding.json")) as file:
        published = json.load(file)
    return {
        "beam_size": args.beam_size or published.get("beam_size", 4),
        "length_penalty": args.length_penalty or published.get("length_penalty", "power"),
        "alpha": published.get("alpha", 1.0) if args.alpha is None else args.alpha,
    }


def our_search(model, settings, max_extra_length):
    """`source_ids -> our best output's tokens` (eos included when it ended), one sentence at
    a time. On TensorFlow the search is traced once for sentences of any length (a batch of
    one: nothing padded), as an export's is; elsewhere it runs eagerly."""
    import keras
    import numpy as np

    from keras_transformer.decoding import BeamSearch, greedy_search

    def search(source):
        if settings["beam_size"] == 1:
            result = greedy_search(model, source, max_extra_length=max_extra_length)
        else:
            result = BeamSearch(
                beam_size=settings["beam_size"],
                alpha=settings["alpha"],
                length_penalty=settings["length_penalty"],
                max_extra_length=max_extra_length,
            )(model, source)
        return result.ids[0, 0], result.lengths[0, 0]

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        signature = [tf.TensorSpec([1, None], tf.int32)]
        search = tf.function(search, input_signature=signature, autograph=False)

    def best(source_ids):
        ids, length = search(keras.ops.convert_to_tensor(np.asarray([source_ids], "int32")))
        length = int(keras.ops.convert_to_numpy(length))
        return [int(t) for t in keras.ops.convert_to_numpy(ids)[:length]]

    return best


def theirs(hf, source_ids, settings, cap):
    """transformers' best output's tokens for one sentence, at most `cap` of them."""
    import torch

    with torch.no_grad():
        output = hf.generate(
            input_ids=torch.tensor([source_ids]),
            num_beams=settings["beam_size"],
            length_penalty=settings["alpha"],
            do_sample=False,
            max_length=cap + 1,  # transformers counts the decoder's start token
        )
    tokens = [int(t) for t in output[0, 1:]]
    eos = hf.config.eos_token_id
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens


def check(args, run, folder):
    import torch
    from transformers import MarianMTModel, MarianTokenizer

    from keras_transformer.runs import load_model

    settings = settings_of(run, args)
    if settings["length_penalty"] != "power" and settings["alpha"]:
        raise SystemExit("transformers' generate has only the power length penalty (or alpha 0)")
    model, _ = load_model(run)
    hf = MarianMTModel.from_pretrained(folder, dtype=torch.float32).eval()
    hf.generation_config.forced_eos_token_id = None
    tokenizer = MarianTokenizer.from_pretrained(folder)
    sentences = read_sentences(args.sentences, args.n)
    ours = our_search(model, settings, args.max_extra_length)
    identical, differing = 0, []
    for sentence in sentences:
        source_ids = tokenizer(sentence)["input_ids"]
        cap = min(len(source_ids) + args.max_extra_length, model.config.max_length)
        mine = ours(source_ids)
        reference = theirs(hf, source_ids, settings, cap)
        if mine == reference:
            identical += 1
        elif len(differing) < 5:
            differing.append(
                {
                    "source": sentence,
                    "ours": tokenizer.decode(mine, skip_special_tokens=True),
                    "transformers": tokenizer.decode(reference, skip_special_tokens=True),
                }
            )
    return {
        "model": args.model,
        "sentences": len(sentences),
        "identical": identical,
        "fraction": identical / max(len(sentences), 1),
        **settings,
        "max_extra_length": args.max_extra_length,
        "differing": differing,
    }


def main(argv=None):
    args = parse_args(argv)
    from keras_transformer.importers import import_checkpoint
    from keras_transformer.importers.marian import resolve_source

    def progress(line):
        print(f"# import: {line}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory() as temporary:
        run = args.output or os.path.join(temporary, "run")
        if not (args.output and os.path.isfile(os.path.join(run, "model.keras"))):
            import_checkpoint("marian", args.model, run, progress=progress)
        # transformers reads the same files: the folder, or the importer's hub snapshot.
        record = check(args, run, resolve_source(args.model, progress))
    print(json.dumps(record, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
