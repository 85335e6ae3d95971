"""lazy_exports: a package's public names imported on first use."""

import subprocess
import sys

import pytest


def test_a_name_is_imported_on_first_use_and_kept():
    # A fresh interpreter: this process may have imported the module already.
    code = (
        "import sys; import keras_transformer.runs as runs; "
        "assert 'keras_transformer.runs.layout' not in sys.modules; "
        "layout_class = runs.OutputDir; "
        "assert 'keras_transformer.runs.layout' in sys.modules; "
        "assert vars(runs)['OutputDir'] is layout_class; "
        "assert 'keras_transformer.runs.checkpoints' not in sys.modules; "
        "print(layout_class.__module__)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "keras_transformer.runs.layout"


def test_a_sibling_package_s_module_resolves():
    from keras_transformer import training
    from keras_transformer.runs.layout import OutputDir

    assert training.OutputDir is OutputDir  # "..runs.layout", relative to the package


def test_an_unknown_name_is_an_attribute_error():
    import keras_transformer.runs as runs

    with pytest.raises(AttributeError, match="'keras_transformer.runs' has no attribute 'Nothing'"):
        runs.Nothing  # noqa: B018
    assert "OutputDir" in runs.__all__ and runs.__all__ == sorted(runs.__all__)
