/* Driven by tests/mpi_test.sh under mpirun. Every rank loads with each
 * mode, hashes what it got, and rank 0 compares every rank's digest with
 * the digest the generator (shard_model.h) gives for that rank's slices;
 * failure cases check every rank returns an error, the failing one its
 * own and the others TZR_ECOMM naming it. Rank 0 prints PASS/FAIL lines.
 *   mpi_load setup DIR      (no mpirun) write DIR/src.tensors, encrypted
 *                           and compressed copies, 8-shard splits
 *                           (plain DIR/s8, encrypted DIR/e8) and
 *                           corrupted copies
 *   mpi_load check DIR      every host mode x input, byte-identical results
 *   mpi_load device DIR     the same into device memory (run with the fake
 *                           CUDA runtime and fake NCCL: TZR_CUDART,
 *                           TZR_NCCL), failures, and no device or pinned
 *                           allocation or NCCL communicator left behind
 *   mpi_load fail DIR       failure cases
 *   mpi_load kill DIR       rank 1 dies before the load (mpirun must abort) */
#include <dlfcn.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shard_model.h"
#include "tzr_comm.h"

static int rank, size;

static uint64_t fnv(uint64_t h, const uint8_t *p, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001B3ull;
    return h;
}

/* Digest of what rank q should hold: whole tensors, or (sharded) the
 * default target slices for q of size. */
static uint64_t expected_digest(int q, int sharded) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < SM_COUNT; i++) {
        int dim = sharded && size > 1 && SM[i].ndim ? SM[i].dim : -1;
        uint64_t off = 0, len = 0, nb;
        if (dim >= 0) sm_chunk(SM[i].shape[dim], size, q, &off, &len);
        uint8_t *b = sm_expected(i, dim, off, len, &nb);
        h = fnv(h, b, nb);
        free(b);
    }
    return h;
}

static uint64_t result_digest(const tzr_shard_result *res) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; res && i < res->count; i++) h = fnv(h, res->pieces[i].data, res->pieces[i].nbytes);
    return h;
}

static const uint8_t KEY[32] = "libtzr-mpi-test-key-0123456789a";

/* Rank 0 compares every rank's load with the generator and prints the
 * case's line: its status, tensor count and digest, whether copying the
 * bytes back failed, and what it left allocated (device runs). */
static int report(const char *label, int rc, uint64_t digest, uint64_t count, int copy_bad, uint64_t left,
                  int sharded) {
    uint64_t mine[5] = {(uint64_t)(int64_t)rc, digest, count, (uint64_t)copy_bad, left}, *all = NULL;
    if (rank == 0) all = malloc(sizeof mine * (size_t)size);
    MPI_Gather(mine, 5, MPI_UINT64_T, all, 5, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    int bad = 0;
    if (rank == 0) {
        char why[256] = "";
        for (int q = 0; q < size && !bad; q++) {
            const uint64_t *m = &all[5 * q];
            if (m[0]) bad = snprintf(why, sizeof why, "rank %d returned %s", q, tzr_strerror((int)(int64_t)m[0]));
            else if (m[3]) bad = snprintf(why, sizeof why, "rank %d: copying the device bytes back failed", q);
            else if (m[2] != SM_COUNT) bad = snprintf(why, sizeof why, "rank %d got %llu tensors", q, (unsigned long long)m[2]);
            else if (m[1] != expected_digest(q, sharded))
                bad = snprintf(why, sizeof why, "rank %d bytes differ from the generator", q);
            else if (m[4])
                bad = snprintf(why, sizeof why, "rank %d left %llu device/pinned allocations or NCCL communicators", q,
                               (unsigned long long)m[4]);
        }
        if (bad) printf("FAIL %s_np%d: %s\n", label, size, why);
        else printf("PASS %s_np%d\n", label, size);
        fflush(stdout);
        free(all);
    }
    return bad;
}

/* A failure case's verdict: the failing rank (every rank: -1) returned
 * want, the others TZR_ECOMM naming it, and (ok) nothing else is wrong. */
static int fail_verdict(const char *label, int rc, int fail_rank, int want, int ok, double dt) {
    char tag[32];
    snprintf(tag, sizeof tag, "rank %d failed", fail_rank);
    ok &= fail_rank < 0 || rank == fail_rank ? rc == want : rc == TZR_ECOMM && strstr(tzr_last_error(), tag) != NULL;
    fprintf(stderr, "rank %d %s: rc %d in %.2fs: %s\n", rank, label, rc, dt, tzr_last_error());
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) {
        if (all_ok) printf("PASS %s_np%d\n", label, size);
        else printf("FAIL %s_np%d: wrong code or message, or allocations left (see stderr)\n", label, size);
        fflush(stdout);
    }
    return !all_ok;
}

