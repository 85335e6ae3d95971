"""Training (paper section 5, and the checkpoint averaging of 6.1). TensorFlow only.

    config.py          TrainingConfig: the YAML/JSON a run is described by, checked up front
    trainer.py         train(config): the entry point of the library, CLI and pipelines
    strategies.py      one device, MirroredStrategy (GPUs or logical CPUs), multi-worker
    accumulation.py    token-exact gradient accumulation over micro-batches and replicas
    training_model.py  TrainingModel: the Transformer wrapped for fit (train/test steps)
    fused_loss.py      the pre-softmax projection and label-smoothed loss over token chunks
    checkpoints.py     crash-safe checkpoints every N minutes/steps, keep the last K
    averaging.py       average_checkpoints: the mean of the last N checkpoints' weights
    callbacks.py       stop at the last step or time limit, NaN guard, TensorBoard logs, history
    dev_bleu.py        DevBleu: dev sacreBLEU each evaluation, keep-best, early stopping
    output_dir.py      OutputDir: the layout of a run folder (what decoding loads)

Example:
    >>> from keras_transformer.training import train
    >>> result = train("configs/multi30k.yaml")  # doctest: +SKIP
    >>> result.output_dir.translation_model  # doctest: +SKIP
    'runs/multi30k_en_de/averaged.keras'
"""

import importlib

# Public names are resolved on first use (PEP 562): `keras_transformer.training.output_dir`,
# which decoding reads to find a run's files, then imports without TensorFlow.
_EXPORTS = {
    "count_real_tokens": "accumulation",
    "group_micro_batches": "accumulation",
    "average_checkpoints": "averaging",
    "NaNGuard": "callbacks",
    "StopAtStep": "callbacks",
    "StopAfterMinutes": "callbacks",
    "TrainingDivergedError": "callbacks",
    "TrainingLogger": "callbacks",
    "CheckpointCallback": "checkpoints",
    "Checkpointer": "checkpoints",
    "list_checkpoints": "checkpoints",
    "model_variables": "checkpoints",
    "CheckpointSettings": "config",
    "CorpusFiles": "config",
    "DataSettings": "config",
    "ScheduleSettings": "config",
    "TrainingConfig": "config",
    "DevBleuSettings": "config",
    "DevBleu": "dev_bleu",
    "OutputDir": "output_dir",
    "fused_projection_loss": "fused_loss",
    "is_chief": "strategies",
    "make_strategy": "strategies",
    "split_cpu": "strategies",
    "TrainingResult": "trainer",
    "load_training_config": "trainer",
    "train": "trainer",
    "TokenMeanLoss": "training_model",
    "TrainingModel": "training_model",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'keras_transformer.training' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"keras_transformer.training.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
