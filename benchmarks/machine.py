"""The machine a benchmark ran on, for its table header and JSON line: results are only
comparable on the same CPU model and flags (benchmarks/README.md records both).

Example:
    >>> model, flags = cpu_description()
    >>> set(flags) <= set(CPU_FLAGS)
    True
"""

import pathlib
import platform

# What decides the speed of our kernels: vector width, fused multiply-add, and the bfloat16
# and int8 instructions oneDNN uses when they are there.
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")


def cpu_description():
    """`(model name, [the flags of CPU_FLAGS it has])` from /proc/cpuinfo (Linux)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    return model, [flag for flag in CPU_FLAGS if flag in flags]