static int run_mode(tzr_comm *c, const char *name, const char *path, tzr_comm_mode mode, size_t chunk, int sharded) {
    tzr_comm_load_options o = TZR_COMM_LOAD_OPTIONS_INIT;
    o.mode = mode;
    if (strstr(name, "enc")) o.crypt.key = KEY;
    o.chunk_bytes = chunk;
    o.timeout_s = 60;
    tzr_shard_result *res = NULL;
    tzr_comm_stats st;
    int rc = tzr_comm_load(c, path, &o, &res, &st);
    if (rc) fprintf(stderr, "rank %d %s: %s\n", rank, name, tzr_last_error());
    int bad = report(name, rc, result_digest(res), res ? res->count : 0, 0, 0, sharded);
    tzr_shard_result_free(res);
    return bad;
}

typedef int (*run_fn)(tzr_comm *c, const char *name, const char *path, tzr_comm_mode mode, size_t chunk, int sharded);

static void paths(const char *dir, const char *input, char *file, size_t fcap, char *man, size_t mcap) {
    snprintf(file, fcap, "%s/%s.tensors", dir, input);
    snprintf(man, mcap, "%s/%s8/model%s", dir, strcmp(input, "enc") == 0 ? "e" : "s", TZR_SHARD_MANIFEST_SUFFIX);
}

/* Every mode on every input: plain, encrypted, compressed; the shard sets
 * (plain and encrypted) through the manifest modes. */
static int every_input(tzr_comm *c, const char *dir, run_fn run) {
    static const char *inputs[] = {"src", "enc", "zst"};
    static const struct { const char *label; tzr_comm_mode mode; size_t chunk; } whole[] = {
        {"independent", TZR_COMM_INDEPENDENT, 0},          {"broadcast", TZR_COMM_BROADCAST, 65536},
        {"broadcast_1chunk", TZR_COMM_BROADCAST, 64 << 20}, {"broadcast_odd_chunk", TZR_COMM_BROADCAST, 100003},
        {"allgather", TZR_COMM_ALLGATHER, 65536},          {"allgather_1chunk", TZR_COMM_ALLGATHER, 64 << 20},
        {"allgather_odd_chunk", TZR_COMM_ALLGATHER, 100003}, {"sharded_plain_file", TZR_COMM_SHARDED, 0},
    };
    int bad = 0;
    for (int k = 0; k < 3; k++) {
        char src[600], man[700], n[64];
        paths(dir, inputs[k], src, sizeof src, man, sizeof man);
        for (size_t m = 0; m < sizeof whole / sizeof whole[0]; m++) {
            snprintf(n, sizeof n, "%s_%s", whole[m].label, inputs[k]);
            bad |= run(c, n, src, whole[m].mode, whole[m].chunk, 0);
        }
        if (k < 2) { /* shard sets: plain and encrypted */
            snprintf(n, sizeof n, "independent_manifest_%s", inputs[k]);
            bad |= run(c, n, man, TZR_COMM_INDEPENDENT, 0, 0);
            snprintf(n, sizeof n, "sharded_%s", inputs[k]);
            bad |= run(c, n, man, TZR_COMM_SHARDED, 0, 1);
        }
    }
    return bad;
}

static int check(const char *dir) {
    MPI_Comm world = MPI_COMM_WORLD;
    tzr_comm *c = NULL;
    if (tzr_comm_open(&c, &world)) {
        fprintf(stderr, "rank %d: %s\n", rank, tzr_last_error());
        if (tzr_last_error_code() == TZR_ENOTSUP && rank == 0) printf("SKIP mpi: %s\n", tzr_last_error());
        return tzr_last_error_code() == TZR_ENOTSUP ? 77 : 1;
    }
    int bad = 0;
    bad |= every_input(c, dir, run_mode);
    /* Without a GPU stack: TZR_ENODEV on every rank. */
    char src[600];
    snprintf(src, sizeof src, "%s/src.tensors", dir);
    tzr_device_result *dl = NULL;
    int rc = tzr_comm_load_device(c, src, NULL, 0, &dl, NULL), rcs[64] = {0};
    MPI_Gather(&rc, 1, MPI_INT, rcs, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        int nodev = 1, ok = 1;
        for (int q = 0; q < size; q++) nodev &= rcs[q] == TZR_ENODEV, ok &= rcs[q] == 0;
        if (nodev) printf("PASS device_enodev_np%d\n", size);
        else if (ok) printf("PASS device_present_np%d\n", size);
        else printf("FAIL device_np%d: ranks disagree or failed (rank 0: %s)\n", size, tzr_strerror(rcs[0])), bad = 1;
    }
    tzr_device_result_free(dl);
    if (rc && rank == 0) fprintf(stderr, "device: %s\n", tzr_last_error());
    tzr_comm_free(c);
    return bad;
}

