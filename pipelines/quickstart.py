"""The quickstart: the whole system on an embedded task, end to end, on a CPU.

1. generates the corpus: English number, date and time expressions with their German
   renderings ("four hundred twenty-one" -> "vierhunderteinundzwanzig"), disjoint
   train/dev/test splits (keras_transformer/data/number_expressions.py);
2. trains the shared SentencePiece vocabulary and a small Transformer with `model.fit`
   (progress bars, TensorBoard logs, checkpoints), then averages the last checkpoints (6.1);
3. evaluates the averaged model on the test split with beam search (beam 4, alpha 0.6):
   sacreBLEU with its signature, chrF and exact-match accuracy;
4. exports a SavedModel to saved_models/quickstart/VERSION/, loads it the way TF Serving does
   (a fresh process with only tensorflow and tensorflow_text, the TF1 session loader) and
   translates a few sentences through its signature and through `keras_transformer.translate()`;
5. draws the learning curve and an attention heat map (PNG) next to the outputs.

    python pipelines/quickstart.py [--output-dir runs/quickstart] [--steps N]
                                   [--max-train-minutes M] [--decay linear|rsqrt]
                                   [--set KEY=VALUE ...]
    python pipelines/quickstart.py --data-only

The training settings are configs/quickstart.yaml's: 1800 updates or 6 minutes, whichever
comes first, with the learning rate falling linearly to 0 at that end, so that a slower
machine trains fewer updates and the whole job stays within about 10 minutes. The options
change them for one run (`--max-train-minutes 0` trains every update; `--decay rsqrt` is the
paper's schedule; `--set KEY=VALUE` overrides any key of the config, e.g. `--set
model.num_layers=1`; the tests shorten the run with a few steps, sentences and beam 1, and
shrink the model).
`--data-only` writes the corpus where configs/quickstart.yaml expects it and stops, so that
`keras-transformer train --config configs/quickstart.yaml` can train it.
"""

import argparse
import json
import math
import os
import pathlib
import subprocess
import sys
import time

from keras_transformer.cli.startup import (  # noqa: E402  (imports no TensorFlow)
    VERBOSE_FLAG,
    VERBOSE_HELP,
    import_tensorflow_quietly,
    quiet_tensorflow,
)

CONFIG = pathlib.Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"

# (English, the German the corpus's grammar gives): the demo marks where the model differs.
SAMPLES = [
    ("four hundred twenty-one", "vierhunderteinundzwanzig"),
    ("half past seven", "halb acht"),
    ("on March third", "am dritten März"),
    ("one red dog", "ein roter Hund"),
    ("in nineteen ninety-eight", "im Jahr neunzehnhundertachtundneunzig"),
    ("seventy-two green bottles", "zweiundsiebzig grüne Flaschen"),
]

# What TF Serving does, in a process that never imports keras_transformer.
SERVING_CHECK = """
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401 (the SentencePiece ops TF Serving links)
path, texts = sys.argv[1], json.loads(sys.argv[2])
with tf.compat.v1.Session(graph=tf.Graph()) as session:
    meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
    signature = meta.signature_def["serving_default"]
    feed = {signature.inputs["text"].name: texts}
    for key, info in signature.inputs.items():
        if key != "text":
            feed[info.name] = tf.make_ndarray(signature.defaults[key])
    out = session.run(signature.outputs["translation"].name, feed_dict=feed)
print(json.dumps([t.decode() for t in out]))
"""


