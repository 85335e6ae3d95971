"""What every benchmark shares: its environment, the machine it ran on, its optional peers,
the best-of-N timing loop, and child processes that run a benchmark module.

Standard library only at import time: `tf_serving_compat` runs this package in a side
environment that holds nothing but TensorFlow, and `serving_soak`'s server process must not
import keras_transformer.

Peers (PyTorch, CTranslate2, keras-hub) are measured against, not used, by keras-transformer;
`pip install -e ".[bench]"` installs every one. A benchmark asks `importable_peers` which of
the peers it was told to run can be imported, runs those, and records the others (with the
reason) under `"skipped_peers"` in its JSON line, so that a result without a peer is never
mistaken for a complete one.

Example (a module that is never installed stands in for a missing peer; the notice goes to
stderr unless told otherwise, here stdout so that doctest sees it):
    >>> present, skipped = importable_peers(
    ...     ["ours", "ct2"], {"ct2": "not_installed_ct2"}, stream=sys.stdout)
    ... # doctest: +ELLIPSIS
    # skipping peer ct2: No module named 'not_installed_ct2' (pip install -e ".[bench]" ...)
    >>> present, skipped
    (['ours'], {'ct2': "No module named 'not_installed_ct2'"})
    >>> model, flags = cpu_description()
    >>> set(flags) <= set(CPU_FLAGS)
    True
"""

import importlib
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]  # the repository: where `benchmarks` imports
INSTALL_HINT = 'pip install -e ".[bench]" installs every peer'
# What decides the speed of our kernels: vector width, fused multiply-add, and the bfloat16
# and int8 instructions oneDNN uses when they are there.
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")


def set_environment_defaults():
    """The TensorFlow backend and quiet TensorFlow logs, unless the caller's environment says
    otherwise; run by `import benchmarks`, before any benchmark imports Keras."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


# -- the machine -------------------------------------------------------------------------------


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


def versions(names=("tensorflow", "keras")):
    """`{"python": V, name: V, ...}` for the named modules that import (the others left out)."""
    found = {"python": platform.python_version()}
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        found[name] = getattr(module, "__version__", "?")
    return found


def machine_record(names=("tensorflow", "keras")):
    """The machine fields of every benchmark's JSON line: results are only comparable on the
    same CPU model and flags."""
    cpu, flags = cpu_description()
    return {
        "cpu": cpu,
        "cpu_flags": flags,
        "cpus": os.cpu_count(),
        "arch": platform.machine(),
        "versions": versions(names),
    }


def machine_line(record, threads=None):
    """One header line for a benchmark's table, from `machine_record()`."""
    flags = " ".join(record["cpu_flags"]) or "none of " + " ".join(CPU_FLAGS)
    thread_note = "" if threads is None else f", threads {threads}"
    packages = ", ".join(f"{name} {version}" for name, version in record["versions"].items())
    return (
        f"machine: {record['cpu']} ({record['arch']}, {record['cpus']} CPUs; flags: {flags})"
        f"{thread_note}; {packages}"
    )


# -- peers -------------------------------------------------------------------------------------


def trained_search_parser(description, lines):
    """The arguments of a benchmark that runs `Translator.translate` of a trained model on
    real sentences: `--trained`, `--source-file`, `--lines` (default `lines`), and the search's
    `--beam-size`, `--alpha` and `--batch-size`."""
    import argparse

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--trained", required=True, help="a run folder or .keras file")
    parser.add_argument("--source-file", required=True, help="one sentence per line")
    parser.add_argument("--lines", type=int, default=lines)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.0)
    parser.add_argument("--batch-size", type=int, default=32)
    return parser


def set_tensorflow_threads(intra, inter=None, stream=None):
    """Sets TensorFlow's thread pools, or, where TensorFlow already started in this process
    (a benchmark called from a test), says in one line that its pools stay as they are."""
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(intra)
        if inter is not None:
            tf.config.threading.set_inter_op_parallelism_threads(inter)
    except RuntimeError:
        print(
            "# TensorFlow already started in this process: its thread pools stay as they are",
            file=stream or sys.stderr,
        )


