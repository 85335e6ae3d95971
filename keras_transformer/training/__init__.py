"""Training (paper section 5, and the checkpoint averaging of 6.1). TensorFlow only.

    config.py          TrainingConfig: the YAML/JSON a run is described by, checked up front
    trainer.py         train(config): the entry point of the library, CLI and pipelines
    strategies.py      one device, MirroredStrategy (GPUs or logical CPUs), multi-worker
    accumulation.py    token-exact gradient accumulation over micro-batches and replicas
    training_model.py  TrainingModel: the Transformer wrapped for fit (train/test steps)
    fused_loss.py      the pre-softmax projection and label-smoothed loss over token chunks
    checkpoints.py     CheckpointCallback: a checkpoint every N minutes/steps
    callbacks.py       stop at the last step or time limit, NaN guard, TensorBoard logs, history
    dev_bleu.py        DevBleu: dev sacreBLEU each evaluation, keep-best, early stopping

The run folder (its layout, checkpoint files, averaging, loading models) is
`keras_transformer.runs`, which translation reads without going through training; its names
stay importable from here.

Example:
    >>> from keras_transformer.training import train
    >>> result = train("configs/multi30k.yaml")  # doctest: +SKIP
    >>> result.output_dir.translation_model  # doctest: +SKIP
    'runs/multi30k_en_de/averaged.keras'
"""

from keras_transformer._lazy import lazy_exports

# Public names are resolved on first use (PEP 562): each module only when a name of it is asked.
_EXPORTS = {
    "count_real_tokens": "accumulation",
    "group_micro_batches": "accumulation",
    "average_checkpoints": "..runs.averaging",
    "NaNGuard": "callbacks",
    "StopAtStep": "callbacks",
    "StopAfterMinutes": "callbacks",
    "TrainingDivergedError": "callbacks",
    "TrainingLogger": "callbacks",
    "CheckpointCallback": "checkpoints",
    "Checkpointer": "..runs.checkpoints",
    "list_checkpoints": "..runs.checkpoints",
    "model_variables": "..runs.checkpoints",
    "CheckpointSettings": "config",
    "CorpusFiles": "config",
    "DataSettings": "config",
    "ScheduleSettings": "config",
    "TrainingConfig": "config",
    "DevBleuSettings": "config",
    "DevBleu": "dev_bleu",
    "OutputDir": "..runs.layout",
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

__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)
