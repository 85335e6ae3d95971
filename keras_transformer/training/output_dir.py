"""The run-folder layout moved to `keras_transformer.runs.layout`, loading and saving models
to `keras_transformer.runs.models`, and atomic writes and output checks to
`keras_transformer.files`; this import path is kept for one release."""

from keras_transformer.files import (  # noqa: F401
    atomic_write,
    check_new_output_file,
    check_output_file,
)
from keras_transformer.runs.layout import (  # noqa: F401
    AVERAGED_MODEL_FILE,
    BEST_MODEL_FILE,
    BEST_RECORD_FILE,
    CHECKPOINT_DIR,
    CONFIG_FILE,
    DEV_BLEU_HISTORY_FILE,
    FINAL_MODEL_FILE,
    HISTORY_FILE,
    INIT_RECORD_FILE,
    LOG_DIR,
    TRAINING_CONFIG_FILE,
    VOCAB_FILE,
    OutputDir,
)
from keras_transformer.runs.models import (  # noqa: F401
    atomic_save_model,
    find_model_files,
    load_model,
)
