"""launch/records.py, the helpers of the table scripts and plot.py: the records' names (file names with as many parent
folders as make each unique, the same path once), clip at a word boundary, and mean ± std without the std of one
sample.
"""
import os
import pathlib
import sys

import pytest

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(SRC / "launch"))
from records import clip, file_labels, mean_std  # noqa: E402


@pytest.mark.parametrize("paths, suffix, want", [
    (["/r/a.json", "/r/b.json"], False, ["a", "b"]),
    (["/r/a.json", "/r/b.json"], True, ["a.json", "b.json"]),
    # a name two files share gets the fewest parent folders that tell it apart; the others stay alone
    (["/r1/run.json", "/r2/run.json", "/r/c.json"], False, ["r1/run", "r2/run", "c"]),
    (["/r1/x/run.json", "/r2/x/run.json", "/r/c.json"], True, ["r1/x/run.json", "r2/x/run.json", "c.json"]),
    (["/r1/x/run.json", "/r2/x/run.json", "/r1/run.json"], False, ["r1/x/run", "r2/x/run", "r1/run"]),
    # a tail of another path is not a name: x/run would be one of /a/x/run's tails
    (["/a/x/run.json", "/x/run.json"], False, ["a/x/run", "/x/run"]),
    # the same path (in any spelling) is one name
    (["/r/run.json", "/r/run.json", "/r/./x/../run.json"], False, ["run", "run", "run"]),
    (["/r1/run.json", "/r1/run.json", "/r2/run.json"], False, ["r1/run", "r1/run", "r2/run"]),
    # equal without the suffix: the names with it
    (["/r/run.json", "/r/run.txt"], False, ["run.json", "run.txt"]),
    ([], False, []),
])
def test_file_labels(paths, suffix, want):
    assert file_labels(paths, suffix=suffix) == want


def test_file_labels_of_relative_paths_name_the_folders_of_the_absolute_path(tmp_path, monkeypatch):
    (tmp_path / "main").mkdir()
    monkeypatch.chdir(tmp_path / "main")
    assert file_labels(["run.json", "../x/run.json", pathlib.Path("run.json")]) == ["main/run", "x/run", "main/run"]


def test_clip():
    assert clip("short  text\n with\tspaces", 40) == "short text with spaces"
    assert clip("out of memory on cuda:0: asked for 47.81 GiB", 30) == "out of memory on cuda:0: asked…"
    assert clip("x" * 80, 60) == "x" * 60 + "…"   # one word: cut inside it
    assert clip("a b c", 5) == "a b c"


@pytest.mark.parametrize("t, args, want", [
    ({"mean_ms": 80.0, "std_ms": 0.5, "samples": [79.5, 80.5]}, (), "80.00 ± 0.50"),
    ({"mean_ms": 80.0, "std_ms": None, "samples": 3}, (), "80.00 ± 0.00"),   # torch_bench: the count
    ({"mean_ms": 80.0, "std_ms": 0.0, "samples": [80.0]}, (), "80.00"),      # one sample: no std
    ({"mean_ms": 80.0, "std_ms": 0.0, "samples": 1}, (), "80.00"),
    ({"mean_ms": 80.0, "std_ms": 0.5}, (), "80.00 ± 0.50"),                  # no count: the std
    ({"mean_ms": 80.0, "std_ms": 0.5, "samples": [1, 2]}, ("8.1f", "5.1f", True), "    80.0 ±   0.5"),
    ({"mean_ms": 80.0, "std_ms": 0.5, "samples": [1]}, ("8.1f", "5.1f", True), "    80.0" + " " * 8),  # aligned
    ({"mean_ms": None, "samples": []}, (), None),
    ({"mean_ms": True}, (), None),
    (None, (), None),
])
def test_mean_std(t, args, want):
    assert mean_std(t, *args) == want
