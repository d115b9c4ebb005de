"""optimizer.in_gemm on the CPU through the CLI: the same losses and final weights, bit for bit, as optimizer.in_backward
alone, in fp32 and in bf16_pure (bf16 gradients: the chunked head's dW is summed in fp32 and then left to the unit's
update instead of its product), with two microbatches and a head in chunks of 24 tokens or whole.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(SRC / "tests" / "parity"))
import safetensors_io  # noqa: E402

BIN = os.environ.get("TRAINER_BIN")
pytestmark = pytest.mark.skipif(not BIN, reason="TRAINER_BIN is not set")


def train(tmp, tag, precision, chunk, in_gemm):
    out, ck = tmp / f"{tag}.json", tmp / f"{tag}.ck"
    p = subprocess.run([BIN, str(SRC / "configs/tiny.json"), "--set", "device=cpu", "--set", f"precision={precision}",
                        "--set", "optimizer.max_grad_norm=null", "--set", f"optimizer.in_gemm={str(in_gemm).lower()}",
                        "--set", "optimizer.in_gemm_min_elements=0",
                        "--set", f"checkpointing.lm_head_chunk_tokens={chunk}", "--set", "data.batch_size=4",
                        "--set", "data.microbatch_size=2", "--set", "bench.warmup_steps=0",
                        "--set", "bench.measure_steps=4", "--set", f"output.results={out}",
                        "--set", f"output.checkpoint={ck}"],
                       capture_output=True, text=True, timeout=120, cwd=SRC,
                       env=dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1"))
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["config"]["optimizer"]["in_backward"] is True and r["config"]["optimizer"]["in_gemm"] is in_gemm
    weights, _ = safetensors_io.load(ck / "model.safetensors")
    return r["loss"]["per_step"], weights, r["grad_norm"]["per_step"]


@pytest.mark.parametrize("precision", ["fp32", "bf16_pure"])
@pytest.mark.parametrize("chunk", [0, 24])
def test_in_gemm_equals_in_backward(tmp_path, precision, chunk):
    loss_a, w_a, norm_a = train(tmp_path, "plain", precision, chunk, False)
    loss_b, w_b, norm_b = train(tmp_path, "fused", precision, chunk, True)
    assert loss_a == loss_b
    # the norm: the same squares (the head's too, also where its update is left to the unit), summed in another order
    assert len(norm_a) == len(norm_b) and all(abs(a - b) <= 1e-12 * a for a, b in zip(norm_a, norm_b))
    assert set(w_a) == set(w_b)
    for k in w_a:
        assert bool((w_a[k] == w_b[k]).all()), k


@pytest.mark.parametrize("precision", ["fp32", "bf16", "bf16_pure"])
def test_in_gemm_plans_no_more_memory(precision):
    """The planned peak of small on cuda with in_gemm is not above in_backward's alone: a matrix with a slot in its
    unit's gradient (the head's, or any at several microbatches) takes its product there, with no temporary (the head's
    had added a [vocab, d_model] temporary where the fused kernel does not run: fp32, bf16_pure)."""
    def peak(in_gemm, micro):
        p = subprocess.run([BIN, "--plan", str(SRC / "configs/small.json"), "--set", "device=cuda", "--set",
                            f"precision={precision}", "--set", f"optimizer.in_gemm={str(in_gemm).lower()}",
                            "--set", "optimizer.in_gemm_min_elements=0",
                            "--set", f"data.microbatch_size={micro}", "--json"],
                           capture_output=True, text=True, timeout=120, cwd=SRC)
        assert p.returncode == 0, p.stderr[-2000:]
        return json.loads(p.stdout)["memory"]["peak_bytes"]
    for micro in (4, 2):
        assert peak(True, micro) <= peak(False, micro), micro


def plan(*sets, cfg="configs/xl.json"):
    args = [BIN, "--plan", str(SRC / cfg)]
    for s in sets:
        args += ["--set", s]
    p = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=120, cwd=SRC)
    assert p.returncode == 0, p.stderr[-2000:]
    q = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=SRC)
    assert q.returncode == 0, q.stderr[-2000:]
    return json.loads(p.stdout), q.stdout.splitlines()[0]


@pytest.mark.parametrize("sets, header", [
    # xl: 4 products a block (Wqkv, Wo, [W1; W3], W2) x 32 and the head's; Wo's 6.6M elements are below the bound
    (("device=cuda", "precision=bf16"),
     "optimizer in_backward + in_gemm (97 of 129 products: those of >= 8388608 elements)"),
    (("device=cuda", "precision=bf16", "optimizer.in_gemm_min_elements=0"),
     "optimizer in_backward + in_gemm (129 of 129 products)"),
    (("device=cuda", "precision=fp32"), "optimizer in_backward"),
    (("device=cuda", "precision=bf16_pure"), "optimizer in_backward"),
    (("device=cpu", "precision=fp32"), "optimizer in_backward"),
    (("device=cuda", "precision=bf16", "optimizer.in_backward=false"), "phase train_step"),
])
def test_in_gemm_auto(sets, header):
    """optimizer.in_gemm null (auto) resolves on only where the fused kernel runs (cuda, precision bf16) and
    in_backward is on; the plan's header says so, with the products it keeps to."""
    _, line = plan(*sets)
    assert line.endswith(header), line


