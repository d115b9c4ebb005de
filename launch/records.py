"""Reading result records (trainer.result/1, torch_bench.result/1) in the table scripts (launch/compare_results.py,
launch/ddp_table.py, launch/memory_table.py) and launch/plot.py. Standard library only.
"""

GIB, MIB = 2 ** 30, 2 ** 20


def get(d, *keys, default=None):
    """d[k0][k1]... or `default` when any level is missing, null or not an object (a partial or failed record)."""
    for k in keys:
        if not isinstance(d, dict) or d.get(k) is None:
            return default
        d = d[k]
    return d


def size_unit(sizes):
    """("GiB", 2**30), or ("MiB", 2**20) when every one of `sizes` (bytes; None skipped) is below 1 GiB: the unit of
    a table's or a figure's sizes. GiB when there is none."""
    sizes = [s for s in sizes if s is not None]
    return ("GiB", GIB) if not sizes or max(sizes) >= GIB else ("MiB", MIB)
