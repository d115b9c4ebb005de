"""Training checkpoints and exact resume (issue 18, item 1), one process on the CPU.

- 4 steps straight == 2 steps + checkpoint + init.resume + 2 steps, bitwise: losses, gradient norms, final weights
  and AdamW m, v and step count, with a cosine schedule (warm-up) and random sampling from a token file. The resumed
  run writes into the directory it resumed from (allowed: new step directories, `latest` replaced atomically).
- The checkpoint directory: `latest`, the newest and the previous step directory, DIR/model.safetensors (the weights
  with the reference names, loadable by PyTorch and by init.weights), the manifest's step, schedule and config hash;
  checkpoint_every writes every N steps and keeps two; the record has the write and read times.
- A checkpoint killed (SIGKILL) while it is being written leaves the previous one loadable, and resuming from it
  still gives the uninterrupted run's values bitwise.
- Resuming an older step of the output directory warns once (the later step named), continues bitwise, and prunes
  the abandoned line. A changed config warns naming the keys that can change numbers, with their values.
- A checkpoint that cannot be written (a full disk) fails the run with its loss curve in the record and no temporary
  directory left.
- A checkpoint file damaged after it was written (one bit): refused naming the file (the block's bytes for the
  optimizer file, read by blocks) and both CRC-32s; one of another size: refused before any work. A manifest without
  checksums resumes unchecked with one warning.
- One clear error line (exit 2, nothing written) for: a missing or half-written checkpoint, another model shape,
  init.weights with init.resume, a checkpoint already at the run's last step, checkpoint_every without a checkpoint,
  a checkpoint path that names a .safetensors file.
"""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
import zlib

import numpy as np
import pytest

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(SRC / "tests" / "parity"))
import safetensors_io  # noqa: E402
from checkpoint_edit import run_moving_latest  # noqa: E402  (this folder)

BIN = os.environ.get("TRAINER_BIN")
pytestmark = pytest.mark.skipif(not BIN, reason="TRAINER_BIN is not set")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def token_file(tmp):
    path = tmp / "tokens.bin"
    if not path.exists():
        rng = np.random.default_rng(7)
        rng.integers(0, 256, size=20000, dtype=np.uint16).tofile(path)
    return path


def args(tmp, tag, steps, *sets):
    """tiny on the CPU, `steps` steps in all, cosine schedule with warm-up, random windows of a token file."""
    a = [BIN, str(SRC / "configs/tiny.json"), "--set", "device=cpu", "--set", "bench.warmup_steps=0",
         "--set", f"bench.measure_steps={steps}", "--set", "optimizer.schedule=cosine",
         "--set", "optimizer.warmup_steps=1", "--set", "optimizer.cosine_steps=4", "--set", "optimizer.min_lr=1e-4",
         "--set", "optimizer.max_grad_norm=0.5", "--set", "data.source=tokens",
         "--set", f"data.path={token_file(tmp)}", "--set", "data.sampling=random", "--set", "data.seed=3",
         "--set", f"output.results={tmp / (tag + '.json')}"]
    for s in sets:
        a += ["--set", s]
    return a


def run(cmd, env=ENV, timeout=120):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=SRC)


def record(tmp, tag):
    return json.loads((tmp / (tag + ".json")).read_text())


def latest(ck):
    return ck / (ck / "latest").read_text().strip()


def state(ck):
    """(weights, optimizer tensors, manifest) of the newest checkpoint in ck."""
    d = latest(ck)
    w, _ = safetensors_io.load(d / "model.safetensors")
    o, _ = safetensors_io.load(d / "optim-rank00000.safetensors")
    return w, o, json.loads((d / "manifest.json").read_text())


