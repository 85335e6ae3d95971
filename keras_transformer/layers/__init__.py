"""Backend-neutral Keras layers of the Transformer, named as in the paper (section 3)."""

from keras_transformer.layers.decoder import (
    TransformerDecoder,
    TransformerDecoderLayer,
    causal_mask,
)
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.embedding import SharedEmbedding
from keras_transformer.layers.encoder import (
    TransformerEncoder,
    TransformerEncoderLayer,
    padding_mask,
)
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.layer_normalization import LayerNormalization
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.layers.output_bias import OutputBias
from keras_transformer.layers.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_positional_encoding,
)
from keras_transformer.layers.residual import ResidualConnection
from keras_transformer.layers.scaled_dot_product_attention import ScaledDotProductAttention

__all__ = [
    "Dropout",
    "LayerNormalization",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "OutputBias",
    "PositionwiseFeedForward",
    "ResidualConnection",
    "ScaledDotProductAttention",
    "SharedEmbedding",
    "SinusoidalPositionalEncoding",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "causal_mask",
    "padding_mask",
    "sinusoidal_positional_encoding",
]
