"""Scoring translations: sacreBLEU and chrF, and the paper-style tokenized BLEU.

The figure to report is sacreBLEU (Post, 2018) on detokenized text, with its signature, which
says exactly how it was computed (references, case, tokenizer, smoothing, version). chrF is
computed beside it.

The paper's BLEU (28.4 EN-DE, 41.0 EN-FR) was computed differently, with tensor2tensor's
`get_ende_bleu.sh`: Moses-tokenize hypotheses and references, split hyphenated compounds
("a-b" -> "a ##AT##-##AT## b"), then `multi-bleu.perl` on the tokens. `paper_bleu` reproduces
that convention; its numbers run higher than sacreBLEU's and are NOT comparable with them,
only with other papers that used the same script. Moses tokenization uses `sacremoses` when it
is installed; otherwise sacreBLEU's 13a tokenizer stands in, and the note says so.
"""

import dataclasses
import json
import re
import time

import sacrebleu

from keras_transformer.errors import UserInputError

PAPER_BLEU_NOTE = (
    "paper-style tokenized BLEU (tensor2tensor get_ende_bleu: tokenized, "
    "compounds split with ##AT##); NOT comparable with sacreBLEU"
)

_COMPOUND = re.compile(r"(\S)-(\S)")


@dataclasses.dataclass
class EvaluationReport:
    """Corpus scores of one system output.

    Fields:
        bleu: sacreBLEU score (0-100).
        bleu_signature: sacreBLEU's signature of that score.
        bleu_details: the full sacreBLEU line (n-gram precisions, brevity penalty, lengths).
        chrf: chrF score (0-100).
        chrf_signature: sacreBLEU's signature of the chrF score.
        num_sentences: segments scored.
        paper_bleu: tokenized BLEU with compound splitting, or None when not asked for.
        paper_bleu_note: how `paper_bleu` was computed (and that it is not sacreBLEU).
    """

    bleu: float
    bleu_signature: str
    bleu_details: str
    chrf: float
    chrf_signature: str
    num_sentences: int
    paper_bleu: float | None = None
    paper_bleu_note: str | None = None

    def to_dict(self):
        return dataclasses.asdict(self)

    def format(self):
        """The report as lines of text, signatures included."""
        lines = [
            f"sacreBLEU: {self.bleu_details}",
            f"  signature: {self.bleu_signature}",
            f"chrF: {self.chrf:.2f}",
            f"  signature: {self.chrf_signature}",
        ]
        if self.paper_bleu is not None:
            lines.append(f"{self.paper_bleu_note}: {self.paper_bleu:.2f}")
        return "\n".join(lines)


def _check_pairs(hypotheses, references):
    hypotheses = list(hypotheses)
    if references and isinstance(references[0], str):
        references = [list(references)]
    references = [list(reference_set) for reference_set in references]
    if not references:
        raise UserInputError("no references given")
    for number, reference_set in enumerate(references):
        if len(reference_set) != len(hypotheses):
            raise UserInputError(
                f"reference set {number} has {len(reference_set)} lines but there are "
                f"{len(hypotheses)} hypotheses: the files must be line-aligned"
            )
    for name, lines in [("hypotheses", hypotheses)] + [
        (f"references[{n}]", r) for n, r in enumerate(references)
    ]:
        for index, line in enumerate(lines):
            if not isinstance(line, str):
                raise TypeError(f"{name}[{index}] is {type(line).__name__}, not str")
    return hypotheses, references


def split_compounds(text):
    """tensor2tensor's compound splitting: "a-b" -> "a ##AT##-##AT## b" (perl s///g semantics).

    Example:
    >>> split_compounds("ein Know-how-Transfer")
    'ein Know ##AT##-##AT## how ##AT##-##AT## Transfer'
    """
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", text)


def _moses_tokenizer(language):
    try:
        from sacremoses import MosesTokenizer
    except ImportError:
        tokenizer = sacrebleu.tokenizers.tokenizer_13a.Tokenizer13a()
        return tokenizer, "sacreBLEU 13a tokenizer (sacremoses is not installed)"
    moses = MosesTokenizer(lang=language)
    return (
        lambda text: moses.tokenize(text, return_str=True, escape=True),
        f"Moses tokenizer ({language}, sacremoses)",
    )


def _tokenized_bleu(hypotheses, references, language, prepare):
    """BLEU of text that `prepare(moses_tokenize, text)` tokenizes: sacreBLEU adds no
    tokenization of its own, as multi-bleu.perl. Returns `(score, tokenizer name)`."""
    hypotheses, references = _check_pairs(hypotheses, references)
    tokenize, tokenizer_name = _moses_tokenizer(language)
    # multi-bleu.perl does not smooth: a corpus with no matched n-gram of some order scores 0
    # (sacreBLEU's default, "exp", would give a positive score).
    metric = sacrebleu.metrics.BLEU(tokenize="none", force=True, smooth_method="none")
    score = metric.corpus_score(
        [prepare(tokenize, h) for h in hypotheses],
        [[prepare(tokenize, r) for r in rs] for rs in references],
    )
    return score.score, tokenizer_name


