"""An OPUS-MT-style model trained by transformers itself, for checking the importer on real text.

Trains a small `MarianMTModel` (swish, post-norm, scaled embeddings, one shared embedding
matrix, OPUS-MT's special ids: `</s>` 0, `<unk>` 1, `<pad>` last and the decoder's start) with
PyTorch and transformers on Multi30k English-German, with two SentencePiece models (one per
side, as OPUS-MT has) and one `vocab.json`, and saves it with `save_pretrained` in the
Hugging Face layout that `keras-transformer import --format marian` reads. No code of this
project takes part in the training, so the checks of `benchmarks.opus_mt_acceptance` on it
compare the importer with a model that only transformers has seen.

    KT_DATA_DIR=../shared/data python -m benchmarks.marian_reference --output marian-m30k

Ends with one JSON line: the folder, the architecture, the steps, the last loss and the
seconds.
"""

import argparse
import gzip
import json
import os
import pathlib
import sys
import time

# A small Transformer of OPUS-MT's shape: trains in minutes on a CPU to captions that read.
ARCHITECTURE = dict(
    d_model=256,
    encoder_layers=3,
    decoder_layers=3,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=1024,
    decoder_ffn_dim=1024,
    max_position_embeddings=256,
    activation_function="swish",
    scale_embedding=True,
    dropout=0.1,
    attention_dropout=0.0,
    activation_dropout=0.0,
    share_encoder_decoder_embeddings=True,
    tie_word_embeddings=True,
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True, help="the checkpoint folder to write (new)")
    parser.add_argument("--data-dir", default=os.environ.get("KT_DATA_DIR"))
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=64, help="sentence pairs per step")
    parser.add_argument("--vocab-size", type=int, default=4000, help="pieces per side")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--d-model", type=int, default=ARCHITECTURE["d_model"])
    parser.add_argument("--layers", type=int, default=ARCHITECTURE["encoder_layers"])
    return parser.parse_args(argv)


def read_lines(path):
    with gzip.open(path, "rt", encoding="utf-8") as file:
        return [line.rstrip("\n") for line in file]


def train_sentencepiece(path, sentences, vocab_size):
    import sentencepiece

    with open(path, "wb") as model:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model,
            vocab_size=vocab_size,
            model_type="unigram",
            character_coverage=1.0,
            hard_vocab_limit=False,  # a small corpus may hold fewer pieces
            minloglevel=2,
        )


def marian_vocab(source_model, target_model, language_tokens=()):
    """OPUS-MT's order: `</s>` 0, `<unk>` 1, the `language_tokens` (`>>deu<<`, ...), the source
    pieces, the target pieces not in them yet, `<pad>` last (SentencePiece's own control pieces
    left out)."""
    import sentencepiece

    vocab = {"</s>": 0, "<unk>": 1}
    for token in language_tokens:
        vocab[token] = len(vocab)
    for path in (source_model, target_model):
        processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
        for piece_id in range(processor.get_piece_size()):
            if not (processor.is_control(piece_id) or processor.is_unknown(piece_id)):
                vocab.setdefault(processor.id_to_piece(piece_id), len(vocab))
    vocab["<pad>"] = len(vocab)
    return vocab


def write_vocabulary(folder, sources, targets, vocab_size):
    """`source.spm`, `target.spm`, `vocab.json` in `folder`; returns the tokenizer."""
    from transformers import MarianTokenizer

    train_sentencepiece(folder / "source.spm", sources, vocab_size)
    train_sentencepiece(folder / "target.spm", targets, vocab_size)
    vocab = marian_vocab(folder / "source.spm", folder / "target.spm")
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=1))
    return MarianTokenizer(
        source_spm=str(folder / "source.spm"),
        target_spm=str(folder / "target.spm"),
        vocab=str(folder / "vocab.json"),
    )


def architecture(args):
    """`ARCHITECTURE` at `--d-model` (4 heads, feed-forward 4 x d_model) and `--layers`."""
    return dict(
        ARCHITECTURE, d_model=args.d_model, encoder_ffn_dim=4 * args.d_model,
        decoder_ffn_dim=4 * args.d_model, encoder_layers=args.layers, decoder_layers=args.layers,
    )  # fmt: skip


def new_model(vocab_size, pad_id, shape):
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    special = dict(
        pad_token_id=pad_id, decoder_start_token_id=pad_id, eos_token_id=0, bos_token_id=0
    )
    config = MarianConfig(
        vocab_size=vocab_size, decoder_vocab_size=vocab_size, forced_eos_token_id=0,
        **special, **shape,
    )  # fmt: skip
    model = MarianMTModel(config)
    # OPUS-MT's published generation settings, with a length that fits this model.
    model.generation_config = GenerationConfig(
        bad_words_ids=[[pad_id]], forced_eos_token_id=0, num_beams=4, max_length=128, **special
    )
    return model


def train(model, tokenizer, sources, targets, args, log):
    """Adam with the paper's warm-up and inverse square root decay, label smoothing 0.1."""
    import torch

    generator = torch.Generator().manual_seed(args.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    warmup, d_model = 400, args.d_model
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: d_model**-0.5 * min((step + 1) ** -0.5, (step + 1) * warmup**-1.5)
    )
    model.train()
    loss = None
    for step in range(1, args.steps + 1):
        rows = torch.randint(len(sources), (args.batch_size,), generator=generator).tolist()
        batch = tokenizer(
            [sources[i] for i in rows],
            text_target=[targets[i] for i in rows],
            padding=True,
            truncation=True,
            max_length=128,
            return_tensors="pt",
        )
        labels = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
        logits = model(**{**batch, "labels": labels}).logits
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), labels.flatten(), ignore_index=-100, label_smoothing=0.1
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 100 == 0 or step == args.steps:
            log(f"step {step}/{args.steps}: loss {loss.item():.3f}")
    return model.eval(), float(loss.item())


def main(argv=None):
    args = parse_args(argv)
    if not args.data_dir:
        raise SystemExit("set KT_DATA_DIR or --data-dir: the folder that holds multi30k/")
    folder = pathlib.Path(args.output)
    if folder.exists():
        raise SystemExit(f"{folder} exists; name a new folder with --output")
    import torch

    torch.manual_seed(args.seed)
    started = time.perf_counter()
    sources = read_lines(os.path.join(args.data_dir, "multi30k", "train.en.gz"))
    targets = read_lines(os.path.join(args.data_dir, "multi30k", "train.de.gz"))
    folder.mkdir(parents=True)
    tokenizer = write_vocabulary(folder, sources, targets, args.vocab_size)
    shape = architecture(args)
    model = new_model(len(tokenizer.encoder), tokenizer.pad_token_id, shape)

    def log(line):
        print(f"# {line} ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)

    model, loss = train(model, tokenizer, sources, targets, args, log)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    record = {
        "folder": str(folder),
        **{k: shape[k] for k in ("d_model", "encoder_layers", "encoder_ffn_dim")},
        "vocab_size": len(tokenizer.encoder),
        "steps": args.steps,
        "batch_size": args.batch_size,
        "last_loss": round(loss, 4),
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