/* ------------------------------------------------------------ device */
/* The fake runtime's calls the test needs: copy back, count allocations. */
static int (*dev_memcpy)(void *, const void *, size_t, int);
static int (*dev_live)(int pinned);
static int (*nccl_live)(void);

static int device_digest(const tzr_device_result *res, uint64_t *h) {
    *h = 0xcbf29ce484222325ull;
    for (size_t i = 0; res && i < res->count; i++) {
        uint64_t n = res->pieces[i].nbytes;
        uint8_t *b = malloc(n ? (size_t)n : 1);
        if (!b || (n && dev_memcpy(b, res->pieces[i].data, (size_t)n, 2))) {
            free(b);
            return 1;
        }
        *h = fnv(*h, b, n);
        free(b);
    }
    return 0;
}

static int run_device(tzr_comm *c, const char *name, const char *path, tzr_comm_mode mode, size_t chunk, int sharded) {
    tzr_comm_load_options o = TZR_COMM_LOAD_OPTIONS_INIT;
    o.mode = mode;
    o.chunk_bytes = chunk;
    o.window = 3;
    o.timeout_s = 60;
    if (strstr(name, "enc")) o.crypt.key = KEY;
    tzr_device_result *res = NULL;
    int rc = tzr_comm_load_device(c, path, &o, 0, &res, NULL);
    if (rc) fprintf(stderr, "rank %d %s: %s\n", rank, name, tzr_last_error());
    uint64_t digest = 0, count = res ? res->count : 0;
    int copy_bad = device_digest(res, &digest);
    tzr_device_result_free(res);
    uint64_t left = (uint64_t)dev_live(0) + (uint64_t)dev_live(1) + (uint64_t)nccl_live();
    char label[96];
    snprintf(label, sizeof label, "device_%s", name);
    return report(label, rc, digest, count, copy_bad, left, sharded);
}

/* A device failure case: the failing rank returns want, the others
 * TZR_ECOMM naming it; nothing is left allocated anywhere. */
static int fail_device(tzr_comm *c, const char *name, const char *path, tzr_comm_mode mode, int fail_rank, int want) {
    tzr_comm_load_options o = TZR_COMM_LOAD_OPTIONS_INIT;
    o.mode = mode;
    o.chunk_bytes = 65536;
    o.timeout_s = 30;
    tzr_device_result *res = NULL;
    double t0 = MPI_Wtime();
    int rc = tzr_comm_load_device(c, path, &o, 0, &res, NULL);
    double dt = MPI_Wtime() - t0;
    char label[96];
    snprintf(label, sizeof label, "device_fail_%s", name);
    int none_left = res == NULL; /* a failed load hands out no result */
    tzr_device_result_free(res);
    none_left &= dev_live(0) == 0 && dev_live(1) == 0 && nccl_live() == 0;
    return fail_verdict(label, rc, fail_rank, want, none_left, dt);
}

