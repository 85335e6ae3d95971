"""A tiny OPUS-MT-style checkpoint in the Hugging Face layout, written with no download.

`marian_folder(tmp_path_factory, activation=..., weights=...)` writes, once per test session
and variant, what `save_pretrained` leaves for an OPUS-MT model: `config.json`,
`generation_config.json`, `model.safetensors` (or `pytorch_model.bin`), `source.spm`,
`target.spm`, `vocab.json` and the tokenizer's own files. The model is a `MarianMTModel`
(d_model 32, 2 + 2 layers, 4 heads, ffn 64) with every parameter drawn at random, biases,
LayerNorms and `final_logits_bias` included: Hugging Face's zeros and ones would hide a
mapping error (a bias on the wrong side, a swapped gamma and beta). The two SentencePiece
models are trained on different texts, as OPUS-MT's source and target models are, and
`vocab.json` follows OPUS-MT's order: `</s>` 0, `<unk>` 1, a language token `>>deu<<`, the
pieces of both sides, `<pad>` last.
"""

import json
import pathlib

SOURCE_SENTENCES = [
    "the cat sat on the mat",
    "a dog runs in the park",
    "the children play with a red ball",
    "we read books in the evening",
    "my brother drives a small car",
    "the weather is cold today",
    "she drinks coffee every morning",
    "they walk to the station",
]
TARGET_SENTENCES = [
    "die katze sitzt auf der matte",
    "ein hund läuft im park",
    "die kinder spielen mit einem roten ball",
    "wir lesen am abend bücher",
    "mein bruder fährt ein kleines auto",
    "das wetter ist heute kalt",
    "sie trinkt jeden morgen kaffee",
    "sie gehen zum bahnhof",
]
LANGUAGE_TOKEN = ">>deu<<"
# The architecture of every variant; `write_marian_folder` takes overrides.
TINY_ARCHITECTURE = dict(
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=64,
)
# OPUS-MT's published decoding settings, with a maximum length that fits the tiny model.
GENERATION = dict(num_beams=4, max_length=40)

# Added to eos's logits bias: random weights alone almost never choose eos (outputs repeat a
# token or two up to the length limit); with it, beams hold hypotheses that end at several
# lengths beside ones that reach the limit.
EOS_BIAS = 6.0

_FOLDERS = {}


def train_sentencepiece(path, sentences, vocab_size=40):
    """Trains a unigram SentencePiece model of `sentences` (single-threaded, no sampling, so
    the same pieces every time) and writes it to `path`; returns `path`."""
    import io

    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences * 10),
        model_writer=model,
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        num_threads=1,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    pathlib.Path(path).write_bytes(model.getvalue())
    return path


def marian_vocab(source_model, target_model, language_tokens=(LANGUAGE_TOKEN,)):
    """OPUS-MT's `vocab.json` mapping for two SentencePiece models, with the language tokens
    (`benchmarks.marian_reference.marian_vocab`: `</s>` 0, `<unk>` 1, the language tokens, the
    source pieces, the target pieces not in them yet, `<pad>` last)."""
    from benchmarks.marian_reference import marian_vocab as opus_mt_vocab

    return opus_mt_vocab(source_model, target_model, language_tokens)


def tiny_marian_config(vocab_size, pad_id, activation="swish", **overrides):
    """The `MarianConfig` of a tiny OPUS-MT-style model (`TINY_ARCHITECTURE`): post-norm,
    scaled embeddings, one shared embedding matrix, `</s>` 0 as eos, decoding from `<pad>`."""
    from transformers import MarianConfig

    values = dict(
        TINY_ARCHITECTURE,
        vocab_size=vocab_size,
        decoder_vocab_size=vocab_size,
        activation_function=activation,
        scale_embedding=True,
        pad_token_id=pad_id,
        decoder_start_token_id=pad_id,
        eos_token_id=0,
        forced_eos_token_id=0,
        bos_token_id=0,
        dropout=0.1,
        attention_dropout=0.0,
        activation_dropout=0.0,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
    )
    values.update(overrides)
    return MarianConfig(**values)


