"""Public names of a package imported on first use (PEP 562).

Packages whose modules need heavy imports (TensorFlow, Keras) name their public names in one
table and import each module only when a name of it is first asked for: `import
keras_transformer` and the CLI's light commands then pay for nothing they do not use.

Example:
    >>> _EXPORTS = {"OutputDir": "layout"}  # doctest: +SKIP
    >>> __getattr__, __all__ = lazy_exports(__name__, _EXPORTS)  # doctest: +SKIP
"""

import importlib
import sys


def lazy_exports(package, exports):
    """`(__getattr__, __all__)` for `package`, whose public names `exports` maps to the
    modules (relative to `package`) that define them.

    Args:
        package: the package's `__name__`.
        exports: public name -> the module that defines it, relative to `package` as after
            `from .`: "layout", "decoding.beam_search", or "..runs.layout" (a sibling's).

    Returns:
        The module-level `__getattr__` that imports a name's module on first use and keeps the
        name in the package, and the sorted `__all__`.
    """

    def __getattr__(name):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        target = exports[name]
        module = importlib.import_module(
            target if target.startswith(".") else "." + target, package
        )
        value = getattr(module, name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__, sorted(exports)
