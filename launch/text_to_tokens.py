#!/usr/bin/env python3
"""Turn text files into a byte-level token file for `data.source: "tokens"`.

    launch/text_to_tokens.py OUT.u16 INPUT [INPUT ...]
    launch/text_to_tokens.py build/data/fortunes.u16 /usr/share/games/fortunes   # the default config's data

Each byte of the input is one token (vocab 256, so use model.vocab_size >= 256), written as uint16 little-endian:
the flat NumPy-memmap layout of the CS336 course and llm.c (np.memmap(path, dtype=np.uint16)), which the trainer
reads with `data.dtype: "uint16"`. Inputs are concatenated in the order given.

An INPUT that is a directory contributes the regular files directly inside it, in name order: symbolic links
(fortunes' *.u8 links), subdirectories (fortunes' offensive "off/"), strfile indexes (*.dat), OUT itself (a re-run
into the same directory) and binary files (any NUL byte) are skipped; OUT named as an INPUT file is refused. Prints
the token count. Bad input (an input missing or unreadable, inputs without text, OUT naming an input) is one line
`text_to_tokens: error: ...` on stderr and exit code 2. Standard library only.
"""
import argparse
import array
import os
import sys

from plot_common import same_file  # this folder: the plot helpers' path comparison


def input_files(paths, out_path):
    """The files to read, in order: files as given, directories expanded without out_path (see the module
    docstring)."""
    out = []
    for p in paths:
        if os.path.isdir(p):
            for name in sorted(os.listdir(p)):
                full = os.path.join(p, name)
                skip = os.path.islink(full) or not os.path.isfile(full) or name.endswith(".dat")
                if skip or same_file(out_path, full):
                    continue
                out.append(full)
        elif os.path.isfile(p):
            out.append(p)
        elif os.path.exists(p):
            die(f"cannot read '{p}': not a regular file or directory")
        else:
            die(f"cannot read '{p}': no such file or directory")
    return out


def die(msg):
    """Bad input: one line on stderr, exit code 2 (as the other tools)."""
    print(f"text_to_tokens: error: {msg}", file=sys.stderr)
    sys.exit(2)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Byte-level tokens (vocab 256) as uint16 little-endian.")
    ap.add_argument("out", help="output token file, e.g. data/fortunes.u16")
    ap.add_argument("inputs", nargs="+", help="text files or directories")
    args = ap.parse_args(argv)

    tokens = array.array("H")
    used, skipped = [], []
    files = input_files(args.inputs, args.out)
    for path in files:  # an output never overwrites an input
        if same_file(args.out, path):
            die(f"the output '{args.out}' is also the input '{path}'; give another name")
    for path in files:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            die(f"cannot read '{path}': {e.strerror or e}")
        if b"\0" in data:  # a binary file in a text directory
            skipped.append(path)
            continue
        tokens.extend(data)  # each byte 0..255 becomes one uint16 (extend iterates the ints of a bytes object)
        used.append(path)
    if not tokens:
        die("no text found in the inputs" + (f" (skipped as binary: {', '.join(skipped)})" if skipped else ""))
    if sys.byteorder != "little":
        tokens.byteswap()

    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    tmp = f"{args.out}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            tokens.tofile(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, args.out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    for path in skipped:
        print(f"skipped binary file {path}", file=sys.stderr)
    print(f"{len(tokens)} tokens (byte-level, vocab 256, uint16) from {len(used)} files -> {args.out}")


if __name__ == "__main__":
    main()
