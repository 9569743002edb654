"""tzr.distributed onto CUDA tensors, for a machine with an NVIDIA GPU (run
by tests/gpu/run.sh): the cases of tests/python/test_distributed.py (every
mode x single file, manifest, HF directory, vLLM rank set, encrypted, zstd;
failures on one rank; save and reload) with device="cuda", compared with
the tensors the test wrote:
  - gloo, 2 ranks sharing GPU 0: CUDA tensors through pinned host buckets;
  - NCCL, 2 ranks (and up to 4 where there are the GPUs), one GPU a rank:
    the staging buckets on the GPU. NCCL refuses two ranks on one GPU, so
    with one GPU these are SKIP lines.
One `PASS name` / `FAIL name: why` / `SKIP name: why` line per case; exit 77
without a CUDA device for torch.
    BUILD=build PYTHONPATH=python TZR_LIBRARY=build/libtzr.so python3 tests/gpu/distributed_test.py"""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.join(ROOT, "python"))

try:
    import torch
    import torch.distributed as dist
except ImportError:
    sys.exit(77)


def main():
    if not torch.cuda.is_available():
        print("distributed_test: torch sees no CUDA device", file=sys.stderr)
        return 77
    import test_distributed as td  # its files, launcher and comparisons
    try:
        sd = td.make_files()
        os.environ["TZR_TEST_DEVICE"] = "cuda"
        os.environ["TZR_TEST_BACKEND"] = "gloo"
        td.session(2, sd, tag="gloo_cuda_")
        ngpu = torch.cuda.device_count()
        if ngpu >= 2 and dist.is_nccl_available():
            os.environ["TZR_TEST_BACKEND"] = "nccl"
            for n in sorted({2, min(ngpu, 4)}):
                td.session(n, sd, tag="nccl_")
        else:
            print("SKIP nccl_sessions: NCCL needs a GPU per rank, %d GPU(s) here" % ngpu)
    finally:
        shutil.rmtree(td.TMP, ignore_errors=True)
    return 1 if td.failed else 0


if __name__ == "__main__":
    sys.exit(main())
