"""Model FLOPs of a train step and the measured matmul peak they are held against (MFU), on
CPU (TensorFlow and PyTorch) and GPU (JAX and PyTorch).

Example:
    >>> training_flops(6, 512, 2048, 8000, 32, 32) > 0
    True
"""

from benchmarks.common import best_seconds

SLOW_BF16 = 0.25  # bf16 rows of a framework whose bf16 matmul is slower than this x fp32


def training_flops(num_layers, d_model, d_ff, vocab_size, batch, length):
    """3 x forward FLOPs (multiply-add = 2) of one step: projections, feed-forward, attention
    scores and weighted sums, cross-attention, and the output projection."""
    tokens = batch * length
    d, f = d_model, d_ff
    encoder = tokens * 2 * (4 * d * d + 2 * d * f) + 2 * 2 * batch * length * length * d
    decoder = (
        tokens * 2 * (4 * d * d + 2 * d * d + 2 * d * f)  # self Q,K,V,O + cross Q,O + FFN
        + tokens * 2 * 2 * d * d  # cross K,V on the memory
        + 2 * 2 * batch * length * length * d * 2
    )  # self + cross attention
    output = tokens * 2 * d * vocab_size
    return 3 * (num_layers * (encoder + decoder) + output)


def matmul_rate(make_product, size=2048, probe=512, repeats=5, budget_s=5.0):
    """Best FLOP/s of a size x size product; `make_product(n)` returns a callable that runs
    one n x n product (operands made beforehand). A probe size first: when the full size
    would take over `budget_s` a product (a precision without fast kernels on this CPU, e.g.
    PyTorch bfloat16 without AVX512-BF16: under 1 GFLOP/s), the probe's rate is kept."""

    probe_seconds = best_seconds(make_product(probe), repeats=2)
    if probe_seconds * (size / probe) ** 3 > budget_s:
        return 2 * probe**3 / probe_seconds
    return 2 * size**3 / best_seconds(make_product(size), repeats=repeats)


def gpu_matmul_peaks(precisions, use_torch):
    """`({precision: {framework: FLOP/s}}, GPU name)`: 8192 x 8192 products on the GPU, JAX's
    and PyTorch's, fp32 without TF32 (as the fp32 rows run)."""
    import jax
    import jax.numpy as jnp

    def jax_product(dtype):
        def make(n):
            a, b = (jax.random.normal(jax.random.key(i), (n, n), dtype) for i in (1, 2))
            product = jax.jit(lambda a, b: jnp.matmul(a, b, precision="highest"))
            return lambda: product(a, b).block_until_ready()

        return make

    dtypes = {"fp32": "float32", "bf16": "bfloat16"}
    precisions = ["fp32"] + [p for p in precisions if p != "fp32"]
    peaks = {
        p: {"jax": matmul_rate(jax_product(dtypes[p]), size=8192, probe=2048)} for p in precisions
    }
    device = jax.devices()[0].device_kind
    if use_torch:
        import torch

        if torch.cuda.is_available():

            def torch_product(dtype):
                def make(n):
                    a, b = (torch.randn(n, n, device="cuda", dtype=dtype) for _ in range(2))
                    return lambda: (torch.matmul(a, b), torch.cuda.synchronize())

                return make

            for p in precisions:
                peaks[p]["torch"] = matmul_rate(
                    torch_product(getattr(torch, dtypes[p])), size=8192, probe=2048
                )
    return peaks, device


def matmul_peaks(precisions, threads, use_torch):
    """`{precision: {framework: FLOP/s}}` for fp32 and the requested precisions."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    dtypes = {"fp32": "float32", "bf16": "bfloat16"}
    precisions = ["fp32"] + [p for p in precisions if p != "fp32"]  # bf16 is judged by fp32

    def tf_product(dtype):
        def make(n):
            a = tf.cast(tf.random.normal((n, n)), dtype)
            b = tf.cast(tf.random.normal((n, n)), dtype)
            return lambda: float(tf.matmul(a, b)[0, 0])

        return make

    peaks = {p: {"tensorflow": matmul_rate(tf_product(dtypes[p]))} for p in precisions}
    if use_torch:
        import torch

        torch.set_num_threads(threads)

        def torch_product(dtype):
            def make(n):
                a, b = (torch.randn(n, n).to(dtype) for _ in range(2))
                return lambda: torch.matmul(a, b)

            return make

        for p in precisions:
            peaks[p]["torch"] = matmul_rate(torch_product(getattr(torch, dtypes[p])))
    return peaks


def slow_bf16(peaks, framework, threshold=SLOW_BF16):
    """Why `framework`'s bf16 rows are not worth running here, or None: its bfloat16 matmul
    rate is under `threshold` x its float32 rate (no bf16 kernels for this CPU)."""
    try:
        bf16, fp32 = peaks["bf16"][framework], peaks["fp32"][framework]
    except KeyError:
        return None
    if bf16 >= threshold * fp32:
        return None
    return (
        f"{framework}'s bfloat16 matmul runs at {bf16 / 1e9:.1f} GFLOP/s here, under "
        f"{threshold:g} x its float32 {fp32 / 1e9:.1f} (no fast bf16 kernels on this CPU; "
        f"--run-slow-bf16 runs them anyway)"
    )
