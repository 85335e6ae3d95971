"""The decoders that `decode_throughput` compares on the same random weights: ours (compiled,
with its key/value cache), ours without the cache, keras-hub's `BeamSampler` over our cached
`decode_step`, and CTranslate2 on the spec `export_ctranslate2` builds from our weights; each
forced to one output length so that untrained weights give comparable runs.

Example:
    >>> model = build("small", 8000)  # doctest: +SKIP
    >>> run = ours(model, beam_size=4, output_length=25, source_length=25)  # doctest: +SKIP
"""

import os

import numpy as np

THREADS = int(os.environ.get("DECODE_THREADS", "2"))


CONFIGS = {
    "tiny": dict(num_layers=1, d_model=64, d_ff=128, num_heads=4),  # for tests
    "small": dict(num_layers=3, d_model=256, d_ff=1024, num_heads=4),
    "base": dict(num_layers=6, d_model=512, d_ff=2048, num_heads=8),
}


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


def ours(model, beam_size, output_length, source_length, compile=True):
    from keras_transformer.decoding import BeamSearch, as_decoder
    from keras_transformer.decoding.compiled import compile_search

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
    from keras_transformer.decoding.compiled import compile_search

    decoder = NoCacheDecoder(model)
    search = BeamSearch(
        beam_size=beam_size,
        alpha=0.6,
        max_extra_length=output_length - source_length,
        min_length=output_length,
    )
    return compile_search(lambda s: tuple(search(decoder, s)), decoder)


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
