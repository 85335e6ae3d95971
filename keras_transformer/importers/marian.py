"""OPUS-MT (Marian) checkpoints in the Hugging Face layout, as `MarianMTModel` saves them.

The source is a folder holding `config.json`, `model.safetensors` (or its sharded index, or
`pytorch_model.bin`), `source.spm`, `target.spm`, `vocab.json`, optionally
`target_vocab.json` and `generation_config.json`, or a hub id such as
`Helsinki-NLP/opus-mt-en-de`, fetched with `huggingface_hub` (its cache and
`HF_HUB_OFFLINE` honoured).

What a `MarianMTModel` computes, and where it goes in the `Transformer`:

- post-norm layers, embeddings times sqrt(d_model), sinusoidal positions from 0, biases on
  every projection: the paper's model. Marian puts the sines in the first half of d_model and
  the cosines in the second, the paper interleaves them: every weight is permuted along the
  model dimension (`half_split_to_interleaved`), which LayerNorm, attention and the tied
  output product do not see, so the imported model computes the same logits exactly;
- `activation_function` -> `activation` (swish/silu, relu, gelu); `final_logits_bias` ->
  `output_bias`; LayerNorm epsilon 1e-5 (torch's default, which Marian's layers use);
- `pad_token_id`, `eos_token_id`, `decoder_start_token_id` -> `pad_id`, `eos_id`, `bos_id`
  (OPUS-MT starts decoding from `<pad>`), `<unk>` of `vocab.json` -> `unk_id`;
- `share_encoder_decoder_embeddings` and `tie_word_embeddings` -> `shared_embeddings`:
  both -> "all", tied output only -> "target", neither -> "none";
- `dropout`, `attention_dropout`, `activation_dropout` -> `dropout`, `attention_dropout`,
  `relu_dropout` (training only); `max_position_embeddings` -> `max_length`.

Accepted without effect on the function: `use_cache`, `init_std` (initialisation),
`bos_token_id` (Marian puts no bos on either side), `forced_eos_token_id` (eos at the
length limit, where our searches stop too), `extra_pos_embeddings`, `bad_words_ids` naming
only `<pad>` (the start token: never a next token in our searches), output and export
switches.

Refused, with the field and its value (the model would compute something else):
`normalize_before` (pre-norm with Marian's placement), `normalize_embedding` /
`layernorm_embedding` (a LayerNorm on the embeddings), `add_final_layer_norm`,
`static_position_embeddings: false` (learned positions), `add_bias_logits`, `scale_embedding:
false`, unequal `encoder_*` / `decoder_*` layers, heads or ffn widths, `decoder_vocab_size` other
than `vocab_size`, nonzero `*_layerdrop`, `tie_encoder_decoder`, `pruned_heads`, an activation
other than swish/silu, relu or gelu, a model type other than marian, an encoder-only or
decoder-only model, tied embeddings with an untied output (no `shared_embeddings` value
holds it), a position table that is not the sinusoid, tensors the model has no place for,
and decoding settings our searches do not have (`do_sample`, `num_beam_groups`,
`no_repeat_ngram_size`, `encoder_no_repeat_ngram_size`, `repetition_penalty`, `min_length`,
`diversity_penalty`, `bad_words_ids` beyond the start token).

The published decoding defaults (`generation_config.json`, else `config.json`) become the
run's `decoding.json`: `beam_size` (num_beams, 1 when unset, as transformers), `length_penalty`
"power" with `alpha` (length_penalty, 1.0 when unset) and, when given, `max_length`
(transformers' count: the decoder's start token included).

Example:
    >>> from keras_transformer.importers import import_checkpoint
    >>> import_checkpoint("marian", "Helsinki-NLP/opus-mt-en-de", "runs/opus-mt-en-de")  # doctest: +SKIP
    'runs/opus-mt-en-de'
"""

import json
import os
import re

import numpy as np

from keras_transformer.errors import UserInputError
from keras_transformer.importers._common import (
    OUTPUT_BIAS,
    ImportedModel,
    half_split_to_interleaved,
)

# Files of the Hugging Face layout: name -> whether required.
VOCABULARY_FILES = {
    "source.spm": True,
    "target.spm": True,
    "vocab.json": True,
    "target_vocab.json": False,
}
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
HUB_PATTERNS = (
    "config.json",
    "generation_config.json",
    "*.spm",
    "vocab.json",
    "target_vocab.json",
    "tokenizer_config.json",
)
ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu"}
LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's default, which every Marian LayerNorm takes
# A hub id: OWNER/NAME (a local folder of that name wins).
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")

