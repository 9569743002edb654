#!/usr/bin/env python3
"""Copies an unencrypted .tensors file with one stored hash of one tensor
changed (its data untouched), found by this script's own walk of the
index and header (formats/tensorizer.md 3, 4.1-4.2):
  spoil_hash.py IN OUT NAME crc32|sha256"""
import struct
import sys


def main(src, dst, name, which):
    b = bytearray(open(src, "rb").read())
    count, = struct.unpack_from("<Q", b, 57)
    at = 73
    for _ in range(count):
        nl, = struct.unpack_from("<H", b, at)
        got = bytes(b[at + 2:at + 2 + nl])
        at += 2 + nl + 1
        at += 1 + b[at]
        at += 1 + 4 * b[at]
        hoff, = struct.unpack_from("<Q", b, at)
        at += 24
        if got == name.encode():
            break
    else:
        raise SystemExit("no tensor %s" % name)
    # header: size u64, module u16, type u8, N u16 + name, D u8 + dtype, K u8 + dims, L u16, count u8
    p = hoff + 8 + 2 + 1
    p += 2 + struct.unpack_from("<H", b, p)[0]
    p += 1 + b[p]
    p += 1 + 4 * b[p]
    p += 2 + 1
    for _ in range(2):
        kind, ln = b[p], b[p + 1]
        if (kind, which) in ((0, "crc32"), (1, "sha256")):
            b[p + 2] ^= 0x01
            open(dst, "wb").write(b)
            return
        p += 2 + ln
    raise SystemExit("no %s entry" % which)


if __name__ == "__main__":
    main(*sys.argv[1:5])
