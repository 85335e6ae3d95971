"""A peer row for the parsing table: supar's CRF constituency parser trained on the same trees.

Our parser (`pipelines/ptb_parsing.py`) is scored on `wsj_sample.dev` with our EVALB
(COLLINS.prm). This script trains a well-kept parsing library on the same preprocessed
`wsj_sample.train` trees (function tags and `-NONE-` removed, TOP root:
`parsing.trees.read_preprocessed`) and scores it on the same dev trees with the same scorer,
so that the two rows differ only in the parser. The peer is supar 1.1.4's
`CRFConstituencyParser` (Zhang, Zhou and Li, IJCAI 2020: BiLSTM span scores, a tree CRF), with its
published CRF recipe (3-layer BiLSTM of 400, character LSTM features, Adam 2e-3, batches of
5000 tokens) but no pretrained word vectors (none can be fetched here), trained from scratch
on one to a few CPU threads.

Fairness:
- the last `--held-out` training trees (default 200) are supar's dev set for choosing the best
  epoch; the scored dev set is never seen in training or selection;
- supar is given the dev words only (no tags, no trees); its output has `_` tags, so the gold
  tags are put in before EVALB, exactly as for our `XX`-slot parser, and tagging accuracy is
  reported as not measured (`tags_predicted=False`).

What else was tried (2026-11-25): stanza 1.15's constituency parser wants pretrained word
vectors (random ones let it start) and then stops: it scores its dev set during training
with CoreNLP (Java, fetched by `stanza.install_corenlp()`, from no package registry); benepar
0.2.0's package has no training code (it lives in its repository's `src/main.py`); NLTK's
`induce_pcfg` + `ViterbiParser` took 2 s for a 5-word sentence, over 5 s for 8 words (mean dev
length 23), and 204 of the 273 dev sentences hold a word unseen in training (no parse).

Setup (a throwaway environment: supar is not a project dependency; torch 2.13.0 installs as a
CPU build here). supar 1.1.4 saves pickled configs, which torch >= 2.6 refuses to load by
default: the script sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 for the checkpoint it wrote.

    python3 -m venv /tmp/peer_supar
    /tmp/peer_supar/bin/pip install torch==2.13.0 supar==1.1.4

Training stops at `--epochs` or, as our CPU recipes, at a time budget (`--max-minutes`: no
epoch starts after it); the best epoch on the held-out trees is scored. Measured on an idle
2-core AVX-512 EPYC with two threads (2026-11-26, benchmarks/README.md "Peer row"): 56-58 s
per epoch of the 3196 training trees (about 34 updates of supar's 5000-token batches), so
the hour is about 62 epochs; dev F1 86.69. (A first smoke run on one thread of a busy machine
had suggested 13 minutes an epoch.)

    PYTHONPATH=. KT_DATA_DIR=../shared/data /tmp/peer_supar/bin/python \\
        benchmarks/parsing_peer.py --max-minutes 60 --threads 2 --output-dir /tmp/parsing_peer

A smoke test (3 minutes): `--epochs 1 --train-lines 250 --held-out 50 --dev-lines 20`. It
prints EVALB's summary and ends with one JSON line.
"""

import argparse
import os
import sys
import time

# supar 1.1.4 pickles its config into the checkpoint; torch >= 2.6 loads weights only by
# default. The checkpoint is the one this script writes.
os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")

# supar's published CRF constituency recipe (its configs/con.crf.ini), without word vectors.
RECIPE = {
    "encoder": "lstm",
    "feat": ["char"],
    "embed": "",
    "unk": "unk",
    "bert": None,
    "n_embed": 100,
    "n_char_embed": 50,
    "n_char_hidden": 100,
    "n_feat_embed": 100,
    "embed_dropout": 0.33,
    "n_lstm_hidden": 400,
    "n_lstm_layers": 3,
    "encoder_dropout": 0.33,
    "n_span_mlp": 500,
    "n_label_mlp": 100,
    "mlp_dropout": 0.33,
    "lr": 2e-3,
    "mu": 0.9,
    "nu": 0.9,
    "eps": 1e-12,
    "weight_decay": 0,
    "clip": 5.0,
    "decay": 0.75,
    "decay_steps": 5000,
    "update_steps": 1,
    "min_freq": 2,
    "fix_len": 20,
    "max_len": None,
    "buckets": 32,
    "batch_size": 5000,
    # What supar's command line sets: no resumed checkpoint; MBR decoding (predict's default).
    "checkpoint": False,
    "mbr": True,
}


class _TimeUp(Exception):
    """Raised by the wrapped epoch loop when the time budget is spent."""