def assert_same(a, b):
    assert set(a) == set(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert bool((a[k] == b[k]).all()), f"{k}: max diff {float((a[k].double() - b[k].double()).abs().max())}"


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("straight")
    p = run(args(tmp, "s", 4, f"output.checkpoint={tmp / 'ck'}"))
    assert p.returncode == 0, p.stderr[-3000:]
    return tmp, record(tmp, "s"), state(tmp / "ck")


def test_two_plus_two_steps_equal_four_bitwise(tmp_path, straight):
    _, ref, (ref_w, ref_o, ref_m) = straight
    ck = tmp_path / "ck"
    p = run(args(tmp_path, "a", 2, f"output.checkpoint={ck}"))
    assert p.returncode == 0, p.stderr[-3000:]
    first = record(tmp_path, "a")
    assert (ck / "latest").read_text().strip() == "step-00000002"
    # the resumed run writes into the directory it resumed from
    p = run(args(tmp_path, "b", 4, f"init.resume={ck}", f"output.checkpoint={ck}"))
    assert p.returncode == 0, p.stderr[-3000:]
    second = record(tmp_path, "b")
    assert first["loss"]["per_step"] + second["loss"]["per_step"] == ref["loss"]["per_step"]
    assert first["grad_norm"]["per_step"] + second["grad_norm"]["per_step"] == ref["grad_norm"]["per_step"]
    assert first["lr"]["per_step"] + second["lr"]["per_step"] == ref["lr"]["per_step"]
    assert len(set(ref["lr"]["per_step"])) == 4  # the cosine schedule moves every step
    w, o, m = state(ck)
    assert_same(w, ref_w)
    assert_same(o, ref_o)
    assert set(o) == {"m", "v"} and o["m"].dtype == o["v"].dtype
    assert m["step"] == 4 and m["optimizer"]["steps_taken"] == 4 == ref_m["optimizer"]["steps_taken"]
    # the record: where it resumed from, how long reading and writing took
    assert second["steps"]["first"] == 2 and second["steps"]["total"] == 4
    assert second["checkpoint"]["resumed_from"]["step"] == 2
    assert second["checkpoint"]["resumed_from"]["path"].endswith("step-00000002")
    assert second["timing"]["resume_read_s"] > 0 and second["timing"]["checkpoint_write_s"] > 0
    assert first["timing"]["resume_read_s"] is None
    # the new checkpoint and the previous one are kept
    assert sorted(x.name for x in ck.iterdir() if x.name.startswith("step-")) == ["step-00000002", "step-00000004"]


def test_checkpoint_directory_contents(straight):
    tmp, ref, (w, o, m) = straight
    ck = tmp / "ck"
    # DIR/model.safetensors: the newest weights, with the reference names, loadable by PyTorch (safetensors_io
    # reads them into torch tensors and checks the layout)
    top, meta = safetensors_io.load(ck / "model.safetensors")
    assert_same(top, w)
    assert "token_embeddings.weight" in top and "layers.1.ffn.w2.weight" in top and meta["format"] == "pt"
    assert top["token_embeddings.weight"].shape == (256, 64)
    n_params = sum(t.numel() for t in top.values())
    assert o["m"].numel() >= n_params  # the flat layout, alignment gaps included
    assert m["format"] == "trainer.checkpoint/1" and m["world_size"] == 1 and m["strategy"] == "none"
    assert m["schedule"]["next_step"] == 4 and m["data"]["next_step"] == 4 and m["data"]["seed"] == 3
    assert m["config"]["optimizer"]["schedule"] == "cosine" and m["config_hash"].startswith("fnv1a64:")
    assert m["optimizer"]["shards"] == [{"rank": 0, "file": "optim-rank00000.safetensors",
                                         "numel": o["m"].numel(), "ranges": [[0, 0, m["layout_total"]]]}]
    assert ref["checkpoint"]["writes"][0]["step"] == 4 and ref["checkpoint"]["dir"] == str(ck)
    # each file's size and CRC-32 (zlib's, as Python computes it) in the manifest
    d = latest(ck)
    for f in ("model.safetensors", "optim-rank00000.safetensors"):
        b = (d / f).read_bytes()
        bb = m["files"][f]["block_bytes"]
        assert m["files"][f] == {"bytes": len(b), "crc32": f"{zlib.crc32(b):08x}", "block_bytes": 64 << 20,
                                 "block_crc32": [f"{zlib.crc32(b[i:i + bb]):08x}" for i in range(0, len(b), bb)]}
    # the weights file starts another run through init.weights
    p = run(args(tmp, "w", 1, f"init.weights={ck / 'model.safetensors'}"))
    assert p.returncode == 0, p.stderr[-2000:]


def test_checkpoint_every_keeps_the_last_two(tmp_path):
    ck = tmp_path / "ck"
    p = run(args(tmp_path, "e", 4, f"output.checkpoint={ck}", "output.checkpoint_every=1"))
    assert p.returncode == 0, p.stderr[-3000:]
    r = record(tmp_path, "e")
    assert [x["step"] for x in r["checkpoint"]["writes"]] == [1, 2, 3, 4]  # the end's write is step 4's
    assert sorted(x.name for x in ck.iterdir()) == [".lock", "latest", "model.safetensors", "step-00000003",
                                                    "step-00000004"]  # .lock: rank 0's flock while a run writes


def test_a_weights_file_left_at_another_step_is_linked_back_to_latest(tmp_path):
    """DIR/model.safetensors is a hard link to the weights of the step `latest` names. A process that ends between
    the commit's two renames leaves it at the other step (simulated: linked to step 3's while latest names step 4);
    the next run that takes the directory's lock links it back, with one warning, before it runs a step."""
    ck = tmp_path / "ck"
    p = run(args(tmp_path, "a", 4, f"output.checkpoint={ck}", "output.checkpoint_every=1"))
    assert p.returncode == 0, p.stderr[-3000:]
    top, step4, step3 = ck / "model.safetensors", ck / "step-00000004", ck / "step-00000003"
    assert latest(ck) == step4 and os.path.samefile(top, step4 / "model.safetensors")
    os.link(step3 / "model.safetensors", ck / "x")
    os.replace(ck / "x", top)
    assert not os.path.samefile(top, step4 / "model.safetensors")
    b = run(args(tmp_path, "b", 6, f"output.checkpoint={ck}", f"init.resume={ck}", "output.checkpoint_every=0",
                 "optimizer.cosine_steps=6"))
    assert b.returncode == 0, b.stderr[-3000:]
    (warn,) = [x for x in b.stderr.splitlines() if "held another step's weights" in x]
    assert f"linked to '{step4}/model.safetensors' again" in warn, warn
    assert os.path.samefile(top, latest(ck) / "model.safetensors") and latest(ck).name == "step-00000006"
    # nothing to mend: no warning
    c = run(args(tmp_path, "c", 7, f"output.checkpoint={ck}", f"init.resume={ck}", "optimizer.cosine_steps=6"))
    assert c.returncode == 0 and "held another step's weights" not in c.stderr, c.stderr[-3000:]


def test_a_later_step_written_while_the_run_started_is_named(tmp_path):
    """init.resume and output.checkpoint name one directory: 'latest' is read with the config, the directory's lock
    taken later. A later step committed in between (simulated: latest rewritten while the run's weights read is held
    by the test hook) is named in a warning; the run continues from the step it resumed, and its checkpoints become
    the latest (the later step is pruned)."""
    ck, other = tmp_path / "ck", tmp_path / "other"
    for d, steps in ((ck, 2), (other, 4)):
        p = run(args(tmp_path, d.name, steps, f"output.checkpoint={d}"))
        assert p.returncode == 0, p.stderr[-3000:]
    step2, step4 = latest(ck).name, latest(other).name
    shutil.copytree(other / step4, ck / step4)
    rc, err = run_moving_latest(args(tmp_path, "b", 6, f"output.checkpoint={ck}", f"init.resume={ck}",
                                     "optimizer.cosine_steps=6"), dict(ENV, TRAINER_TEST_IO_PAUSE_S="2"), SRC, ck,
                                step4, "pausing 2 s after reading the weights")
    assert rc == 0, err[-3000:]
    (w,) = [x for x in err.splitlines() if "names '" in x and "which this run resumed" in x]
    assert f"'{ck}/latest' names '{step4}' now, not '{step2}', which this run resumed" in w, w
    b = record(tmp_path, "b")
    assert b["steps"]["first"] == 2 and b["checkpoint"]["resumed_from"]["step"] == 2
    assert latest(ck).name == "step-00000006" and not (ck / step4).exists()


def test_resume_from_an_older_step_of_the_same_directory(tmp_path):
    """Resuming step 3 of a directory whose latest is step 4, with optimizer.in_gemm switched on (on the cpu the
    same update: its product into a temporary, then AdamW): one warning naming the later step, none saying the
    directory holds another run or that the config differs, and step 4 again bitwise (written beside the first
    as step-00000004.1, now the latest; the first step 4 pruned)."""
    ck = tmp_path / "ck"
    no_clip = "optimizer.max_grad_norm=null"  # in_backward (auto) on: in_gemm may run
    p = run(args(tmp_path, "a", 4, f"output.checkpoint={ck}", "output.checkpoint_every=1", no_clip))
    assert p.returncode == 0, p.stderr[-3000:]
    first = state(ck)
    p = run(args(tmp_path, "b", 4, f"output.checkpoint={ck}", f"init.resume={ck / 'step-00000003'}", no_clip,
                 "optimizer.in_gemm=true", "optimizer.in_gemm_min_elements=0"))
    assert p.returncode == 0, p.stderr[-3000:]
    warnings = [line for line in p.stderr.splitlines() if "[warning]" in line]
    assert len(warnings) == 1, warnings
    assert "is step 3" in warnings[0] and "later one (step 4)" in warnings[0], warnings[0]
    assert latest(ck).name == "step-00000004.1"
    # kept: the new step and the one it continued from; the abandoned line's step 4 is pruned (it once stayed, and
    # the step resumed from went)
    assert sorted(x.name for x in ck.iterdir() if x.name.startswith("step-")) == ["step-00000003",
                                                                                  "step-00000004.1"]
    again = state(ck)
    assert_same(first[0], again[0])
    assert_same(first[1], again[1])


def test_a_checkpoint_directory_of_another_run_is_named_but_a_copy_of_its_own_is_not(tmp_path):
    """output.checkpoint that already holds another run's checkpoints: a warning that this run's replace them. Not
    where the run resumes from the directory itself, or from a copy of it (cp -a, cp -r: the resumed step's weights
    are one of the directory's steps', by the manifests' CRC-32)."""
    ck, other = tmp_path / "ck", tmp_path / "other"
    assert run(args(tmp_path, "a", 2, f"output.checkpoint={ck}")).returncode == 0
    assert run(args(tmp_path, "o", 2, f"output.checkpoint={other}", "optimizer.lr=0.002")).returncode == 0
    for flag in ("-a", "-r"):
        subprocess.run(["cp", flag, str(ck), str(tmp_path / f"copy_{flag[1]}")], check=True)
    needle = f"output.checkpoint: '{ck}' already holds a checkpoint of another run"
    for tag, resume, warned in (("b", ck, False), ("c", tmp_path / "copy_a", False),
                                ("d", tmp_path / "copy_r" / latest(ck).name, False), ("e", other, True)):
        target = tmp_path / f"out_{tag}"
        shutil.copytree(ck, target)  # each resume writes into its own copy of ck, which stays as it was
        p = run(args(tmp_path, tag, 3, f"output.checkpoint={target}", f"init.resume={resume}"))
        assert p.returncode == 0, p.stderr[-3000:]
        assert (needle.replace(str(ck), str(target)) in p.stderr) == warned, (tag, p.stderr[-3000:])
    # an older step of a copy: its later steps in output.checkpoint are another branch, pruned as it writes (as for
    # an older step of the directory itself), and the warning says so
    assert run(args(tmp_path, "f", 4, f"output.checkpoint={ck}", "output.checkpoint_every=1",
                    f"init.resume={ck}")).returncode == 0
    subprocess.run(["cp", "-r", str(ck), str(tmp_path / "copy_f")], check=True)
    older = sorted(x.name for x in ck.iterdir() if x.name.startswith("step-"))[0]
    p = run(args(tmp_path, "g", 4, f"output.checkpoint={ck}", f"init.resume={tmp_path / 'copy_f' / older}"))
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"but '{ck}' has a later one (step 4)" in p.stderr and "another run" not in p.stderr, p.stderr[-3000:]


def test_the_config_differs_warning_names_the_keys_that_change_numbers_only(tmp_path):
    """The warning that a resumed run may not match an uninterrupted one: silent for what changes no number (the
    checkpointing policy, the token file given by another path), naming each changed key with its values otherwise
    (the token file rewritten at its path since: data.path with its sizes), and init.seed where it seeds the run
    (bf16_pure's stochastic rounding)."""
    ck = tmp_path / "ck"
    p = run(args(tmp_path, "a", 2, f"output.checkpoint={ck}"))
    assert p.returncode == 0, p.stderr[-3000:]

    def warnings(tag, *sets, steps=3, ckpt=ck):
        p = run(args(tmp_path, tag, steps, f"init.resume={ckpt}", *sets))
        assert p.returncode == 0, p.stderr[-3000:]
        return [line for line in p.stderr.splitlines() if "differs from the checkpoint" in line]

    relative = os.path.relpath(token_file(tmp_path), SRC)  # run() runs in SRC
    assert warnings("b", "checkpointing.policy=full", f"data.path={relative}") == []
    (w,) = warnings("c", "optimizer.lr=0.002", "optimizer.betas.1=0.99", "checkpointing.policy=none")
    assert "optimizer.lr (0.001 -> 0.002)" in w and "optimizer.betas.1 (0.999 -> 0.99)" in w, w
    assert "checkpointing" not in w and "may not match" in w, w
    assert warnings("d", "init.seed=5") == []  # the weights come from the checkpoint: the seed seeds nothing
    other = tmp_path / "other"
    other.mkdir()
    np.random.default_rng(8).integers(0, 256, size=20000, dtype=np.uint16).tofile(other / "tokens.bin")
    (w,) = warnings("g", f"data.path={other / 'tokens.bin'}", "attention=flash2")
    assert "data.path (" in w and "attention (" in w, w
    # the same path, its file rewritten shorter since the checkpoint: named with both sizes
    np.fromfile(token_file(tmp_path), dtype=np.uint16)[:15000].tofile(token_file(tmp_path))
    (w,) = warnings("h")
    assert 'data.path ("40000 bytes at /' in w and '-> "30000 bytes at /' in w, w
    sr = ["precision=bf16_pure", "optimizer.stochastic_rounding=true"]
    p = run(args(tmp_path, "e", 2, f"output.checkpoint={tmp_path / 'sr'}", *sr))
    assert p.returncode == 0, p.stderr[-3000:]
    (w,) = warnings("f", "init.seed=5", *sr, ckpt=tmp_path / "sr")
    assert "init.seed (0 -> 5)" in w, w


def test_a_checkpoint_that_cannot_be_written_fails_the_run_with_its_losses_and_no_temporary(tmp_path):
    """A full disk, as a file-size limit (RLIMIT_FSIZE; SIGXFSZ ignored, so the write fails with EFBIG): 32 MiB is
    enough for MPI's start (a few MiB of shared-memory files) and the record, not for the weights of tiny at d_model
    768 (58 MB). The run fails (exit 1) at its first periodic checkpoint; the record keeps the
    loss curve, the steps done and the checkpoints written (none), and the temporary step directory is gone."""
    import resource

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # ignored stays ignored across exec
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 25, 1 << 25))

    ck = tmp_path / "ck"
    cmd = args(tmp_path, "full", 4, f"output.checkpoint={ck}", "output.checkpoint_every=2", "model.d_model=768",
               "model.d_ff=2048")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=ENV, cwd=SRC, preexec_fn=limited)
    assert p.returncode == 1, p.stderr[-3000:]
    r = record(tmp_path, "full")
    assert r["status"] == "error" and "File too large" in r["error"], r.get("error")
    assert len(r["loss"]["per_step"]) == 2 and r["steps"]["done"] == 2
    assert r["checkpoint"]["writes"] == []
    assert [x.name for x in ck.iterdir()] == [".lock"]  # rank 0's flock file; no .tmp-step-00000002


