"""Benchmarks that compare keras-transformer with its peers; run each from the repository root
as a module, e.g. `python -m benchmarks.train_throughput` (benchmarks/README.md).

Importing the package sets the environment every benchmark expects before Keras or TensorFlow
is imported by a benchmark's own imports (`common.set_environment_defaults`).
"""

from benchmarks.common import set_environment_defaults

set_environment_defaults()
