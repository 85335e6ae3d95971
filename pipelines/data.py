"""The data each recipe reads: check that it is in place, or fetch it where the network allows.

Every recipe that reads real text reads it from one data folder, `KT_DATA_DIR` (or
`--data-dir`), in this layout:

    multi30k/{train,val,test_2016_flickr}.{en,de}.gz   Multi30k task 1, raw cased captions
    wmt/newstest2013.{en,de,fr}                          WMT newstest2013, the paper's dev set
    treebank/wsj_sample.{train,dev}.trees                Penn Treebank WSJ sample, a tree a line
    gum/gum_const.train.trees                            GUM silver trees, a tree a line

`check RECIPE` opens every file the recipe reads, counts its lines and checks that the two
sides of each corpus are line-aligned; it prints one line per file and exits with status 1,
naming each missing or misaligned file and where it comes from, when one is wrong. `fetch
RECIPE` downloads what can be downloaded (Multi30k from its GitHub repository, newstest2013
through sacreBLEU) into the data folder, never overwriting a file, then checks. Nothing here
imports TensorFlow.

    python pipelines/data.py check multi30k|wmt14-en-de|wmt14-en-fr|parsing-wsj|parsing-wsj-gum|all
    python pipelines/data.py fetch multi30k|wmt14-en-de|wmt14-en-fr [--data-dir DIR]
"""

import argparse
import dataclasses
import gzip
import os
import shutil
import sys
import tempfile
import urllib.request

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"


@dataclasses.dataclass(frozen=True)
class DataFile:
    """One file a recipe reads, relative to the data folder, and where it comes from."""

    path: str
    source: str
    aligned_with: str | None = None  # the other side of a parallel corpus


def _multi30k(target):
    files = []
    for split in ("train", "val", "test_2016_flickr"):
        source = f"Multi30k task 1 ({MULTI30K_URL}/{split}.en.gz)"
        files.append(DataFile(f"multi30k/{split}.en.gz", source))
        files.append(
            DataFile(
                f"multi30k/{split}.{target}.gz",
                source.replace(".en.gz", f".{target}.gz"),
                f"multi30k/{split}.en.gz",
            )
        )
    return files


def _newstest2013(target):
    source = f"WMT newstest2013 (sacrebleu -t wmt13 -l en-{target} --echo src / ref)"
    return [
        DataFile("wmt/newstest2013.en", source),
        DataFile(f"wmt/newstest2013.{target}", source, "wmt/newstest2013.en"),
    ]


WSJ_SOURCE = "the Penn Treebank WSJ sample of NLTK (nltk.download('treebank')), one tree a line"
GUM_SOURCE = "GUM constituency trees (github.com/amir-zeldes/gum), one tree a line"
RECIPES = {
    "multi30k": _multi30k("de"),
    "wmt14-en-de": _newstest2013("de"),
    "wmt14-en-fr": _newstest2013("fr"),
    "parsing-wsj": [
        DataFile("treebank/wsj_sample.train.trees", WSJ_SOURCE),
        DataFile("treebank/wsj_sample.dev.trees", WSJ_SOURCE),
    ],
}
RECIPES["parsing-wsj-gum"] = RECIPES["parsing-wsj"] + [
    DataFile("gum/gum_const.train.trees", GUM_SOURCE)
]


def count_lines(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as lines:
        return sum(1 for _ in lines)


FETCHABLE = ("multi30k/", "wmt/")


def check(files, data_dir, out=sys.stdout):
    """Prints each file's lines; returns the problems found, one line each (empty: all good)."""
    problems, counts = [], {}
    for file in files:
        path = os.path.join(data_dir, file.path)
        try:
            counts[file.path] = count_lines(path)
        except FileNotFoundError:
            fetchable = file.path.startswith(FETCHABLE)
            how = " (`python pipelines/data.py fetch RECIPE` downloads it)" if fetchable else ""
            problems.append(f"{path}: missing; it comes from {file.source}{how}")
            continue
        except (OSError, EOFError) as error:
            problems.append(f"{path}: unreadable ({error}); it comes from {file.source}")
            continue
        print(f"{counts[file.path]:>8} lines  {path}", file=out)
        if counts[file.path] == 0:
            problems.append(f"{path}: empty; it comes from {file.source}")
        other = file.aligned_with
        if other in counts and counts[other] != counts[file.path]:
            problems.append(
                f"{path}: {counts[file.path]} lines, but {other} has {counts[other]}: "
                "the two sides of a corpus must be line-aligned"
            )
    return problems


def _download(url, path):
    """Writes url's bytes to path through a temporary file: an interrupted download leaves none."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, delete=False) as partial:
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                shutil.copyfileobj(response, partial)
        except BaseException:
            os.unlink(partial.name)
            raise
    os.replace(partial.name, path)


def _sacrebleu_lines(target, side):
    from sacrebleu.utils import get_reference_files, get_source_file

    pair = f"en-{target}"
    path = get_source_file("wmt13", pair) if side == "en" else get_reference_files("wmt13", pair)[0]
    with open(path, encoding="utf-8") as lines:
        return lines.read()


def fetch(recipe, data_dir, multi30k_url=MULTI30K_URL, out=sys.stdout):
    """Downloads the recipe's files that are not there yet; returns the files written."""
    written = []
    for file in RECIPES[recipe]:
        path = os.path.join(data_dir, file.path)
        if os.path.exists(path):
            continue
        name = os.path.basename(file.path)
        print(f"fetching {path}", file=out)
        if file.path.startswith("multi30k/"):
            _download(f"{multi30k_url}/{name}", path)
        elif file.path.startswith("wmt/"):
            text = _sacrebleu_lines(recipe[-2:], name.rsplit(".", 1)[1])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path + ".partial", "w", encoding="utf-8") as partial:
                partial.write(text)
            os.replace(path + ".partial", path)
        else:
            raise SystemExit(f"data: {file.path} is not downloaded here; get {file.source}")
        written.append(path)
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("check", "fetch"))
    parser.add_argument("recipe", choices=(*RECIPES, "all"))
    parser.add_argument("--data-dir", default=None, help="default: $KT_DATA_DIR")
    args = parser.parse_args(argv)
    data_dir = args.data_dir or os.environ.get("KT_DATA_DIR")
    if not data_dir:
        print("data: give --data-dir or set KT_DATA_DIR to the data folder", file=sys.stderr)
        return 2
    recipes = list(RECIPES) if args.recipe == "all" else [args.recipe]
    if args.action == "fetch":
        for recipe in recipes:
            try:
                fetch(recipe, data_dir)
            except OSError as error:
                print(f"data: fetching {recipe} failed ({error}); no network?", file=sys.stderr)
                return 1
    files = {file.path: file for recipe in recipes for file in RECIPES[recipe]}
    problems = check(list(files.values()), data_dir)
    for problem in problems:
        print(f"data: {problem}", file=sys.stderr)
    if not problems:
        print(f"data: every file of {', '.join(recipes)} is in place in {data_dir}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
