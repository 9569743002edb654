#!/usr/bin/env python3
"""Exit 0 when two safetensors files hold the same tensors (names, dtypes,
shapes and bytes), whatever their order, padding or metadata; else print
the first difference and exit 1. The oracle for exports and conversions:
it parses both files itself.
  st_same.py A.safetensors B.safetensors"""
import json
import struct
import sys


def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}


a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
if a.keys() != b.keys():
    print("names differ:", sorted(a.keys() ^ b.keys())[:5])
    sys.exit(1)
for k in a:
    if a[k] != b[k]:
        print("tensor", k, "differs")
        sys.exit(1)
