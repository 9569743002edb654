#!/usr/bin/env python3
"""A small S3 endpoint on loopback for answers Swift cannot give.

Usage: hostile_s3.py LOGFILE PORTFILE
Path-style only, no signature checks. Objects live in memory; every
request is logged to LOGFILE as "METHOD RAWPATH" (the path exactly as it
came on the request line). The bucket picks the behaviour:
  plain        a plain store: PUT, HEAD, GET (Range), DELETE, multipart
               (part ETags are the parts' MD5s, the object's ETag
               md5-of-part-md5s-N, as S3 computes them), ListObjectsV2
  latecomplete CompleteMultipartUpload answers 200, 1.5 MiB of blanks,
               then <Error> (S3 may send a late error that way); no object
  dropcomplete Complete stores the object, then drops the connection
               unanswered; the upload is gone, so a retry is NoSuchUpload
  dropfail     Complete drops the connection and stores nothing; an old
               object stays at the key
  amp          part ETags hold '&' and '<'; Complete must be well-formed
               XML naming them exactly (else 400 MalformedXML)
  crash        after CreateMultipartUpload every request is dropped
               unanswered (a crashed server)
  biglist      a ListObjectsV2 page of ~2 MiB: dir/a.safetensors first,
               padding keys, dir/b.safetensors last
  hugelist     a ListObjectsV2 page of 65 MiB (past the 64 MiB bound)
  sametoken    every ListObjectsV2 page is truncated with the same token
  outside      the listing of dir/ also returns keys outside it
               (zzzzzz.safetensors, ../ab.safetensors)
Safetensors objects hold one F32 tensor named after the file.
"""
import hashlib
import json
import os
import struct
import sys
import threading
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

LOCK = threading.Lock()
OBJS = {}      # (bucket, key) -> bytes
UPLOADS = {}   # upload id -> {"bucket", "key", "parts": {n: (etag, body)}}
NEXT = [0]


