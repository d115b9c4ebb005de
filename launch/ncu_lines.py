#!/usr/bin/env python3
"""Warp-stall samples of one kernel, by source line: ncu's SASS source page joined with nvdisasm's line table.

  python3 launch/ncu_lines.py SOURCE_CSV[.gz] SASS KERNEL_SUBSTRING [--top 20] [--at 0x1620,0x2030]

SOURCE_CSV: `ncu -i REPORT --page source --csv --print-source sass` (one kernel; gzip allowed). SASS: `nvdisasm -g -c
CUBIN` of the same build (the same nvcc and flags; our GPU machine has nvdisasm, this one may not). KERNEL_SUBSTRING
picks the kernel's section in SASS (e.g. "ILb1ELb0E" for dw_adamw_kernel<true, false>). Offsets are the CSV's
addresses minus its first (the kernel's start). A line of an inlined helper (an mbarrier wait, an address
conversion) says little alone: its samples count apart per callsite (the last line of the kernel's own file before
it), and each such row names the last lines of that file before it and the first after it. Prints: share of all stall samples, file:line, its text.
"""
import argparse
import collections
import csv
import gzip
import os
import re
import sys

ap = argparse.ArgumentParser()
ap.add_argument("csv")
ap.add_argument("sass")
ap.add_argument("kernel")
ap.add_argument("--top", type=int, default=20)
ap.add_argument("--at", default="", help="comma-separated offsets (hex) to explain as well")
args = ap.parse_args()

opener = gzip.open if args.csv.endswith(".gz") else open
with opener(args.csv, "rt") as f:
    rows = list(csv.reader(f))
hdr_at = next(i for i, r in enumerate(rows) if "Address" in r)
hdr, data = rows[hdr_at], rows[hdr_at + 1:]
ia, isamp = hdr.index("Address"), hdr.index("Warp Stall Sampling (All Samples)")
base = int(data[0][ia], 16)
total = sum(float(r[isamp] or 0) for r in data) or 1.0

text = open(args.sass).read().split("\n")
starts = [i for i, l in enumerate(text) if l.startswith(".text.") and args.kernel in l]
if not starts:
    sys.exit(f"ncu_lines: no section of {args.sass} names '{args.kernel}'")
end = next((i for i in range(starts[0] + 1, len(text)) if text[i].startswith("//---")), len(text))
body = text[starts[0]:end]
marks = []  # per instruction index in body: (file, line)
where, order, cur = {}, [], None
for l in body:
    m = re.search(r'//## File "([^"]+)", line (\d+)', l)
    if m:
        cur = (m.group(1), int(m.group(2)))
        continue
    m = re.search(r"/\*([0-9a-f]{4,})\*/", l)
    if m:
        where[int(m.group(1), 16)] = (cur, len(order))
        order.append(cur)
kernel_file = collections.Counter(c[0] for c in order if c).most_common(1)[0][0]

lines_of = {}


def source(fl):
    if not fl:
        return "?"
    f, n = fl
    if f not in lines_of:
        lines_of[f] = open(f).read().split("\n") if os.path.exists(f) else []
    t = lines_of[f][n - 1].strip() if 0 < n <= len(lines_of[f]) else ""
    return f"{os.path.relpath(f)}:{n}: {t[:100]}"


def callsite(i):
    before = [c[1] for c in reversed(order[max(0, i - 400):i]) if c and c[0] == kernel_file][:3]
    after = [c[1] for c in order[i + 1:i + 400] if c and c[0] == kernel_file][:2]
    return f"(in {os.path.basename(kernel_file)} after lines {before}, before {after})"


def caller(i):  # the last line of the kernel's file before instruction i (an inlined helper's callsite)
    return next((c[1] for c in reversed(order[max(0, i - 400):i]) if c and c[0] == kernel_file), None)


# A helper's line (an mbarrier wait inlined at several places) counts apart for each callsite
by_line, missing = collections.Counter(), 0.0
first_at = {}
for r in data:
    off, s = int(r[ia], 16) - base, float(r[isamp] or 0)
    if off not in where:
        missing += s
        continue
    fl, i = where[off]
    key = (fl, None if fl and fl[0] == kernel_file else caller(i))
    by_line[key] += s
    first_at.setdefault(key, i)
if missing:
    print(f"({missing / total:.1%} of samples at offsets the SASS file lacks: another build?)")
for key, s in by_line.most_common(args.top):
    fl = key[0]
    extra = "" if fl and fl[0] == kernel_file else " " + callsite(first_at[key])
    print(f"{s / total:6.1%}  {source(fl)}{extra}")
for a in filter(None, args.at.split(",")):
    off = int(a, 16)
    if off in where:
        fl, i = where[off]
        print(f"{a}: {source(fl)} {callsite(i)}")
