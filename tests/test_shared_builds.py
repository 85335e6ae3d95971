"""tests/_shared_builds.py: a shared thing is made once, whole, by whichever process comes
first (a worker or the background process), and the background process makes what the
collected tests read."""

import subprocess
import sys
import time
import types

from tests import _shared_builds


def _write(folder):
    (folder / "made.txt").write_text("whole")


def test_build_once_makes_the_folder_once_and_drops_a_crashed_half(tmp_path):
    calls = []

    def write(folder):
        calls.append(folder.name)
        _write(folder)

    (tmp_path / "thing.staging").mkdir()
    (tmp_path / "thing.staging" / "half.txt").write_text("a crashed process's")
    folder = _shared_builds.build_once_in(tmp_path, "thing", write)
    assert _shared_builds.build_once_in(tmp_path, "thing", write) == folder
    assert calls == ["thing.staging"]  # made once, in the staging folder
    assert sorted(p.name for p in folder.iterdir()) == ["made.txt"]
    assert not (tmp_path / "thing.staging").exists()


def test_needed_builds_are_those_the_collected_tests_read():
    def item(*names):
        return types.SimpleNamespace(fixturenames=list(names))

    assert _shared_builds.needed_builds([item("tmp_path"), item("data_dir")]) == []
    both = [item("shared_export", "exported"), item("quickstart_run")]
    assert _shared_builds.needed_builds(both) == ["quickstart", "shared_export"]


def test_the_background_process_makes_the_named_builds(tmp_path, monkeypatch):
    monkeypatch.setitem(_shared_builds.BUILDS, "marker", ("marker_fixture", __name__))
    _shared_builds._main(str(tmp_path), ["marker"])
    assert (tmp_path / "marker" / "made.txt").read_text() == "whole"


def test_stop_ends_a_background_build_and_what_it_started(tmp_path):
    grandchild = tmp_path / "grandchild.pid"
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(grandchild)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    deadline = time.monotonic() + 30
    while not grandchild.exists() or not grandchild.read_text():
        assert time.monotonic() < deadline, "the script never started its child"
        time.sleep(0.05)
    _shared_builds.stop(process)
    assert process.returncode == -9
    pid = int(grandchild.read_text())
    deadline = time.monotonic() + 10
    while _alive(pid):  # the grandchild is reaped by init once killed
        assert time.monotonic() < deadline, "the child of the background build still runs"
        time.sleep(0.05)
    _shared_builds.stop(process)  # a finished process: nothing to do


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
