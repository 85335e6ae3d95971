"""Training (paper section 5, and the checkpoint averaging of 6.1). TensorFlow only.

    config.py          TrainingConfig: the YAML/JSON a run is described by, checked up front
    trainer.py         train(config): the entry point of the library, CLI and pipelines
    strategies.py      one device, MirroredStrategy (GPUs or logical CPUs), multi-worker
    accumulation.py    token-exact gradient accumulation over micro-batches and replicas
    training_model.py  TrainingModel: the Transformer wrapped for fit (train/test steps)
    checkpoints.py     crash-safe checkpoints every N minutes/steps, keep the last K
    averaging.py       average_checkpoints: the mean of the last N checkpoints' weights
    callbacks.py       stop at the last step, NaN guard, TensorBoard logs and history
    dev_bleu.py        DevBleu: dev sacreBLEU each evaluation, keep-best, early stopping
    output_dir.py      OutputDir: the layout of a run folder (what decoding loads)

Example:
    >>> from keras_transformer.training import train
    >>> result = train("configs/multi30k.yaml")  # doctest: +SKIP
    >>> result.output_dir.translation_model  # doctest: +SKIP
    'runs/multi30k/averaged.keras'
"""

from keras_transformer.training.accumulation import count_real_tokens, group_micro_batches
from keras_transformer.training.averaging import average_checkpoints
from keras_transformer.training.callbacks import (
    NaNGuard,
    StopAtStep,
    TrainingDivergedError,
    TrainingLogger,
)
from keras_transformer.training.checkpoints import (
    CheckpointCallback,
    Checkpointer,
    list_checkpoints,
    model_variables,
)
from keras_transformer.training.config import (
    CheckpointSettings,
    CorpusFiles,
    DataSettings,
    DevBleuSettings,
    ScheduleSettings,
    TrainingConfig,
)
from keras_transformer.training.dev_bleu import DevBleu
from keras_transformer.training.output_dir import OutputDir
from keras_transformer.training.strategies import is_chief, make_strategy, split_cpu
from keras_transformer.training.trainer import TrainingResult, load_training_config, train
from keras_transformer.training.training_model import TokenMeanLoss, TrainingModel

__all__ = [
    "CheckpointCallback", "CheckpointSettings", "Checkpointer", "CorpusFiles", "DataSettings",
    "DevBleu", "DevBleuSettings",
    "NaNGuard", "OutputDir", "ScheduleSettings", "StopAtStep", "TokenMeanLoss",
    "TrainingConfig", "TrainingDivergedError", "TrainingLogger", "TrainingModel",
    "TrainingResult", "average_checkpoints", "count_real_tokens", "group_micro_batches",
    "is_chief", "list_checkpoints", "load_training_config", "make_strategy", "model_variables", "split_cpu",
    "train",
]