def st(name):
    data = struct.pack("<4f", 1, 2, 3, 4)
    hdr = json.dumps({name: {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    return struct.pack("<Q", len(hdr)) + hdr + data


for b in ("biglist", "outside", "sametoken"):
    OBJS[(b, "dir/a.safetensors")] = st("tensor_a")
OBJS[("biglist", "dir/b.safetensors")] = st("tensor_b")
OBJS[("outside", "zzzzzz.safetensors")] = st("tensor_outside")
OBJS[("outside", "../ab.safetensors")] = st("tensor_dotdot")
OBJS[("dropfail", "old.tensors")] = b"old object"
OBJS[("plain", "exists.tensors")] = b"keep"


def multipart_etag(etags):
    md5s = b"".join(bytes.fromhex(e.strip('"')[:32]) for e in etags)
    return '"%s-%d"' % (hashlib.md5(md5s).hexdigest(), len(etags))


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *a):
        pass

    def _send(self, code, body=b"", headers=None):
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _err(self, code, what):
        self._send(code, ("<Error><Code>%s</Code><Message>%s</Message></Error>" % (what, what)).encode())

    def _drop(self):
        self.close_connection = True

    def _handle(self):
        with LOCK, open(sys.argv[1], "a") as f:
            f.write("%s %s\n" % (self.command, self.path))
        u = urlsplit(self.path)
        bucket, _, key = u.path.lstrip("/").partition("/")
        key = unquote(key)
        q = parse_qs(u.query, keep_blank_values=True)
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        if bucket in CRASHED:
            return self._drop()
        if not key and "list-type" in q:
            return self._list(bucket, q)
        if self.command == "POST" and "uploads" in q:
            with LOCK:
                NEXT[0] += 1
                uid = "up%d" % NEXT[0]
                UPLOADS[uid] = {"bucket": bucket, "key": key, "parts": {}}
                if bucket == "crash":
                    CRASHED.add(bucket)
            return self._send(200, ("<InitiateMultipartUploadResult><UploadId>%s</UploadId>"
                                    "</InitiateMultipartUploadResult>" % uid).encode())
        uid = q.get("uploadId", [None])[0]
        if uid is not None:
            up = UPLOADS.get(uid)
            if up is None:
                return self._err(404, "NoSuchUpload")
            if self.command == "PUT":
                pn = int(q["partNumber"][0])
                etag = '"%s"' % hashlib.md5(body).hexdigest()
                if bucket == "amp":
                    etag = '"%s&<x%d"' % (hashlib.md5(body).hexdigest(), pn)
                up["parts"][pn] = (etag, body)
                return self._send(200, headers={"ETag": etag})
            if self.command == "DELETE":
                UPLOADS.pop(uid, None)
                return self._send(204)
            if self.command == "POST":
                return self._complete(bucket, key, uid, up, body)
        if self.command == "PUT":
            OBJS[(bucket, key)] = body
            return self._send(200, headers={"ETag": '"%s"' % hashlib.md5(body).hexdigest()})
        obj = OBJS.get((bucket, key))
        if obj is None:
            return self._err(404, "NoSuchKey")
        etag = self._etag(bucket, key, obj)
        if self.command == "DELETE":
            OBJS.pop((bucket, key), None)
            return self._send(204)
        rng = self.headers.get("Range")
        if rng and self.command == "GET":
            a, b = rng.split("=", 1)[1].split("-", 1)
            a, b = int(a), min(int(b) if b else len(obj) - 1, len(obj) - 1)
            return self._send(206, obj[a:b + 1], {"ETag": etag, "Content-Range": "bytes %d-%d/%d" % (a, b, len(obj))})
        self.send_response(200)
        self.send_header("ETag", etag)
        self.send_header("Content-Length", str(len(obj)))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(obj)

    def _etag(self, bucket, key, obj):
        return ETAGS.get((bucket, key)) or '"%s"' % hashlib.md5(obj).hexdigest()

    def _complete(self, bucket, key, uid, up, body):
        try:
            root = ET.fromstring(body)
            given = [(int(p.find("PartNumber").text), p.find("ETag").text) for p in root.findall("Part")]
        except (ET.ParseError, AttributeError, ValueError):
            return self._err(400, "MalformedXML")
        for pn, etag in given:
            if pn not in up["parts"] or up["parts"][pn][0] != etag:
                return self._err(400, "InvalidPart")
        etags = [up["parts"][pn][0] for pn, _ in given]
        data = b"".join(up["parts"][pn][1] for pn, _ in given)
        if bucket == "latecomplete":
            out = b" " * (3 << 19) + b"<Error><Code>InternalError</Code><Message>late</Message></Error>"
            return self._send(200, out)
        with LOCK:
            UPLOADS.pop(uid, None)
            if bucket != "dropfail":
                OBJS[(bucket, key)] = data
                ETAGS[(bucket, key)] = multipart_etag(etags)
        if bucket in ("dropcomplete", "dropfail"):
            return self._drop()
        return self._send(200, ("<CompleteMultipartUploadResult><ETag>%s</ETag></CompleteMultipartUploadResult>"
                                % escape(ETAGS[(bucket, key)])).encode())

    def _list(self, bucket, q):
        prefix = q.get("prefix", [""])[0]
        keys = sorted(k for b, k in OBJS if b == bucket and (bucket == "outside" or k.startswith(prefix)))
        if bucket == "biglist":
            pad = ["dir/pad-%06d-%s.bin" % (i, "x" * 60) for i in range(20000)]
            keys = ["dir/a.safetensors"] + pad + ["dir/b.safetensors"]
        if bucket == "hugelist":
            key = "<Contents><Key>dir/pad-%s.bin</Key><Size>1</Size></Contents>" % ("x" * 960)
            return self._send(200, ("<ListBucketResult>%s</ListBucketResult>" % (key * (65 << 10))).encode())
        more = ""
        if bucket == "sametoken":
            more = "<IsTruncated>true</IsTruncated><NextContinuationToken>t1</NextContinuationToken>"
        out = "<ListBucketResult>%s%s</ListBucketResult>" % (
            more, "".join("<Contents><Key>%s</Key><Size>1</Size></Contents>" % escape(k) for k in keys))
        self._send(200, out.encode())

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


ETAGS = {}
CRASHED = set()


def main():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    with open(sys.argv[2] + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    srv.serve_forever()


if __name__ == "__main__":
    main()
