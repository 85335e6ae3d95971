"""Decoding throughput: beam search on CPU, ours against the peers, on the same weights.

Measures generated target tokens/s and sentences/s at beam 4, batch 32, source length 25, with
the output length forced (eos forbidden before it, hypotheses cut at it) so that untrained
weights give comparable runs. Beside our compiled decoder (`tf.function` over the
`keras.ops.while_loop` beam search with its key/value cache), in the same process and on the
same weights:

- ours without the cache: every step re-runs the decoder over the whole (fixed-size) prefix;
- keras-hub's `BeamSampler` driving the same model's cached `decode_step` (no length
  penalty, and it gathers every cache, the encoder-decoder ones included, at each step);
- CTranslate2, with the `TransformerSpec` that `keras_transformer.export.ctranslate2` builds
  from our weights (pad and bos kept out of its outputs, as ours), forced to the same length
  with min/max decoding lengths.

Also decodes at 25, 50, 100 and 200 tokens to show how our cost grows with the output length.
Ends with one JSON line of every figure. A peer that is not installed is skipped with one line
and listed under "skipped_peers" in the JSON (`pip install -e ".[bench]"` installs every peer).

Threads: `DECODE_THREADS` (default 2) for TensorFlow's intra-op pool and CTranslate2 alike.

Usage (from the repository root):
    python -m benchmarks.decode_throughput                      # small and base, all peers
    python -m benchmarks.decode_throughput --configs small --repeats 1 --peers ours,ct2
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

from benchmarks.common import (
    best_seconds,
    importable_peers,
    machine_line,
    machine_record,
    set_tensorflow_threads,
)

THREADS = int(os.environ.get("DECODE_THREADS", "2"))
CONFIGS = {
    "tiny": dict(num_layers=1, d_model=64, d_ff=128, num_heads=4),  # for tests
    "small": dict(num_layers=3, d_model=256, d_ff=1024, num_heads=4),
    "base": dict(num_layers=6, d_model=512, d_ff=2048, num_heads=8),
}
PEERS = ("ours", "nocache", "kerashub", "ct2")
PEER_MODULES = {"kerashub": "keras_hub", "ct2": "ctranslate2"}


def build(name, vocab_size, seed=0):
    import keras

    from keras_transformer import TransformerConfig, build_model

    keras.utils.set_random_seed(seed)
    config = TransformerConfig(vocab_size=vocab_size, dropout=0.0, max_length=512, **CONFIGS[name])
    return build_model(config)


def random_sources(batch_size, source_length, vocab_size, seed=0):
    rng = np.random.default_rng(seed)
    sources = rng.integers(4, vocab_size, size=(batch_size, source_length)).astype("int32")
    sources[:, -1] = 3  # eos
    return sources


# -- ours -------------------------------------------------------------------------------------


def ours(model, beam_size, output_length, source_length, compile=True):
    from keras_transformer.decoding import BeamSearch, as_decoder
    from keras_transformer.translation import compile_search

    search = BeamSearch(
        beam_size=beam_size,
        alpha=0.6,
        max_extra_length=output_length - source_length,
        min_length=output_length,
    )
    return compile_search(lambda s: tuple(search(model, s)), as_decoder(model), compile)


class NoCacheDecoder:
    """The decoder interface without the key/value cache: each step runs the decoder stack on
    the whole fixed-size prefix buffer and keeps the logits of the current position."""

    def __init__(self, model):
        config = model.config
        self.model = model
        self.vocab_size, self.max_length = config.vocab_size, config.max_length
        self.pad_id, self.bos_id, self.eos_id = config.pad_id, config.bos_id, config.eos_id
        self.variables = list(model.variables)

    def initial_state(self, source_ids, max_length):
        from keras import ops

        memory, memory_mask = self.model.encode(source_ids)
        prefix = ops.full((ops.shape(source_ids)[0], max_length), self.pad_id, "int32")
        return (memory, memory_mask), (prefix,)

    def step(self, token_ids, static, dynamic, step):
        from keras import ops

        memory, memory_mask = static
        (prefix,) = dynamic
        width = ops.shape(prefix)[1]
        prefix = ops.where(ops.arange(width)[None, :] == step, token_ids, prefix)
        hidden = self.model.decoder(
            self.model.target_embedding(prefix), memory, memory_mask=memory_mask
        )
        hidden = ops.take(hidden, ops.expand_dims(step, 0), axis=1)
        logits = ops.cast(self.model.output_projection(hidden, reverse=True), "float32")
        return ops.log_softmax(logits[:, 0], axis=-1), (prefix,)


def ours_without_cache(model, beam_size, output_length, source_length):
    from keras_transformer.decoding import BeamSearch
    from keras_transformer.translation import compile_search

    decoder = NoCacheDecoder(model)
    search = BeamSearch(
        beam_size=beam_size,
        alpha=0.6,
        max_extra_length=output_length - source_length,
        min_length=output_length,
    )
    return compile_search(lambda s: tuple(search(decoder, s)), decoder)


# -- keras-hub ------------------------------------------------------------------------------


def keras_hub_beam_sampler(model, beam_size, output_length, source_length):
    import tensorflow as tf
    from keras import ops
    from keras_hub.samplers import BeamSampler

    sampler = BeamSampler(num_beams=beam_size)
    bos = model.config.bos_id

    def run(source_ids):
        batch_size = ops.shape(source_ids)[0]
        memory, memory_mask = model.encode(source_ids)
        cache = (memory_mask, model.init_cache(memory, output_length))
        prompt = ops.concatenate(
            [
                ops.full((batch_size, 1), bos, "int32"),
                ops.zeros((batch_size, output_length), "int32"),
            ],
            axis=1,
        )

        def next_fn(prompt, cache, index):
            memory_mask, layers = cache
            tokens = ops.slice(prompt, [0, index - 1], [ops.shape(prompt)[0], 1])
            logits, layers = model.decode_step(tokens, memory_mask, layers, index - 1)
            return logits, None, (memory_mask, layers)

        # No stop token: it generates exactly `output_length` tokens.
        return sampler(next_fn, prompt, cache=cache, index=1, stop_token_ids=None)

    return tf.function(run)


# -- CTranslate2 ----------------------------------------------------------------------------


def ctranslate2_model(model, directory):
    """Saves `model` as a CTranslate2 model (the library's converter,
    `keras_transformer.export.ctranslate2`; the sources here carry their eos already) and
    returns its `Translator` and the token of each id."""
    import ctranslate2

    from keras_transformer.export.ctranslate2 import ctranslate2_spec

    tokens = ["<blank>", "<unk>", "<s>", "</s>"] + [
        f"t{i}" for i in range(4, model.config.vocab_size)
    ]
    spec = ctranslate2_spec(model, tokens, add_source_eos=False)
    spec.optimize(quantization=None)
    spec.save(directory)
    return ctranslate2.Translator(
        directory, device="cpu", compute_type="float32", intra_threads=THREADS, inter_threads=1
    ), tokens


def ctranslate2_runner(translator, tokens, beam_size, output_length):
    def run(source_ids):
        batch = [[tokens[i] for i in row if i != 0] for row in source_ids]
        return translator.translate_batch(
            batch,
            beam_size=beam_size,
            max_batch_size=len(batch),
            max_decoding_length=output_length,
            min_decoding_length=output_length,
            length_penalty=0.6,
            return_scores=False,
        )

    return run


def ctranslate2_agrees_with_ours(model, translator, tokens, sources, steps=10):
    """Greedy outputs of CTranslate2 and ours on the same weights: fraction of equal tokens."""
    from keras import ops

    from keras_transformer.decoding import greedy_search

    ids = ops.convert_to_numpy(
        greedy_search(
            model, sources[:4], max_extra_length=steps - sources.shape[1], min_length=steps
        ).ids
    )[:, 0, :steps]
    theirs = translator.translate_batch(
        [[tokens[i] for i in row if i != 0] for row in sources[:4]],
        beam_size=1,
        max_decoding_length=steps,
        min_decoding_length=steps,
    )
    theirs = [[tokens.index(t) for t in r.hypotheses[0][:steps]] for r in theirs]
    matches = sum(
        a == b for row_a, row_b in zip(ids.tolist(), theirs) for a, b in zip(row_a, row_b)
    )
    return matches / sum(len(r) for r in theirs)


# -- timing ----------------------------------------------------------------------------------


def set_thread_environment():
    """Run before TensorFlow and CTranslate2 are imported: both read these at start-up."""
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    # CTranslate2 uses MKL only on Intel CPUs unless told otherwise; on AMD its default DNNL
    # SGEMM was 4-8x slower here. Compare with CTranslate2 at its best.
    os.environ.setdefault("CT2_USE_MKL", "1")


def wait_for(out):
    if isinstance(out, tuple):  # our compiled search: tensors that may still be computing
        np.asarray(out[0])


def time_it(run, sources, repeats):
    """`(best seconds of `repeats` runs, seconds of the first run)`: the first compiles."""
    start = time.perf_counter()
    wait_for(run(sources))
    first = time.perf_counter() - start
    return best_seconds(lambda: run(sources), repeats=repeats, warmup=0, wait=wait_for), first


def trained_model_throughput(args, peers):
    """Beam 4, alpha 0.6, max length input + 50 on real sentences with a trained model:
    `Translator.translate` (length-sorted batches of --batch-size, text in and out) against
    CTranslate2 on the same weights and the same subword pieces."""
    source_file = args.source_file or os.path.join(
        os.environ.get("KT_DATA_DIR", ""), "wmt", "newstest2013.en"
    )
    if not os.path.isfile(source_file):
        print(f"# --trained: {source_file} not found (set KT_DATA_DIR or --source-file)")
        return None
    from keras_transformer import Translator

    with open(source_file, encoding="utf-8") as file:
        lines = [line.rstrip("\n") for _, line in zip(range(args.lines), file)]
    translator = Translator.load(
        args.trained,
        beam_size=args.beam_size,
        alpha=0.6,
        max_extra_length=50,
        batch_size=args.batch_size,
    )
    translator.translate(lines)  # compile every batch shape once
    start = time.perf_counter()
    hypotheses = translator.translate(lines)
    seconds = time.perf_counter() - start
    vocabulary = translator.vocabulary
    generated = sum(len(vocabulary.encode(h)) + 1 for h in hypotheses)  # pieces + eos
    rows = [
        dict(
            decoder="ours (Translator)",
            seconds=round(seconds, 2),
            tokens_per_second=round(generated / seconds, 1),
            sentences_per_second=round(len(lines) / seconds, 2),
        )
    ]
    if "ct2" in peers:
        ct2_translator, tokens = ctranslate2_model(
            translator.model, tempfile.mkdtemp(prefix="ct2-trained-")
        )
        # Cut as the Translator cuts sources longer than the model's maximum.
        keep = translator.model.config.max_length - 1
        pieces = [[tokens[i] for i in vocabulary.encode(line)[:keep]] + ["</s>"] for line in lines]
        longest = max(len(p) for p in pieces)

        def run():
            return ct2_translator.translate_batch(
                pieces,
                beam_size=args.beam_size,
                max_batch_size=args.batch_size,
                length_penalty=0.6,
                max_decoding_length=min(longest + 50, translator.model.config.max_length),
            )

        run()
        start = time.perf_counter()
        outputs = run()
        ct2_seconds = time.perf_counter() - start
        ct2_generated = sum(len(o.hypotheses[0]) + 1 for o in outputs)
        rows.append(
            dict(
                decoder="CTranslate2",
                seconds=round(ct2_seconds, 2),
                tokens_per_second=round(ct2_generated / ct2_seconds, 1),
                sentences_per_second=round(len(lines) / ct2_seconds, 2),
            )
        )
        for row in rows:
            row["sentences_vs_ctranslate2"] = round(
                row["sentences_per_second"] / rows[-1]["sentences_per_second"], 3
            )
    print(f"# trained model {args.trained} on the first {len(lines)} lines of {source_file}")
    for row in rows:
        print(
            f"trained {row['decoder']:22} {row['seconds']:>8.2f} s "
            f"{row['tokens_per_second']:>9.1f} tokens/s {row['sentences_per_second']:>7.2f} "
            f"sent/s {row.get('sentences_vs_ctranslate2', float('nan')):>6.2f}",
            flush=True,
        )
    return {"source_file": source_file, "lines": len(lines), "rows": rows}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="small,base")
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--source-length", type=int, default=25)
    parser.add_argument("--lengths", default="25,50")
    parser.add_argument(
        "--scaling-lengths",
        default="25,50,100,200",
        help="output lengths for our cost-vs-length check (small config)",
    )
    parser.add_argument(
        "--nocache-configs",
        default="small",
        help="configs on which to time the no-cache decoder (it is slow)",
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--trained",
        metavar="RUN",
        help="also decode --source-file with this trained model (a training "
        "output_dir or .keras file), ours and CTranslate2",
    )
    parser.add_argument(
        "--source-file",
        default=None,
        help="real sentences for --trained (default: $KT_DATA_DIR/wmt/newstest2013.en)",
    )
    parser.add_argument(
        "--lines",
        type=int,
        default=500,
        help="first lines of --source-file to translate (default: 500)",
    )
    args = parser.parse_args(argv)
    unknown = [peer for peer in args.peers.split(",") if peer not in PEERS]
    if unknown:  # a misspelt peer would otherwise be run by no branch, without a word
        parser.error(f"--peers: unknown {', '.join(unknown)}; choose from {','.join(PEERS)}")

    set_thread_environment()

    set_tensorflow_threads(THREADS, inter=1)
    peers, skipped_peers = importable_peers(args.peers.split(","), PEER_MODULES)
    lengths = [int(x) for x in args.lengths.split(",")]
    results, agreement = [], {}
    machine = machine_record(["tensorflow", "keras", *PEER_MODULES.values()])
    print(machine_line(machine, THREADS))
    print(
        f"# beam {args.beam_size}, batch {args.batch_size}, source length "
        f"{args.source_length}, vocab {args.vocab_size}, fp32; best of {args.repeats} runs "
        "after one that compiles",
        flush=True,
    )
    header = (
        f"{'config':6} {'decoder':22} {'out len':>7} {'tokens/s':>9} {'sent/s':>7} "
        f"{'x ct2':>6} {'warmup s':>8}"
    )
    print(header)
    for name in filter(None, args.configs.split(",")):
        model = build(name, args.vocab_size)
        sources = random_sources(args.batch_size, args.source_length, args.vocab_size)
        ct2 = None
        if "ct2" in peers:
            directory = tempfile.mkdtemp(prefix=f"ct2-{name}-")
            ct2 = ctranslate2_model(model, directory)
            agreement[name] = ctranslate2_agrees_with_ours(model, *ct2, sources)
            print(
                f"# {name}: CTranslate2 greedy tokens equal to ours: {agreement[name]:.0%} "
                "(100%: the conversion is faithful)",
                flush=True,
            )
        for length in lengths:
            runners = {}
            if "ours" in peers:
                runners["ours (tf.function)"] = ours(
                    model, args.beam_size, length, args.source_length
                )
            if "nocache" in peers and name in args.nocache_configs.split(","):
                runners["ours without cache"] = ours_without_cache(
                    model, args.beam_size, length, args.source_length
                )
            if "kerashub" in peers:
                runners["keras-hub BeamSampler"] = keras_hub_beam_sampler(
                    model, args.beam_size, length, args.source_length
                )
            if ct2 is not None:
                runners["CTranslate2"] = ctranslate2_runner(*ct2, args.beam_size, length)
            rows = {}
            for label, run in runners.items():
                seconds, warmup = time_it(run, sources, args.repeats)
                rows[label] = dict(
                    config=name,
                    decoder=label,
                    output_length=length,
                    seconds=round(seconds, 3),
                    warmup_seconds=round(warmup, 2),
                    tokens_per_second=round(args.batch_size * length / seconds, 1),
                    sentences_per_second=round(args.batch_size / seconds, 2),
                )
            reference = rows.get("CTranslate2")
            for row in rows.values():
                if reference:
                    row["vs_ctranslate2"] = round(
                        row["tokens_per_second"] / reference["tokens_per_second"], 3
                    )
                print(
                    f"{row['config']:6} {row['decoder']:22} {length:>7} "
                    f"{row['tokens_per_second']:>9.1f} {row['sentences_per_second']:>7.2f} "
                    f"{row.get('vs_ctranslate2', float('nan')):>6.2f} "
                    f"{row['warmup_seconds']:>8.1f}",
                    flush=True,
                )
                results.append(row)
    scaling = []
    if args.scaling_lengths and "ours" in peers:
        model = build("small", args.vocab_size)
        sources = random_sources(args.batch_size, args.source_length, args.vocab_size)
        ct2 = None
        if "ct2" in peers:
            ct2 = ctranslate2_model(model, tempfile.mkdtemp(prefix="ct2-scaling-"))
        print("# cost against output length (small): milliseconds per generated token")
        for length in [int(x) for x in args.scaling_lengths.split(",")]:
            runners = {"ours": ours(model, args.beam_size, length, args.source_length)}
            if ct2 is not None:
                runners["CTranslate2"] = ctranslate2_runner(*ct2, args.beam_size, length)
            for label, run in runners.items():
                seconds, _ = time_it(run, sources, 1)
                per_token = seconds / (args.batch_size * length)
                scaling.append(
                    dict(
                        decoder=label,
                        output_length=length,
                        seconds=round(seconds, 3),
                        ms_per_token=round(1000 * per_token, 3),
                    )
                )
                print(
                    f"small  {label:22} {length:>7} {seconds:>8.2f} s  "
                    f"{1000 * per_token:.3f} ms/token",
                    flush=True,
                )
    trained = trained_model_throughput(args, peers) if args.trained else None
    print(
        json.dumps(
            {
                "benchmark": "decode_throughput",
                **machine,
                "threads": THREADS,
                "batch_size": args.batch_size,
                "beam_size": args.beam_size,
                "source_length": args.source_length,
                "vocab_size": args.vocab_size,
                "ct2_greedy_agreement": agreement,
                "results": results,
                "scaling": scaling,
                "trained": trained,
                "skipped_peers": skipped_peers,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
