"""Data for training (paper section 5.1): corpora, the shared subword vocabulary, token batches.

The pipelines are TensorFlow-only (tf.data, tensorflow-text); the top-level `keras_transformer`
package does not import them, so the model stays usable on any Keras backend. Names are imported
on first use: `vocabulary.py` (the one vocabulary class, also used by translation and export)
needs only `sentencepiece` until a TensorFlow tokenizer is asked for.

    corpora.py     readers: two line-aligned text files (optionally .gz), TSV, TFDS; mixing
    vocabulary.py  SentencePiece training (BPE / unigram) and SubwordVocabulary: Python,
                   keras-hub tokenizer layer and tensorflow-text tokenizer of one model
    batching.py    length buckets and batch sizes under a per-replica token budget
    marian_vocabulary.py  MarianVocabulary: an imported OPUS-MT model's two SentencePiece
                   models and id table
    pipeline.py    make_dataset: text pairs -> ({"source_ids", "target_ids"}, labels) batches
    options.py     the tf.data options of the package's datasets (no autotuning thread)

Example:
    >>> from keras_transformer import data
    >>> corpus = data.TextPairCorpus("train.en.gz", "train.de.gz")  # doctest: +SKIP
    >>> vocabulary = data.train_vocabulary(  # doctest: +SKIP
    ...     [corpus], "vocab/ende", vocab_size=8000)
    >>> batches = data.make_dataset(corpus, vocabulary, token_budget=4096, seed=1)  # doctest: +SKIP
"""

from keras_transformer._lazy import lazy_exports

# Public names are resolved on first use (PEP 562), so that `keras_transformer.data.vocabulary`,
# which translation uses, imports without TensorFlow; the other modules import it.
_EXPORTS = {
    "bucket_batch_sizes": "batching",
    "bucket_boundaries": "batching",
    "token_budget_batches": "batching",
    "CorpusCheck": "corpora",
    "ParallelCorpus": "corpora",
    "TextPairCorpus": "corpora",
    "TfdsCorpus": "corpora",
    "TsvCorpus": "corpora",
    "check_corpora": "corpora",
    "mix_corpora": "corpora",
    "read_lines": "corpora",
    "MarianVocabulary": "marian_vocabulary",
    "PipelineReport": "pipeline",
    "TranslationPipeline": "pipeline",
    "add_special_ids": "pipeline",
    "make_dataset": "pipeline",
    "num_replicas_in_sync": "pipeline",
    "BOS_ID": "vocabulary",
    "EOS_ID": "vocabulary",
    "PAD_ID": "vocabulary",
    "UNK_ID": "vocabulary",
    "PRESETS": "vocabulary",
    "SubwordVocabulary": "vocabulary",
    "load_vocabulary": "vocabulary",
    "round_vocab_size": "vocabulary",
    "train_vocabulary": "vocabulary",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
