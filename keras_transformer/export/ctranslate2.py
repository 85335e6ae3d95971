"""A CTranslate2 model directory from a `Transformer`: its weights as CTranslate2's
`TransformerSpec`, its SentencePiece model, and a config that appends eos to the source.

`ctranslate2.Translator(DIR)` with `sentencepiece` then translates raw text with no other
file, as docs/ctranslate2.md shows. CTranslate2 is an optional dependency (the `ctranslate2`
extra), imported only here.

How our model maps onto the spec (CTranslate2 4.x, `ctranslate2/specs/transformer_spec.py`):

- post-norm (`pre_norm=False`) or pre-norm with its final LayerNorm per stack; the
  feed-forward activation (`TransformerConfig.activation`: ReLU, swish or exact GELU) as the
  stack specs' `activation`;
- embeddings x sqrt(d_model) (or unscaled, per stack), then the positional table (our
  sinusoids, or the learned table) written out for `max_length` positions: CTranslate2 has
  no later position, as our model has none (its `max_decoding_length` must stay within);
- the source embedding, the target embedding and the pre-softmax projection, tied or not
  (`optimize` stores a matrix used twice once);
- heads of width d_k != d_model / h via the attention spec's `head_dim`; d_k != d_v by padding
  the narrower one with zero columns (zero query/key columns add nothing to Q K^T, zero value
  columns meet zero rows of the output projection), the query weights scaled so that the
  padded width's 1/sqrt(width) is still 1/sqrt(d_k): the outputs are unchanged.
- the output bias (`config.output_bias`) as the projection's bias; our searches never emit pad
  or bos (one token when bos is pad), and that bias keeps them out of CTranslate2's outputs
  likewise (`FORBIDDEN_LOGIT`); the decoder starts from bos, pad for OPUS-MT models.

Refused, with the layer named: a layer whose activation is not the config's.
"""

import math
import pathlib

import numpy as np

from keras_transformer.errors import UserInputError
from keras_transformer.files import atomic_directory

# The weight types CTranslate2 can store (`ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES`);
# None keeps float32.
QUANTIZATIONS = (
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "int16",
    "float16",
    "bfloat16",
    "float32",
)
INSTALL_HINT = (
    'CTranslate2 is not installed: pip install "keras-nmt-transformer[ctranslate2]" '
    "(or pip install ctranslate2)"
)
# The first release whose encoder spec takes head_dim (pyproject's ctranslate2 extra).
MINIMUM_VERSION = (4, 7)
SENTENCEPIECE_FILE = "sentencepiece.model"
# Added to the pad and bos logits: exp(-1e4) is 0 in every float type, and -1e4 stays finite
# in float16 (a bias of -inf could make NaNs).
FORBIDDEN_LOGIT = -1e4


def import_ctranslate2():
    """The `ctranslate2` module, or a `UserInputError` saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise UserInputError(INSTALL_HINT) from None
    version = tuple(int(part) for part in ctranslate2.__version__.split(".")[:2])
    if version < MINIMUM_VERSION:
        raise UserInputError(
            f"CTranslate2 {ctranslate2.__version__} is too old to hold these models: "
            f'pip install -U "ctranslate2>={".".join(map(str, MINIMUM_VERSION))}"'
        )
    return ctranslate2


# `TransformerConfig.activation` -> the member of CTranslate2's `common_spec.Activation` (its
# GELU is the exact, erf form, as Keras' "gelu"; SWISH is x * sigmoid(x)).
CTRANSLATE2_ACTIVATIONS = {"relu": "RELU", "swish": "SWISH", "gelu": "GELU"}


def check_exportable(model):
    """Raises `UserInputError` naming what of `model` the `TransformerSpec` written here
    cannot hold; returns its config otherwise."""
    import keras

    config = getattr(model, "config", None)
    if config is None or not all(hasattr(model, name) for name in ("encoder", "decoder")):
        raise UserInputError(
            f"only a keras_transformer Transformer exports to CTranslate2, got "
            f"{type(model).__name__} (an ensemble exports one model at a time)"
        )
    expected = keras.activations.get(config.activation)
    for stack in (model.encoder, model.decoder):
        for layer in stack.transformer_layers:
            activation = layer.feed_forward.inner_dense.activation
            if activation is not expected:
                raise UserInputError(
                    f"{stack.name}/{layer.name}/feed_forward has the activation "
                    f"{getattr(activation, '__name__', activation)!r}, not the config's "
                    f"{config.activation!r}: the CTranslate2 export writes one activation "
                    f"for every layer, one of {', '.join(CTRANSLATE2_ACTIVATIONS)}"
                )
    return config


def vocabulary_tokens(vocabulary):
    """The pieces in id order: CTranslate2's source and target vocabulary (an imported
    model's: its `vocab.json` table, whose language tokens such as `>>deu<<` are tokens)."""
    processor = getattr(vocabulary, "processor", vocabulary)
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]