def test_in_gemm_auto_plans_xl_faster_and_smaller():
    """xl bf16 on cuda: auto fuses Wqkv, [W1; W3], W2 and the head (Wo's 6.6M elements are below 8388608), whose
    gradients then never exist: a lower planned peak than in_gemm off, the same as every matrix fused (Wo's gradient
    lives in its block's compact buffer only while the block's backward runs, below the peak); a shorter planned
    step than off (the fused kernel: its product at 0.83 of cuBLASLt's rate, then 0.71 of its epilogue's memory time,
    against the product and a separate AdamW that also reads the gradient), longer than every matrix fused."""
    auto, _ = plan("device=cuda", "precision=bf16")
    off, _ = plan("device=cuda", "precision=bf16", "optimizer.in_gemm=false")
    every, _ = plan("device=cuda", "precision=bf16", "optimizer.in_gemm_min_elements=0")
    assert auto["memory"]["peak_bytes"] < off["memory"]["peak_bytes"]
    assert auto["memory"]["peak_bytes"] == every["memory"]["peak_bytes"]
    assert every["time_s"] < auto["time_s"] < off["time_s"]


def test_in_gemm_auto_fuses_nothing_in_small():
    """small's largest product, the head's 10000 x 768 = 7.68M elements, is below the default bound: auto plans
    exactly in_gemm off (the same peak and time), and a bound at 7680000 fuses the head."""
    auto, line = plan("device=cuda", "precision=bf16", cfg="configs/small.json")
    assert line.endswith("in_gemm (0 of 49 products: those of >= 8388608 elements)"), line
    off, _ = plan("device=cuda", "precision=bf16", "optimizer.in_gemm=false", cfg="configs/small.json")
    head, _ = plan("device=cuda", "precision=bf16", "optimizer.in_gemm_min_elements=7680000", cfg="configs/small.json")
    assert auto["memory"]["peak_bytes"] == off["memory"]["peak_bytes"] and auto["time_s"] == off["time_s"]
    assert head["time_s"] != off["time_s"]


@pytest.mark.parametrize("in_gemm, bound, expect", [
    ("true", 0, {"fused_products": 9, "products": 9, "min_elements": 0}),   # tiny: 2 blocks x 4 products + the head
    ("true", 8388608, {"fused_products": 0, "products": 9, "min_elements": 8388608}),
    ("false", 0, None),
])
def test_the_record_says_which_products_were_fused(tmp_path, in_gemm, bound, expect):
    """The train record's in_gemm: how many of the weight-gradient products the run fused and the bound, null with
    in_gemm off; launch/compare_results.py's "optimizer update" row reads it."""
    out = tmp_path / "r.json"
    p = subprocess.run([BIN, str(SRC / "configs/tiny.json"), "--set", "device=cpu", "--set", "optimizer.max_grad_norm=null",
                        "--set", f"optimizer.in_gemm={in_gemm}", "--set", f"optimizer.in_gemm_min_elements={bound}",
                        "--set", "bench.warmup_steps=0", "--set", "bench.measure_steps=1",
                        "--set", f"output.results={out}"],
                       capture_output=True, text=True, timeout=120, cwd=SRC)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(out.read_text())["in_gemm"] == expect
    c = subprocess.run([sys.executable, str(SRC / "launch/compare_results.py"), str(out)], capture_output=True,
                       text=True, timeout=60)
    assert c.returncode == 0, c.stderr
    row = next(line for line in c.stdout.splitlines() if line.startswith("optimizer update"))
    want = {0: "in backward + in gemm (9 of 9 products)", 8388608: "in backward (in gemm: no product of >= 8388608"}
    assert (want[bound] if expect else "in backward") in row, row
