#!/usr/bin/env python3
"""Fault-injecting HTTP/1.1 file server for libtzr's HTTP source tests.

Usage: faulty_http.py DIR PORTFILE
Serves files of DIR on 127.0.0.1 (a free port, written to PORTFILE) with
HEAD, GET and Range support, ETag and If-Match (412 on mismatch).
The first path component selects a fault mode: /MODE/NAME serves DIR/NAME.
  ok       no faults
  e503     every 2nd GET answers 503
  e503once the first GET of every distinct Range answers 503 (each range
           fails exactly once, however requests interleave)
  e429     every 2nd GET answers 429 (Retry-After: 0)
  ra1      every 2nd GET answers 429 (Retry-After: 1)
  ralong   every 2nd GET answers 503 (Retry-After: 3600)
  cut      every 2nd GET sends half of its body, then closes the connection
  stall    every 2nd GET sends half of its body, then stalls for 60 s
  gate     every 2nd GET sends half of its body, then waits until the file
           DIR/gate.open exists and sends the rest (a writer held mid-write
           for exactly as long as the test needs)
  etag     after 3 GETs the ETag changes (the object was "replaced")
  die      after 3 GETs the server process exits
  norange  ignores Range (always 200 with the whole file)
  longer   answers 206 with one more byte than asked for
  replace  after 3 GETs the object is replaced (ETag "v2", other bytes) and
           If-Match is ignored, as some servers do
  replacelm  no ETag; after 3 GETs Last-Modified changes, other bytes
  chunkcut answers 206 chunked and closes before the final empty chunk
  shortbody  Content-Length one larger than the body sent, then closes
  loop     every request answers 302 to itself
  loopget  HEAD is fine, every GET answers 302 to itself
  gzip     GETs answer with a gzip-encoded body (Content-Encoding: gzip)
  gziphead HEAD says Content-Encoding: gzip
  trickle  HEAD is fine; GETs send their headers, then 1 byte a second
  silent   reads every request and never answers (closes after 30 s)
  silentget  HEAD is fine, GETs are never answered
  partfail   a minimal S3 multipart target (bucket = mode): UploadPart of
           part 2 answers 403 AccessDenied; abort is logged
  deny     a missing name answers 403, as S3 does without s3:ListBucket
  partretry  the same target, where the first PUT of every part answers
           503 and the retry succeeds; CompleteMultipartUpload writes the
           assembled object to DIR/KEY
An inverted range (bytes=N-M with M < N) answers 416, as nginx does.
Every request is logged to DIR/requests.log as "METHOD PATH RANGE TIME"
(TIME: seconds on the monotonic clock, when the request arrived).
"""
import gzip
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = sys.argv[1]
LOCK = threading.Lock()
COUNTS = {}
FLIP = bytes(i ^ 0xFF for i in range(256))
LM1 = "Mon, 01 Jan 2024 00:00:00 GMT"
LM2 = "Tue, 02 Jan 2024 00:00:00 GMT"
SEEN = set()
PARTS = {}  # (key, part number) -> body, for the multipart modes


def first_time(key):
    with LOCK:
        new = key not in SEEN
        SEEN.add(key)
        return new