def _write(trees, path):
    with open(path, "w", encoding="utf-8") as file:
        file.writelines(str(tree) + "\n" for tree in trees)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-dir", default=None, help="the shared data folder (default: $KT_DATA_DIR)"
    )
    parser.add_argument(
        "--output-dir",
        default="/tmp/parsing_peer",
        help="data copies, the model and the parsed dev trees",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=1000,
        help="at most this many epochs (the best on the held-out trees is kept)",
    )
    parser.add_argument(
        "--max-minutes",
        type=float,
        default=None,
        help="no epoch starts after this many minutes of training",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=RECIPE["batch_size"],
        help=f"tokens per update (default: supar's {RECIPE['batch_size']})",
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument(
        "--held-out",
        type=int,
        default=200,
        help="last N training trees used to pick the epoch (default: 200)",
    )
    parser.add_argument(
        "--train-lines",
        type=int,
        default=None,
        help="use only the first N training trees (a smoke test)",
    )
    parser.add_argument(
        "--dev-lines",
        type=int,
        default=None,
        help="score only the first N dev trees (a smoke test)",
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    data_dir = args.data_dir or os.environ.get("KT_DATA_DIR")
    if not data_dir:
        print("parsing_peer: give --data-dir or set KT_DATA_DIR", file=sys.stderr)
        return 2
    try:
        import supar
        import torch
        from supar import CRFConstituencyParser
    except ImportError as error:
        print(
            f"parsing_peer: {error}: install supar in its own environment (see this "
            "script's docstring)",
            file=sys.stderr,
        )
        return 2
    from keras_transformer.parsing.evalb import evaluate
    from keras_transformer.parsing.linearization import with_tags
    from keras_transformer.parsing.trees import parse_tree, read_preprocessed

    train_trees = read_preprocessed(os.path.join(data_dir, "treebank", "wsj_sample.train.trees"))
    dev_trees = read_preprocessed(os.path.join(data_dir, "treebank", "wsj_sample.dev.trees"))
    train_trees = train_trees[: args.train_lines]
    dev_trees = dev_trees[: args.dev_lines]
    if not 0 < args.held_out < len(train_trees):
        print(f"parsing_peer: --held-out must be in [1, {len(train_trees) - 1}]", file=sys.stderr)
        return 2
    os.makedirs(args.output_dir, exist_ok=True)
    train_file = _write(train_trees[: -args.held_out], os.path.join(args.output_dir, "train.trees"))
    held_out_file = _write(
        train_trees[-args.held_out :], os.path.join(args.output_dir, "held_out.trees")
    )
    model_path = os.path.join(args.output_dir, "model")
    pred_file = os.path.join(args.output_dir, "dev.parsed.trees")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    recipe = dict(RECIPE, batch_size=args.batch_size)
    start = time.perf_counter()
    peer = CRFConstituencyParser.build(path=model_path, build=True, train=train_file, **recipe)
    # supar reloads the best checkpoint after training; one that never beat F1 0 (a short smoke
    # run) would leave none, and supar would then try to download `model_path`.
    peer.save(model_path)
    if args.max_minutes is not None:
        deadline = start + 60 * args.max_minutes
        train_epoch = peer._train

        def _train_until_deadline(loader):
            if time.perf_counter() > deadline:
                raise _TimeUp
            train_epoch(loader)

        peer._train = _train_until_deadline
    try:
        peer.train(
            train=train_file,
            dev=held_out_file,
            test=held_out_file,
            epochs=args.epochs,
            patience=args.epochs,
            verbose=True,
            **recipe,
        )
    except _TimeUp:
        pass  # the best epoch so far is saved at model_path
    epochs_trained = peer.epoch - 1
    # The epoch whose model is scored; None: none beat F1 0 and the untrained one is scored.
    best_epoch = peer.best_e if getattr(peer.best_metric, "score", 0) > 0 else None
    train_seconds = time.perf_counter() - start

    peer = CRFConstituencyParser.load(model_path)
    start = time.perf_counter()
    peer.predict(
        data=[tree.leaves() for tree in dev_trees],
        pred=pred_file,
        buckets=8,
        batch_size=5000,
        verbose=False,
    )
    parse_seconds = time.perf_counter() - start
    with open(pred_file, encoding="utf-8") as file:
        parsed = [parse_tree(line, pred_file, number) for number, line in enumerate(file, 1)]
    assert [t.leaves() for t in parsed] == [t.leaves() for t in dev_trees], "order changed"
    # supar predicts no tags ('_'): the gold tags go in, as for our XX-slot parser.
    scored = [
        with_tags(tree, [tag for _, tag in gold.pos()]) for tree, gold in zip(parsed, dev_trees)
    ]
    report = evaluate([str(t) for t in dev_trees], [str(t) for t in scored], tags_predicted=False)
    print(report.format())
    print(
        report.to_json(
            benchmark="parsing_peer",
            peer=f"supar {supar.__version__} CRFConstituencyParser",
            torch=torch.__version__,
            epochs=epochs_trained,
            best_epoch=best_epoch,
            max_minutes=args.max_minutes,
            batch_size=args.batch_size,
            threads=args.threads,
            train_trees=len(train_trees) - args.held_out,
            held_out=args.held_out,
            train_seconds=round(train_seconds, 1),
            parse_seconds=round(parse_seconds, 1),
            sentences_per_second=round(len(dev_trees) / max(parse_seconds, 1e-9), 2),
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