def _array(variable):
    from keras import ops

    return np.asarray(ops.convert_to_numpy(variable), dtype="float32")


def _bias(layer):
    """A Dense layer's bias; zeros for one built with `use_bias=False`."""
    if layer.bias is None:
        return np.zeros((layer.kernel.shape[-1],), "float32")
    return _array(layer.bias)


def _heads(kernel, bias, num_heads, width):
    """A Dense projection to `num_heads` heads, as CTranslate2's `[out, in]` weight and bias,
    each head padded with zero columns to `width`."""
    rows = kernel.shape[0]
    kernel = kernel.reshape(rows, num_heads, -1)
    bias = bias.reshape(num_heads, -1)
    padding = width - kernel.shape[-1]
    kernel = np.pad(kernel, ((0, 0), (0, 0), (0, padding)))
    bias = np.pad(bias, ((0, 0), (0, padding)))
    return kernel.reshape(rows, num_heads * width).T, bias.reshape(-1)


class _Converter:
    """Writes one `Transformer`'s weights into a `TransformerSpec`."""

    def __init__(self, config):
        self.num_heads = config.num_heads
        self.width = max(config.key_dim, config.value_dim)
        # Padded query/key heads are scaled by 1/sqrt(width); ours by 1/sqrt(d_k).
        self.query_scale = math.sqrt(self.width / config.key_dim)

    def attention_projections(self, attention):
        """(query, key, value) as `(weight, bias)` pairs of `width` per head."""

        def dense(layer, scale=1.0):
            kernel, bias = _heads(_array(layer.kernel), _bias(layer), self.num_heads, self.width)
            return kernel * scale, bias * scale

        return (
            dense(attention.query_dense, self.query_scale),
            dense(attention.key_dense),
            dense(attention.value_dense),
        )

    def attention_output(self, target, attention):
        kernel = _array(attention.output_dense.kernel)
        kernel = kernel.reshape(self.num_heads, -1, kernel.shape[-1])
        kernel = np.pad(kernel, ((0, 0), (0, self.width - kernel.shape[1]), (0, 0)))
        target.weight = kernel.reshape(-1, kernel.shape[-1]).T.copy()
        target.bias = _bias(attention.output_dense)

    @staticmethod
    def fused(target, pairs):
        target.weight = np.ascontiguousarray(np.concatenate([w for w, _ in pairs], axis=0))
        target.bias = np.concatenate([b for _, b in pairs], axis=0)

    @staticmethod
    def dense(target, layer):
        target.weight = np.ascontiguousarray(_array(layer.kernel).T)
        target.bias = _bias(layer)

    @staticmethod
    def norm(target, layer):
        target.gamma = _array(layer.gamma)
        target.beta = _array(layer.beta)

    def self_attention(self, target, attention, residual):
        self.fused(target.linear[0], self.attention_projections(attention))
        self.attention_output(target.linear[1], attention)
        self.norm(target.layer_norm, residual.layer_norm)

    def cross_attention(self, target, attention, residual):
        query, key, value = self.attention_projections(attention)
        self.fused(target.linear[0], [query])
        self.fused(target.linear[1], [key, value])
        self.attention_output(target.linear[2], attention)
        self.norm(target.layer_norm, residual.layer_norm)

    def feed_forward(self, target, layer):
        self.dense(target.linear_0, layer.feed_forward.inner_dense)
        self.dense(target.linear_1, layer.feed_forward.output_dense)
        self.norm(target.layer_norm, layer.feed_forward_residual.layer_norm)


