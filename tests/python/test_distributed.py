"""Tests of tzr.distributed and its launcher with the gloo backend on CPU:
one `PASS name` / `FAIL name: why` line per case (tests/run.sh counts them).
Writes the checkpoints (one .tensors file, a ShardWriter manifest, a
Hugging Face directory, an encrypted file, a corrupted copy), runs
distributed_worker.py under `python3 -m tzr.distributed.launch` with 2 and
then 3 ranks, and compares what every rank got with the tensors written
here. NCCL/CUDA paths are not exercised (no GPU here).
    PYTHONPATH=python /usr/bin/python3 tests/python/test_distributed.py"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.distributed as dist
except ImportError:
    sys.exit(77)
if not dist.is_available() or not dist.is_gloo_available():
    print("python_distributed: torch.distributed with gloo is missing", file=sys.stderr)
    sys.exit(77)

import tzr

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
TMP = tempfile.mkdtemp(prefix="tzr-dist-")
WORKER = os.path.join(HERE, "distributed_worker.py")
failed = 0


def report(name, why):
    global failed
    if why is None:
        print("PASS", name)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, str(why).replace("\n", " ")[:400]))
    sys.stdout.flush()


def p(*names):
    return os.path.join(TMP, *names)


def make_files():
    g = torch.Generator().manual_seed(24)
    sd = {"a": torch.arange(10, dtype=torch.float32),
          "b": torch.randn(256, 1024, generator=g),            # 1 MiB: broadcast in pieces
          "c": torch.tensor([True, False, True]),
          "d": torch.randn(7, 5, generator=g).to(torch.bfloat16),
          "e": torch.zeros(0, 4),
          "f": torch.tensor(3, dtype=torch.int64),
          "layers.0.w": torch.randn(64, 33, generator=g).to(torch.float16),
          # Cut by a vLLM rank set (q_proj along dim 0, o_proj along dim 1).
          "layers.0.q_proj.weight": torch.randn(64, 48, generator=g),
          "layers.0.o_proj.weight": torch.randn(32, 64, generator=g).to(torch.bfloat16)}
    torch.save(sd, p("oracle.pt"))
    with tzr.TensorSerializer(p("single.tensors")) as s:
        s.write_state_dict(sd)
    key = os.urandom(32)
    open(p("key.hex"), "w").write(key.hex())
    with tzr.TensorSerializer(p("enc.tensors"), encryption=tzr.EncryptionParams(key)) as s:
        s.write_state_dict(sd)
    # Two shards, "b" cut along dim 0, the rest replicated on both.
    os.mkdir(p("man"))
    for r in range(2):
        with tzr.ShardWriter(p("man", "model"), r, 2) as w:
            for k, t in sd.items():
                if k == "b":
                    w.add(k, t[r * 128:(r + 1) * 128], t.shape, 0, r * 128)
                else:
                    w.add(k, t)
    tzr.build_manifest(p("man", "model"), 2)
    # A Hugging Face directory: two safetensors files and their index.
    os.mkdir(p("hf"))
    halves = [["a", "b", "c"], ["d", "e", "f", "layers.0.w", "layers.0.q_proj.weight", "layers.0.o_proj.weight"]]
    wmap = {}
    for i, names in enumerate(halves):
        part = p("part%d.tensors" % i)
        with tzr.TensorSerializer(part) as s:
            s.write_state_dict({k: sd[k] for k in names})
        out = "model-%05d-of-00002.safetensors" % (i + 1)
        subprocess.run([os.path.join(BUILD, "detensorize"), part, "-o", p("hf", out)], check=True,
                       stdout=subprocess.DEVNULL, timeout=60)
        wmap.update({k: out for k in names})
    json.dump({"metadata": {}, "weight_map": wmap}, open(p("hf", "model.safetensors.index.json"), "w"))
    tensorize = os.path.join(BUILD, "tensorize")
    # zstd frames (byte planes for the 2/4-byte dtypes).
    subprocess.run([tensorize, "-q", p("single.tensors"), "-o", p("zstd.tensors"), "--compress", "zstd:3"],
                   check=True, timeout=60)
    # A vLLM rank set of 2 files, opened from its pattern alone (no manifest,
    # so by vLLM's rules). The rules are spelled out: without them tensorize
    # would also cut the 1 MiB "b", which vLLM's rules read as replicated.
    os.mkdir(p("vllm"))
    subprocess.run([tensorize, "-q", p("single.tensors"), "--shards", "2", "--names", "vllm", "-o",
                    p("vllm", "model-rank-%03d.tensors"), "--split-dim", "*.q_proj.*=0,*.o_proj.weight=1,*=replicate"],
                   check=True, timeout=60)
    os.unlink(p("vllm", "model-rank.tzr-index.json"))
    os.unlink(p("vllm", "model-rank.tzr-hashes"))
    assert sorted(os.listdir(p("vllm"))) == ["model-rank-000.tensors", "model-rank-001.tensors"]
    # The set is really cut (else it would test only a replicated copy).
    part = tzr.load_rank(p("vllm", "model-rank-000.tensors"), 0, 1)
    assert tuple(part["layers.0.q_proj.weight"].shape) == (32, 48), part["layers.0.q_proj.weight"].shape
    assert tuple(part["layers.0.o_proj.weight"].shape) == (32, 32), part["layers.0.o_proj.weight"].shape
    assert sd["b"][100].numpy().tobytes() not in open(p("zstd.tensors"), "rb").read(), "zstd.tensors not compressed"
    upload_s3(tensorize)
    # A corrupted copy: one byte of "b"'s data flipped.
    data = bytearray(open(p("single.tensors"), "rb").read())
    at = data.find(sd["b"][100].numpy().tobytes())
    assert at > 0
    data[at + 5] ^= 0xFF
    open(p("corrupt.tensors"), "wb").write(bytes(data))
    # A short file: cut inside "b"'s data (the index still promises it all).
    data[at + 5] ^= 0xFF
    open(p("short.tensors"), "wb").write(bytes(data[:at + 4096]))
    return sd


def upload_s3(tensorize):
    """With TZR_TEST_S3 ("endpoint bucket", Swift the shell script
    started): single.tensors and the vLLM rank set as s3:// objects, the
    workers' environment given the endpoint and Swift's test credentials."""
    v = os.environ.get("TZR_TEST_S3")
    if not v:
        return
    endpoint, bucket = v.split()
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="test:tester", AWS_SECRET_ACCESS_KEY="testing")
    for name in ("single.tensors", "vllm/model-rank-000.tensors", "vllm/model-rank-001.tensors"):
        subprocess.run([tensorize, "-q", p(name), "-o", "s3://%s/dist/%s" % (bucket, name)], check=True,
                       timeout=120)


def launch(n, *args, timeout=150):
    cmd = [sys.executable, "-m", "tzr.distributed.launch", "-n", str(n), "--timeout", str(timeout - 10)]
    return subprocess.run(cmd + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                          text=True)


def results(n):
    out = []
    for r in range(n):
        path = p("result-%d-%d.json" % (n, r))
        out.append(json.load(open(path)) if os.path.exists(path) else {})
    return out


def check_ok(name, every):
    for r, res in enumerate(every):
        got = res.get(name)
        if got != ["ok"]:
            return "rank %d: %s" % (r, got)
    return None


def check_error(name, every, kind, failing, *words):
    """Every rank raised the same kind with the same message, naming the
    failing rank and the words (file, tensor)."""
    first = every[0].get(name)
    for r, res in enumerate(every):
        if res.get(name) != first:
            return "rank %d got %s, rank 0 got %s" % (r, res.get(name), first)
    if not first or first[0] != "error" or first[1] != kind:
        return "expected %s on every rank, got %s" % (kind, first)
    for w in ["rank %d of %d" % (failing, len(every))] + list(words):
        if w not in first[2]:
            return "message %r lacks %r" % (first[2], w)
    return None


def session(n, sd, tag=""):
    """Every case of distributed_worker.py on n ranks (its backend and
    device from TZR_TEST_BACKEND/TZR_TEST_DEVICE); tag: a prefix of the names."""
    for r in range(n):  # no stale result passes for a rank that never wrote one
        if os.path.exists(p("result-%d-%d.json" % (n, r))):
            os.unlink(p("result-%d-%d.json" % (n, r)))
    r = launch(n, WORKER, TMP)
    if r.returncode != 0:
        sys.stderr.write(r.stdout)
    every = results(n)
    cases = [k for k, v in every[0].items()] or ["session"]
    for name in cases:
        full = "%s%s_w%d" % (tag, name, n)
        if not all(every) or len(every) != n:
            report(full, "launcher status %d, results from %d of %d ranks: %s" % (
                r.returncode, sum(1 for e in every if e), n, r.stdout[-300:]))
        elif every[0][name][:1] == ["skip"]:
            print("SKIP %s: %s" % (full, every[0][name][1]))
        elif name.startswith("missing_"):
            bad = 0 if name.endswith("broadcast") else n - 1
            report(full, check_error(name, every, "TzrFileNotFoundError", bad, "missing.tensors"))
        elif name.startswith("corrupt_"):
            owner = [e for e in every if e.get(name, [""])[0] == "error"]
            why = None
            msg = owner[0][name][2] if owner else ""
            failing = int(msg.split("rank ")[1].split(" ")[0]) if "rank " in msg else -1
            if name.endswith("broadcast") and failing != 0:
                why = "rank 0 reads everything in broadcast mode; message names rank %d" % failing
            report(full, why or check_error(name, every, "HashMismatchError", failing, "corrupt.tensors", "'b'"))
        elif name.startswith("short_"):
            bad = 0 if name.endswith("broadcast") else n - 1
            kind = every[0].get(name, [None, None])[1]
            why = None if kind in ("FormatError", "TzrIOError") else "expected a FormatError or TzrIOError, got %s" % kind
            report(full, why or check_error(name, every, kind, bad, "short.tensors"))
        elif name.startswith("wrong_key_"):
            report(full, check_error(name, every, "CryptographyError", 0, "enc.tensors"))
        else:
            report(full, check_ok(name, every))


def case_saved_by_3(sd):
    m = p("ckpt3", "model.tzr-index.json")
    if not os.path.exists(m):
        return "no manifest"
    got = tzr.load_rank(m, 0, 1)
    for k, t in sd.items():
        if not torch.equal(got[k].reshape(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8)):
            return "tensor %s differs" % k
    shards = json.load(open(m))["shard_count"]
    return None if shards == 3 else "%d shards" % shards


def killed(how):
    """distributed_worker.py `how` on 2 ranks started without the launcher
    (which would stop rank 0 when rank 1 dies): the exit codes."""
    from tzr.distributed.launch import free_port
    env = dict(os.environ, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    procs = [subprocess.Popen([sys.executable, WORKER, TMP, how], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in range(2)]
    try:
        return [q.wait(120) for q in procs]
    finally:
        for q in procs:
            if q.poll() is None:
                q.kill()
                q.wait()


def case_killed_in_load():
    """Rank 1 dies mid-broadcast; rank 0 must raise (within the group's
    40 s timeout; the closed connection usually ends it at once)."""
    for r in range(2):
        if os.path.exists(p("result-2-%d.json" % r)):
            os.unlink(p("result-2-%d.json" % r))
    codes = killed("die_load")
    if codes[1] != 9:
        return "rank 1 exited %s, expected 9 (os._exit in Group.broadcast)" % codes[1]
    got = results(2)[0].get("die_in_load")
    return None if got and got[0] == "error" else "rank 0 did not raise: %s (exit %s)" % (got, codes[0])


def case_killed_in_save():
    """Rank 1 dies (os._exit) during save; rank 0, started without the
    launcher (which would stop it), must raise, and no manifest appears."""
    codes = killed("die")
    if codes[1] != 9:
        return "rank 1 exited %s, expected 9 (os._exit in ShardWriter.add)" % codes[1]
    got = results(2)[0].get("die_in_save")
    if not got or got[0] != "error":
        return "rank 0 did not raise: %s (exit %s)" % (got, codes[0])
    if os.path.exists(p("died", "model.tzr-index.json")):
        return "a manifest was written"
    # Rank 0 removes its shard; the dead rank's hidden temporary (never
    # renamed into place) is all that may remain.
    left = [f for f in os.listdir(p("died")) if not (f.startswith(".") and f.endswith(".tmp"))]
    return "files left: %s" % left if left else None


def case_launcher_forwards_failure():
    """One rank exits 7 while the other would sleep a minute: the launcher
    stops it and exits 7 (well before its own timeout)."""
    script = p("exit7.py")
    open(script, "w").write("import os, time\nif os.environ['RANK'] == '1': raise SystemExit(7)\ntime.sleep(60)\n")
    r = launch(2, script, timeout=50)
    return None if r.returncode == 7 else "status %d: %s" % (r.returncode, r.stdout[-300:])


def case_launcher_environment():
    script = p("env.py")
    open(script, "w").write("import os, sys\nopen(sys.argv[1] + os.environ['RANK'], 'w').write(' '.join(os.environ[k] for k"
                            " in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')))\n")
    r = launch(3, script, p("env-"), timeout=50)
    got = [open(p("env-%d" % i)).read().split() if os.path.exists(p("env-%d" % i)) else None for i in range(3)]
    ok = r.returncode == 0 and all(g and g[:4] == [str(i), str(i), "3", "127.0.0.1"] and g[4].isdigit()
                                   for i, g in enumerate(got)) and len({g[4] for g in got}) == 1
    return None if ok else "status %d, %s" % (r.returncode, got)


def case_launcher_timeout():
    script = p("sleep.py")
    open(script, "w").write("import time\ntime.sleep(60)\n")
    r = subprocess.run([sys.executable, "-m", "tzr.distributed.launch", "-n", "2", "--timeout", "2", script],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=50, text=True)
    return None if r.returncode == 124 else "status %d" % r.returncode


def main():
    try:
        sd = make_files()
    except Exception as e:  # noqa: BLE001
        report("distributed_setup", "%s: %s" % (type(e).__name__, e))
        return 1
    session(2, sd)
    session(3, sd)
    report("save_tensor_parallel_w3_reloaded", case_saved_by_3(sd))
    report("killed_rank_in_save_leaves_no_manifest", case_killed_in_save())
    report("killed_rank_in_broadcast_load_raises", case_killed_in_load())
    for fn in (case_launcher_forwards_failure, case_launcher_environment, case_launcher_timeout):
        try:
            why = fn()
        except Exception as e:  # noqa: BLE001
            why = "%s: %s" % (type(e).__name__, e)
        report(fn.__name__[5:], why)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(rc)
