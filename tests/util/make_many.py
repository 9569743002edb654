#!/usr/bin/env python3
"""Many small tensors, the test's own bytes: a safetensors file of N f32
tensors of shape (4,), named "experts.{i}.w" and filled from a seeded
generator, and a raw dump of their data in that order (the oracle).
  make_many.py N OUT.safetensors OUT.raw [seed]"""
import json
import random
import struct
import sys


def main(n, out, raw, seed):
    rnd = random.Random(seed)
    data = rnd.randbytes(16 * n)
    header = {"experts.%d.w" % i: {"dtype": "F32", "shape": [4], "data_offsets": [16 * i, 16 * i + 16]}
              for i in range(n)}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    open(out, "wb").write(struct.pack("<Q", len(text)) + text + data)
    open(raw, "wb").write(data)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 1)