def _positions(stack, config):
    """The stack's positional table `[max_length, d_model]`, as CTranslate2 adds it."""
    from keras import ops

    from keras_transformer.layers.positional import sinusoidal_positional_encoding

    if config.positional == "learned":
        return _array(stack.positional_layer.position_embeddings)
    return _array(sinusoidal_positional_encoding(ops.arange(config.max_length), config.d_model))


def ctranslate2_spec(model, tokens, add_source_eos=True):
    """CTranslate2's `TransformerSpec` holding `model`'s weights (validated, not optimized).

    Args:
        model: a `keras_transformer.Transformer`.
        tokens: the vocabulary, one string per id (`vocabulary_tokens(vocabulary)`); the
            config's `unk_id`, `bos_id` (the decoder's start token) and `eos_id` name unk,
            bos and eos.
        add_source_eos: whether CTranslate2 appends eos to each source itself (our models
            are trained on eos-terminated sources).

    Returns:
        The spec: `spec.optimize(quantization)` then `spec.save(directory)` writes it.
    """
    ctranslate2 = import_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    config = check_exportable(model)
    if len(tokens) != config.vocab_size:
        raise UserInputError(
            f"the vocabulary has {len(tokens)} pieces but the model was built for "
            f"vocab_size={config.vocab_size}; export the model with the vocabulary it was "
            "trained with"
        )
    converter = _Converter(config)
    pre_norm = config.norm_position == "pre"
    head_dim = None if converter.width * config.num_heads == config.d_model else converter.width
    activation = common_spec.Activation[CTRANSLATE2_ACTIVATIONS[config.activation]]
    shape = dict(
        num_heads=config.num_heads, pre_norm=pre_norm, head_dim=head_dim, activation=activation
    )
    spec = transformer_spec.TransformerSpec(
        transformer_spec.TransformerEncoderSpec(config.num_layers, **shape),
        transformer_spec.TransformerDecoderSpec(config.num_layers, **shape),
    )
    spec.config.layer_norm_epsilon = float(config.layer_norm_epsilon)
    spec.config.unk_token = tokens[config.unk_id]
    spec.config.bos_token = spec.config.decoder_start_token = tokens[config.bos_id]
    spec.config.eos_token = tokens[config.eos_id]
    spec.config.add_source_eos = add_source_eos

    _copy_weights(spec, model, config, converter)
    spec.register_source_vocabulary(list(tokens))
    spec.register_target_vocabulary(list(tokens))
    try:
        spec.validate()
    except ValueError as error:  # a shape the installed CTranslate2 cannot hold
        raise UserInputError(
            f"CTranslate2 {ctranslate2.__version__} cannot hold this model: {error}"
        ) from None
    return spec


def _copy_weights(spec, model, config, converter):
    """Fills `spec`'s encoder, decoder and projection with `model`'s weights."""
    pre_norm = config.norm_position == "pre"
    spec.encoder.embeddings[0].weight = _array(model.source_embedding.embeddings)
    spec.decoder.embeddings.weight = _array(model.target_embedding.embeddings)
    stacks = (
        (spec.encoder, model.encoder, model.source_embedding),
        (spec.decoder, model.decoder, model.target_embedding),
    )
    for target, stack, embedding in stacks:
        target.scale_embeddings = bool(getattr(embedding, "scale", True))
        target.position_encodings.encodings = _positions(stack, config)
        if pre_norm:
            converter.norm(target.layer_norm, stack.final_norm)
    for target, layer in zip(spec.encoder.layer, model.encoder.transformer_layers):
        converter.self_attention(
            target.self_attention, layer.self_attention, layer.self_attention_residual
        )
        converter.feed_forward(target.ffn, layer)
    for target, layer in zip(spec.decoder.layer, model.decoder.transformer_layers):
        converter.self_attention(
            target.self_attention, layer.self_attention, layer.self_attention_residual
        )
        converter.cross_attention(
            target.attention, layer.cross_attention, layer.cross_attention_residual
        )
        converter.feed_forward(target.ffn, layer)
    spec.decoder.projection.weight = _array(model.output_projection.embeddings)
    # The output bias (`config.output_bias`) where the model has one; pad and bos, which our
    # searches never emit, forbidden on top (with bos == pad, the one token).
    bias = np.zeros((config.vocab_size,), "float32")
    if model.output_bias is not None:
        bias = _array(model.output_bias)
    bias[[config.pad_id, config.bos_id]] = FORBIDDEN_LOGIT
    spec.decoder.projection.bias = bias


