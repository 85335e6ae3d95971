"""Shared test settings: the TensorFlow backend unless KERAS_BACKEND says otherwise, quiet
TensorFlow logs, and `data_dir` for tests that need ../shared/data (KT_DATA_DIR)."""

import os
import pathlib

import pytest

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)


@pytest.fixture(scope="session")
def data_dir():
    """The shared real data (../shared/data); skips the test with the reason when absent."""
    location = os.environ.get("KT_DATA_DIR")
    if not location:
        pytest.skip("KT_DATA_DIR is not set: point it at ../shared/data to run this test")
    path = pathlib.Path(location)
    if not path.is_dir():
        pytest.skip(f"KT_DATA_DIR={location} is not a directory")
    return path
