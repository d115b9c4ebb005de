"""Spoiling result records for the table scripts' tests (test_ddp_table.py, test_loss_match.py)."""


def drop(rec, dotted, null):
    """rec with the key `dotted` (a.b.c) set to null (null true) or deleted; rec itself, changed in place."""
    *path, key = dotted.split(".")
    d = rec
    for k in path:
        d = d[k]
    if null:
        d[key] = None
    else:
        del d[key]
    return rec
