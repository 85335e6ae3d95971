"""Small models and scripted decoders shared by the decoding tests."""

import keras
import numpy as np
from keras import ops

from keras_transformer import TransformerConfig, build_model

PAD, UNK, BOS, EOS = 0, 1, 2, 3


def tiny_model(vocab_size=11, max_length=16, seed=0, sharpen=1.0, num_layers=1, d_model=32):
    """A random tiny Transformer; `sharpen` scales the embeddings to make peaky distributions
    (random weights otherwise give near-uniform ones, full of near-ties)."""
    keras.utils.set_random_seed(seed)
    config = TransformerConfig(
        vocab_size=vocab_size,
        num_layers=num_layers,
        d_model=d_model,
        d_ff=2 * d_model,
        num_heads=4,
        max_length=max_length,
        dropout=0.0,
    )
    model = build_model(config)
    if sharpen != 1.0:
        embedding = model.target_embedding.embeddings
        embedding.assign(embedding * sharpen)
    return model


def full_log_probs(model, source_ids, target_inputs):
    """NumPy log-softmax of the full (teacher-forced, uncached) forward pass, pad and bos
    forbidden after normalization as decoding does: `[batch, target_length, vocab]`."""
    logits = model(
        {
            "source_ids": ops.convert_to_tensor(source_ids, "int32"),
            "target_ids": ops.convert_to_tensor(target_inputs, "int32"),
        }
    )
    logits = np.asarray(ops.convert_to_numpy(logits), np.float64)
    logits = logits - logits.max(-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    log_probs[..., [PAD, BOS]] = -np.inf
    return log_probs


def sequence_log_prob(model, source_ids, output_ids):
    """log P(output_ids | source_ids) by one full forward pass (NumPy side)."""
    output_ids = list(output_ids)
    target_inputs = np.array([[BOS] + output_ids[:-1]], "int32")
    log_probs = full_log_probs(model, np.asarray(source_ids, "int32")[None], target_inputs)[0]
    return float(sum(log_probs[t, token] for t, token in enumerate(output_ids)))


class MarkovDecoder:
    """A scripted decoder: the next-token log-probabilities depend only on the previous token,
    `table[previous_token]`. Counts its steps (in eager mode, one Python call per step)."""

    def __init__(self, table, max_length=32):
        self.table = np.asarray(table, "float32")
        self.vocab_size = self.table.shape[1]
        self.pad_id, self.bos_id, self.eos_id = PAD, BOS, EOS
        self.max_length = max_length
        self.variables = []
        self.steps = 0

    def initial_state(self, source_ids, max_length):
        batch = ops.shape(source_ids)[0]
        return ops.zeros((batch, 1)), (ops.zeros((batch, 1)),)

    def step(self, token_ids, static, dynamic, step):
        self.steps += 1
        return ops.take(ops.convert_to_tensor(self.table), token_ids[:, 0], axis=0), dynamic


class RowCountingDecoder(MarkovDecoder):
    """A scripted decoder that records how many rows each step decodes."""

    def __init__(self, table, max_length=32):
        super().__init__(table, max_length)
        self.rows = []

    def step(self, token_ids, static, dynamic, step):
        self.rows.append(int(ops.shape(token_ids)[0]))
        return super().step(token_ids, static, dynamic, step)


def markov_table(vocab_size, rows):
    """A `[vocab, vocab]` log-prob table from `{previous: {token: prob}}`; unlisted tokens get
    the rest of the probability mass spread evenly (pad and bos excluded)."""
    table = np.full((vocab_size, vocab_size), -np.inf)
    for previous in range(vocab_size):
        probs = dict(rows.get(previous, {}))
        free = [t for t in range(vocab_size) if t not in probs and t not in (PAD, BOS)]
        rest = 1.0 - sum(probs.values())
        for token in free:
            probs[token] = rest / len(free) if rest > 0 else 1e-12
        for token, prob in probs.items():
            table[previous, token] = np.log(prob)
    table[:, [PAD, BOS]] = np.log(1e-12)
    return table


def second_hypothesis_later_table():
    """A Markov table (vocab 8) whose best output, "4 eos" (log-prob -0.11), is final after
    step 1, when the best alive "4 5" has -2.42; a second finished one, "4 5 eos" (-3.66),
    outranks everything alive only once "4 5 5 5 5 5" falls to -3.84, after step 5. A beam
    search of width 2 stops after 2 steps for one hypothesis, after 6 for two."""
    return markov_table(8, {BOS: {4: 0.99}, 4: {EOS: 0.9, 5: 0.09}, 5: {5: 0.7, EOS: 0.29}})


def power_prefers_longer_table():
    """A Markov table (vocab 8) with two outputs: "4 eos", log P = ln 0.55 + ln 0.99, and
    "6 7 eos", log P = ln 0.45 + 2 ln 0.999. By log P, and by the GNMT penalty at alpha 1
    (lp 7/6 and 8/6), "4 eos" ranks first; by the power penalty at alpha 1 (lp 2 and 3),
    "6 7 eos" does. After step 1 "4 eos" is final and "6 7" alive with -0.80: -0.80 / 2
    (its current length) is below -0.61 / 2, -0.80 / lp(cap) is not."""
    return markov_table(
        8, {BOS: {4: 0.55, 6: 0.45}, 4: {EOS: 0.99}, 6: {7: 0.999}, 7: {EOS: 0.999}}
    )


SENTENCES = [
    "the cat sat on the mat",
    "a dog",
    "birds sing in the morning light",
    "hello",
    "we walk to the river and back again today",
    "it rains",
    "the old man reads a book",
    "green",
    "she writes long letters to her friend",
]


def train_char_vocabulary(folder):
    """A tiny character-level SentencePiece model (pad 0, unk 1, bos 2, eos 3) of SENTENCES."""
    import sentencepiece

    prefix = str(folder / "vocab")
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(SENTENCES * 20),
        model_prefix=prefix,
        vocab_size=40,
        model_type="char",
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        minloglevel=2,
    )
    return prefix + ".model"


def tiny_run_folder(folder, vocabulary_path, model):
    """A training output_dir as `train` leaves it for translation: vocab.model, config.json,
    and model.keras saved as training saves it (carrying the vocabulary inside)."""
    import shutil

    from keras_transformer.runs.models import atomic_save_model

    (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
    shutil.copy(vocabulary_path, folder / "vocab.model")
    (folder / "config.json").write_text(model.config.to_json())
    atomic_save_model(model, str(folder / "model.keras"))
    return folder


def tiny_copy_run_folder(tmp_path_factory):
    """The run folder the CLI tests share: a tiny sharpened model over a character
    vocabulary, as `keras-transformer train` would leave it."""
    folder = tmp_path_factory.mktemp("run")
    vocabulary = train_char_vocabulary(folder)
    model = tiny_model(vocab_size=25, max_length=48, seed=21, sharpen=2.0)
    return tiny_run_folder(folder / "run", vocabulary, model)