def importable_peers(requested, modules, stream=None):
    """Splits `requested` peers into those whose module imports and those that do not.

    Args:
        requested: peer names, in the order the benchmark runs them.
        modules: peer name -> the module it needs (`"ctranslate2"`); a peer not in it (ours)
            needs nothing optional.
        stream: where the one-line notice of each skipped peer goes (default: stderr).

    Returns:
        `(present, skipped)`: the importable peers in order, and `{peer: reason}` for the
        others, ready for the JSON line.
    """
    stream = sys.stderr if stream is None else stream
    present, skipped = [], {}
    for peer in requested:
        module = modules.get(peer)
        if module is not None:
            try:
                importlib.import_module(module)
            except ImportError as error:  # missing, or installed but broken (a shared library)
                skipped[peer] = str(error).splitlines()[0] if str(error) else type(error).__name__
                print(
                    f"# skipping peer {peer}: {skipped[peer]} ({INSTALL_HINT})",
                    file=stream,
                    flush=True,
                )
                continue
        present.append(peer)
    return present, skipped


def speed_ratios(rows, matched, ours="ours"):
    """Our best row over the best peer row, and ours over each peer in a matched mode.

    One config and one precision: only rows of the same numerics are compared. A row whose
    `tokens_per_s` is None (it failed, or its peer was skipped) takes part in nothing, and a
    ratio that lacks a side is None, so that a missing peer never reads as a win.

    Args:
        rows: dicts with `system` (`ours` or a peer), `mode` and `tokens_per_s`.
        matched: `(peer, peer_mode, our_mode)` triples: the modes that do the same kind of
            execution on both sides (e.g. `("torch", "compile", "xla_on")`: both compiled).
        ours: the system name of our rows.

    Returns:
        `{"over_best_peer": R, "ours_best": MODE, "best_peer": "PEER MODE",
        "matched": {"PEER/MODE": R}}` with ratios of tokens/s rounded to 3 decimals.

    Example:
    >>> rows = [{"system": "ours", "mode": "xla_off", "tokens_per_s": 300.0},
    ...         {"system": "ours", "mode": "xla_on", "tokens_per_s": 360.0},
    ...         {"system": "torch", "mode": "eager", "tokens_per_s": 200.0},
    ...         {"system": "torch", "mode": "compile", "tokens_per_s": 400.0}]
    >>> ratios = speed_ratios(rows, [("torch", "eager", "xla_off"),
    ...                              ("torch", "compile", "xla_on")])
    >>> ratios["over_best_peer"], ratios["matched"]
    (0.9, {'torch/eager': 1.5, 'torch/compile': 0.9})
    """

    def rate(system, mode):
        for row in rows:
            if row["system"] == system and row["mode"] == mode:
                return row["tokens_per_s"]
        return None

    def best(candidates):
        candidates = [r for r in candidates if r["tokens_per_s"] is not None]
        return max(candidates, key=lambda r: r["tokens_per_s"]) if candidates else None

    def ratio(numerator, denominator):
        if numerator is None or denominator is None:
            return None
        return round(numerator / denominator, 3)

    best_ours = best(r for r in rows if r["system"] == ours)
    best_peer = best(r for r in rows if r["system"] != ours)
    return {
        "over_best_peer": ratio(
            best_ours and best_ours["tokens_per_s"], best_peer and best_peer["tokens_per_s"]
        ),
        "ours_best": best_ours and best_ours["mode"],
        "best_peer": best_peer and f"{best_peer['system']} {best_peer['mode']}",
        "matched": {
            f"{peer}/{peer_mode}": ratio(rate(ours, our_mode), rate(peer, peer_mode))
            for peer, peer_mode, our_mode in matched
        },
    }


# -- timing ------------------------------------------------------------------------------------