def paper_bleu(hypotheses, references, language="de"):
    """BLEU as tensor2tensor's get_ende_bleu.sh computes it (see the module docstring).

    Args:
        hypotheses: detokenized system output, one string per segment.
        references: one list of reference strings (or a list of such lists).
        language: the target language, for the Moses tokenizer.

    Returns:
        `(score, note)`: the BLEU score (0-100) and how it was computed.

    Example:
    >>> round(paper_bleu(["Das ist ein Test-Satz ."], ["Das ist ein Test-Satz ."])[0], 2)
    100.0
    """
    score, tokenizer_name = _tokenized_bleu(
        hypotheses,
        references,
        language,
        lambda tokenize, text: split_compounds(tokenize(text.strip())),
    )
    return score, f"{PAPER_BLEU_NOTE}; {tokenizer_name}"


def moses_lowercase_bleu(hypotheses, references, language="de"):
    """Word-level BLEU on lower-cased, Moses-tokenized text: `multi-bleu.perl` on data
    prepared as the Multi30k literature prepares it (Wu et al. 2021 and most multimodal MT
    papers), so that a detokenized, cased system output can be compared with their figures.

    Both sides are lower-cased and tokenized with sacremoses, then scored by sacreBLEU with
    `tokenize="none"`. Not comparable with sacreBLEU's default (13a, cased) figure.

    Returns:
        `(score, note)`: the BLEU score (0-100) and how it was computed.

    Example:
    >>> round(moses_lowercase_bleu(["Ein Hund läuft."], ["ein hund läuft ."])[0], 2)
    100.0
    """
    score, tokenizer_name = _tokenized_bleu(
        hypotheses, references, language, lambda tokenize, text: tokenize(text.strip().lower())
    )
    return score, (
        f"lower-cased, {tokenizer_name}, then sacreBLEU tokenize='none' "
        "(multi-bleu.perl on tokenized text); not comparable with sacreBLEU"
    )


def evaluate(
    hypotheses, references, *, target_language=None, lowercase=False, with_paper_bleu=False
):
    """sacreBLEU and chrF of `hypotheses` against `references` (and optionally paper BLEU).

    Args:
        hypotheses: detokenized system output, one string per segment.
        references: a list of reference strings, or a list of such lists (several references).
        target_language: ISO code of the target (e.g. "de"); lets sacreBLEU choose its
            tokenizer (zh, ja, ko) and the Moses tokenizer of `paper_bleu` its rules.
        lowercase: case-insensitive BLEU and chrF (reported in their signatures): for a
            model trained on lower-cased text, whose output has no case to compare.
        with_paper_bleu: also compute `paper_bleu` (not comparable with sacreBLEU).

    Returns:
        An `EvaluationReport`.

    Example:
    >>> report = evaluate(["The cat sat on the mat."], ["The cat sat on the mat."])
    >>> round(report.bleu, 1), report.bleu_signature
    (100.0, 'nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0')
    """
    hypotheses, references = _check_pairs(hypotheses, references)
    bleu_metric = sacrebleu.metrics.BLEU(lowercase=lowercase, trg_lang=target_language or "")
    bleu = bleu_metric.corpus_score(hypotheses, references)
    chrf_metric = sacrebleu.metrics.CHRF(lowercase=lowercase)
    chrf = chrf_metric.corpus_score(hypotheses, references)
    report = EvaluationReport(
        bleu=bleu.score,
        bleu_signature=str(bleu_metric.get_signature()),
        bleu_details=str(bleu),
        chrf=chrf.score,
        chrf_signature=str(chrf_metric.get_signature()),
        num_sentences=len(hypotheses),
    )
    if with_paper_bleu:
        report.paper_bleu, report.paper_bleu_note = paper_bleu(
            hypotheses, references, language=target_language or "de"
        )
    return report


def translate_and_evaluate(translator, sources, references, **options):
    """Translates `sources` with a `Translator` and scores the output.

    Args:
        translator: a `keras_transformer.Translator`.
        sources: source sentences.
        references: reference translations (see `evaluate`).
        **options: `evaluate` arguments.

    Returns:
        `(hypotheses, report, seconds)`: the translations, the `EvaluationReport` and the
        translation wall time.
    """
    start = time.perf_counter()
    hypotheses = translator.translate(list(sources))
    seconds = time.perf_counter() - start
    return hypotheses, evaluate(hypotheses, references, **options), seconds


def headline_json(report, **extra):
    """One JSON line of the headline figures, for scripts and logs."""
    figures = {
        "bleu": round(report.bleu, 2),
        "chrf": round(report.chrf, 2),
        "bleu_signature": report.bleu_signature,
        "sentences": report.num_sentences,
    }
    if report.paper_bleu is not None:
        figures["paper_bleu_not_sacrebleu"] = round(report.paper_bleu, 2)
    figures.update(extra)
    return json.dumps(figures, sort_keys=True)
