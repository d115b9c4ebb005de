"""launch/compare_results.py: trainer records beside the PyTorch peer's (torch_bench.result/1), on the kept H200
records of v24 (the ratios are computed here from the files, independently of the script), and bad input."""
import json
import os
import pathlib
import subprocess
import sys

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
SCRIPT = SRC / "launch" / "compare_results.py"
V24 = SRC / "results" / "h200" / "2026-12-04" / "v24" / "call2"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=60)


def row(text, label):
    """The cells of the row `label` of the text table (split on runs of two or more spaces)."""
    import re
    for line in text.splitlines():
        if line.startswith(label + "  ") or line == label:
            return re.split(r"\s{2,}", line.strip())[1:]
    raise AssertionError(f"no row '{label}' in:\n{text}")


def test_peer_beside_trainer():
    peer, ours = V24 / "torch_xl_ro.json", V24 / "xl1.json"
    p, t = json.loads(peer.read_text()), json.loads(ours.read_text())
    out = run(peer, ours)
    assert out.returncode == 0, out.stderr
    ratio = t["timing"]["step"]["mean_ms"] / p["timing"]["step"]["mean_ms"]
    assert row(out.stdout, "step time vs first") == ["1.00x", f"{ratio:.2f}x"]
    assert row(out.stdout, "job / name") == ["peer / torch_bench compiled, torch.compile reduce-overhead",
                                             "train / xl1"]
    assert row(out.stdout, "step ms (mean ± std)")[0] == (
        f"{p['timing']['step']['mean_ms']:.2f} ± {p['timing']['step']['std_ms']:.2f} (n={p['timing']['step']['samples']})")
    assert row(out.stdout, "peak memory") == [f"{p['memory']['peak_bytes'] / 2**30:.2f} GiB",
                                              f"{t['memory']['peak_bytes'] / 2**30:.2f} GiB"]
    assert row(out.stdout, "precision") == ["bf16 (autocast, compiled)", "bf16"]
    model = row(out.stdout, "model")
    assert model[0] == model[1] and model[0].startswith("xl: d_model 2560 d_ff 10240 L 32")  # the same shape
    md = run("--markdown", ours, peer)
    assert md.returncode == 0, md.stderr
    assert f"| step time vs first | 1.00x | {1 / ratio:.2f}x |" in md.stdout


def test_bad_input(tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "something/1"}))
    out = run(V24 / "xl1.json", other)
    assert out.returncode != 0 and out.stdout == ""
    assert "is not a trainer result record" in out.stderr and "torch_bench.result/1" in out.stderr
    missing = run(tmp_path / "missing.json")
    assert missing.returncode != 0 and "cannot read" in missing.stderr
