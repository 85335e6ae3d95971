"""A search compiled for the current Keras backend: `tf.function` on TensorFlow (and XLA for
one-sentence batches on request), `jax.jit` on JAX, eager elsewhere. What `Translator` runs,
and what the benchmarks and tests time and compare.

Example:
    >>> run = compile_search(lambda s: tuple(BeamSearch()(model, s)), as_decoder(model))  # doctest: +SKIP
    >>> ids, lengths, scores = run(source_ids)  # doctest: +SKIP
"""

import logging

import keras


class _SearchRetracingFilter(logging.Filter):
    """Drops TensorFlow's "triggered tf.function retracing" warning about `Translator._search`
    (and `Translator._score`, bucketed alike).

    Those traces are by design: each `Translator` compiles its own search (its settings are
    constants of the graph), once per source-batch shape, and shapes are bucketed
    (`translation.LENGTH_MULTIPLE`, and row counts under a token budget: `padded_rows`) so that they are
    few; static shapes keep the search's loop simple.
    The warning counts them across Translators and would read as a bug. Any other function's
    retracing warning still shows.
    """

    def filter(self, record):
        message = record.getMessage()
        return not (
            "triggered tf.function retracing" in message
            and ("._search " in message or "._score " in message)
        )


def _quiet_search_retracing():
    logger = logging.getLogger("tensorflow")
    if not any(isinstance(f, _SearchRetracingFilter) for f in logger.filters):
        logger.addFilter(_SearchRetracingFilter())


def compile_search(search_fn, decoder, enabled=True, jit_single=False):
    """`search_fn(source_ids, *extra) -> tuple of tensors`, compiled for the current backend.

    TensorFlow: `tf.function` (the while loop becomes one graph op); with `jit_single`,
    batches of one sentence go through a second `tf.function` compiled with XLA (their shapes
    stay fixed; a larger batch shrinks as its sentences finish, which XLA cannot compile, and
    shrinking pays more: docs/decisions.md#xla-for-one-sentence). JAX: `jax.jit`, with the
    model weights passed as arguments through a `keras.StatelessScope`, so that they are not
    baked into the program as constants. Other backends (and `enabled=False`) run eagerly.

    Example:
    >>> run = compile_search(lambda s: tuple(BeamSearch()(model, s)), as_decoder(model))
    """
    backend = keras.backend.backend()
    if not enabled or backend not in ("tensorflow", "jax"):
        return search_fn
    if backend == "tensorflow":
        import tensorflow as tf

        _quiet_search_retracing()
        # No AutoGraph: the search is keras.ops, its loops and branches explicit ops, as
        # Keras's own exports and train steps; converting its source took most of a process's
        # first trace (docs/decisions.md#no-autograph).
        graph = tf.function(search_fn, autograph=False)
        if not jit_single:
            return graph
        xla = tf.function(search_fn, jit_compile=True, autograph=False)
        return lambda source_ids, *extra: (xla if len(source_ids) == 1 else graph)(
            source_ids, *extra
        )
    import jax

    variables = list(getattr(decoder, "variables", []))

    def stateless(values, *args):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return search_fn(*args)

    jitted = jax.jit(stateless)
    return lambda *args: jitted([variable.value for variable in variables], *args)