# Field: (the value that keeps the model ours, why another one is refused). A missing field
# means the keeping value (transformers' default).
_REQUIRED = {
    "normalize_before": (False, "pre-norm layers (LayerNorm before each sub-layer)"),
    "normalize_embedding": (False, "a LayerNorm on the embeddings"),
    "layernorm_embedding": (False, "a LayerNorm on the embeddings"),
    "add_final_layer_norm": (False, "a final LayerNorm after each stack"),
    "static_position_embeddings": (True, "learned positions where Marian's are sinusoids"),
    "add_bias_logits": (False, "a separate logits bias layer"),
    "scale_embedding": (True, "embeddings not multiplied by sqrt(d_model)"),
    "encoder_layerdrop": (0.0, "LayerDrop, which the model has no setting for"),
    "decoder_layerdrop": (0.0, "LayerDrop, which the model has no setting for"),
    "tie_encoder_decoder": (False, "encoder and decoder layers sharing weights"),
    "is_encoder_decoder": (True, "not an encoder-decoder"),
    "is_decoder": (False, "a decoder-only model"),
    "pruned_heads": ({}, "pruned attention heads (layers with fewer heads)"),
}
_DECODING_REQUIRED = {
    "do_sample": False,
    "num_beam_groups": 1,
    "diversity_penalty": 0.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "repetition_penalty": 1.0,
    "min_length": 0,
}


def read_checkpoint(source, progress=print):
    """Reads and checks an OPUS-MT checkpoint (see the module docstring).

    Args:
        source: a local folder in the Hugging Face layout, or a hub id.
        progress: called with one line per stage.

    Returns:
        An `ImportedModel`.

    Raises:
        UserInputError: a missing file, an unreachable hub, or a model this project's
            `Transformer` cannot hold (naming the field and its value).
    """
    folder = resolve_source(source, progress)
    check_files(folder)
    hf_config = _read_json(os.path.join(folder, "config.json"))
    vocab = _read_json(os.path.join(folder, "vocab.json"))
    generation_path = os.path.join(folder, "generation_config.json")
    generation = _read_json(generation_path) if os.path.isfile(generation_path) else {}
    config = transformer_config(hf_config, vocab)
    decoding = decoding_defaults(hf_config, generation)
    progress(
        f"config: {config.num_layers} + {config.num_layers} layers, d_model {config.d_model}, "
        f"{config.num_heads} heads, d_ff {config.d_ff}, vocabulary {config.vocab_size}, "
        f"activation {config.activation}, embeddings shared: {config.shared_embeddings}"
    )
    checkpoint = read_weights(folder)
    progress(f"read {len(checkpoint)} tensors")
    weights = map_weights(checkpoint, config)
    files = {
        name: os.path.join(folder, name)
        for name in VOCABULARY_FILES
        if os.path.isfile(os.path.join(folder, name))
    }
    return ImportedModel(config, weights, files, decoding, source=str(source))


# -- the source ----------------------------------------------------------------------------


def resolve_source(source, progress=print):
    """The local folder of `source`: the folder itself, or the hub snapshot of a hub id."""
    source = os.fspath(source)
    if os.path.isdir(source):
        return source
    if os.path.exists(source):
        raise UserInputError(
            f"--model {source} is a file; give the checkpoint's folder (config.json, "
            "model.safetensors, source.spm, ...) or a hub id such as Helsinki-NLP/opus-mt-en-de"
        )
    if not _HUB_ID.fullmatch(source):
        raise UserInputError(
            f"--model {source}: no such folder, and not a hub id (OWNER/NAME, such as "
            "Helsinki-NLP/opus-mt-en-de)"
        )
    try:
        import huggingface_hub
    except ImportError:
        raise UserInputError(
            f"--model {source}: no such folder, and downloading a hub model needs "
            "huggingface_hub (pip install 'keras-nmt-transformer[hub]'); or download the "
            "model's folder elsewhere and give its path"
        ) from None
    progress(f"fetching {source} from the Hugging Face hub (or its cache)")
    try:
        folder = huggingface_hub.snapshot_download(source, allow_patterns=list(HUB_PATTERNS))
        if not os.path.isfile(os.path.join(folder, "config.json")):
            raise UserInputError(f"--model {source}: the hub repository has no config.json")
        # safetensors first; the pickled weights only for models that have no other.
        for patterns in (["model.safetensors*"], ["pytorch_model.bin"]):
            folder = huggingface_hub.snapshot_download(source, allow_patterns=patterns)
            if any(os.path.isfile(os.path.join(folder, name)) for name in WEIGHT_FILES):
                break
    except UserInputError:
        raise
    except Exception as error:  # offline, unknown repository, network: one message for all
        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
        hint = (
            "HF_HUB_OFFLINE is set and the model is not in the hub cache: unset it once to "
            "download the model"
            if offline
            else "check the id and the network, or download the model's folder elsewhere "
            "and give its path"
        )
        raise UserInputError(
            f"--model {source}: could not fetch it from the Hugging Face hub "
            f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
            f"{hint}"
        ) from None
    return folder


