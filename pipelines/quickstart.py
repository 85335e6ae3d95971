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

    python pipelines/quickstart.py [--output-dir runs/quickstart] [--steps 1500]
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# (English, the German the corpus's grammar gives): the demo marks where the model differs.
SAMPLES = [("four hundred twenty-one", "vierhunderteinundzwanzig"),
           ("half past seven", "halb acht"),
           ("on March third", "am dritten März"),
           ("one red dog", "ein roter Hund"),
           ("in nineteen ninety-eight", "im Jahr neunzehnhundertachtundneunzig"),
           ("seventy-two green bottles", "zweiundsiebzig grüne Flaschen")]

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


def training_config(output_dir, corpus, steps, dev_bleu_sentences=100):
    """The run: a 2-layer d_model 128 Transformer, tuned on the dev split for 2 CPU cores."""
    return {
        "output_dir": str(output_dir),
        "model": {"preset": "base", "num_layers": 2, "d_model": 128, "d_ff": 512,
                  "num_heads": 4, "dropout": 0.1, "max_length": 128},
        "data": {
            "train": [{"source": str(corpus["train"][0]), "target": str(corpus["train"][1])}],
            "dev": {"source": str(corpus["dev"][0]), "target": str(corpus["dev"][1])},
            "vocab_size": 1000, "token_budget": 3072, "max_length": 64,
            "shuffle_buffer": 20000,
        },
        "schedule": {"train_steps": steps, "warmup_steps": 300, "learning_rate_scale": 2.0,
                     "tokens_per_update": 3072, "eval_every_steps": max(steps // 4, 1),
                     "log_every_steps": 25},
        "checkpoints": {"every_minutes": None, "every_steps": max(steps // 10, 1),
                        "keep_last": 5, "average_last": 5},
        "dev_bleu": {"sentences": dev_bleu_sentences, "beam_size": 4, "alpha": 0.6},
        "strategy": "one_device",
    }


def plot_learning_curve(history_path, bleu_points, png_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history = json.loads(pathlib.Path(history_path).read_text())
    steps = [entry["step"] for entry in history]
    figure, loss_axis = plt.subplots(figsize=(7, 4))
    loss_axis.plot(steps, [e["loss"] for e in history], "o-", label="train loss")
    if all("val_loss" in e for e in history):
        loss_axis.plot(steps, [e["val_loss"] for e in history], "s-", label="dev loss")
    loss_axis.set_xlabel("update step")
    loss_axis.set_ylabel("label-smoothed cross-entropy")
    lines, labels = loss_axis.get_legend_handles_labels()
    if bleu_points:
        bleu_axis = loss_axis.twinx()
        bleu_axis.plot(*zip(*bleu_points), "^-", color="tab:green", label="test sacreBLEU")
        bleu_axis.set_ylabel("sacreBLEU")
        more_lines, more_labels = bleu_axis.get_legend_handles_labels()
        lines, labels = lines + more_lines, labels + more_labels
    loss_axis.legend(lines, labels, loc="center right")
    loss_axis.set_title("Quickstart learning curve")
    figure.tight_layout()
    figure.savefig(png_path, dpi=100)
    plt.close(figure)


def plot_attention(model, vocabulary, source, target, png_path):
    """Encoder-decoder attention of the last decoder layer, one panel per head (as the
    paper's figures 3-5)."""
    import keras
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    config = model.config
    source_ids = vocabulary.encode(source) + [config.eos_id]
    target_ids = vocabulary.encode(target) + [config.eos_id]
    weights = keras.ops.convert_to_numpy(model.cross_attention_weights(
        np.array([source_ids], "int32"), np.array([[config.bos_id] + target_ids[:-1]], "int32")))
    pieces = vocabulary.processor.id_to_piece
    columns = [pieces(i) for i in source_ids]
    rows = [pieces(i) for i in target_ids]
    heads = weights.shape[1]
    figure, axes = plt.subplots(1, heads, figsize=(3.2 * heads, 3.4), squeeze=False)
    for head, axis in enumerate(axes[0]):
        axis.imshow(weights[0, head], cmap="viridis", vmin=0, vmax=1)
        axis.set_xticks(range(len(columns)), columns, rotation=90, fontsize=7)
        axis.set_yticks(range(len(rows)), rows if head == 0 else [""] * len(rows), fontsize=7)
        axis.set_title(f"head {head + 1}", fontsize=9)
    figure.suptitle(f"last decoder layer, encoder-decoder attention: {source!r}", fontsize=9)
    figure.tight_layout()
    figure.savefig(png_path, dpi=100)
    plt.close(figure)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", default="runs/quickstart",
                        help="the training run folder (default: runs/quickstart)")
    parser.add_argument("--export-dir", default="saved_models",
                        help="TF Serving model base folder (default: saved_models)")
    parser.add_argument("--steps", type=int, default=1500, help="training updates (1500)")
    parser.add_argument("--test-size", type=int, default=500,
                        help="test sentences to evaluate (default: all 500)")
    parser.add_argument("--dev-bleu-sentences", type=int, default=100,
                        help="dev sentences scored with BLEU at each evaluation (default: 100)")
    parser.add_argument("--max-extra-length", type=int, default=50,
                        help="output tokens beyond the input length (default: 50, paper 6.1)")
    args = parser.parse_args(argv)
    started = time.monotonic()

    from keras_transformer.data.number_expressions import write_number_expressions
    from keras_transformer.evaluation import evaluate
    from keras_transformer.export import export_saved_model
    from keras_transformer.training import train
    from keras_transformer.translation import Translator, translate

    output_dir = pathlib.Path(args.output_dir)
    corpus = write_number_expressions(output_dir / "corpus", seed=0)
    print(f"[1/5] corpus: {output_dir / 'corpus'} (train 20000, dev 500, test 500 pairs)")

    print(f"[2/5] training: vocabulary, then {args.steps} updates with model.fit")
    result = train(training_config(output_dir, corpus, args.steps, args.dev_bleu_sentences))
    run = result.output_dir

    print("[3/5] evaluating the averaged model on the test split (beam 4, alpha 0.6)")
    sources = corpus["test"][0].read_text(encoding="utf-8").splitlines()[:args.test_size]
    references = corpus["test"][1].read_text(encoding="utf-8").splitlines()[:args.test_size]
    translator = Translator.load(str(run.path), beam_size=4, alpha=0.6,
                                 max_extra_length=args.max_extra_length)
    hypotheses = translator.translate(sources)
    report = evaluate(hypotheses, references)
    exact_match = sum(h == r for h, r in zip(hypotheses, references)) / len(references)
    (output_dir / "test.hyp.de").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    print(f"      sacreBLEU {report.bleu:.1f}  ({report.bleu_signature})")
    print(f"      chrF {report.chrf:.1f}  ({report.chrf_signature})")
    print(f"      exact match {exact_match:.1%} (target: >= 95%)")

    print("[4/5] exporting the SavedModel and loading it as TF Serving does")
    export_path = export_saved_model(translator.model, str(run.vocabulary), "quickstart",
                                     base_dir=args.export_dir, max_beam_size=4)
    samples = [english for english, _ in SAMPLES]
    served = subprocess.run([sys.executable, "-c", SERVING_CHECK, str(export_path),
                             json.dumps(samples)], capture_output=True, text=True, check=True)
    served = json.loads(served.stdout.strip().splitlines()[-1])
    in_process = translate(samples, model=translator)
    for (source, expected), via_signature, via_api in zip(SAMPLES, served, in_process):
        notes = [] if via_signature == expected else [f"expected {expected!r}"]
        if via_signature != via_api:
            notes.append(f"translate() gave {via_api!r}")
        note = f"   ({'; '.join(notes)})" if notes else ""
        print(f"      {source!r:32} -> {via_signature!r}{note}")

    print("[5/5] plots")
    learning_curve = output_dir / "learning_curve.png"
    plot_learning_curve(run.history, [(result.step, report.bleu)], learning_curve)
    attention_map = output_dir / "attention.png"
    plot_attention(translator.model, translator.vocabulary, samples[0], in_process[0],
                   attention_map)

    summary = {"bleu": round(report.bleu, 2), "chrf": round(report.chrf, 2),
               "exact_match": round(exact_match, 4), "steps": result.step,
               "minutes": round((time.monotonic() - started) / 60, 1)}
    print("\noutputs:")
    for label, path in [("corpus", output_dir / "corpus"), ("vocabulary", run.vocabulary),
                        ("checkpoints", run.checkpoint_dir), ("final model", run.final_model),
                        ("averaged model", run.averaged_model),
                        ("TensorBoard logs", f"{run.log_dir}  (tensorboard --logdir "
                                             f"{run.log_dir})"),
                        ("test translations", output_dir / "test.hyp.de"),
                        ("SavedModel", export_path), ("learning curve", learning_curve),
                        ("attention heat map", attention_map)]:
        print(f"  {label:20} {path}")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