def check_output_dir(output_dir, overwrite):
    """Refuses an `output_dir` that exists (unless `overwrite` and it is a CTranslate2 model
    directory or empty)."""
    output_dir = pathlib.Path(output_dir)
    if not output_dir.exists():
        return
    if not overwrite:
        raise UserInputError(
            f"{output_dir} already exists; pass --overwrite (overwrite=True) to replace it, "
            "or choose another output directory"
        )
    if not output_dir.is_dir():
        raise UserInputError(f"{output_dir} is a file, not a CTranslate2 model directory")
    if any(output_dir.iterdir()) and not (output_dir / "model.bin").is_file():
        # Replacing means deleting: only what an export wrote (or nothing) is deleted.
        raise UserInputError(
            f"{output_dir} is not a CTranslate2 model directory (it has no model.bin), so "
            "--overwrite does not replace it; choose another output directory"
        )


def export_ctranslate2(model, output_dir, quantization=None, overwrite=False, vocabulary=None):
    """Writes a CTranslate2 model directory for `model` and returns its path.

    The directory holds `model.bin`, `config.json` (with `add_source_eos`, so that callers
    pass the SentencePiece pieces alone), `shared_vocabulary.json` and the SentencePiece
    model as `sentencepiece.model` (an imported model's: `source.spm` to cut sources and
    `target.spm`, `vocab.json` as imported). It is written beside `output_dir` and renamed into
    place, so a failed export leaves no half-written model.

    Args:
        model: a `keras_transformer.Transformer`.
        output_dir: the directory to write.
        quantization: how CTranslate2 stores the weights: one of `QUANTIZATIONS`
            ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16",
            "bfloat16", "float32"); None keeps float32.
        overwrite: replace an existing CTranslate2 model directory at `output_dir`.
        vocabulary: the SentencePiece vocabulary the model was trained with (a
            `SubwordVocabulary`, a `.model` path or a keras-hub tokenizer, or an imported
            model's `MarianVocabulary` or run folder); default: the one the model carries
            (`model.tokenizer`, saved in `.keras` files).

    Example:
        >>> model, files = load_model("runs/ende")  # doctest: +SKIP
        >>> export_ctranslate2(model, "ct2/ende", quantization="int8")  # doctest: +SKIP
        PosixPath('ct2/ende')
    """
    from keras_transformer.data.vocabulary import load_vocabulary

    import_ctranslate2()
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise UserInputError(
            f"quantization {quantization!r} is not one of {', '.join(QUANTIZATIONS)}"
        )
    output_dir = pathlib.Path(output_dir)
    check_output_dir(output_dir, overwrite)
    if vocabulary is None:
        vocabulary = getattr(model, "tokenizer", None)
        if vocabulary is None:
            raise UserInputError(
                "the model carries no vocabulary: pass the SentencePiece .model it was "
                "trained with (--vocab FILE, vocabulary=)"
            )
    vocabulary = load_vocabulary(vocabulary)
    spec = ctranslate2_spec(model, vocabulary_tokens(vocabulary))
    spec.optimize(quantization=quantization)
    with atomic_directory(output_dir) as staging:
        spec.save(str(staging))
        files = getattr(vocabulary, "files", None)
        for name, content in (
            files().items() if files else [(SENTENCEPIECE_FILE, vocabulary.model_proto)]
        ):
            (staging / name).write_bytes(content)
    return output_dir
