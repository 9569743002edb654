#!/usr/bin/env python3
"""Prints SigV4 vectors for S3-style requests computed by botocore's own
signers (S3SigV4Auth for headers, S3SigV4QueryAuth for presigned URLs) at a
fixed time. tests/test_sigv4.c signs the same requests with libtzr's signer
and compares canonical request and signature. Output format, one case:

  case NAME / mode header|query / method M / path_hex HEX(raw path bytes)
  query Q (as sent, percent-encoded; '-' none) / header Name:value (repeated)
  payload HASH / date YYYYMMDDTHHMMSSZ / region R / access_key A /
  secret_key S / token T|- / expires N / creq_hex HEX / signature SIG / end

Regenerate: python3 tests/data/gen_botocore_vectors.py > tests/data/sigv4_botocore.txt
"""
import datetime
import hashlib
from unittest import mock
from urllib.parse import quote

import botocore
import botocore.auth as auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

FIXED = datetime.datetime(2024, 3, 9, 17, 5, 42)
AK = "AKIAIOSFODNN7EXAMPLE"
SK = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
TOKEN = "FQoGZXIvYXdzEJr//////////wEaDOEXAMPLEtoken+/=="

CASES = [
    # name, mode, method, base, raw path, query(encoded), headers, body, region, token, expires
    ("path_style_get_range", "header", "GET", "http://127.0.0.1:8080", "/bucket/model.tensors",
     "", {"Range": "bytes=0-1048575"}, b"", "us-east-1", None, 0),
    ("virtual_hosted_get", "header", "GET", "https://my-bucket.s3.us-west-2.amazonaws.com",
     "/dir/sub/model.tensors", "", {}, b"", "us-west-2", None, 0),
    ("head_if_match", "header", "HEAD", "http://localhost:9000", "/b/k",
     "", {"If-Match": '"9b2cf535f27731c974343645a3985328"'}, b"", "us-east-1", None, 0),
    ("unicode_key", "header", "GET", "http://127.0.0.1:8080",
     "/bucket/\u6a21\u578b/\u1234 file+x (1).tensors", "", {}, b"", "eu-central-1", None, 0),
    ("odd_path_not_normalized", "header", "GET", "http://127.0.0.1:8080",
     "/bucket/a//b/./c/../d~e", "", {}, b"", "us-east-1", None, 0),
    ("session_token", "header", "GET", "https://bkt.s3.amazonaws.com", "/x.tensors",
     "", {"Range": "bytes=100-199"}, b"", "us-east-1", TOKEN, 0),
    ("create_multipart", "header", "POST", "http://127.0.0.1:8080", "/bucket/out.tensors",
     "uploads=", {}, b"", "us-east-1", None, 0),
    ("upload_part_query", "header", "PUT", "http://127.0.0.1:8080", "/bucket/out.tensors",
     "partNumber=3&uploadId=" + quote("2~abc/def+ghi=", safe=""), {}, b"part-bytes" * 100,
     "us-east-1", None, 0),
    ("complete_multipart_body", "header", "POST", "http://127.0.0.1:8080", "/bucket/out.tensors",
     "uploadId=tx123abc",
     {"Content-Type": "application/xml"},
     b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>\"e\"</ETag></Part>"
     b"</CompleteMultipartUpload>", "us-east-1", None, 0),
    ("query_sorting", "header", "GET", "http://127.0.0.1:8080", "/bucket",
     "prefix=a%20b&list-type=2&max-keys=10&continuation-token=" + quote("x/y=", safe=""), {}, b"",
     "us-east-1", None, 0),
    ("presign_get", "query", "GET", "https://examplebucket.s3.amazonaws.com", "/test.txt",
     "", {}, b"", "us-east-1", None, 86400),
    ("presign_get_token_unicode", "query", "GET", "http://127.0.0.1:8080",
     "/bucket/\u00e9t\u00e9 model.tensors", "", {}, b"", "us-east-1", TOKEN, 172800),
    ("presign_virtual_hosted", "query", "GET", "https://bkt.s3.ap-south-1.amazonaws.com",
     "/k/v.tensors", "versionId=3HL4kqtJlcpXroDTDmJ%2BrmSpXd3dIbrHY", {}, b"", "ap-south-1",
     None, 3600),
]


def main():
    for (name, mode, method, base, path, query, headers, body, region, token, expires) in CASES:
        url = base + quote(path, safe="/~")
        if query:
            url += "?" + query
        req = AWSRequest(method=method, url=url, headers=dict(headers), data=body)
        creds = Credentials(AK, SK, token)
        if mode == "header":
            signer = auth.S3SigV4Auth(creds, "s3", region)
        else:
            signer = auth.S3SigV4QueryAuth(creds, "s3", region, expires=expires)
        captured = {}
        orig = signer.canonical_request

        def cap(r, orig=orig):
            c = orig(r)
            captured["creq"] = c
            return c

        with mock.patch.object(auth, "get_current_datetime", return_value=FIXED), \
             mock.patch.object(signer, "canonical_request", side_effect=cap):
            signer.add_auth(req)
        creq = captured["creq"]
        if mode == "header":
            sig = req.headers["Authorization"].rsplit("Signature=", 1)[1]
            payload = req.headers["X-Amz-Content-SHA256"]
        else:
            sig = req.url.rsplit("X-Amz-Signature=", 1)[1]
            payload = "UNSIGNED-PAYLOAD"
        host = auth._host_from_url(url)
        print("case", name)
        print("mode", mode)
        print("method", method)
        print("path_hex", path.encode().hex())
        print("query", query if query else "-")
        print("header", "Host:" + host)
        for k, v in headers.items():
            print("header", f"{k}:{v}")
        print("payload", payload)
        print("date", FIXED.strftime("%Y%m%dT%H%M%SZ"))
        print("region", region)
        print("access_key", AK)
        print("secret_key", SK)
        print("token", token if token else "-")
        print("expires", expires)
        print("creq_hex", creq.encode().hex())
        print("signature", sig)
        print("end")
    print("# botocore", botocore.__version__, "body sha256 check",
          hashlib.sha256(b"").hexdigest()[:8])


if __name__ == "__main__":
    main()
