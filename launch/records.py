"""Reading result records (trainer.result/1, torch_bench.result/1) in the table scripts (launch/compare_results.py,
launch/ddp_table.py). Standard library only.
"""


def get(d, *keys, default=None):
    """d[k0][k1]... or `default` when any level is missing, null or not an object (a partial or failed record)."""
    for k in keys:
        if not isinstance(d, dict) or d.get(k) is None:
            return default
        d = d[k]
    return d
