"""pipelines/data.py: checks the files each recipe reads, and fetches those it can download."""

import gzip
import importlib.util
import io
import os
import pathlib
import subprocess
import sys

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[1]


def load_data_script():
    spec = importlib.util.spec_from_file_location("data_script", REPO / "pipelines" / "data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


data = load_data_script()


def write_gz(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.writelines(f"{line}\n" for line in lines)


def fake_multi30k(folder, lines=3):
    for split in ("train", "val", "test_2016_flickr"):
        for language in ("en", "de"):
            write_gz(
                folder / f"{split}.{language}.gz", [f"{split} {language} {i}" for i in range(lines)]
            )


@pytest.mark.skipif(
    not os.path.isdir(os.path.join(os.environ.get("KT_DATA_DIR", "-"), "multi30k")),
    reason="KT_DATA_DIR with the real data is not set",
)
def test_every_recipe_finds_its_files_in_the_data_folder():
    result = subprocess.run(
        [sys.executable, str(REPO / "pipelines" / "data.py"), "check", "all"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "   29000 lines  " in result.stdout  # Multi30k's training pairs
    assert "newstest2013.fr" in result.stdout and "gum_const.train.trees" in result.stdout


def test_missing_and_misaligned_files_are_named_with_their_source(tmp_path):
    fake_multi30k(tmp_path / "multi30k")
    (tmp_path / "multi30k" / "val.de.gz").unlink()
    write_gz(tmp_path / "multi30k" / "train.de.gz", ["one", "two"])
    problems = data.check(data.RECIPES["multi30k"], str(tmp_path), out=io.StringIO())
    assert len(problems) == 2
    assert "train.de.gz: 2 lines, but multi30k/train.en.gz has 3" in problems[0]
    assert problems[1].startswith(f"{tmp_path}/multi30k/val.de.gz: missing; it comes from")
    assert "fetch RECIPE" in problems[1]


def test_the_command_exits_1_on_a_problem_and_0_when_all_is_there(tmp_path, capsys):
    fake_multi30k(tmp_path / "multi30k")
    assert data.main(["check", "multi30k", "--data-dir", str(tmp_path)]) == 0
    (tmp_path / "multi30k" / "test_2016_flickr.en.gz").write_bytes(b"")
    assert data.main(["check", "multi30k", "--data-dir", str(tmp_path)]) == 1
    assert "test_2016_flickr.en.gz: empty" in capsys.readouterr().err


def test_fetch_downloads_what_is_missing_and_overwrites_nothing(tmp_path):
    mirror, target = tmp_path / "mirror", tmp_path / "data"
    fake_multi30k(mirror, lines=4)
    write_gz(target / "multi30k" / "train.en.gz", ["kept"] * 4)
    written = data.fetch("multi30k", str(target), multi30k_url=mirror.as_uri(), out=io.StringIO())
    assert len(written) == 5 and str(target / "multi30k" / "train.en.gz") not in written
    with gzip.open(target / "multi30k" / "train.en.gz", "rt") as kept:
        assert kept.read() == "kept\n" * 4
    assert data.check(data.RECIPES["multi30k"], str(target), out=io.StringIO()) == []
    assert sorted(os.listdir(target / "multi30k")) == sorted(os.listdir(mirror))  # no partials


@pytest.mark.parametrize("config", ["wmt14_en_de_base", "wmt14_en_fr_big"])
def test_the_files_checked_are_the_ones_the_configs_read(config):
    values = yaml.safe_load((REPO / "configs" / f"{config}.yaml").read_text())
    dev = [
        values["data"]["dev"][side].replace("${KT_DATA_DIR}/", "") for side in ("source", "target")
    ]
    recipe = config[:11].replace("_", "-")  # wmt14-en-de, wmt14-en-fr
    assert dev == [file.path for file in data.RECIPES[recipe]]