def check_files(folder):
    """Refuses a folder that lacks a file the import needs, naming every missing one."""
    missing = [
        name
        for name, required in VOCABULARY_FILES.items()
        if required and not os.path.isfile(os.path.join(folder, name))
    ]
    if not os.path.isfile(os.path.join(folder, "config.json")):
        missing.insert(0, "config.json")
    if not any(os.path.isfile(os.path.join(folder, name)) for name in WEIGHT_FILES):
        missing.append(" or ".join(WEIGHT_FILES))
    if missing:
        raise UserInputError(
            f"{folder} is not an OPUS-MT checkpoint in the Hugging Face layout: it has no "
            f"{', '.join(missing)}"
        )


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserInputError(f"{path}: not readable JSON ({error})") from None


# -- the configuration -----------------------------------------------------------------------


def _refuse(field, value, why):
    raise UserInputError(
        f"config.json {field}={json.dumps(value)}: {why}; this project's Transformer cannot "
        "hold it, so the model is not imported"
    )


def transformer_config(hf_config, vocab):
    """The `TransformerConfig` that computes what a `MarianConfig` (a dict of config.json)
    computes, with `unk_id` from `vocab` (vocab.json); refuses what it cannot hold."""
    from keras_transformer.config import TransformerConfig

    def get(field, default=None):
        return hf_config.get(field, default)

    if get("model_type") != "marian":
        _refuse("model_type", get("model_type"), "not a Marian model")
    for field, (keeping, why) in _REQUIRED.items():
        value = get(field, keeping)
        if value != keeping and not (keeping == {} and not value):
            _refuse(field, value, why)
    for name in ("layers", "attention_heads", "ffn_dim"):
        encoder, decoder = get(f"encoder_{name}"), get(f"decoder_{name}")
        if encoder != decoder:
            _refuse(
                f"decoder_{name}",
                decoder,
                f"differs from encoder_{name}={encoder}; the model has one value for both",
            )
    vocab_size = get("vocab_size")
    if get("decoder_vocab_size", vocab_size) not in (None, vocab_size):
        _refuse(
            "decoder_vocab_size",
            get("decoder_vocab_size"),
            f"differs from vocab_size={vocab_size}; the model has one vocabulary size",
        )
    activation = get("activation_function", "gelu")
    if activation not in ACTIVATIONS:
        _refuse(
            "activation_function",
            activation,
            f"an activation the model does not have (it has {', '.join(ACTIVATIONS)})",
        )
    eos = get("eos_token_id", 0)
    if isinstance(eos, list):
        if len(eos) != 1:
            _refuse("eos_token_id", eos, "several end tokens; the model has one")
        eos = eos[0]
    share = get("share_encoder_decoder_embeddings", True)
    tie = get("tie_word_embeddings", True)
    if share and not tie:
        _refuse(
            "tie_word_embeddings",
            tie,
            "with share_encoder_decoder_embeddings=true: one matrix for both embeddings and "
            "another for the output, which shared_embeddings cannot express",
        )
    if "<unk>" not in vocab:
        raise UserInputError("vocab.json has no <unk>: not an OPUS-MT vocabulary")
    pad = get("pad_token_id")
    for name, token_id in (("pad_token_id", pad), ("eos_token_id", eos)):
        if not isinstance(token_id, int) or not 0 <= token_id < vocab_size:
            _refuse(name, token_id, f"not an id of the {vocab_size}-token vocabulary")
    return TransformerConfig(
        vocab_size=vocab_size,
        num_layers=get("encoder_layers"),
        d_model=get("d_model"),
        d_ff=get("encoder_ffn_dim"),
        num_heads=get("encoder_attention_heads"),
        dropout=float(get("dropout", 0.1)),
        attention_dropout=float(get("attention_dropout", 0.0)),
        relu_dropout=float(get("activation_dropout", 0.0)),
        positional="sinusoidal",
        max_length=get("max_position_embeddings", 1024),
        shared_embeddings="all" if share else ("target" if tie else "none"),
        norm_position="post",
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        activation=ACTIVATIONS[activation],
        output_bias=True,
        pad_id=pad,
        bos_id=get("decoder_start_token_id", pad),
        eos_id=eos,
        unk_id=vocab["<unk>"],
    )


