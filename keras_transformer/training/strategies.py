"""Distribution strategies: one device, all GPUs of a host, or several hosts (paper 5.2).

The paper trains on one machine with 8 P100 GPUs, each step on a batch of about 25000 source
and 25000 target tokens. Here that is `MirroredStrategy` over the visible GPUs, with a per-
replica token budget; `MultiWorkerMirroredStrategy` (configured by the TF_CONFIG environment
variable) extends it to several hosts. Without GPUs, "mirrored" can split the CPU into
`num_devices` logical devices, which is how the tests check multi-replica training on a laptop.

Logical CPU devices can only be configured before TensorFlow initialises its devices (before
the first op runs), so `make_strategy` must be the first TensorFlow call of a process that
wants them.
"""

import json
import os

import tensorflow as tf

from keras_transformer.errors import UserInputError


def make_strategy(name="auto", num_devices=None):
    """The `tf.distribute.Strategy` called `name`.

    Args:
        name: "auto" (MirroredStrategy over the GPUs when there are two or more, else the
            default one-device strategy), "one_device", "mirrored" or "multi_worker".
        num_devices: for "mirrored": how many GPUs (the first ones), or, without GPUs, how many
            logical CPU devices to create (default: all GPUs; at least 2 logical CPUs are
            needed to mirror on a CPU).

    Returns:
        A strategy; its `num_replicas_in_sync` sets the global batch of the data pipeline.
        The same arguments return the same strategy object for the life of the process.

    Raises:
        UserInputError: when the devices asked for do not exist, TF_CONFIG is missing or
            malformed for "multi_worker", or logical CPUs are asked for too late.

    Example:
        >>> strategy = make_strategy("one_device")
        >>> strategy.num_replicas_in_sync
        1
    """
    key = (name, num_devices)
    if key not in _STRATEGIES:
        _STRATEGIES[key] = _make_strategy(name, num_devices)
    return _STRATEGIES[key]


# One strategy per setting and process: two MirroredStrategy objects over the same devices
# number their collective ops independently, and their all-reduces then collide ("Shape
# mismatch in the collective instance").
_STRATEGIES = {}


def _make_strategy(name, num_devices):
    if name == "one_device":
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    if name == "auto":
        gpus = tf.config.list_logical_devices("GPU")
        if len(gpus) > 1:
            return tf.distribute.MirroredStrategy()
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return _mirrored(num_devices)
    if name == "multi_worker":
        return _multi_worker()
    raise UserInputError(
        f"unknown strategy {name!r}; choose auto, one_device, mirrored or multi_worker"
    )


def _mirrored(num_devices):
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        count = len(gpus) if num_devices is None else num_devices
        if count > len(gpus):
            raise UserInputError(
                f"num_devices={count} but only {len(gpus)} GPU(s) are visible; lower num_devices"
            )
        devices = [f"/gpu:{i}" for i in range(count)]
        return tf.distribute.MirroredStrategy(devices)
    count = num_devices or 1
    if count > 1:
        split_cpu(count)
    devices = [device.name for device in tf.config.list_logical_devices("CPU")][:count]
    return tf.distribute.MirroredStrategy(devices)


def split_cpu(count):
    """Splits the first physical CPU into `count` logical devices (tests, CPU-only hosts).

    Must run before TensorFlow initialises its devices. Calling it again with the same count
    is harmless.

    Raises:
        UserInputError: when TensorFlow is already initialised with another device count.

    Example:
        >>> split_cpu(2)  # first thing in the process  # doctest: +SKIP
    """
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu)
    if current is not None and len(current) == count:
        return
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
        )
    except RuntimeError:
        have = len(tf.config.list_logical_devices("CPU"))
        if have >= count:
            return
        raise UserInputError(
            f"cannot split the CPU into {count} logical devices: TensorFlow is already "
            f"initialised with {have}; create the strategy (keras_transformer.training."
            "make_strategy or train()) before running any TensorFlow op in this process"
        ) from None


def _multi_worker():
    text = os.environ.get("TF_CONFIG")
    if not text:
        raise UserInputError(
            "strategy 'multi_worker' needs the TF_CONFIG environment variable, e.g. "
            '{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
            '"task": {"type": "worker", "index": 0}}, set on each worker with its own index'
        )
    try:
        tf_config = json.loads(text)
        workers = tf_config["cluster"]["worker"]
        tf_config["task"]["index"]
    except (ValueError, KeyError, TypeError) as error:
        raise UserInputError(
            f"TF_CONFIG is not a valid cluster description ({error!r}): it must be JSON with "
            "cluster.worker (a list of host:port) and task.type/task.index"
        ) from None
    if not workers:
        raise UserInputError("TF_CONFIG lists no workers in cluster.worker")
    return tf.distribute.MultiWorkerMirroredStrategy()


def is_chief(strategy):
    """Whether this process writes shared outputs: always, except on non-chief workers.

    Under MultiWorkerMirroredStrategy every worker runs the same program; only the chief
    (worker 0, or the task of type "chief") writes checkpoints, logs and models.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type in (None, "chief"):
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "worker" and task_id == 0 and not has_chief
