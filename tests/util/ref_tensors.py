#!/usr/bin/env python3
"""An independent, minimal writer of tensorizer's .tensors format in Python
(zlib/hashlib), used as the oracle for the tools' output. It is checked
first against the golden files tensorizer itself wrote.

  ref_tensors.py check-golden DIR         rebuild DIR's unencrypted goldens
  ref_tensors.py from-safetensors IN... OUT  what tensorize should write
"""
import hashlib
import json
import struct
import sys
import zlib

META_LEN = 262144
OPAQUE = {"BF16": b"<V2\0torch.bfloat16", "F8_E4M3": b"|V1\0torch.float8_e4m3fn",
          "F8_E5M2": b"|V1\0torch.float8_e5m2", "F8_E8M0": b"|V1\0torch.float8_e8m0fnu"}
NUMPY = {"BOOL": b"|b1", "U8": b"|u1", "I8": b"|i1", "I16": b"<i2", "U16": b"<u2", "I32": b"<i4",
         "U32": b"<u4", "I64": b"<i8", "U64": b"<u8", "F16": b"<f2", "F32": b"<f4", "F64": b"<f8",
         "C64": b"<c8"}


def write(tensors):
    """tensors: list of (name bytes, type, module idx, dtype bytes, shape, data bytes, meta)."""
    records, index = b"", b""
    pos = 5 + 60 + 8 + META_LEN
    version, total = 1, 0
    for name, ttype, idx, dtype, shape, data, meta in tensors:
        if b"\0" in dtype:
            version = max(version, 2)
        if meta:
            version = max(version, 4)
            data = b""
        dims = struct.pack("<%dI" % len(shape), *shape)
        body = (struct.pack("<HBH", idx, ttype, len(name)) + name + struct.pack("<B", len(dtype)) + dtype +
                struct.pack("<B", len(shape)) + dims)
        hashes = struct.pack("<HB", 41, 2) + b"\x00\x04" + b"\0" * 4 + b"\x01\x20" + b"\0" * 32
        size = 8 + len(body) + len(hashes) + 8
        header = struct.pack("<Q", size) + body + hashes + struct.pack("<q", len(data))
        crc = zlib.crc32(data, zlib.crc32(header))
        sha = hashlib.sha256(header + data).digest()
        at = 8 + len(body) + 3
        header = header[:at + 2] + struct.pack("<I", crc) + header[at + 6:at + 8] + sha + header[at + 40:]
        index += (struct.pack("<H", len(name)) + name + struct.pack("<BB", ttype, len(dtype)) + dtype +
                  struct.pack("<B", len(shape)) + dims + struct.pack("<QQQ", pos, pos + size, len(data)))
        records += header + data
        pos += size + len(data)
        total += len(data)
    pro = b"|TZR|" + struct.pack("<I", version) + b"\0" * 32 + struct.pack("<Q", total) + b"\0" * 8 + \
        struct.pack("<QQ", len(tensors), META_LEN)
    return pro + index + b"\0" * (META_LEN - len(index)) + records + b"\0" * 8


def name_bytes(path):
    if isinstance(path, str):
        return path.encode()
    return b"\x1e" + json.dumps(path, indent=None, ensure_ascii=True, separators=(",", ":")).encode()


def check_golden(d):
    manifest = json.load(open(d + "/manifest.json"))
    ok = True
    for fname, f in manifest.items():
        if "key_hex" in f or "password" in f:
            continue
        ts = [(name_bytes(t["path"]), t["type"], t["module_idx"], t["dtype"].encode("latin-1"), t["shape"],
               bytes.fromhex(t["data_hex"] or ""), t.get("meta", False)) for t in f["tensors"]]
        same = write(ts) == open(d + "/" + fname, "rb").read()
        print(("PASS" if same else "FAIL") + " ref_writer_reproduces_" + fname)
        ok &= same
    return ok


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    items = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    out = []
    for name, e in items:
        b, en = e["data_offsets"]
        dtype = OPAQUE.get(e["dtype"]) or NUMPY[e["dtype"]]
        out.append((name.encode(), 2, 0, dtype, e["shape"], raw[8 + n + b:8 + n + en], False))
    return out


if __name__ == "__main__":
    if sys.argv[1] == "check-golden":
        sys.exit(0 if check_golden(sys.argv[2]) else 1)
    if sys.argv[1] == "from-safetensors":
        ts = []
        for p in sys.argv[2:-1]:
            ts += read_safetensors(p)
        open(sys.argv[-1], "wb").write(write(ts))
