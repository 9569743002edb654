#!/usr/bin/env python3
"""Writes a small safetensors file by hand (no safetensors package needed):
every dtype tensorize maps, a 0-d scalar, a zero-size tensor, and JSON keys
in a different order from the data layout.
  make_safetensors.py OUT [seed]"""
import json
import random
import struct
import sys

SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "I32": 4, "U32": 4, "I64": 8, "U64": 8,
         "F16": 2, "BF16": 2, "F32": 4, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1, "C64": 8}


def main(out, seed):
    rnd = random.Random(seed)
    tensors = []
    for i, (dt, size) in enumerate(SIZES.items()):
        shape = [rnd.randint(1, 5), rnd.randint(1, 7)]
        tensors.append(("model.layers.%d.%s" % (i, dt.lower()), dt, shape))
    tensors.append(("scalar", "F32", []))
    tensors.append(("empty", "F16", [0, 4]))
    tensors.append(("embed.weight", "BF16", [64, 33]))
    header, blobs, off = {}, [], 0
    for name, dt, shape in tensors:
        n = SIZES[dt]
        for d in shape:
            n *= d
        data = bytes(rnd.getrandbits(8) for _ in range(n))
        if dt == "BOOL":
            data = bytes(b & 1 for b in data)
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        blobs.append(data)
        off += n
    header["__metadata__"] = {"format": "pt"}
    # JSON keys sorted by name, as the safetensors library writes them;
    # the data stays in declaration order ("file order").
    text = json.dumps(dict(sorted(header.items())), separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    open(out, "wb").write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1)
