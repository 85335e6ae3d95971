"""Decoding an OPUS-MT model: ours against Hugging Face transformers' `generate`, the tool
OPUS-MT users run today, on the same imported weights.

A `MarianMTModel` of opus-mt-en-de's size (d_model 512, 6 + 6 layers, 8 heads, d_ff 2048,
swish, a 58,101-token vocabulary, `final_logits_bias`) with random weights goes through the
importer (`keras_transformer.importers.marian`) into our model. Both sides then decode the
same random source ids at beam 4, alpha 0, with the output forced to one length (eos
forbidden before it, hypotheses cut at it; transformers: `min_new_tokens` = `max_new_tokens`,
no forced eos), so untrained weights give runs of equal work, at batch 32 and batch 1.

Each side runs in its best mode, float32 on `DECODE_THREADS` threads (default 2):

- ours: the compiled search (`tf.function` over the `keras.ops` beam search with its
  key/value cache); batch 1 also with XLA (`jit_compile`, as `translate --jit-compile`);
- transformers: `generate` under `torch.inference_mode`, with its key/value cache.

The JSON line gives sentences/s of each, our ratio to transformers, and the share of
sentences whose best output is identical (the same model and search on both sides: near 1.0).

    python -m benchmarks.decode_transformers                 # batch 32 and 1, 25 tokens
    python -m benchmarks.decode_transformers --batch-sizes 8 --vocab-size 8000 --repeats 1

Needs the bench extra (`pip install -e ".[bench]"`: torch, transformers); without
transformers it prints one line and exits.
"""

import argparse
import functools
import json
import sys

import numpy as np

from benchmarks.common import (
    best_seconds,
    importable_peers,
    machine_line,
    machine_record,
    set_tensorflow_threads,
    source_commit,
)
from benchmarks.decode_peers import THREADS, random_sources

# opus-mt-en-de's config.json, less its vocabulary size (an argument).
OPUS_MT_EN_DE = dict(
    d_model=512,
    encoder_layers=6,
    decoder_layers=6,
    encoder_attention_heads=8,
    decoder_attention_heads=8,
    encoder_ffn_dim=2048,
    decoder_ffn_dim=2048,
    activation_function="swish",
    max_position_embeddings=512,
    scale_embedding=True,
    share_encoder_decoder_embeddings=True,
    eos_token_id=0,
    forced_eos_token_id=0,
    dropout=0.0,
    attention_dropout=0.0,
    activation_dropout=0.0,
)


# The widths of each --size: opus-mt-en-de's, and a tiny one for tests.
SIZES = {
    "opus-mt-en-de": {},
    "tiny": dict(
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
    ),
}


def marian_model(vocab_size, size="opus-mt-en-de", seed=0):
    """A random `MarianMTModel` of opus-mt-en-de's widths (or `size`'s), `<pad>` last as in OPUS-MT; its
    `final_logits_bias` random too (transformers initialises it to zeros)."""
    import torch
    from transformers import MarianConfig, MarianMTModel

    torch.manual_seed(seed)
    pad = vocab_size - 1
    config = MarianConfig(
        vocab_size=vocab_size,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        **{**OPUS_MT_EN_DE, **SIZES[size]},
    )
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 0.5)
    return model


def import_into_ours(hf_model):
    """Our `Transformer` holding `hf_model`'s weights, through the importer's own mapping."""
    from keras_transformer.importers._common import build_model
    from keras_transformer.importers.marian import map_weights, transformer_config

    config = transformer_config(hf_model.config.to_dict(), {"<unk>": 1})
    checkpoint = {
        name: tensor.detach().float().numpy() for name, tensor in hf_model.state_dict().items()
    }
    return build_model(config, map_weights(checkpoint, config))


def our_search(model, beam_size, output_length, source_length, jit):
    """Our compiled beam search at alpha 0, forced to `output_length` tokens."""
    from keras_transformer.decoding import BeamSearch, as_decoder
    from keras_transformer.decoding.compiled import compile_search

    search = BeamSearch(
        beam_size=beam_size,
        alpha=0.0,
        max_extra_length=output_length - source_length,
        min_length=output_length,
    )
    run = compile_search(lambda s: tuple(search(model, s)), as_decoder(model), jit_single=jit)
    # The best hypothesis' ids, as NumPy (which waits for the computation).
    return lambda sources: np.asarray(run(sources)[0])[:, 0, :output_length]


