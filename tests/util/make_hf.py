#!/usr/bin/env python3
"""Cuts a safetensors file into a Hugging Face style checkpoint directory:
model-0000k-of-0000N.safetensors files holding consecutive tensors, and
model.safetensors.index.json mapping each tensor to its file.
  make_hf.py IN.safetensors OUTDIR N"""
import json
import os
import struct
import sys


def main(src, out, n):
    raw = open(src, "rb").read()
    hlen = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + hlen])
    header.pop("__metadata__", None)
    names = sorted(header, key=lambda k: header[k]["data_offsets"][0])
    os.makedirs(out, exist_ok=True)
    per = (len(names) + n - 1) // n
    weight_map = {}
    for k in range(n):
        part = names[k * per:(k + 1) * per]
        fname = "model-%05d-of-%05d.safetensors" % (k + 1, n)
        h, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
        for name in part:
            b, e = header[name]["data_offsets"]
            data = raw[8 + hlen + b:8 + hlen + e]
            h[name] = {"dtype": header[name]["dtype"], "shape": header[name]["shape"], "data_offsets": [off, off + len(data)]}
            blobs.append(data)
            off += len(data)
            weight_map[name] = fname
        js = json.dumps(h).encode()
        js += b" " * (-len(js) % 8)
        with open(os.path.join(out, fname), "wb") as f:
            f.write(struct.pack("<Q", len(js)) + js + b"".join(blobs))
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(len(x) for x in [raw])}, "weight_map": weight_map}, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
