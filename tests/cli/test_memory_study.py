"""launch/memory_study.sh: the GPU memory study's bookkeeping, against real trainer runs on the CPU.

- only the records this invocation wrote are tabulated (one an earlier run left in OUT is not), and a failed run makes
  the exit status 1 with a line saying how many failed;
- OUT naming a regular file: one line, exit 2;
- the timeline PNGs are drawn by a python that has matplotlib (/usr/bin/python3 before the first python3 on PATH, or
  PYTHON), else one line saying they are not plotted.

The study's runs ask for device cuda and the xl / small configs: a wrapper (`wrapper`) runs them on the CPU with the
tiny model instead. Run: TRAINER_BIN=build/trainer TRAINER_SOURCE_DIR=. /usr/bin/python3 -m pytest
tests/cli/test_memory_study.py
"""
import os
import pathlib
import subprocess

import pytest

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BIN = os.environ.get("TRAINER_BIN")
needs_trainer = pytest.mark.skipif(not BIN, reason="TRAINER_BIN is not set")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
OLD = SRC / "results" / "cpu" / "small_cpu_fp32.json"  # a record an earlier run left (step 43237.8 ms)


def study(trainer, out, *stages, env=None):
    return subprocess.run(["bash", str(SRC / "launch" / "memory_study.sh"), str(trainer), str(out), *stages],
                          capture_output=True, text=True, timeout=300, env=env or ENV)


def wrapper(tmp_path, refuse=""):
    """The trainer on the CPU with a one-block tiny model and one measured step (its --set come last and win); the run
    named `refuse` gets a bad batch size (refused: exit 2, no record)."""
    w = tmp_path / "trainer.sh"
    w.write_text(f"""#!/bin/bash
args=("$@"); args[0]='{SRC}/configs/tiny.json'
extra=()
[[ " $* " == *" name={refuse} "* ]] && extra=(--set data.batch_size=-1)
exec '{BIN}' "${{args[@]}}" --set device=cpu --set precision=fp32 --set model.num_layers=1 \\
  --set model.context_length=64 --set bench.warmup_steps=0 --set bench.measure_steps=1 "${{extra[@]}}"
""")
    w.chmod(0o755)
    return w


def test_refused_runs_and_an_old_record(tmp_path):
    # the fresh-user report: every run refused (there: device cuda on a CPU build; here a stand-in trainer that
    # refuses everything, so the test means the same on a GPU machine), OUT holding an old record of one's name
    out = tmp_path / "out"
    out.mkdir()
    (out / "small_c512_none.json").write_text(OLD.read_text())
    refuse = tmp_path / "refuse.sh"
    refuse.write_text("#!/bin/bash\necho \"trainer: error: device: 'cuda' was asked for but no CUDA device is visible\" >&2\n"
                      "exit 2\n")
    refuse.chmod(0o755)
    p = study(refuse, out, "small")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "43237.8" not in p.stdout and "small_c512_none" not in p.stdout, p.stdout
    assert "6 of 6 runs failed" in p.stderr, p.stderr
    assert (out / "small_c512_none.json").read_text() == OLD.read_text()  # left as it was


@needs_trainer
def test_only_this_invocations_records_are_tabulated(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "small_c512_full.json").write_text(OLD.read_text())
    p = study(wrapper(tmp_path, refuse="small_c512_full"), out, "small")
    assert p.returncode == 1, p.stdout + p.stderr
    names = [line.split()[0] for line in p.stdout.splitlines()[1:] if line.strip()]
    assert names == [f"small_c512_{x}" for x in ("none", "selective", "every_k", "sqrt", "nested")], p.stdout
    assert "43237.8" not in p.stdout, p.stdout
    assert p.stderr.splitlines()[-1].startswith("memory_study.sh: 1 of 6 runs failed"), p.stderr
    assert (out / "table.txt").read_text() == p.stdout


def test_out_is_a_regular_file(tmp_path):
    out = tmp_path / "out"
    out.write_text("")
    p = study("/bin/true", out, "small")
    assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
    assert p.stderr == f"memory_study.sh: OUT '{out}' exists and is not a directory\n", p.stderr


@needs_trainer
@pytest.mark.parametrize("python", [None, "without"])
def test_timeline_plots_with_a_python_that_has_matplotlib(tmp_path, python):
    # the first python3 on PATH lacks matplotlib; with PYTHON naming one that does too, nothing is plotted
    if subprocess.run(["/usr/bin/python3", "-c", "import matplotlib, numpy"], capture_output=True).returncode != 0:
        pytest.skip("/usr/bin/python3 has no matplotlib and numpy")
    bare = tmp_path / "bin"  # python3: /usr/bin/python3 where `import matplotlib` fails
    bare.mkdir()
    (bare / "matplotlib.py").write_text("raise ImportError('no matplotlib in this python')\n")
    (bare / "python3").write_text(f"#!/bin/sh\nPYTHONPATH='{bare}' exec /usr/bin/python3 \"$@\"\n")
    (bare / "python3").chmod(0o755)
    env = dict(ENV, PATH=f"{bare}:{ENV['PATH']}")
    env.pop("PYTHON", None)
    if python:
        env["PYTHON"] = str(bare / "python3")
    out = tmp_path / "out"
    p = study(wrapper(tmp_path), out, "timeline", env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    names = ["xl_c2048_timeline_forward_selective", "xl_c2048_timeline_train_step_none",
             "xl_c2048_timeline_train_step_full"]
    assert all((out / f"{n}.memory.json").is_file() for n in names)
    pngs = sorted(x.name for x in out.glob("*.png"))
    if python:
        assert pngs == [] and [line for line in p.stderr.splitlines() if "matplotlib" in line] == [
            f"memory_study.sh: no python with matplotlib and numpy (tried {bare}/python3; set PYTHON): the timelines"
            " are written, not plotted"], p.stderr
    else:
        assert pngs == sorted(f"{n}.png" for n in names), p.stderr
        assert "matplotlib" not in p.stderr and "plot failed" not in p.stderr, p.stderr