static int device(const char *dir) {
    const char *rt = getenv("TZR_CUDART"), *nc = getenv("TZR_NCCL");
    void *h = rt ? dlopen(rt, RTLD_NOW) : NULL, *hn = nc ? dlopen(nc, RTLD_NOW) : NULL;
    if (h) *(void **)&dev_memcpy = dlsym(h, "cudaMemcpy"), *(void **)&dev_live = dlsym(h, "fake_cuda_live");
    if (hn) *(void **)&nccl_live = dlsym(hn, "fake_nccl_live");
    if (!dev_memcpy || !dev_live || !nccl_live) {
        if (rank == 0) printf("FAIL device_setup: TZR_CUDART and TZR_NCCL must name the fake runtime and NCCL\n");
        return 1;
    }
    tzr_comm *c = NULL;
    if (tzr_comm_open(&c, NULL)) {
        fprintf(stderr, "rank %d: %s\n", rank, tzr_last_error());
        return 1;
    }
    int bad = 0;
    bad |= every_input(c, dir, run_device);
    char bad_path[600], missing[600];
    snprintf(bad_path, sizeof bad_path, "%s/bad.tensors", dir);
    snprintf(missing, sizeof missing, "%s/nope.tensors", dir);
    char src[600];
    snprintf(src, sizeof src, "%s/src.tensors", dir);
    bad |= fail_device(c, "broadcast_hash", bad_path, TZR_COMM_BROADCAST, 0, TZR_EHASH);
    /* big.weight (the corrupted tensor) spans every rank's part at np 2 and
     * 3; each rank verifies the tensors its part touches whole, and the
     * agreement names the lowest failing rank */
    bad |= fail_device(c, "allgather_hash", bad_path, TZR_COMM_ALLGATHER, 0, TZR_EHASH);
    bad |= fail_device(c, "broadcast_missing_root", rank == 0 ? missing : src, TZR_COMM_BROADCAST, 0, TZR_ENOTFOUND);
    bad |= fail_device(c, "independent_missing", rank == size - 1 ? missing : src, TZR_COMM_INDEPENDENT, size - 1,
                       TZR_ENOTFOUND);
    tzr_comm_free(c);
    return bad;
}

/* A failure case: rank fail_rank (or all, -1) fails with want; every
 * other rank must return TZR_ECOMM naming it. */
static int fail_case(tzr_comm *c, const char *name, const char *path, tzr_comm_mode mode, int fail_rank, int want) {
    tzr_comm_load_options o = TZR_COMM_LOAD_OPTIONS_INIT;
    o.mode = mode;
    o.chunk_bytes = 65536;
    o.timeout_s = 30;
    tzr_shard_result *res = NULL;
    double t0 = MPI_Wtime();
    int rc = tzr_comm_load(c, path, &o, &res, NULL);
    double dt = MPI_Wtime() - t0;
    char label[96];
    snprintf(label, sizeof label, "fail_%s", name);
    int none_left = res == NULL;
    tzr_shard_result_free(res);
    /* the communicator is still usable after an agreed failure */
    return fail_verdict(label, rc, fail_rank, want, none_left, dt);
}

static int fail(const char *dir) {
    char src[600], bad[600], man[700], badman[700], missing[700];
    snprintf(src, sizeof src, "%s/src.tensors", dir);
    snprintf(bad, sizeof bad, "%s/bad.tensors", dir);
    snprintf(man, sizeof man, "%s/s8/model%s", dir, TZR_SHARD_MANIFEST_SUFFIX);
    snprintf(badman, sizeof badman, "%s/s8bad/model%s", dir, TZR_SHARD_MANIFEST_SUFFIX);
    snprintf(missing, sizeof missing, "%s/nope.tensors", dir);
    tzr_comm *c = NULL;
    if (tzr_comm_open(&c, NULL)) { /* MPI already initialised: library uses MPI_COMM_WORLD */
        fprintf(stderr, "rank %d: %s\n", rank, tzr_last_error());
        return 1;
    }
    int badc = 0, last = size - 1;
    /* a rank-specific missing file */
    badc |= fail_case(c, "independent_missing", rank == last ? missing : src, TZR_COMM_INDEPENDENT, last, TZR_ENOTFOUND);
    badc |= fail_case(c, "sharded_missing_manifest", rank == 1 ? missing : man, TZR_COMM_SHARDED, 1, TZR_ENOTFOUND);
    /* hash mismatches: rank 0 reads it (broadcast); every rank whose part
     * big.weight touches verifies it whole (allgather: all of them here),
     * and the agreement names the lowest failing rank */
    badc |= fail_case(c, "broadcast_hash", bad, TZR_COMM_BROADCAST, 0, TZR_EHASH);
    badc |= fail_case(c, "allgather_hash", bad, TZR_COMM_ALLGATHER, 0, TZR_EHASH);
    /* shard 0 corrupted: only the rank reading shard 0's big.weight fails */
    badc |= fail_case(c, "sharded_hash", badman, TZR_COMM_SHARDED, 0, TZR_EHASH);
    badc |= fail_case(c, "broadcast_missing_root", rank == 0 ? missing : src, TZR_COMM_BROADCAST, 0, TZR_ENOTFOUND);
    tzr_comm_free(c);
    return badc;
}

