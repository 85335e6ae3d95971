"""The benchmarks' optional peers: one that is not installed is skipped with one line.

The peers (PyTorch, CTranslate2, keras-hub) are measured against, not used, by
keras-transformer; `pip install -e ".[bench]"` installs every one. A benchmark asks
`importable_peers` which of the peers it was told to run can be imported, runs those, and
records the others (with the reason) under `"skipped_peers"` in its JSON line, so that a
result without a peer is never mistaken for a complete one.

Example:
    >>> present, skipped = importable_peers(["ours", "ct2"], {"ct2": "ctranslate2"})
    # skipping peer ct2: No module named 'ctranslate2' (pip install -e ".[bench]" installs ...)
    >>> present, skipped  # doctest: +SKIP
    (['ours'], {'ct2': "No module named 'ctranslate2'"})
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
                print(f"# skipping peer {peer}: {skipped[peer]} ({INSTALL_HINT})", file=stream,
                      flush=True)
                continue
        present.append(peer)
    return present, skipped