def decoding_defaults(hf_config, generation):
    """`decoding.json`'s values from `generation_config.json` (a dict; `{}` when absent),
    else config.json; refuses settings our searches do not have."""
    source = generation if generation else hf_config
    name = "generation_config.json" if generation else "config.json"
    for field, keeping in _DECODING_REQUIRED.items():
        value = source.get(field, keeping)
        if value not in (keeping, None):
            raise UserInputError(
                f"{name} {field}={json.dumps(value)}: a decoding setting that this project's "
                "searches do not have, so they would not give the published translations; the "
                "model is not imported"
            )
    # Our searches forbid the start token (OPUS-MT's <pad>) and nothing else.
    forbidden = source.get("bad_words_ids") or []
    allowed = [[hf_config.get("pad_token_id")], [hf_config.get("decoder_start_token_id")]]
    if any(ids not in allowed for ids in forbidden):
        raise UserInputError(
            f"{name} bad_words_ids={json.dumps(forbidden)}: this project's searches forbid "
            "only the decoder's start token, so they would not give the published "
            "translations; the model is not imported"
        )
    decoding = {
        "beam_size": int(source.get("num_beams") or 1),
        "length_penalty": "power",
        # transformers' default length_penalty is 1.0 (its power form: log P / |Y|).
        "alpha": float(1.0 if source.get("length_penalty") is None else source["length_penalty"]),
    }
    if source.get("max_length") is not None:
        decoding["max_length"] = int(source["max_length"])
    return decoding


# -- the weights -------------------------------------------------------------------------------


def read_weights(folder):
    """Every tensor of the checkpoint as a float32 NumPy array: safetensors without torch,
    `pytorch_model.bin` through torch with `weights_only=True` (no pickled code runs)."""
    single = os.path.join(folder, "model.safetensors")
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(single) or os.path.isfile(index):
        try:
            from safetensors.numpy import load_file
        except ImportError:
            raise UserInputError(
                f"{folder} holds its weights as safetensors: pip install safetensors (or "
                "'keras-nmt-transformer[hub]')"
            ) from None

        shards = (
            [single]
            if os.path.isfile(single)
            else sorted({os.path.join(folder, s) for s in _read_json(index)["weight_map"].values()})
        )
        tensors = {}
        for shard in shards:
            tensors.update(load_file(shard))
    else:
        try:
            import torch
        except ImportError:
            raise UserInputError(
                f"{folder} holds its weights as pytorch_model.bin, which only torch reads; "
                "install torch (CPU is enough), or convert the weights to model.safetensors"
            ) from None
        state = torch.load(
            os.path.join(folder, "pytorch_model.bin"), map_location="cpu", weights_only=True
        )
        tensors = {name: tensor.float().numpy() for name, tensor in state.items()}
    return {name: np.asarray(value, dtype="float32") for name, value in tensors.items()}