def bump(mode):
    with LOCK:
        COUNTS[mode] = COUNTS.get(mode, 0) + 1
        return COUNTS[mode]


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without TCP_NODELAY a
    # small body waits for the client's delayed ACK (tens of ms per GET).
    disable_nagle_algorithm = True

    def log_message(self, *a):
        pass

    def _resolve(self):
        parts = self.path.split("?", 1)[0].lstrip("/").split("/", 1)
        if len(parts) != 2:
            return None, None
        mode, name = parts
        path = os.path.join(ROOT, name)
        if "/" in name or not os.path.isfile(path):
            return mode, None
        return mode, path

    def _log(self):
        with LOCK, open(os.path.join(ROOT, "requests.log"), "a") as f:
            f.write("%s %s %s %.3f\n" % (self.command, self.path, self.headers.get("Range", "-"),
                                         time.monotonic()))

    def _send_simple(self, code, extra=None):
        self.send_response(code)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _silent(self):
        time.sleep(30)
        self.close_connection = True

    def _loop(self):
        self._send_simple(302, {"Location": self.path})

    def do_HEAD(self):
        self._log()
        mode, path = self._resolve()
        if not path:
            return self._send_simple(403 if mode == "deny" else 404)
        if mode == "silent":
            return self._silent()
        if mode == "loop":
            return self._loop()
        size = os.path.getsize(path)
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.send_header("Accept-Ranges", "bytes")
        if mode == "replacelm":
            self.send_header("Last-Modified", LM1)
        else:
            self.send_header("ETag", '"v1"')
        if mode == "gziphead":
            self.send_header("Content-Encoding", "gzip")
        self.end_headers()

    def do_GET(self):
        self._log()
        mode, path = self._resolve()
        if not path:
            return self._send_simple(403 if mode == "deny" else 404)
        if mode in ("silent", "silentget"):
            return self._silent()
        if mode in ("loop", "loopget"):
            return self._loop()
        n = bump(mode)
        size = os.path.getsize(path)
        etag = '"v1"'
        if mode in ("etag", "replace") and n > 3:
            etag = '"v2"'
        replaced = mode in ("replace", "replacelm") and n > 3
        if mode == "die" and n > 3:
            os._exit(0)
        im = self.headers.get("If-Match")
        if im is not None and im != etag and mode != "replace":
            return self._send_simple(412)
        if mode == "e503" and n % 2 == 0:
            return self._send_simple(503)
        if mode == "e503once" and first_time((self.path, self.headers.get("Range"))):
            return self._send_simple(503)
        if mode == "e429" and n % 2 == 0:
            return self._send_simple(429, {"Retry-After": "0"})
        if mode == "ra1" and n % 2 == 0:
            return self._send_simple(429, {"Retry-After": "1"})
        if mode == "ralong" and n % 2 == 0:
            return self._send_simple(503, {"Retry-After": "3600"})
        rng = self.headers.get("Range")
        start, end, code = 0, size - 1, 200
        if rng and mode != "norange":
            spec = rng.split("=", 1)[1]
            a, b = spec.split("-", 1)
            start = int(a)
            end = min(int(b), size - 1) if b else size - 1
            if start >= size or (b and int(b) < start):
                return self._send_simple(416, {"Content-Range": "bytes */%d" % size})
            code = 206
        length = end - start + 1
        if mode in ("replace", "replacelm", "chunkcut", "gzip"):
            return self._send_body(mode, path, start, length, size, code, etag, replaced)
        send_len = length + 1 if mode in ("longer", "shortbody") else length
        self.send_response(code)
        self.send_header("Content-Length", str(send_len))
        self.send_header("ETag", etag)
        if code == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        self.end_headers()
        cut = (mode in ("cut", "stall")) and n % 2 == 0
        gated = mode == "gate" and n % 2 == 0
        with open(path, "rb") as f:
            f.seek(start)
            if gated:
                half = max(1, length // 2)
                self.wfile.write(f.read(half))
                self.wfile.flush()
                while not os.path.exists(os.path.join(ROOT, "gate.open")):
                    time.sleep(0.05)
                self.wfile.write(f.read(length - half))
                self.wfile.flush()
                return
            elif mode == "trickle":
                for _ in range(min(length, 600)):
                    self.wfile.write(f.read(1))
                    self.wfile.flush()
                    time.sleep(1)
                self.close_connection = True
                return
            left = length if not cut else max(1, length // 2)
            while left > 0:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)
            if mode == "longer":
                self.wfile.write(b"X")
        self.wfile.flush()
        if cut:
            if mode == "stall":
                time.sleep(60)
            self.close_connection = True
        if mode == "shortbody":
            self.close_connection = True

    # ---- a minimal S3 multipart target (partfail, partretry) --------------
    def _s3(self):
        from urllib.parse import parse_qs, urlsplit
        u = urlsplit(self.path)
        mode, _, key = u.path.lstrip("/").partition("/")
        q = parse_qs(u.query, keep_blank_values=True)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        def xml(code, text):
            data = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        if mode not in ("partfail", "partretry") or not key:
            return self._send_simple(404)
        if self.command == "POST" and "uploads" in q:
            return xml(200, "<InitiateMultipartUploadResult><UploadId>u1</UploadId></InitiateMultipartUploadResult>")
        if self.command == "PUT" and "partNumber" in q:
            n = int(q["partNumber"][0])
            if mode == "partfail" and n == 2:
                return xml(403, "<Error><Code>AccessDenied</Code><Message>part 2 refused</Message></Error>")
            if mode == "partretry" and first_time(("part", key, n)):
                return self._send_simple(503)
            with LOCK:
                PARTS[(key, n)] = body
            return self._send_simple(200, {"ETag": '"p%d"' % n})
        if self.command == "POST" and "uploadId" in q:
            with LOCK:
                nums = sorted(k[1] for k in PARTS if k[0] == key)
                data = b"".join(PARTS[(key, k)] for k in nums)
            with open(os.path.join(ROOT, key.replace("/", "_")), "wb") as f:
                f.write(data)
            return xml(200, "<CompleteMultipartUploadResult><ETag>\"done\"</ETag></CompleteMultipartUploadResult>")
        if self.command == "DELETE" and "uploadId" in q:
            return self._send_simple(204)
        return self._send_simple(400)

    def do_POST(self):
        self._log()
        self._s3()

    def do_PUT(self):
        self._log()
        self._s3()

    def do_DELETE(self):
        self._log()
        self._s3()

    def _send_body(self, mode, path, start, length, size, code, etag, replaced):
        """Whole-range answers of the replace, chunkcut and gzip modes."""
        with open(path, "rb") as f:
            f.seek(start)
            body = f.read(length)
        if replaced:
            body = body.translate(FLIP)
        if mode == "gzip":
            body = gzip.compress(body, 1)
        self.send_response(code)
        if mode == "replacelm":
            self.send_header("Last-Modified", LM2 if replaced else LM1)
        else:
            self.send_header("ETag", etag)
        if code == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, start + length - 1, size))
        if mode == "gzip":
            self.send_header("Content-Encoding", "gzip")
        if mode == "chunkcut":
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if mode == "chunkcut":
            for i in range(0, len(body), 1 << 16):
                piece = body[i:i + (1 << 16)]
                self.wfile.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
            # no final "0\r\n\r\n": the body is complete, the framing is not
            self.close_connection = True
        else:
            self.wfile.write(body)
        self.wfile.flush()


def main():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    with open(sys.argv[2] + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    srv.serve_forever()


if __name__ == "__main__":
    main()
