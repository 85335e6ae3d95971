"""Beam size and length penalty of a trained Multi30k model, on the val split only.

Section 6.1 fixes beam 4 and alpha 0.6 "after experimentation on the development set"; this
repeats that experiment for a `pipelines/multi30k.py` run, so that decoding settings are never
chosen on test. For each `BEAM:ALPHA` it translates val with the averaged model (the run's own
preparation: lower-cased and Moses-tokenized unless the run was trained `--cased --no-moses`)
and prints the comparable BLEU (`moses_lowercase_bleu`), case-insensitive sacreBLEU with its
brevity penalty, and chrF. Ends with one JSON line of every figure.

Usage:
    KT_DATA_DIR=../shared/data python benchmarks/multi30k_decoding_sweep.py \\
        --run runs/multi30k_en_de --settings 4:0.6 4:1.0 4:1.4 5:0.6 5:1.0
"""

import argparse
import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="output folder of pipelines/multi30k.py")
    parser.add_argument(
        "--data-dir", default=None, help="the multi30k folder (default: $KT_DATA_DIR/multi30k)"
    )
    parser.add_argument("--target", choices=["de", "fr"], default="de")
    parser.add_argument(
        "--settings", nargs="+", default=["4:0.6", "4:1.0", "4:1.4", "5:0.6"], metavar="BEAM:ALPHA"
    )
    parser.add_argument("--lines", type=int, default=None, help="first N val lines only")
    args = parser.parse_args(argv)
    data_dir = args.data_dir or os.path.join(os.environ.get("KT_DATA_DIR", ""), "multi30k")
    if not os.path.isdir(data_dir):
        parser.error(f"no multi30k data at {data_dir!r}: give --data-dir or set KT_DATA_DIR")
    preparation = pathlib.Path(args.run, "data", "PREPROCESSING")
    if not preparation.is_file():
        parser.error(
            f"{args.run} has no data/PREPROCESSING: not a run of pipelines/multi30k.py "
            "with a preparation (a --cased --no-moses run needs none: use evaluate)"
        )

    sys.path.insert(0, str(ROOT / "pipelines"))
    import sacrebleu
    from multi30k import Preprocessing, _read_lines

    from keras_transformer import Translator
    from keras_transformer.evaluation import moses_lowercase_bleu

    name = preparation.read_text().strip()
    preprocessing = Preprocessing(
        lowercase="lowercase" in name, moses="moses" in name, language=args.target
    )
    sources = _read_lines(os.path.join(data_dir, "val.en.gz"))[: args.lines]
    references = _read_lines(os.path.join(data_dir, f"val.{args.target}.gz"))[: args.lines]
    inputs = [preprocessing(line, "en") for line in sources]
    print(f"val en-{args.target}, {len(sources)} sentences, preparation {name}")
    print(
        f"{'beam':>4} {'alpha':>5} {'comparable':>10} {'sacreBLEU lc':>12} {'BP':>6} "
        f"{'chrF lc':>7} {'seconds':>7}"
    )
    rows = []
    for setting in args.settings:
        beam, alpha = setting.split(":")
        translator = Translator.load(
            args.run, beam_size=int(beam), alpha=float(alpha), max_extra_length=50
        )
        start = time.perf_counter()
        hypotheses = [preprocessing.postprocess(h) for h in translator.translate(inputs)]
        seconds = time.perf_counter() - start
        bleu = sacrebleu.metrics.BLEU(lowercase=True).corpus_score(hypotheses, [references])
        chrf = sacrebleu.metrics.CHRF(lowercase=True).corpus_score(hypotheses, [references])
        comparable, _ = moses_lowercase_bleu(hypotheses, references, language=args.target)
        rows.append(
            {
                "beam": int(beam),
                "alpha": float(alpha),
                "moses_lowercase_bleu": round(comparable, 2),
                "bleu_lc": round(bleu.score, 2),
                "bp": round(bleu.bp, 3),
                "chrf_lc": round(chrf.score, 2),
                "seconds": round(seconds, 1),
            }
        )
        row = rows[-1]
        print(
            f"{row['beam']:>4} {row['alpha']:>5} {row['moses_lowercase_bleu']:>10} "
            f"{row['bleu_lc']:>12} {row['bp']:>6} {row['chrf_lc']:>7} {row['seconds']:>7}"
        )
    best = max(rows, key=lambda row: row["moses_lowercase_bleu"])
    print(
        json.dumps(
            {
                "benchmark": "multi30k_decoding_sweep",
                "split": "val",
                "sentences": len(sources),
                "preprocessing": name,
                "settings": rows,
                "best": {"beam": best["beam"], "alpha": best["alpha"]},
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