def test_killed_mid_write_leaves_the_previous_checkpoint(tmp_path, straight):
    _, ref, (ref_w, ref_o, _) = straight
    ck = tmp_path / "ck"
    p = run(args(tmp_path, "a", 2, f"output.checkpoint={ck}"))
    assert p.returncode == 0, p.stderr[-3000:]
    env = dict(ENV, TRAINER_TEST_CHECKPOINT_PAUSE_S="60")
    proc = subprocess.Popen(args(tmp_path, "k", 4, f"init.resume={ck}", f"output.checkpoint={ck}"), env=env,
                            cwd=SRC, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shard = ck / ".tmp-step-00000004" / "optim-rank00000.safetensors"
    t0 = time.time()
    while not shard.exists() and time.time() - t0 < 60 and proc.poll() is None:
        time.sleep(0.05)
    assert shard.exists() and proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (ck / "latest").read_text().strip() == "step-00000002"
    assert (ck / "step-00000002" / "manifest.json").exists() and not (ck / "step-00000004").exists()
    # resumed from what survived: still the uninterrupted run, and the stale temporary directory is cleaned up
    p = run(args(tmp_path, "b", 4, f"init.resume={ck}", f"output.checkpoint={ck}"))
    assert p.returncode == 0, p.stderr[-3000:]
    assert record(tmp_path, "b")["loss"]["per_step"] == ref["loss"]["per_step"][2:]
    w, o, _ = state(ck)
    assert_same(w, ref_w)
    assert_same(o, ref_o)
    assert not (ck / ".tmp-step-00000004").exists()


def expect_error(tmp, cmd, *needles):
    before = set(tmp.rglob("*"))
    p = run(cmd)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainer: error: "), p.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    assert set(tmp.rglob("*")) == before  # nothing written
    return lines[0]


def test_resume_errors(tmp_path):
    ck = tmp_path / "ck"
    p = run(args(tmp_path, "a", 2, f"output.checkpoint={ck}"))
    assert p.returncode == 0, p.stderr[-3000:]
    expect_error(tmp_path, args(tmp_path, "x", 4, f"init.resume={tmp_path / 'none'}"),
                 "init.resume", "does not exist")
    expect_error(tmp_path, args(tmp_path, "x", 4, f"init.resume={tmp_path}"), "init.resume", "no complete checkpoint")
    expect_error(tmp_path, args(tmp_path, "x", 4, f"init.resume={ck}", "model.num_layers=3"),
                 "init.resume", "model.num_layers 2, the config 3")
    expect_error(tmp_path, args(tmp_path, "x", 4, f"init.resume={ck}",
                                f"init.weights={ck / 'model.safetensors'}"), "init.weights or init.resume")
    expect_error(tmp_path, args(tmp_path, "x", 2, f"init.resume={ck}"), "at step 2", "nothing is left to run")
    expect_error(tmp_path, args(tmp_path, "x", 2, "output.checkpoint_every=1"),
                 "output.checkpoint_every: 1 needs output.checkpoint")
    expect_error(tmp_path, args(tmp_path, "x", 2, f"output.checkpoint={tmp_path / 'w.safetensors'}"),
                 "output.checkpoint", "names a directory")
    # no other output inside a checkpoint directory: a record over `latest`, a manifest or the exported weights
    for target in (ck / "latest", ck / "model.safetensors", ck / "step-00000002" / "manifest.json"):
        expect_error(tmp_path, args(tmp_path, "x", 4, f"init.resume={ck}", f"output.checkpoint={ck}") +
                     ["--set", f"output.results={target}"], "output.results", "inside the checkpoint directory")
    expect_error(tmp_path, args(tmp_path, "x", 4, f"init.resume={ck}", f"profile.trace={ck / 't.json'}"),
                 "profile.trace", "(init.resume)")
    # half-written: `latest` names a directory without its manifest
    half = tmp_path / "half"
    (half / "step-00000002").mkdir(parents=True)
    (half / "latest").write_text("step-00000002\n")
    expect_error(tmp_path, args(tmp_path, "x", 4, f"init.resume={half}"), "init.resume", "incomplete")
    (half / "latest").write_text("")
    expect_error(tmp_path, args(tmp_path, "x", 4, f"init.resume={half}"), "init.resume",
                 "holds no complete checkpoint (its 'latest' file is empty or unreadable)")
    # the weights of another model (d_ff 128) in the step directory, its manifest without checksums (read unchecked):
    # the shape error names init.resume, the key that named the file (it said init.weights)
    other = tmp_path / "other"
    p = run(args(tmp_path, "o", 1, f"output.checkpoint={other}", "model.d_ff=128"))
    assert p.returncode == 0, p.stderr[-3000:]
    step = latest(ck)
    (step / "model.safetensors").unlink()  # (a hard link: the top-level file keeps the original)
    (step / "model.safetensors").write_bytes((latest(other) / "model.safetensors").read_bytes())
    m = json.loads((step / "manifest.json").read_text())
    del m["files"]
    (step / "manifest.json").write_text(json.dumps(m))
    before = set(tmp_path.rglob("*"))
    p = run(args(tmp_path, "x", 4, f"init.resume={ck}"))  # (after the log's lines: found as the weights load)
    assert p.returncode == 2 and p.stderr.strip().splitlines()[-1] == (
        f"trainer: error: init.resume: '{step / 'model.safetensors'}': tensor 'layers.0.ffn.w1.weight' has shape "
        "[128, 64], the model needs [172, 64]"), p.stderr[-2000:]
    assert set(tmp_path.rglob("*")) == before  # nothing written


def test_a_damaged_checkpoint_file_is_refused_naming_it(tmp_path):
    """One bit flipped in the weights or the optimizer state after the checkpoint was written (a disk or a copy that
    went wrong): the resume stops before any step with one error line naming the file and both CRC-32s, exit 2, no
    record. The same checkpoint undamaged resumes, and its record says the checksums were verified."""
    ck = tmp_path / "ck"
    p = run(args(tmp_path, "a", 2, f"output.checkpoint={ck}"))
    assert p.returncode == 0, p.stderr[-3000:]
    d = latest(ck)
    files = json.loads((d / "manifest.json").read_text())["files"]
    for name in ("model.safetensors", "optim-rank00000.safetensors"):
        f = d / name
        good = f.read_bytes()
        bad = bytearray(good)
        bad[len(bad) - 1001] ^= 0x04  # a bit of the last tensor's data: the header still parses
        # a new inode (DIR/model.safetensors is a hard link to the step's weights, left as written)
        f.unlink()
        f.write_bytes(bytes(bad))
        if name == "model.safetensors":  # read whole by every rank: the file's CRC
            where, have, want = "", zlib.crc32(bytes(bad)), files[name]["crc32"]
        else:  # read by blocks (a rank reads those around its share): the block's
            bb = files[name]["block_bytes"]
            k = (len(bad) - 1001) // bb
            where = f" in bytes [{k * bb}, {min(len(bad), (k + 1) * bb)})"
            have, want = zlib.crc32(bytes(bad[k * bb:(k + 1) * bb])), files[name]["block_crc32"][k]
        try:
            p = run(args(tmp_path, "x", 4, f"init.resume={ck}"))
            assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
            errors = [x for x in p.stderr.splitlines() if x.startswith("trainer: error: ")]
            assert errors == [f"trainer: error: init.resume: '{f}' does not match its checksum{where} (CRC-32 "
                              f"{have:08x}, the manifest records {want}): the file was damaged or changed after the "
                              "checkpoint was written; resume from another checkpoint (a step directory can be "
                              "named)"], p.stderr[-2000:]
            assert not (tmp_path / "x.json").exists()
            # its header damaged (the JSON's first byte): the parser's line, with the hint that it was damaged
            f.unlink()
            f.write_bytes(good[:8] + b"x" + good[9:])
            p = run(args(tmp_path, "x", 4, f"init.resume={ck}"))
            assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
            errors = [x for x in p.stderr.splitlines() if x.startswith("trainer: error: ")]
            assert len(errors) == 1 and str(f) in errors[0] and errors[0].endswith(
                "(the manifest lists this file at this size: damaged after the checkpoint was written? resume from "
                "another checkpoint; a step directory can be named)"), p.stderr[-2000:]
            assert not (tmp_path / "x.json").exists()
            # a file of another size (cut short, or longer): refused before any work, from the manifest's size
            f.write_bytes(good[:-8] if name == "model.safetensors" else good + b"\0")
            expect_error(tmp_path, args(tmp_path, "x", 4, f"init.resume={ck}"),
                         f"init.resume: '{f}' has {len(good) + (-8 if name == 'model.safetensors' else 1)} bytes, its "
                         f"manifest records {len(good)}: the file was truncated or replaced")
        finally:
            f.unlink()
            f.write_bytes(good)
    p = run(args(tmp_path, "y", 4, f"init.resume={ck}"))
    assert p.returncode == 0, p.stderr[-3000:]
    assert record(tmp_path, "y")["checkpoint"]["resumed_from"]["checksums"] == "verified"
    # entries with the whole file's CRC only (this format's first form): each file read whole and checked
    manifest = d / "manifest.json"
    m = json.loads(manifest.read_text())
    for entry in m["files"].values():
        del entry["block_bytes"], entry["block_crc32"]
    manifest.write_text(json.dumps(m))
    p = run(args(tmp_path, "w", 4, f"init.resume={ck}"))
    assert p.returncode == 0, p.stderr[-3000:]
    assert record(tmp_path, "w")["checkpoint"]["resumed_from"]["checksums"] == "verified"
    # a manifest without "files" (a checkpoint written before checksums) resumes unchecked, with one warning
    del m["files"]
    manifest.write_text(json.dumps(m))
    p = run(args(tmp_path, "z", 4, f"init.resume={ck}"))
    assert p.returncode == 0, p.stderr[-3000:]
    assert record(tmp_path, "z")["checkpoint"]["resumed_from"]["checksums"].startswith("absent")
    assert p.stderr.count(f"init.resume: '{d}' records no checksums (written before they were): its files are read "
                          "unchecked") == 1, p.stderr[-3000:]


def test_a_damaged_manifest_is_one_line_naming_it(tmp_path):
    """A manifest edited or damaged in the fields a resume reads: one line naming the manifest and the field, exit 2,
    nothing written (a JSON type error, an internal check mid-run or a silent misread before)."""
    ck = tmp_path / "ck"
    p = run(args(tmp_path, "a", 2, f"output.checkpoint={ck}"))
    assert p.returncode == 0, p.stderr[-3000:]
    manifest = latest(ck) / "manifest.json"
    good = json.loads(manifest.read_text())
    cases = [
        (("step",), -5, "'step' is -5, not a whole number >= 0"),
        (("step",), 1.5, "'step' is 1.5, not a whole number >= 0"),
        (("step",), "x", "'step' is \"x\", not a whole number >= 0"),
        (("config",), "x", "'config' is not a run config with a 'model' object"),
        (("config", "model"), 5, "'config' is not a run config with a 'model' object"),
        (("optimizer", "steps_taken"), 10 ** 12, "'optimizer.steps_taken' is 1000000000000, not a whole number from "
                                                 "0 to the step, 2"),
        (("optimizer", "shards"), {}, "'optimizer.shards' is not a list"),
        (("data", "next_step"), 3, "'data.next_step' is 3, not the step, 2"),
        (("layout_total",), "x", "'layout_total' is not a whole number"),
        (("step",), 2 ** 64 - 1, "'step' is 18446744073709551615, not a whole number >= 0"),
        (("world_size",), "x", "'world_size' is not a whole number"),
        (("strategy",), 5, "'strategy' is not a string"),
        (("config_hash",), 5, "'config_hash' is not a string"),
        (("data",), "x", "'data' is not an object"),
        (("config", "init"), "x", "'config.init' is not an object"),
        (("files",), [], "'files' is not an object"),
        (("files", "model.safetensors", "crc32"), "xyz", "'files.model.safetensors' is not {\"bytes\": a whole "
                                                         "number, \"crc32\": 8 hex digits, \"block_bytes\": a "
                                                         "whole number > 0, \"block_crc32\": 8 hex digits for each "
                                                         "block}"),
        (("files", "model.safetensors", "bytes"), -1, "'files.model.safetensors' is not"),
        (("files", "model.safetensors", "block_bytes"), 0, "'files.model.safetensors' is not"),
        (("files", "model.safetensors", "block_crc32"), [], "'files.model.safetensors' is not"),
        (("files", "optim-rank00000.safetensors", "block_crc32"), ["0000000g"],
         "'files.optim-rank00000.safetensors' is not"),
    ]
    try:
        for path, value, needle in cases:
            m = json.loads(json.dumps(good))
            d = m
            for k in path[:-1]:
                d = d[k]
            d[path[-1]] = value
            manifest.write_text(json.dumps(m))
            line = expect_error(tmp_path, args(tmp_path, "x", 4, f"init.resume={ck}"), str(manifest), needle,
                                "(corrupt checkpoint)")
            assert "json.exception" not in line
        # a layout_total of another model: refused when the job reads the checkpoint (before any step)
        m = json.loads(json.dumps(good))
        m["layout_total"] = 7
        manifest.write_text(json.dumps(m))
        p = run(args(tmp_path, "y", 4, f"init.resume={ck}"))
        assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
        assert f"has layout_total 7, this model's flat parameter layout has {good['layout_total']} elements" in \
            p.stderr, p.stderr[-2000:]
        assert not (tmp_path / "y.json").exists()
    finally:
        manifest.write_text(json.dumps(good))
    p = run(args(tmp_path, "z", 4, f"init.resume={ck}"))  # the manifest as written resumes
    assert p.returncode == 0, p.stderr[-3000:]