def randomize_parameters(model, seed=0, eos_bias=EOS_BIAS):
    """Draws every parameter of a `MarianMTModel` at random, in place (seeded): weights and
    biases N(0, 0.15^2), embeddings N(0, 0.5^2) (peaky output distributions without near
    ties, and float32 rounding that stays near 1e-6 in the logits), LayerNorm gamma 1 + N(0, 0.2^2) and beta N(0, 0.2^2), `final_logits_bias`
    N(0, 1) plus `eos_bias` at eos (id 0). The fixed sinusoidal position tables stay as they
    are."""
    import torch

    generator = torch.Generator().manual_seed(seed)

    def normal(tensor, std, mean=0.0):
        noise = torch.randn(tensor.shape, generator=generator, dtype=torch.float32)
        tensor.copy_(mean + std * noise)

    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed_positions" in name:
                continue
            if "layer_norm" in name:
                normal(parameter, 0.2, 1.0 if name.endswith("weight") else 0.0)
            elif "embed_tokens" in name or "shared" in name or "lm_head" in name:
                normal(parameter, 0.5)
            else:
                normal(parameter, 0.15)
        normal(model.final_logits_bias, 1.0)
        model.final_logits_bias[0, 0] += eos_bias
    return model


def write_marian_folder(
    folder, activation="swish", weights="safetensors", seed=0, generation=None, **overrides
):
    """Writes a tiny OPUS-MT-style checkpoint (see the module docstring) into `folder`.

    Args:
        folder: where to write (created).
        activation: MarianConfig.activation_function ("swish" as most OPUS-MT models, "relu").
        weights: "safetensors" (`save_pretrained`'s `model.safetensors`) or "bin"
            (`pytorch_model.bin`, the whole state dict with torch.save, as older OPUS-MT
            uploads hold it, the position tables included).
        seed: the seed of the random parameters.
        generation: `generation_config.json` values (default `GENERATION`).
        overrides: further MarianConfig fields.

    Returns:
        `folder` as a `pathlib.Path`.
    """
    import torch
    from transformers import GenerationConfig, MarianMTModel, MarianTokenizer

    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    source_model = train_sentencepiece(folder / "source.spm", SOURCE_SENTENCES)
    target_model = train_sentencepiece(folder / "target.spm", TARGET_SENTENCES)
    vocab = marian_vocab(source_model, target_model)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=2))
    pad_id = vocab["<pad>"]

    torch.manual_seed(seed)
    config = tiny_marian_config(len(vocab), pad_id, activation, **overrides)
    model = randomize_parameters(MarianMTModel(config).eval(), seed)
    model.generation_config = GenerationConfig(
        bad_words_ids=[[pad_id]],
        bos_token_id=0,
        decoder_start_token_id=pad_id,
        eos_token_id=0,
        forced_eos_token_id=0,
        pad_token_id=pad_id,
        **(GENERATION if generation is None else generation),
    )
    if weights == "safetensors":
        model.save_pretrained(folder)
    elif weights == "bin":
        model.config.save_pretrained(folder)
        model.generation_config.save_pretrained(folder)
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
    else:
        raise ValueError(f"weights must be 'safetensors' or 'bin', got {weights!r}")
    tokenizer = MarianTokenizer(
        source_spm=str(folder / "source.spm"),
        target_spm=str(folder / "target.spm"),
        vocab=str(folder / "vocab.json"),
    )
    tokenizer.save_pretrained(folder)
    return folder


def marian_folder(tmp_path_factory, activation="swish", weights="safetensors", **overrides):
    """The tiny checkpoint of one variant (`write_marian_folder`'s arguments, MarianConfig
    `overrides` included), written once per test session (per pytest-xdist worker) under the
    session's temporary folder and shared by every test that asks."""
    key = (activation, weights, *sorted(overrides.items()))
    if key not in _FOLDERS:
        name = "-".join(["marian", activation, weights] + [f"{k}={v}" for k, v in key[2:]])
        folder = tmp_path_factory.getbasetemp() / name
        _FOLDERS[key] = write_marian_folder(
            folder, activation=activation, weights=weights, **overrides
        )
    return _FOLDERS[key]


def load_marian_model(folder):
    """transformers' `MarianMTModel` of a checkpoint folder, in float32 and eval mode (the
    reference the tests compare with)."""
    import torch
    from transformers import MarianMTModel

    return MarianMTModel.from_pretrained(folder, dtype=torch.float32).eval()


def marian_tokenizer(folder):
    """transformers' `MarianTokenizer` of a checkpoint folder."""
    from transformers import MarianTokenizer

    return MarianTokenizer.from_pretrained(folder)
