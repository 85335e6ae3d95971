"""`TransformerConfig`: every hyperparameter of the paper's Table 3, and its presets.

Preset names (`TransformerConfig.from_preset(name, vocab_size=...)`):

- `base`, `big` (Table 3 first and last lines; `big` has P_drop 0.3 as for EN-DE) and
  `big_en_fr` (the EN-FR big model, P_drop 0.1, section 6.1).
- Every other row of Table 3 is named `ROW.SYMBOL=VALUE` with the paper's own row letter and
  column symbol, applied to `base`: `A.h=1`, `A.h=4`, `A.h=16`, `A.h=32` (h with d_k = d_v =
  d_model / h), `B.d_k=16`, `B.d_k=32`, `C.N=2`, `C.N=4`, `C.N=8`, `C.d_model=256`,
  `C.d_model=1024` (with d_k = d_v = d_model / 8, as the table lists), `C.d_ff=1024`,
  `C.d_ff=4096`, `D.P_drop=0.0`, `D.P_drop=0.2`, `D.eps_ls=0.0`, `D.eps_ls=0.2`, `E.learned`
  (learned positional embedding instead of sinusoids).

- `parsing_wsj` and `parsing_semi` (section 6.3, English constituency parsing): 4 layers,
  d_model 1024 (d_k = d_v = 128, as `C.d_model=1024`), otherwise base; a 16K vocabulary for
  the WSJ-only setting and 32K for the semi-supervised one. Decoding settings of 6.3 (beam
  21, alpha 0.3, input + 300) are `keras_transformer.parsing.parser.PAPER_DECODING`.

`TABLE3` maps each preset to the paper's "params x10^6" column (None where the paper leaves it
blank).
"""

import dataclasses
import json
import math
from typing import Literal

from keras_transformer.errors import UserInputError

# Feed-forward activations (Keras names): the paper's, and those of OPUS-MT and BERT-like models.
ACTIVATIONS = ("relu", "swish", "gelu")

