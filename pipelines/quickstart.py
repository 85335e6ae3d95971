"""Quickstart: build a tiny Transformer and train it with model.fit on a built-in task.

The task is synthetic and needs no download: reverse a random sequence of tokens. The loss
falls from about ln(V) and the model learns to reverse the sentences of a held-out batch.

    python pipelines/quickstart.py [--steps 600] [--output-dir runs/quickstart]
"""

import argparse
import os
import pathlib
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_transformer as kt  # noqa: E402


def reversal_task(rng, count, vocab_size, max_tokens, config):
    """Source: random tokens + eos; target: the same tokens reversed (decoder input starts
    with bos, labels end with eos), padded with 0 to a fixed width."""
    width = max_tokens + 1
    source = np.zeros((count, width), "int32")
    target = np.zeros((count, width), "int32")
    labels = np.zeros((count, width), "int32")
    for row in range(count):
        tokens = rng.integers(4, vocab_size, rng.integers(3, max_tokens + 1))
        reversed_tokens = tokens[::-1]
        source[row, :len(tokens) + 1] = [*tokens, config.eos_id]
        target[row, :len(tokens) + 1] = [config.bos_id, *reversed_tokens]
        labels[row, :len(tokens) + 1] = [*reversed_tokens, config.eos_id]
    return {"source_ids": source, "target_ids": target}, labels


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600, help="training steps (default 600)")
    parser.add_argument("--output-dir", default="runs/quickstart",
                        help="where the model and TensorBoard logs go")
    args = parser.parse_args(argv)
    output_dir = pathlib.Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)

    keras.utils.set_random_seed(0)
    config = kt.TransformerConfig(vocab_size=32, num_layers=2, d_model=64, d_ff=128,
                                  num_heads=4, dropout=0.0, max_length=32)
    rng = np.random.default_rng(0)
    train_inputs, train_labels = reversal_task(rng, 4096, config.vocab_size, 10, config)
    test_inputs, test_labels = reversal_task(rng, 256, config.vocab_size, 10, config)

    model = kt.build_model(config)
    model.compile(
        optimizer=kt.build_optimizer(config.d_model, warmup_steps=100, scale=0.5),
        loss=kt.LabelSmoothedCrossEntropy(config.label_smoothing, config.pad_id),
        metrics=[kt.MaskedTokenAccuracy(config.pad_id), kt.Perplexity(config.pad_id)],
    )
    print(f"Transformer with {model.count_params():,} parameters "
          f"(N={config.num_layers}, d_model={config.d_model}, h={config.num_heads})")
    steps_per_epoch = 50
    epochs = max(1, args.steps // steps_per_epoch)
    dataset_repeats = -(-epochs * steps_per_epoch * 64 // len(train_labels))
    inputs = {k: np.tile(v, (dataset_repeats, 1)) for k, v in train_inputs.items()}
    labels = np.tile(train_labels, (dataset_repeats, 1))
    history = model.fit(
        inputs, labels, batch_size=64, epochs=epochs, steps_per_epoch=steps_per_epoch,
        validation_data=(test_inputs, test_labels), verbose="auto",
        callbacks=[keras.callbacks.TensorBoard(str(output_dir / "logs"))],
    )
    losses = history.history["loss"]
    print(f"loss fell from {losses[0]:.3f} to {losses[-1]:.3f} over {epochs * steps_per_epoch} "
          f"steps; held-out token accuracy {history.history['val_token_accuracy'][-1]:.1%}")
    model.save(output_dir / "model.keras")
    print(f"outputs: model {output_dir / 'model.keras'}, TensorBoard logs {output_dir / 'logs'}")
    return 0 if losses[-1] < losses[0] else 1


if __name__ == "__main__":
    sys.exit(main())