static int corrupt(const char *path, const char *name, size_t name_len) {
    tzr_reader *r = NULL;
    size_t idx;
    if (tzr_reader_open(&r, path, NULL) || tzr_reader_find(r, name, name_len, &idx)) return 1;
    uint64_t off = tzr_reader_tensor(r, idx)->data_offset + 7;
    tzr_reader_free(r);
    FILE *f = fopen(path, "r+b");
    if (!f) return 1;
    fseek(f, (long)off, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, (long)off, SEEK_SET);
    fputc(ch ^ 0xA5, f);
    return fclose(f) != 0;
}

static int setup(const char *dir) {
    char src[600], pre[700], cmd[2000];
    snprintf(src, sizeof src, "%s/src.tensors", dir);
    snprintf(pre, sizeof pre, "%s/s8", dir);
    mkdir(pre, 0755);
    snprintf(pre, sizeof pre, "%s/s8/model", dir);
    tzr_reader *r = NULL;
    int rc = sm_write(src);
    if (!rc) rc = tzr_reader_open(&r, src, NULL);
    if (!rc) rc = tzr_shard_split(r, pre, 8, SM_RULES, NULL);
    /* encrypted and compressed copies, and an encrypted shard set */
    char path[700];
    tzr_writer_options enc = TZR_WRITER_OPTIONS_INIT, zst = TZR_WRITER_OPTIONS_INIT;
    enc.crypt.key = KEY;
    zst.compression = TZR_COMPRESSION_ZSTD;
    zst.frame_size = 65536; /* several frames per large tensor */
    snprintf(path, sizeof path, "%s/enc.tensors", dir);
    if (!rc) rc = sm_write_with(path, &enc);
    snprintf(path, sizeof path, "%s/zst.tensors", dir);
    if (!rc) rc = sm_write_with(path, &zst);
    tzr_shard_split_options so = TZR_SHARD_SPLIT_OPTIONS_INIT;
    so.file = &enc;
    snprintf(path, sizeof path, "%s/e8", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/e8/model", dir);
    if (!rc) rc = tzr_shard_split(r, path, 8, SM_RULES, &so);
    tzr_reader_free(r);
    if (rc) {
        fprintf(stderr, "setup: %s\n", tzr_last_error());
        return 1;
    }
    snprintf(cmd, sizeof cmd, "cp '%s/src.tensors' '%s/bad.tensors' && rm -rf '%s/s8bad' && cp -r '%s/s8' '%s/s8bad'",
             dir, dir, dir, dir, dir);
    if (system(cmd) != 0) return 1;
    char bad[600], shard0[700];
    snprintf(bad, sizeof bad, "%s/bad.tensors", dir);
    snprintf(shard0, sizeof shard0, "%s/s8bad/model-rank-00000-of-00008.tensors", dir);
    return corrupt(bad, SM_S("big.weight")) || corrupt(shard0, SM_S("big.weight"));
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: mpi_load setup|check|fail|kill DIR\n");
        return 2;
    }
    if (strcmp(argv[1], "setup") == 0) return setup(argv[2]);
    /* The fake NCCL runs its collectives on the fake streams' threads. */
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int rc = 2;
    if (strcmp(argv[1], "check") == 0) rc = check(argv[2]);
    else if (strcmp(argv[1], "fail") == 0) rc = fail(argv[2]);
    else if (strcmp(argv[1], "device") == 0) rc = provided < MPI_THREAD_MULTIPLE ? 1 : device(argv[2]);
    else if (strcmp(argv[1], "kill") == 0) {
        tzr_comm *c = NULL;
        if (tzr_comm_open(&c, NULL)) return 1;
        if (rank == 1) raise(SIGKILL);
        char src[600];
        snprintf(src, sizeof src, "%s/src.tensors", argv[2]);
        tzr_comm_load_options o = TZR_COMM_LOAD_OPTIONS_INIT;
        o.mode = TZR_COMM_BROADCAST;
        o.timeout_s = 20;
        tzr_shard_result *res = NULL;
        rc = tzr_comm_load(c, src, &o, &res, NULL) ? 1 : 0;
        fprintf(stderr, "rank %d survived the kill: %s\n", rank, tzr_last_error());
        tzr_shard_result_free(res);
        tzr_comm_free(c);
    }
    MPI_Finalize();
    return rc;
}