def training_config(
    output_dir=None,
    corpus=None,
    steps=None,
    dev_bleu_sentences=None,
    beam_size=None,
    seed=None,
    decay=None,
    max_train_minutes="recipe",
    config_file=CONFIG,
    overrides=(),
):
    """The run's `TrainingConfig`: `config_file` with the options' changes (None: the file's).

    `corpus`: `{split: (english path, german path)}` of the written corpus, which the config
    then reads. `steps` also scales the evaluation and checkpoint intervals, and shortens the
    warm-up for a shorter run, in the file's proportions. `seed` draws the initial weights,
    dropout and the batch order (the corpus stays the same). `max_train_minutes`: None for no
    limit, "recipe" for the file's. `overrides`: `KEY=VALUE` strings applied last (`--set`).
    """
    from keras_transformer.training.config import TrainingConfig
    from keras_transformer.training.config_reading import read_config_file

    changes = {}
    if output_dir is not None:
        changes["output_dir"] = str(output_dir)
    if corpus is not None:
        changes["data.train"] = [
            {"source": str(corpus["train"][0]), "target": str(corpus["train"][1])}
        ]
        changes["data.dev"] = {"source": str(corpus["dev"][0]), "target": str(corpus["dev"][1])}
    if steps is not None:
        recipe = read_config_file(config_file)
        schedule, every = recipe["schedule"], recipe["checkpoints"]["every_steps"]

        def scaled(value):
            return max(1, steps * value // schedule["train_steps"])

        changes["schedule.train_steps"] = steps
        changes["schedule.warmup_steps"] = min(
            schedule["warmup_steps"], scaled(schedule["warmup_steps"])
        )
        changes["schedule.eval_every_steps"] = scaled(schedule["eval_every_steps"])
        changes["checkpoints.every_steps"] = scaled(every)
    if dev_bleu_sentences is not None:
        changes["dev_bleu.sentences"] = dev_bleu_sentences
    if beam_size is not None:
        changes["dev_bleu.beam_size"] = beam_size
    if seed is not None:
        changes["seed"] = changes["data.seed"] = seed
    if decay is not None:
        changes["schedule.decay"] = decay
    if max_train_minutes != "recipe":
        changes["schedule.max_train_minutes"] = max_train_minutes
    return TrainingConfig.from_file(config_file, overrides, changes)


def write_corpus(config_file=CONFIG, output_dir=None):
    """Writes the corpus (train, dev and test) into the folder of `config_file`'s training
    files, or into OUTPUT_DIR/corpus; returns `{split: (english path, german path)}`."""
    from keras_transformer.data.number_expressions import write_number_expressions
    from keras_transformer.training.config_reading import read_config_file

    if output_dir is None:
        folder = os.path.dirname(read_config_file(config_file)["data"]["train"][0]["source"])
    else:
        folder = pathlib.Path(output_dir) / "corpus"
    return write_number_expressions(folder, seed=0)


def write_data_only(output_dir=None):
    """`--data-only`: writes the corpus, prints where, and how to train on it."""
    corpus = write_corpus(output_dir=output_dir)
    print("the quickstart corpus (English, German):")
    for split, (english, german) in corpus.items():
        print(f"  {split:5} {english}  {german}")
    if output_dir is None:
        config = os.path.relpath(CONFIG) if not os.path.relpath(CONFIG).startswith("..") else CONFIG
        print(f"train on it with: keras-transformer train --config {config}")
    return 0


def read_logged_losses(log_dir):
    """`[(step, train loss)]`: the points TrainingLogger writes to TensorBoard every
    `log_every_steps` updates (`logs/train`); a resumed run's later value wins."""
    import glob

    import tensorflow as tf
    from tensorflow.core.util import event_pb2

    losses = {}
    for path in sorted(glob.glob(os.path.join(log_dir, "train", "events.out.tfevents.*"))):
        for record in tf.data.TFRecordDataset(path):
            event = event_pb2.Event.FromString(record.numpy())
            for value in event.summary.value:
                if value.tag == "loss":
                    losses[event.step] = (
                        float(tf.make_ndarray(value.tensor))
                        if value.HasField("tensor")
                        else value.simple_value
                    )
    return sorted(losses.items())


def draw_learning_curve(train_points, history, test_bleu_points):
    """The learning curve as a matplotlib Figure: train loss at every logged interval, dev
    loss and dev sacreBLEU at every evaluation (`history.json` entries), test sacreBLEU.

    The sacreBLEU axis runs from 0 to 100, and the legend sits below the axes, so that it
    never hides a point (the test-BLEU point ends up in the top-right corner)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4.6), layout="constrained")
    loss_axis = figure.add_subplot()
    if not train_points:  # no TensorBoard points: fall back to the per-evaluation means
        train_points = [(e["step"], e["loss"]) for e in history if "loss" in e]
    if train_points:
        loss_axis.plot(*zip(*train_points), ".-", markersize=4, label="train loss")
    dev = [(e["step"], e["val_loss"]) for e in history if "val_loss" in e]
    if dev:
        loss_axis.plot(*zip(*dev), "s-", label="dev loss")
    loss_axis.set_xlabel("update step")
    loss_axis.set_ylabel("label-smoothed cross-entropy")
    loss_axis.grid(alpha=0.3)
    handles = loss_axis.get_legend_handles_labels()[0]
    dev_bleu = [(e["step"], e["val_bleu"]) for e in history if "val_bleu" in e]
    if dev_bleu or test_bleu_points:
        bleu_axis = loss_axis.twinx()
        if dev_bleu:
            bleu_axis.plot(*zip(*dev_bleu), "^--", color="tab:green", label="dev sacreBLEU")
        for step, bleu in test_bleu_points:
            bleu_axis.plot(
                [step], [bleu], "*", color="tab:red", markersize=12, label="test sacreBLEU"
            )
            bleu_axis.annotate(
                f"{bleu:.1f}",
                (step, bleu),
                textcoords="offset points",
                xytext=(-10, 0),
                ha="right",
                va="center",
                fontsize=8,
                color="tab:red",
            )
        bleu_axis.set_ylim(0, 105)  # the whole BLEU range; the top margin keeps 100 visible
        bleu_axis.set_ylabel("sacreBLEU")
        handles += bleu_axis.get_legend_handles_labels()[0]
    figure.legend(
        handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8, frameon=False
    )
    loss_axis.set_title("Quickstart learning curve")
    return figure


def plot_learning_curve(history_path, log_dir, test_bleu_points, png_path):
    history = json.loads(pathlib.Path(history_path).read_text())
    figure = draw_learning_curve(read_logged_losses(log_dir), history, test_bleu_points)
    figure.savefig(png_path, dpi=100)
    return figure


def plot_attention(model, vocabulary, source, target, png_path):
    """Encoder-decoder attention of the last decoder layer, one heat map per head, with a
    colour bar (`keras-transformer attention` draws any layer, also as the paper's lines)."""
    import keras
    import numpy as np

    from keras_transformer.visualization import draw_attention_heatmaps

    config = model.config
    source_ids = vocabulary.encode(source) + [config.eos_id]
    target_ids = vocabulary.encode(target) + [config.eos_id]
    weights = keras.ops.convert_to_numpy(
        model.cross_attention_weights(
            np.array([source_ids], "int32"), np.array([[config.bos_id] + target_ids[:-1]], "int32")
        )
    )
    pieces = vocabulary.processor.id_to_piece
    return draw_attention_heatmaps(
        weights[0],
        [pieces(i) for i in target_ids],
        [pieces(i) for i in source_ids],
        title=f"last decoder layer, encoder-decoder attention: {source!r}",
        path=png_path,
    )


def evaluate_test(run, test_files, output_dir, test_size, beam_size, alpha, max_extra_length):
    """Translates the first `test_size` test sentences with the run's averaged model, writes
    them to OUTPUT/test.hyp.de and prints sacreBLEU, chrF and exact match; returns the
    `Translator`, the `evaluate` report and the exact match."""
    from keras_transformer.evaluation import evaluate
    from keras_transformer.translation import Translator

    sources = test_files[0].read_text(encoding="utf-8").splitlines()[:test_size]
    references = test_files[1].read_text(encoding="utf-8").splitlines()[:test_size]
    translator = Translator.load(
        str(run.path), beam_size=beam_size, alpha=alpha, max_extra_length=max_extra_length
    )
    hypotheses = translator.translate(sources)
    report = evaluate(hypotheses, references)
    exact_match = sum(h == r for h, r in zip(hypotheses, references)) / len(references)
    (output_dir / "test.hyp.de").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    print(f"      sacreBLEU {report.bleu:.1f}  ({report.bleu_signature})")
    print(f"      chrF {report.chrf:.1f}  ({report.chrf_signature})")
    print(f"      exact match {exact_match:.1%}")
    return translator, report, exact_match


def export_and_serve(translator, run, export_dir, beam_size, max_extra_length):
    """Exports the SavedModel, translates `SAMPLES` through its signature in a fresh process
    (as TF Serving loads it) and through `translate()`, and prints both; returns the export
    path and `translate()`'s translations."""
    from keras_transformer.export import export_saved_model
    from keras_transformer.translation import translate

    export_path = export_saved_model(
        translator.model,
        str(run.vocabulary),
        "quickstart",
        base_dir=export_dir,
        max_beam_size=beam_size,
        beam_size=beam_size,
        max_extra_length=max_extra_length,
    )
    samples = [english for english, _ in SAMPLES]
    served = subprocess.run(
        [sys.executable, "-c", SERVING_CHECK, str(export_path), json.dumps(samples)],
        capture_output=True,
        text=True,
        check=True,
    )
    served = json.loads(served.stdout.strip().splitlines()[-1])
    in_process = translate(samples, model=translator)
    for (source, expected), via_signature, via_api in zip(SAMPLES, served, in_process):
        notes = [] if via_signature == expected else [f"expected {expected!r}"]
        if via_signature != via_api:
            notes.append(f"translate() gave {via_api!r}")
        note = f"   ({'; '.join(notes)})" if notes else ""
        print(f"      {source!r:32} -> {via_signature!r}{note}")

    return export_path, in_process


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(VERBOSE_FLAG, action="store_true", help=VERBOSE_HELP)
    parser.add_argument(
        "--output-dir",
        default=None,
        help="the training run folder (default: configs/quickstart.yaml's, runs/quickstart)",
    )
    parser.add_argument(
        "--data-only",
        action="store_true",
        help="write the corpus where configs/quickstart.yaml expects it (or under "
        "--output-dir), print its paths, and stop",
    )
    parser.add_argument(
        "--export-dir",
        default="saved_models",
        help="TF Serving model base folder (default: saved_models)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="training updates at most (default: the config's, 1800); the evaluation and "
        "checkpoint intervals scale with it",
    )
    parser.add_argument(
        "--max-train-minutes",
        type=float,
        default=None,
        help="training wall time at most, evaluations included; the linear "
        "rate reaches 0 there if it comes before --steps (default: the config's, 6, "
        "so the job takes about 10 minutes on a slow 2-core machine; 0: "
        "no limit)",
    )
    parser.add_argument(
        "--decay",
        choices=("linear", "rsqrt"),
        default=None,
        help="the rate after the warm-up: straight down to 0 at the end "
        "(the config's) or the paper's inverse square root",
    )
    parser.add_argument(
        "--test-size", type=int, default=500, help="test sentences to evaluate (default: all 500)"
    )
    parser.add_argument(
        "--dev-bleu-sentences",
        type=int,
        default=None,
        help="dev sentences scored with BLEU at each evaluation (default: the config's, 100)",
    )
    parser.add_argument(
        "--max-extra-length",
        type=int,
        default=50,
        help="output tokens beyond the input length (default: 50, paper 6.1)",
    )
    parser.add_argument(
        "--beam-size",
        type=int,
        default=None,
        help="beam of dev BLEU, the test evaluation and the widest beam the "
        "SavedModel compiles (default: the config's, 4, paper 6.1; each width it "
        "compiles adds to the export's time)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="initial weights, dropout and batch order (default: the config's, 1); the "
        "corpus and its splits stay the same",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="override a key of configs/quickstart.yaml (dotted, repeatable), e.g. "
        "--set model.num_layers=1; applied after the options above",
    )
    return parser


def checked_recipe(parser, args):
    """The recipe file's values, after refusing options it cannot train with (one line,
    exit 2, before any work)."""
    from keras_transformer.errors import UserInputError
    from keras_transformer.training.config_reading import read_config_file

    limit = args.max_train_minutes
    if limit is not None and not (math.isfinite(limit) and limit >= 0):
        parser.error(f"--max-train-minutes {limit}: give minutes > 0, or 0 for no limit")
    try:
        recipe = read_config_file(CONFIG)
        if args.overrides:  # a bad --set, before the corpus is written
            training_config(steps=args.steps, overrides=args.overrides)
    except UserInputError as error:
        parser.error(str(error))
    decay = args.decay or recipe["schedule"]["decay"]
    if args.steps is not None and args.steps < (2 if decay == "linear" else 1):
        parser.error(
            f"--steps {args.steps}: give at least 2 updates (1 with --decay rsqrt: "
            "the linear decay needs an update after its warm-up)"
        )
    return recipe


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    verbose = quiet_tensorflow(argv)  # before anything imports TensorFlow
    parser = build_parser()
    args = parser.parse_args(argv)
    import_tensorflow_quietly(verbose)
    if args.data_only:
        return write_data_only(args.output_dir)
    recipe = checked_recipe(parser, args)
    started = time.monotonic()

    from keras_transformer.training import train

    output_dir = pathlib.Path(args.output_dir or recipe["output_dir"])
    corpus = write_corpus(output_dir=output_dir)
    english = {
        split: paths[0].read_text(encoding="utf-8").splitlines() for split, paths in corpus.items()
    }
    print(
        f"[1/5] corpus: {output_dir / 'corpus'} (train {len(english['train'])} lines of "
        f"{len(set(english['train']))} distinct sentences, dev {len(english['dev'])}, "
        f"test {len(english['test'])})"
    )

    config = training_config(
        output_dir,
        corpus,
        args.steps,
        args.dev_bleu_sentences,
        args.beam_size,
        seed=args.seed,
        decay=args.decay,
        max_train_minutes="recipe"
        if args.max_train_minutes is None
        else (args.max_train_minutes or None),
        overrides=args.overrides,
    )
    steps, limit = config.schedule.train_steps, config.schedule.max_train_minutes
    beam_size, alpha = config.dev_bleu.beam_size, config.dev_bleu.alpha
    print(
        f"[2/5] training: vocabulary, then {steps} updates with model.fit"
        + (f" or {limit:g} minutes, whichever comes first" if limit else "")
    )
    result = train(config)
    run = result.output_dir
    if result.stopped_by_time:
        print(
            f"      the {limit:g} minutes ended training at update {result.step} of "
            f"{steps}, the learning rate at 0 there (a faster machine does all "
            f"{steps}); --max-train-minutes 0 trains every update"
        )

    print(
        f"[3/5] evaluating the averaged model on the test split (beam {beam_size}, alpha {alpha})"
    )
    translator, report, exact_match = evaluate_test(
        run, corpus["test"], output_dir, args.test_size, beam_size, alpha, args.max_extra_length
    )

    print("[4/5] exporting the SavedModel and loading it as TF Serving does")
    export_path, in_process = export_and_serve(
        translator, run, args.export_dir, beam_size, args.max_extra_length
    )

    print("[5/5] plots")
    learning_curve = output_dir / "learning_curve.png"
    plot_learning_curve(run.history, run.log_dir, [(result.step, report.bleu)], learning_curve)
    attention_map = output_dir / "attention.png"
    plot_attention(
        translator.model, translator.vocabulary, SAMPLES[0][0], in_process[0], attention_map
    )

    summary = {
        "bleu": round(report.bleu, 2),
        "chrf": round(report.chrf, 2),
        "exact_match": round(exact_match, 4),
        "steps": result.step,
        "stopped_by_time": result.stopped_by_time,
        "minutes": round((time.monotonic() - started) / 60, 1),
    }
    print("\noutputs:")
    for label, path in [
        ("corpus", output_dir / "corpus"),
        ("vocabulary", run.vocabulary),
        ("checkpoints", run.checkpoint_dir),
        ("final model", run.final_model),
        ("averaged model", run.averaged_model),
        ("TensorBoard logs", f"{run.log_dir}  (tensorboard --logdir {run.log_dir})"),
        ("test translations", output_dir / "test.hyp.de"),
        ("SavedModel", export_path),
        ("learning curve", learning_curve),
        ("attention heat map", attention_map),
    ]:
        print(f"  {label:20} {path}")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        from keras_transformer.errors import report_interrupted

        sys.exit(report_interrupted("quickstart"))