def transformers_search(hf_model, beam_size, output_length):
    """transformers' `generate` at length penalty 0, forced to `output_length` new tokens."""
    import torch

    pad = hf_model.config.pad_token_id

    def run(sources):
        with torch.inference_mode():
            output = hf_model.generate(
                input_ids=torch.from_numpy(sources.astype("int64")),
                attention_mask=torch.ones(sources.shape, dtype=torch.long),
                num_beams=beam_size,
                length_penalty=0.0,
                do_sample=False,
                min_new_tokens=output_length,
                max_new_tokens=output_length,
                forced_eos_token_id=None,
                bad_words_ids=[[pad]],  # OPUS-MT's generation config; ours never emits pad
            )
        return output[:, 1:].numpy()  # without the decoder's start token

    return run


def measure(runners, sources, repeats):
    """`{label: (best seconds, outputs)}`: each runner's first call compiles, untimed."""
    measured = {}
    for label, run in runners.items():
        outputs = run(sources)
        measured[label] = (
            best_seconds(functools.partial(run, sources), repeats=repeats, warmup=0),
            outputs,
        )
    return measured


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="opus-mt-en-de")
    parser.add_argument("--vocab-size", type=int, default=58101, help="opus-mt-en-de: 58101")
    parser.add_argument("--batch-sizes", default="32,1")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--source-length", type=int, default=25)
    parser.add_argument("--output-length", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=2)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    set_tensorflow_threads(THREADS, inter=1)
    peers, skipped = importable_peers(["ours", "transformers"], {"transformers": "transformers"})
    machine = machine_record(["tensorflow", "keras", "torch", "transformers"])
    commit = source_commit()
    print(machine_line(machine, THREADS))
    rows = []
    if "transformers" in peers:
        import torch

        torch.set_num_threads(THREADS)
        hf_model = marian_model(args.vocab_size, args.size)
        model = import_into_ours(hf_model)
        print(
            f"# {args.size} widths, vocab {args.vocab_size}, beam {args.beam_size}, alpha 0, "
            f"{args.source_length} source and {args.output_length} output tokens, fp32; best "
            f"of {args.repeats} runs after one that compiles"
        )
        print(f"{'batch':>5} {'decoder':28} {'sent/s':>8} {'x transformers':>14} {'identical':>9}")
        for batch_size in [int(x) for x in args.batch_sizes.split(",")]:
            rows += _batch_rows(args, model, hf_model, batch_size)
    print(
        json.dumps(
            {
                "benchmark": "decode_transformers",
                **machine,
                "size": args.size,
                "commit": commit,
                "threads": THREADS,
                "beam_size": args.beam_size,
                "vocab_size": args.vocab_size,
                "source_length": args.source_length,
                "output_length": args.output_length,
                "results": rows,
                "skipped_peers": skipped,
            }
        )
    )
    return 0


def _batch_rows(args, model, hf_model, batch_size):
    sources = random_sources(batch_size, args.source_length, args.vocab_size - 1)
    sources[:, -1] = hf_model.config.eos_token_id
    runners = {
        "transformers generate": transformers_search(hf_model, args.beam_size, args.output_length),
        "ours (tf.function)": our_search(
            model, args.beam_size, args.output_length, args.source_length, jit=False
        ),
    }
    if batch_size == 1:
        runners["ours (tf.function, XLA)"] = our_search(
            model, args.beam_size, args.output_length, args.source_length, jit=True
        )
    measured = measure(runners, sources, args.repeats)
    reference_seconds, reference_outputs = measured["transformers generate"]
    rows = []
    for label, (seconds, outputs) in measured.items():
        row = dict(
            batch_size=batch_size,
            decoder=label,
            seconds=round(seconds, 5),
            sentences_per_second=round(batch_size / seconds, 2),
            vs_transformers=round(reference_seconds / seconds, 3),
            identical=float(np.mean(np.all(outputs == reference_outputs, axis=1))),
        )
        print(
            f"{batch_size:>5} {label:28} {row['sentences_per_second']:>8.2f} "
            f"{row['vs_transformers']:>14.2f} {row['identical']:>9.0%}",
            flush=True,
        )
        rows.append(row)
    return rows


if __name__ == "__main__":
    sys.exit(main())
