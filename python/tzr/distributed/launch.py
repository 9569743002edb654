"""python3 -m tzr.distributed.launch -n N [--timeout S] [--port P] script.py args...

Starts N copies of `script.py args...` (or `-m module args...`) with the
environment torchrun gives (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
MASTER_ADDR=127.0.0.1, MASTER_PORT: a free loopback port unless --port),
for where torchrun is missing or broken (Debian's, on Python 3.11). When
one exits non-zero the others are stopped (SIGTERM, then SIGKILL after
--grace seconds) and its status is the launcher's; all zero gives 0.
--timeout stops them all and exits 124. Single node only."""
import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse(argv):
    """The launcher's own options, then what to run: everything from the
    script (or -m module) on goes to it untouched."""
    p = argparse.ArgumentParser(prog="python3 -m tzr.distributed.launch", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--nproc-per-node", "--nproc", dest="n", type=int, required=True)
    p.add_argument("--timeout", type=float, default=None, help="seconds before every rank is stopped (exit 124)")
    p.add_argument("--port", type=int, default=None, help="MASTER_PORT (default: a free one)")
    p.add_argument("--grace", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL")
    valued = {"-n", "--nproc-per-node", "--nproc", "--timeout", "--port", "--grace"}
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-m":
        i += 1 if "=" in argv[i] or argv[i] not in valued else 2
    a = p.parse_args(argv[:i])
    rest = argv[i:]
    if rest[:1] == ["-m"]:
        rest = rest[1:]
        a.module = True
    else:
        a.module = False
    if not rest:
        p.error("a script (or -m module) to run is needed")
    if a.n < 1:
        p.error("-n must be at least 1")
    a.cmd = [sys.executable] + (["-m"] if a.module else []) + rest
    return a


def stop(procs, grace):
    for q in procs:
        if q.poll() is None:
            q.send_signal(signal.SIGTERM)
    end = time.monotonic() + grace
    for q in procs:
        try:
            q.wait(max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            q.kill()
            q.wait()


def _interrupt(*_):
    raise KeyboardInterrupt


def main(argv=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    cmd = a.cmd
    port = a.port or free_port()
    procs = []
    # SIGTERM to the launcher stops the ranks the same way a failure does.
    signal.signal(signal.SIGTERM, _interrupt)
    deadline = None if a.timeout is None else time.monotonic() + a.timeout
    try:
        for r in range(a.n):
            env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(a.n),
                       LOCAL_WORLD_SIZE=str(a.n), GROUP_RANK="0", MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port))
            procs.append(subprocess.Popen(cmd, env=env))
        while True:
            codes = [q.poll() for q in procs]
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                r, c = bad[0]
                sys.stderr.write("tzr.distributed.launch: rank %d exited with status %d; stopping the others\n"
                                 % (r, c))
                stop(procs, a.grace)
                return c if c > 0 else 128 - c  # killed by signal s: 128 + s, as a shell says
            if all(c == 0 for c in codes):
                return 0
            if deadline is not None and time.monotonic() > deadline:
                sys.stderr.write("tzr.distributed.launch: timed out after %g s; stopping every rank\n" % a.timeout)
                stop(procs, a.grace)
                return 124
            time.sleep(0.05)
    except KeyboardInterrupt:
        stop(procs, a.grace)
        return 130


if __name__ == "__main__":
    sys.exit(main())
