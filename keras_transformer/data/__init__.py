"""Data for training (paper section 5.1): corpora, the shared subword vocabulary, token batches.

TensorFlow-only (tf.data, tensorflow-text): import it as `keras_transformer.data`; the top-level
`keras_transformer` package does not import it, so the model stays usable on any Keras backend.

    corpora.py     readers: two line-aligned text files (optionally .gz), TSV, TFDS; mixing
    vocabulary.py  SentencePiece training (BPE / unigram) and the tensorflow-text tokenizer
    batching.py    length buckets and batch sizes under a per-replica token budget
    pipeline.py    make_dataset: text pairs -> ({"source_ids", "target_ids"}, labels) batches

Example:
    >>> from keras_transformer import data
    >>> corpus = data.TextPairCorpus("train.en.gz", "train.de.gz")  # doctest: +SKIP
    >>> vocabulary = data.train_vocabulary(  # doctest: +SKIP
    ...     [corpus], "vocab/ende", vocab_size=8000)
    >>> batches = data.make_dataset(corpus, vocabulary, token_budget=4096, seed=1)  # doctest: +SKIP
"""

from keras_transformer.data.batching import (
    bucket_batch_sizes,
    bucket_boundaries,
    token_budget_batches,
)
from keras_transformer.data.corpora import (
    CorpusCheck,
    ParallelCorpus,
    TextPairCorpus,
    TfdsCorpus,
    TsvCorpus,
    check_corpora,
    mix_corpora,
    read_lines,
)
from keras_transformer.data.pipeline import (
    PipelineReport,
    TranslationPipeline,
    add_special_ids,
    make_dataset,
    num_replicas_in_sync,
)
from keras_transformer.data.vocabulary import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    PRESETS,
    UNK_ID,
    SubwordVocabulary,
    round_vocab_size,
    train_vocabulary,
)

__all__ = [
    "BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID", "PRESETS",
    "CorpusCheck", "ParallelCorpus", "TextPairCorpus", "TsvCorpus", "TfdsCorpus",
    "check_corpora", "mix_corpora", "read_lines",
    "SubwordVocabulary", "round_vocab_size", "train_vocabulary",
    "bucket_boundaries", "bucket_batch_sizes", "token_budget_batches",
    "PipelineReport", "TranslationPipeline", "add_special_ids", "make_dataset",
    "num_replicas_in_sync",
]
