"""Decoding in reduced precision: a model's weights cast to bfloat16 for inference.

An opt-in option, not shown to pay (docs/decisions.md#bfloat16-decoding); refused on CPUs
without AVX512-BF16 or AMX, where TensorFlow's bfloat16 matmul runs at a fraction of its
float32 rate (benchmarks/README.md, train_throughput). int8 is not offered: CTranslate2's
int8 export is the int8 path (docs/decisions.md#no-int8-decoding).
"""

import pathlib

from keras_transformer.errors import UserInputError

PRECISIONS = ("float32", "bf16")
# The CPU flags (/proc/cpuinfo) of the instructions a precision needs to run fast; one is enough.
FAST_FLAGS = {"bf16": ("avx512_bf16", "amx_bf16")}


def cpu_flags(cpuinfo="/proc/cpuinfo"):
    """The flags of the first CPU in `cpuinfo` (Linux), as a frozenset; empty if unreadable."""
    try:
        for line in pathlib.Path(cpuinfo).read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "flags":
                return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def check_precision(precision, flags=None, for_export=False):
    """Raises `UserInputError` for an unknown precision, or one this CPU cannot run fast
    (`flags`: default, this machine's `cpu_flags()`). `for_export`: the message says that the
    machine serving the export needs the instructions too."""
    if precision not in PRECISIONS:
        raise UserInputError(
            f"precision {precision!r} is not one of {', '.join(PRECISIONS)} (for int8, export "
            "to CTranslate2: keras-transformer export --format ctranslate2 --quantization int8)"
        )
    needed = FAST_FLAGS.get(precision)
    if needed is None:
        return
    flags = cpu_flags() if flags is None else flags
    if not any(flag in flags for flag in needed):
        serving = (
            "; the machine that serves the model needs one of them too: export on such a "
            "machine, or"
            if for_export
            else ";"
        )
        raise UserInputError(
            f"precision {precision!r} needs a CPU with {' or '.join(needed)} (without them "
            "bfloat16 products run at a fraction of float32's speed), and this machine's CPU "
            f"has neither{serving} leave --precision out (float32)"
        )


def with_precision(model, precision, flags=None):
    """`model` for decoding at `precision`: itself for float32, else a copy built with the
    "bfloat16" dtype policy holding its weights cast (softmax, layer norm and logits stay
    float32). Checked first with `check_precision`."""
    check_precision(precision, flags)
    if precision == "float32":
        return model
    from keras_transformer.model import Transformer

    cast = Transformer(model.config, dtype="bfloat16", tokenizer=getattr(model, "tokenizer", None))
    cast.set_weights(model.get_weights())
    return cast
