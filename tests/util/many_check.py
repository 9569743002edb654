#!/usr/bin/env python3
"""Checks a .tensors file of make_many.py's tensors with a parser of its
own (formats/tensorizer.md 2-3), not libtzr's: the index is exactly the
bytes its entries take (29 + name + dtype + 4 per dim each, at least
tensorizer's 262144), and every tensor's data is the generator's bytes.
  many_check.py FILE.tensors RAW N"""
import struct
import sys


def main(path, raw_path, n):
    b = open(path, "rb").read()
    raw = open(raw_path, "rb").read()
    assert b[:5] == b"|TZR|", "magic"
    count, m = struct.unpack_from("<QQ", b, 57)
    assert count == n, "count %d, want %d" % (count, n)
    names = ["experts.%d.w" % i for i in range(n)]
    want = max(262144, sum(29 + len(s) + 3 + 4 for s in names))
    assert m == want, "index %d bytes, want %d" % (m, want)
    at = 73
    for i, name in enumerate(names):
        nl, = struct.unpack_from("<H", b, at)
        got = b[at + 2:at + 2 + nl].decode()
        at += 2 + nl
        kind, dl = b[at], b[at + 1]
        dt = b[at + 2:at + 2 + dl]
        at += 2 + dl
        k = b[at]
        dims = struct.unpack_from("<%dI" % k, b, at + 1)
        at += 1 + 4 * k
        hoff, doff, dlen = struct.unpack_from("<QQQ", b, at)
        at += 24
        if i == 0:
            assert hoff == 73 + m, "first record at %d, want %d" % (hoff, 73 + m)
        assert (got, kind, dt, dims, dlen) == (name, 2, b"<f4", (4,), 16), "entry %d: %r" % (i, (got, kind, dt, dims, dlen))
        assert b[doff:doff + 16] == raw[16 * i:16 * i + 16], "tensor %s: data differs" % name
    assert at <= 73 + m and not any(b[at:73 + m]), "padding"


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
    print("ok")