# Fixed ids shared by the vocabulary, the data pipeline, the model and decoding.
PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Hyperparameters of the Transformer (paper section 3 and Table 3).

    Field names follow Keras; the paper's symbol is given beside each.

    Args:
        vocab_size: size of the shared source-target vocabulary (5.1).
        num_layers: N, layers in each of the encoder and decoder stacks.
        d_model: d_model, width of every sub-layer output and embedding.
        d_ff: d_ff, inner width of the position-wise feed-forward network (3.3).
        num_heads: h, attention heads (3.2.2).
        key_dim: d_k, per-head query/key width; None means d_model / h.
        value_dim: d_v, per-head value width; None means d_model / h.
        dropout: P_drop, residual dropout on each sub-layer output and on the embedding +
            positional-encoding sums (5.4).
        label_smoothing: eps_ls (5.4).
        positional: "sinusoidal" (3.5) or "learned" (Table 3 row E).
        max_length: longest sequence (tokens) the model takes; bounds learned positions and the
            decoding cache.
        shared_embeddings: "all" shares one matrix between source embedding, target embedding
            and the pre-softmax projection (3.4); "target" shares only target embedding and
            projection; "none" unties all three.
        norm_position: "post" is the paper's LayerNorm(x + Dropout(Sublayer(x))) (5.4);
            "pre" is x + Dropout(Sublayer(LayerNorm(x))) with a final LayerNorm per stack.
        attention_dropout: dropout on attention weights (not in the paper: default 0).
        relu_dropout: dropout after the feed-forward activation (not in the paper: default 0).
        layer_norm_epsilon: epsilon of every LayerNorm (the paper does not state it; 1e-6 as in
            tensor2tensor).
        activation: the feed-forward network's inner activation: "relu" (3.3, the paper),
            "swish" (x * sigmoid(x), also called SiLU) or "gelu" (the exact, erf form).
        output_bias: add a trainable bias, one value per vocabulary entry, to the output logits
            (not in the paper; Marian's and OPUS-MT's `final_logits_bias`).
        pad_id: the padding token's id (0 in the project's vocabularies).
        bos_id: the token that starts every decoder input (2). It may equal `pad_id`, as in
            OPUS-MT models, which start decoding from pad: the decoder never masks its input
            by pad (its self-attention is causal only).
        eos_id: the end-of-sentence token's id, which ends every sequence (3); it must differ
            from `pad_id` and `bos_id`.
        unk_id: the unknown token's id (1), for vocabularies that map unseen pieces to it.
    """

    vocab_size: int = 37000
    num_layers: int = 6
    d_model: int = 512
    d_ff: int = 2048
    num_heads: int = 8
    key_dim: int | None = None
    value_dim: int | None = None
    dropout: float = 0.1
    label_smoothing: float = 0.1
    positional: Literal["sinusoidal", "learned"] = "sinusoidal"
    max_length: int = 1024
    shared_embeddings: Literal["all", "target", "none"] = "all"
    norm_position: Literal["post", "pre"] = "post"
    attention_dropout: float = 0.0
    relu_dropout: float = 0.0
    layer_norm_epsilon: float = 1e-6
    activation: Literal["relu", "swish", "gelu"] = "relu"
    output_bias: bool = False
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    unk_id: int = UNK_ID

    def __post_init__(self):
        _validate(self)
        # Resolve d_k, d_v once so that every reader sees numbers (frozen: set via object).
        if self.key_dim is None:
            object.__setattr__(self, "key_dim", self.d_model // self.num_heads)
        if self.value_dim is None:
            object.__setattr__(self, "value_dim", self.d_model // self.num_heads)

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_preset(cls, name, vocab_size=None, **overrides):
        """A preset of Table 3 (see the module docstring for names), with overrides.

        A preset whose d_k and d_v are its d_model / h (every one but `B.d_k=*`'s d_k) keeps
        them so under a new `d_model` or `num_heads`, as in OpenNMT-tf and fairseq, unless
        `key_dim` / `value_dim` are given too.

        Example:
        >>> TransformerConfig.from_preset("big", vocab_size=37000).d_model
        1024
        >>> TransformerConfig.from_preset("base", d_model=128, num_heads=4).key_dim
        32
        """
        if name not in PRESETS:
            raise UserInputError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
        values = dict(PRESETS[name])
        per_head = values["d_model"] // values["num_heads"]
        if "d_model" in overrides or "num_heads" in overrides:
            for field in ("key_dim", "value_dim"):
                if field not in overrides and values[field] == per_head:
                    values[field] = None  # d_model / h of the new dims (__post_init__)
        if vocab_size is not None:
            values["vocab_size"] = vocab_size
        values.update(overrides)
        return cls.from_dict(values)

    @classmethod
    def from_dict(cls, values):
        """Builds a config from a dict, rejecting unknown keys with the list of valid ones."""
        if not isinstance(values, dict):
            raise UserInputError(
                f"a Transformer config must be a mapping of field names to values, got "
                f"{type(values).__name__}"
            )
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UserInputError(
                f"unknown TransformerConfig field(s) {unknown}; valid fields: "
                f"{', '.join(sorted(known))}"
            )
        return cls(**values)

    def to_dict(self):
        return dataclasses.asdict(self)

    def to_json(self, indent=2):
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True)

    @classmethod
    def from_json(cls, text):
        try:
            values = json.loads(text)
        except json.JSONDecodeError as error:
            raise UserInputError(f"the Transformer config is not valid JSON: {error}") from None
        return cls.from_dict(values)

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def parameter_count(self):
        """Trainable parameters of `build_model(self)`, counted from the formula.

        Per attention block: Q, K projections d_model x h*d_k, V projection d_model x h*d_v,
        output projection h*d_v x d_model, each with a bias. Feed-forward: two dense layers
        with biases. LayerNorm: gamma and beta. The embedding matrix is vocab x d_model, once
        per untied use; learned positions add max_length x d_model to each stack; the output
        bias adds vocab_size.
        """
        d, h = self.d_model, self.num_heads
        attention = (d * h * self.key_dim + h * self.key_dim) * 2
        attention += d * h * self.value_dim + h * self.value_dim
        attention += h * self.value_dim * d + d
        feed_forward = d * self.d_ff + self.d_ff + self.d_ff * d + d
        norm = 2 * d
        encoder_layer = attention + feed_forward + 2 * norm
        decoder_layer = 2 * attention + feed_forward + 3 * norm
        total = self.num_layers * (encoder_layer + decoder_layer)
        embedding = self.vocab_size * d
        if self.output_bias:
            total += self.vocab_size
        total += {"all": 1, "target": 2, "none": 3}[self.shared_embeddings] * embedding
        if self.positional == "learned":
            total += 2 * self.max_length * d  # one table for the encoder, one for the decoder
        if self.norm_position == "pre":
            total += 2 * norm  # the final LayerNorm of each stack
        return total


def _validate(config):
    def fail(field, message):
        raise UserInputError(f"TransformerConfig.{field}={getattr(config, field)!r}: {message}")

    for field in ("vocab_size", "num_layers", "d_model", "d_ff", "num_heads", "max_length"):
        value = getattr(config, field)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            fail(field, "must be a positive integer")
    for field in ("key_dim", "value_dim"):
        value = getattr(config, field)
        if value is not None and (not isinstance(value, int) or value <= 0):
            fail(field, "must be a positive integer or None (= d_model / num_heads)")
    if (config.key_dim is None or config.value_dim is None) and config.d_model % config.num_heads:
        fail(
            "num_heads",
            f"must divide d_model={config.d_model} unless key_dim and value_dim are set",
        )
    for field in ("dropout", "label_smoothing", "attention_dropout", "relu_dropout"):
        value = getattr(config, field)
        if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
            fail(field, "must be a number in [0, 1)")
    if not isinstance(config.output_bias, bool):
        fail("output_bias", "must be true or false")
    choices = {
        "positional": ("sinusoidal", "learned"),
        "shared_embeddings": ("all", "target", "none"),
        "norm_position": ("post", "pre"),
        "activation": ACTIVATIONS,
    }
    for field, allowed in choices.items():
        if getattr(config, field) not in allowed:
            fail(field, f"must be one of {allowed}")
    for field in ("pad_id", "bos_id", "eos_id", "unk_id"):
        value = getattr(config, field)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            fail(field, "must be a non-negative integer")
        if value >= config.vocab_size:
            fail(field, f"must be below vocab_size={config.vocab_size}")
    # Decoding stops at eos and forbids pad and bos: eos must be neither.
    for field in ("pad_id", "bos_id"):
        if getattr(config, field) == config.eos_id:
            fail("eos_id", f"must differ from {field}={getattr(config, field)}")


# -- presets -----------------------------------------------------------------------------------

_BASE = dict(
    num_layers=6,
    d_model=512,
    d_ff=2048,
    num_heads=8,
    key_dim=64,
    value_dim=64,
    dropout=0.1,
    label_smoothing=0.1,
)


def _row(**changes):
    return {**_BASE, **changes}


PRESETS = {
    "base": _row(),
    "big": _row(d_model=1024, d_ff=4096, num_heads=16, dropout=0.3),
    "big_en_fr": _row(d_model=1024, d_ff=4096, num_heads=16, dropout=0.1),
    # (A): heads vary at constant computation, d_k = d_v = d_model / h.
    **{f"A.h={h}": _row(num_heads=h, key_dim=512 // h, value_dim=512 // h) for h in (1, 4, 16, 32)},
    # (B): attention key size alone.
    **{f"B.d_k={k}": _row(key_dim=k) for k in (16, 32)},
    # (C): model size.
    **{f"C.N={n}": _row(num_layers=n) for n in (2, 4, 8)},
    "C.d_model=256": _row(d_model=256, key_dim=32, value_dim=32),
    "C.d_model=1024": _row(d_model=1024, key_dim=128, value_dim=128),
    **{f"C.d_ff={f}": _row(d_ff=f) for f in (1024, 4096)},
    # (D): regularization.
    **{f"D.P_drop={p}": _row(dropout=p) for p in (0.0, 0.2)},
    **{f"D.eps_ls={e}": _row(label_smoothing=e) for e in (0.0, 0.2)},
    # (E): learned positional embedding.
    "E.learned": _row(positional="learned"),
    # Section 6.3: "a 4-layer transformer with d_model = 1024"; vocabulary 16K (WSJ only) or
    # 32K (semi-supervised).
    "parsing_wsj": _row(num_layers=4, d_model=1024, key_dim=128, value_dim=128, vocab_size=16000),
    "parsing_semi": _row(num_layers=4, d_model=1024, key_dim=128, value_dim=128, vocab_size=32000),
}

# The paper's Table 3 "params x10^6" column; None where it is blank.
TABLE3 = {
    "base": 65,
    "A.h=1": None,
    "A.h=4": None,
    "A.h=16": None,
    "A.h=32": None,
    "B.d_k=16": 58,
    "B.d_k=32": 60,
    "C.N=2": 36,
    "C.N=4": 50,
    "C.N=8": 80,
    "C.d_model=256": 28,
    "C.d_model=1024": 168,
    "C.d_ff=1024": 53,
    "C.d_ff=4096": 90,
    "D.P_drop=0.0": None,
    "D.P_drop=0.2": None,
    "D.eps_ls=0.0": None,
    "D.eps_ls=0.2": None,
    "E.learned": None,
    "big": 213,
}

# Subword vocabulary sizes of section 5.1.
VOCAB_SIZES = {"en_de": 37000, "en_fr": 32000}


def round_up_to_multiple(value, multiple=8):
    """Vocabulary sizes are rounded up to a multiple of 8 for efficient matmuls."""
    return int(math.ceil(value / multiple) * multiple)
