"""The benchmarks' optional peers: one that is not installed is skipped with one line.

The peers (PyTorch, CTranslate2, keras-hub) are measured against, not used, by
keras-transformer; `pip install -e ".[bench]"` installs every one. A benchmark asks
`importable_peers` which of the peers it was told to run can be imported, runs those, and
records the others (with the reason) under `"skipped_peers"` in its JSON line, so that a
result without a peer is never mistaken for a complete one. `speed_ratios` turns one
config's rows into the headline (our best over the best peer) and the matched-mode ratios,
with None wherever a side is missing.

Example (a module that is never installed stands in for a missing peer; the notice goes to
stderr unless told otherwise, here stdout so that doctest sees it):
    >>> present, skipped = importable_peers(
    ...     ["ours", "ct2"], {"ct2": "not_installed_ct2"}, stream=sys.stdout)
    ... # doctest: +ELLIPSIS
    # skipping peer ct2: No module named 'not_installed_ct2' (pip install -e ".[bench]" ...)
    >>> present, skipped
    (['ours'], {'ct2': "No module named 'not_installed_ct2'"})
"""

import importlib
import sys

INSTALL_HINT = 'pip install -e ".[bench]" installs every peer'


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