def best_seconds_each(calls, steps=1, repeats=3, warmup=1, wait=None, clock=time.perf_counter):
    """`{name: seconds per call}`: for each of `calls` (`{name: callable}`), the best of
    `repeats` windows of `steps` calls, after `warmup` untimed calls each (tracing,
    compilation, allocation).

    The windows of the calls take turns, so that a machine that slows down or speeds up
    during the run affects every row alike. `wait(result)` is applied to the last result of
    each window, inside it: what blocks until asynchronous work is done (e.g. `np.asarray`).
    `clock` is for tests.
    """

    def window(call):
        started = clock()
        for _ in range(steps):
            result = call()
        if wait is not None:
            wait(result)
        return (clock() - started) / steps

    for call in calls.values():
        for _ in range(warmup):
            result = call()
        if warmup and wait is not None:
            wait(result)
    best = {name: float("inf") for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            best[name] = min(best[name], window(call))
    return best


def best_seconds(call, steps=1, repeats=3, warmup=1, wait=None, clock=time.perf_counter):
    """Seconds per call of `call`: the best of `repeats` windows of `steps` calls after
    `warmup` untimed calls (`best_seconds_each` with one call)."""
    return best_seconds_each({"call": call}, steps, repeats, warmup, wait, clock)["call"]


# -- child processes ---------------------------------------------------------------------------


def module_command(module, *args, python=None):
    """`[python, "-m", module, *args]`: a benchmark module in a fresh interpreter."""
    return [python or sys.executable, "-m", module, *map(str, args)]


def child_environment():
    """This process's environment with the repository first on PYTHONPATH, so that a child
    finds `benchmarks` from any working directory (paths given as arguments stay valid)."""
    environment = dict(os.environ)
    paths = [str(ROOT), *filter(None, environment.get("PYTHONPATH", "").split(os.pathsep))]
    environment["PYTHONPATH"] = os.pathsep.join(paths)
    return environment


def run_module(module, *args, python=None, timeout=None):
    """Runs `python -m module ARGS` and returns its `subprocess.CompletedProcess` (text output
    captured; a timeout raises `subprocess.TimeoutExpired`)."""
    return subprocess.run(
        module_command(module, *args, python=python),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_environment(),
        check=False,
    )


# -- one measurement per child process ---------------------------------------------------------

RESULT_PREFIX = "RESULT "


def print_result(result):
    """A worker's answer to `in_child`: one JSON line after RESULT_PREFIX on stdout."""
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def in_child(module, spec, timeout=None):
    """Runs `python -m module --worker SPEC` (that module's worker for `spec`) in a fresh
    interpreter and returns what it printed with `print_result`; `{"error": ...}` if it died
    or timed out.

    Example:
        >>> in_child("benchmarks.train_throughput", {"kind": "peaks"})  # doctest: +SKIP
    """
    try:
        process = run_module(module, "--worker", json.dumps(spec), timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"stopped after --row-timeout {timeout:g} s"}
    for line in reversed(process.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    if process.returncode < 0:
        return {"error": f"child killed by signal {-process.returncode}"}
    lines = process.stderr.strip().splitlines()
    errors = [line for line in lines if "Error" in line or "error:" in line]
    last = (errors or lines or ["no output"])[-1]
    return {"error": f"child exited with status {process.returncode}: {last}"[:300]}


def best_milliseconds(calls, steps, repeats, wait=None):
    """`{name: best ms per call}`, the windows of the calls taking turns after `steps` warm-up
    calls each (tracing, allocation); `wait` as `best_seconds_each`'s."""
    seconds = best_seconds_each(calls, steps, repeats, warmup=steps, wait=wait)
    return {name: value * 1e3 for name, value in seconds.items()}


def source_commit():
    """The checked-out commit, with "+changes" when the measured code (the library or the
    benchmarks) differs from it; None outside a git checkout."""

    def git(*command):
        return subprocess.run(
            ["git", *command], capture_output=True, text=True, check=False, cwd=ROOT
        ).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return None
    return commit + (
        "+changes"
        if git(
            "status", "--porcelain", "--untracked-files=no", "--", "keras_transformer", "benchmarks"
        )
        else ""
    )