def map_weights(checkpoint, config):
    """`ImportedModel.weights` from Marian's tensors (a dict, emptied as it is read): torch's
    `[output, input]` matrices transposed, and the model dimension permuted from Marian's
    [sin | cos] layout to the paper's interleaved one wherever a tensor has it."""
    checkpoint = dict(checkpoint)
    permutation = half_split_to_interleaved(config.d_model)
    weights = {}

    def take(name):
        if name not in checkpoint:
            raise UserInputError(f"the checkpoint has no tensor {name}: not a MarianMTModel")
        return checkpoint.pop(name)

    def linear(theirs, ours, model_dim_in, model_dim_out):
        kernel, bias = take(f"{theirs}.weight").T, take(f"{theirs}.bias")
        if model_dim_in:
            kernel = kernel[permutation, :]
        if model_dim_out:
            kernel, bias = kernel[:, permutation], bias[permutation]
        weights[f"{ours}/kernel"], weights[f"{ours}/bias"] = kernel, bias

    def layer_norm(theirs, ours):
        weights[f"{ours}/gamma"] = take(f"{theirs}.weight")[permutation]
        weights[f"{ours}/beta"] = take(f"{theirs}.bias")[permutation]

    for stack in ("encoder", "decoder"):
        attentions = [("self_attn", "self_attention")]
        if stack == "decoder":
            attentions.append(("encoder_attn", "cross_attention"))
        for index in range(config.num_layers):
            theirs, ours = f"model.{stack}.layers.{index}", f"{stack}/layer_{index}"
            for their_name, our_name in attentions:
                for projection, dense in (
                    ("q_proj", "query"),
                    ("k_proj", "key"),
                    ("v_proj", "value"),
                ):
                    linear(
                        f"{theirs}.{their_name}.{projection}",
                        f"{ours}/{our_name}/{dense}",
                        True,
                        False,
                    )
                linear(f"{theirs}.{their_name}.out_proj", f"{ours}/{our_name}/output", False, True)
                layer_norm(
                    f"{theirs}.{their_name}_layer_norm", f"{ours}/{our_name}_residual/layer_norm"
                )
            linear(f"{theirs}.fc1", f"{ours}/feed_forward/inner", True, False)
            linear(f"{theirs}.fc2", f"{ours}/feed_forward/output", False, True)
            layer_norm(f"{theirs}.final_layer_norm", f"{ours}/feed_forward_residual/layer_norm")

    for name, matrix in _embeddings(checkpoint, config).items():
        weights[f"{name}/embeddings"] = matrix[:, permutation]
    bias = checkpoint.pop("final_logits_bias", np.zeros((1, config.vocab_size), "float32"))
    weights[OUTPUT_BIAS] = bias.reshape(-1)
    for stack in ("encoder", "decoder"):
        table = checkpoint.pop(f"model.{stack}.embed_positions.weight", None)
        if table is not None:
            _check_positions(f"model.{stack}.embed_positions.weight", table, permutation)
    if checkpoint:
        raise UserInputError(
            f"the checkpoint has tensors the model has no place for: {', '.join(sorted(checkpoint))}"
        )
    return weights


# Names under which a checkpoint may hold each embedding matrix (tied ones are saved once,
# under any of their names).
_SOURCE = "model.encoder.embed_tokens.weight"
_TARGET = "model.decoder.embed_tokens.weight"
_OUTPUT = "lm_head.weight"
_SHARED = "model.shared.weight"


def _embeddings(checkpoint, config):
    """Our embedding matrices by layer name (Marian's layout), one per tied group, each
    checked equal under every name it is saved under."""
    groups = {
        "all": {"shared_embedding": (_SHARED, _SOURCE, _TARGET, _OUTPUT)},
        "target": {"source_embedding": (_SOURCE,), "target_embedding": (_TARGET, _OUTPUT)},
        "none": {
            "source_embedding": (_SOURCE,),
            "target_embedding": (_TARGET,),
            "output_projection": (_OUTPUT,),
        },
    }[config.shared_embeddings]
    matrices = {}
    for layer, names in groups.items():
        present = [name for name in names if name in checkpoint]
        if not present:
            raise UserInputError(f"the checkpoint has none of {', '.join(names)}")
        first = checkpoint[present[0]]
        for name in present[1:]:
            if not np.array_equal(checkpoint[name], first):
                raise UserInputError(
                    f"the checkpoint's {name} differs from its {present[0]}, but config.json "
                    "ties them (share_encoder_decoder_embeddings / tie_word_embeddings)"
                )
        for name in present:
            checkpoint.pop(name)
        if first.shape != (config.vocab_size, config.d_model):
            raise UserInputError(
                f"the checkpoint's {present[0]} is {first.shape}, config.json says "
                f"vocab_size {config.vocab_size} x d_model {config.d_model}"
            )
        matrices[layer] = first
    if config.shared_embeddings != "all" and _SHARED in checkpoint:
        checkpoint.pop(_SHARED)  # transformers keeps an unused one when not sharing
    return matrices


def _check_positions(name, table, permutation):
    """Refuses a saved position table that is not Marian's sinusoid (learned or shifted
    positions would be silently replaced by ours)."""
    from keras import ops

    from keras_transformer.layers.positional import sinusoidal_positional_encoding

    length, width = table.shape
    ours = ops.convert_to_numpy(sinusoidal_positional_encoding(np.arange(length), width))
    # float32 sines of angles up to `length` differ in the 5th decimal from float64's.
    if not np.allclose(table[:, permutation], ours, atol=1e-3):
        raise UserInputError(
            f"the checkpoint's {name} is not the sinusoidal table of Marian's positions (learned "
            "or shifted positions), which the model cannot hold"
        )
