"""benchmarks/micro/search_cpu_time.py: its JSON line, and an md5 that is the translations'."""

import hashlib
import json

from benchmarks.micro import search_cpu_time
from keras_transformer import Translator
from tests._decoding_fixtures import SENTENCES, tiny_copy_run_folder


def test_json_line_holds_the_times_and_the_md5_of_the_translations(
    tmp_path_factory, tmp_path, capsys
):
    run = tiny_copy_run_folder(tmp_path_factory)
    source = tmp_path / "source.txt"
    source.write_text("\n".join(SENTENCES[:3]) + "\n", encoding="utf-8")
    search_cpu_time.main(
        ["--trained", str(run), "--source-file", str(source), "--beam-size", "2", "--repeats", "1"]
    )
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["benchmark"] == "search_cpu_time" and record["lines"] == 3
    assert record["cpu_seconds"] > 0 and record["wall_seconds"] > 0
    expected = Translator.load(str(run), beam_size=2, alpha=0.0).translate(SENTENCES[:3])
    assert record["outputs_md5"] == hashlib.md5("\n".join(expected).encode()).hexdigest()
