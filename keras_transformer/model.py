"""The Transformer: the encoder-decoder of section 3 as a functional Keras model."""

import keras
from keras import ops

from keras_transformer.config import TransformerConfig
from keras_transformer.layers.decoder import TransformerDecoder
from keras_transformer.layers.embedding import SharedEmbedding
from keras_transformer.layers.encoder import TransformerEncoder, padding_mask
from keras_transformer.layers.output_bias import OutputBias


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(keras.Model):
    """The Transformer of Figure 1: a functional model from token ids to next-token logits.

    Inputs are `source_ids` `[batch, source_length]` and `target_ids` `[batch, target_length]`
    (the decoder input: the target shifted right, starting with bos), int32, padded with
    `config.pad_id`; the output is float32 logits `[batch, target_length, vocab_size]`,
    with `output_bias` (`config.output_bias`) added where the model has one.

    Besides the functional graph used by `fit`, the model exposes the pieces decoding needs:
    `encode`, `decode`, `init_cache` and `decode_step` (incremental decoding over a
    fixed-size key/value cache). All of it is `keras.ops`, so it runs on every Keras backend.

    Args:
        config: a `TransformerConfig` (or its dict).
        dtype: a dtype policy for every layer, e.g. "mixed_bfloat16".
        tokenizer: optionally, the vocabulary the ids come from, as a keras-hub
            `SentencePieceTokenizer` (`SubwordVocabulary.to_tokenizer()`). It is not part of
            the graph (the model maps ids to logits); it is saved inside `.keras` files, so
            that a saved model translates with no `vocab.model` beside it.

    Example:
    >>> config = TransformerConfig(vocab_size=100, num_layers=1, d_model=32, d_ff=64,
    ...                            num_heads=4)
    >>> model = Transformer(config)
    >>> logits = model({"source_ids": keras.ops.ones((2, 7), "int32"),
    ...                 "target_ids": keras.ops.ones((2, 5), "int32")})
    >>> logits.shape
    (2, 5, 100)
    """

    def __setattr__(self, name, value):
        # torch.nn.Module refuses layers assigned before Module.__init__, and __init__ must
        # create the layers before the functional super().__init__ that wires them. Every
        # layer is tracked through the functional graph anyway, and saving finds the
        # tokenizer as an attribute, so on torch attributes bypass Keras' tracking.
        if keras.config.backend() == "torch":
            return object.__setattr__(self, name, value)
        return super().__setattr__(name, value)

    def __init__(self, config, dtype=None, tokenizer=None, **kwargs):
        if isinstance(config, dict):
            config = TransformerConfig.from_dict(config)
        stack_args = dict(
            num_layers=config.num_layers,
            num_heads=config.num_heads,
            key_dim=config.key_dim,
            value_dim=config.value_dim,
            d_ff=config.d_ff,
            dropout=config.dropout,
            attention_dropout=config.attention_dropout,
            relu_dropout=config.relu_dropout,
            norm_position=config.norm_position,
            layer_norm_epsilon=config.layer_norm_epsilon,
            activation=config.activation,
            positional=config.positional,
            max_length=config.max_length,
            dtype=dtype,
        )

        # === Layers ===
        def embedding(name):
            return SharedEmbedding(config.vocab_size, config.d_model, dtype=dtype, name=name)

        # 3.4: one matrix for source embedding, target embedding and pre-softmax projection.
        self.target_embedding = embedding(
            "shared_embedding" if config.shared_embeddings == "all" else "target_embedding"
        )
        self.source_embedding = (
            self.target_embedding
            if config.shared_embeddings == "all"
            else embedding("source_embedding")
        )
        self.output_projection = (
            embedding("output_projection")
            if config.shared_embeddings == "none"
            else self.target_embedding
        )
        # Marian's `final_logits_bias`; float32, added to the float32 logits.
        self.output_bias_layer = (
            OutputBias(config.vocab_size, name="output_bias") if config.output_bias else None
        )
        self.encoder = TransformerEncoder(**stack_args, name="encoder")
        self.decoder = TransformerDecoder(**stack_args, name="decoder")

        # === Functional model ===
        source_ids = keras.Input((None,), dtype="int32", name="source_ids")
        target_ids = keras.Input((None,), dtype="int32", name="target_ids")
        memory, memory_mask = self._encode(source_ids, config.pad_id, training=None)
        logits = self._decode(target_ids, memory, memory_mask, training=None)
        super().__init__(
            inputs={"source_ids": source_ids, "target_ids": target_ids},
            outputs=logits,
            dtype=dtype,
            **kwargs,
        )

        # === Config ===
        self.config = config
        # The functional init ignores `dtype`: keep it for get_config, so that a saved
        # mixed-precision model reloads as one.
        self._dtype_argument = dtype
        # Keras saves a tracked layer's assets (here the SentencePiece model) with the model.
        self.tokenizer = tokenizer

    # The functional graph is traced before `self.config` exists, hence the explicit pad_id.
    def _encode(self, source_ids, pad_id, training):
        memory_mask = padding_mask(source_ids, pad_id)
        memory = self.encoder(
            self.source_embedding(source_ids), attention_mask=memory_mask, training=training
        )
        return memory, memory_mask

    def _decode(self, target_ids, memory, memory_mask, training):
        hidden = self.decoder_states(target_ids, memory, memory_mask, training)
        return self._logits(self.output_projection(hidden, reverse=True))

    def _logits(self, projected):
        """Float32 logits from the pre-softmax projection's output (whatever the compute
        dtype: softmax and loss need the range), with the output bias where there is one."""
        logits = ops.cast(projected, "float32")
        return logits if self.output_bias_layer is None else self.output_bias_layer(logits)

    @property
    def output_bias(self):
        """The output bias `[vocab_size]` float32 variable (`config.output_bias`), or None."""
        return None if self.output_bias_layer is None else self.output_bias_layer.bias

    def decoder_states(self, target_ids, memory, memory_mask, training=False):
        """The decoder stack's output `[batch, target_length, d_model]` (compute dtype), the
        input of the pre-softmax projection `output_projection(states, reverse=True)`."""
        return self.decoder(
            self.target_embedding(target_ids), memory, memory_mask=memory_mask, training=training
        )

    def encode(self, source_ids, training=False):
        """Encoder output `[batch, source_length, d_model]` and the source padding mask."""
        return self._encode(source_ids, self.config.pad_id, training)

    def decode(self, target_ids, memory, memory_mask, training=False):
        """Logits for every target position at once (teacher forcing)."""
        return self._decode(target_ids, memory, memory_mask, training)

    def attention_weights(
        self, source_ids, target_ids=None, stack="encoder", kind="self", layer_index=-1
    ):
        """Attention weights of one attention sub-layer, as the paper's figures 3-5 draw them.

        Args:
            source_ids: `[batch, source_length]` int32, padded with `config.pad_id`.
            target_ids: `[batch, target_length]` decoder input (bos first); needed for the
                decoder's attentions.
            stack: "encoder" or "decoder".
            kind: "self" (self-attention) or "cross" (the decoder's encoder-decoder
                attention).
            layer_index: 0-based layer of the stack; negative counts from the end (default
                -1, the last). The paper's "layer 5 of 6" is `layer_index=4`.

        Returns:
            float32 probabilities `[batch, heads, query_length, key_length]` (dropout off),
            each row summing to 1 over the keys the query may see: the real source tokens for
            encoder self-attention and for cross-attention, target positions up to the
            query's own for decoder self-attention.

        Example:
        >>> weights = model.attention_weights(source_ids, layer_index=4)  # encoder, layer 5
        >>> weights.shape
        (1, 8, 11, 11)
        """
        if stack not in ("encoder", "decoder"):
            raise ValueError(f"stack must be 'encoder' or 'decoder', got {stack!r}")
        if kind not in ("self", "cross"):
            raise ValueError(f"kind must be 'self' or 'cross', got {kind!r}")
        if stack == "encoder":
            if kind == "cross":
                raise ValueError("the encoder has no cross-attention: use stack='decoder'")
            memory_mask = padding_mask(source_ids, self.config.pad_id)
            return self.encoder.self_attention_weights(
                self.source_embedding(source_ids), memory_mask, layer_index
            )
        if target_ids is None:
            raise ValueError(
                "the decoder's attention weights need target_ids (the decoder "
                "input: bos, then the target)"
            )
        memory, memory_mask = self.encode(source_ids)
        weights = (
            self.decoder.self_attention_weights
            if kind == "self"
            else self.decoder.cross_attention_weights
        )
        return weights(self.target_embedding(target_ids), memory, memory_mask, layer_index)

    def cross_attention_weights(self, source_ids, target_ids, layer_index=-1):
        """Encoder-decoder attention of one decoder layer (default: the last),
        `[batch, heads, target_length, source_length]`, rows summing to 1 over the real
        source tokens: `attention_weights(..., stack="decoder", kind="cross")`."""
        return self.attention_weights(source_ids, target_ids, "decoder", "cross", layer_index)

    def init_cache(self, memory, max_length):
        """The decoding cache: empty self-attention keys/values for `max_length` steps per
        decoder layer, and the encoder-decoder keys/values of `memory`, computed once."""
        return self.decoder.init_cache(memory, max_length)

    def output_kernel(self):
        """The pre-softmax projection's matrix as `[d_model, vocab_size]` (compute dtype): the
        embedding matrix transposed, for `decode_step` to reuse at every step."""
        embeddings = self.output_projection.embeddings
        return ops.transpose(ops.cast(embeddings, self.output_projection.compute_dtype))

    def decode_step(self, token_ids, memory_mask, cache, step, output_kernel=None):
        """Logits `[batch, vocab_size]` for the token after `token_ids` `[batch, 1]`, the
        token at position `step`, and the cache with that position written.

        `output_kernel`: `output_kernel()`, computed once before the decoding loop; None
        multiplies by the embedding matrix transposed inside the product, which oneDNN runs
        1.4-2.3x slower (docs/decisions.md#output-kernel-once).
        """
        hidden, cache = self.decoder(
            self.target_embedding(token_ids),
            memory_mask=memory_mask,
            cache=cache,
            cache_update_index=step,
        )
        # The last position only, as a 2-D product (no `tensordot` shape ops at each step).
        if output_kernel is None:
            logits = self.output_projection(hidden[:, -1, :], reverse=True)
        else:
            logits = ops.matmul(hidden[:, -1, :], output_kernel)
        return self._logits(logits), cache

    def get_config(self):
        dtype = self._dtype_argument
        return {
            "config": self.config.to_dict(),
            "name": self.name,
            "trainable": self.trainable,
            "dtype": None
            if dtype is None
            else keras.dtype_policies.serialize(keras.dtype_policies.get(dtype)),
            **(
                {}
                if self.tokenizer is None
                else {"tokenizer": keras.saving.serialize_keras_object(self.tokenizer)}
            ),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if config.get("dtype") is not None and isinstance(config["dtype"], dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        if isinstance(config.get("tokenizer"), dict):
            config["tokenizer"] = keras.saving.deserialize_keras_object(config["tokenizer"])
        return cls(**config)


def build_model(config, dtype=None):
    """Builds the functional `Transformer` for a `TransformerConfig` (or a preset name).

    Example:
    >>> model = build_model(TransformerConfig.from_preset("base", vocab_size=37000))
    >>> round(model.count_params() / 1e6, 1)
    63.1
    """
    if isinstance(config, str):
        config = TransformerConfig.from_preset(config)
    return Transformer(config, dtype=dtype)
