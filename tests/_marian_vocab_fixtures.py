"""A tiny OPUS-MT vocabulary folder: two SentencePiece models and one `vocab.json`.

OPUS-MT's vocabularies hold a SentencePiece model per side (`source.spm`, `target.spm`, trained
on different text, with their own ids) and one id table `vocab.json` (piece -> model id) made
of both models' pieces: `</s>` 0, `<unk>` 1, the pieces, language tokens such as `>>deu<<`,
and `<pad>` last. Here each side is trained on a few sentences of its own language, so that the
two models' ids differ and some pieces exist on one side only.
"""

import json

SOURCE_TEXT = [
    "The house is small and the garden is green.",
    "A man reads a book in the quiet library.",
    "Two children play football in the park today.",
    "She writes letters to her friends every week.",
    "The weather was cold, so we stayed at home.",
    "Where is the train station? It is near the bridge.",
]
TARGET_TEXT = [
    "Das Haus ist klein und der Garten ist grün.",
    "Ein Mann liest ein Buch in der ruhigen Bibliothek.",
    "Zwei Kinder spielen heute Fußball im Park.",
    "Sie schreibt jede Woche Briefe an ihre Freunde.",
    "Das Wetter war kalt, also blieben wir zu Hause.",
    "Wo ist der Bahnhof? Er ist nahe der Brücke.",
]
LANGUAGE_TOKENS = (">>deu<<", ">>fra<<")


def _train(lines, prefix, vocab_size):
    import sentencepiece

    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(prefix),
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        # OPUS-MT's models: unk 0, bos 1, eos 2, no pad, no byte fallback.
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    return sentencepiece.SentencePieceProcessor(model_file=f"{prefix}.model")


def write_marian_vocabulary(folder, *, language_tokens=True, separate_target_vocab=False):
    """Writes `source.spm`, `target.spm` and `vocab.json` (and `target_vocab.json` when
    `separate_target_vocab`) into `folder`; returns the table of `vocab.json`."""
    folder.mkdir(parents=True, exist_ok=True)
    processors = []
    for name, lines, size in (("source", SOURCE_TEXT, 60), ("target", TARGET_TEXT, 64)):
        processors.append(_train(lines, folder / f"_{name}", size))
        (folder / f"_{name}.model").rename(folder / f"{name}.spm")
        (folder / f"_{name}.vocab").unlink()
    table = {"</s>": 0, "<unk>": 1}
    tokens = list(LANGUAGE_TOKENS) if language_tokens else []
    for processor in processors:
        for piece_id in range(processor.get_piece_size()):
            piece = processor.id_to_piece(piece_id)
            if not processor.is_control(piece_id) and not processor.is_unknown(piece_id):
                table.setdefault(piece, len(table))
    for token in tokens:
        table[token] = len(table)
    table["<pad>"] = len(table)
    (folder / "vocab.json").write_text(json.dumps(table, ensure_ascii=False, indent=2))
    if separate_target_vocab:
        target_table = {"</s>": 0, "<unk>": 1}
        for piece_id in range(processors[1].get_piece_size()):
            if not processors[1].is_control(piece_id) and not processors[1].is_unknown(piece_id):
                target_table.setdefault(processors[1].id_to_piece(piece_id), len(target_table))
        target_table["<pad>"] = len(target_table)
        (folder / "target_vocab.json").write_text(json.dumps(target_table, ensure_ascii=False))
    return table
