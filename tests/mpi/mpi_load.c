/* Driven by tests/mpi_test.sh under mpirun. Every rank loads with each
 * mode, hashes what it got, and rank 0 compares every rank's digest with
 * the digest the generator (shard_model.h) gives for that rank's slices;
 * failure cases check every rank returns an error, the failing one its
 * own and the others TZR_ECOMM naming it. Rank 0 prints PASS/FAIL lines.
 *   mpi_load setup DIR      (no mpirun) write DIR/src.tensors, its 8-shard
 *                           split DIR/s8 and corrupted copies
 *   mpi_load check DIR      every mode, byte-identical results
 *   mpi_load fail DIR       failure cases
 *   mpi_load kill DIR       rank 1 dies before the load (mpirun must abort) */
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

static int run_mode(tzr_comm *c, const char *name, const char *path, tzr_comm_mode mode, size_t chunk, int sharded) {
    tzr_comm_load_options o = TZR_COMM_LOAD_OPTIONS_INIT;
    o.mode = mode;
    o.chunk_bytes = chunk;
    o.timeout_s = 60;
    tzr_shard_result *res = NULL;
    tzr_comm_stats st;
    int rc = tzr_comm_load(c, path, &o, &res, &st);
    if (rc) fprintf(stderr, "rank %d %s: %s\n", rank, name, tzr_last_error());
    uint64_t mine[2] = {result_digest(res), (uint64_t)(res ? res->count : 0)}, *all = NULL;
    if (rank == 0) all = malloc(sizeof mine * (size_t)size);
    MPI_Gather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    int rcs[64] = {0};
    MPI_Gather(&rc, 1, MPI_INT, rcs, 1, MPI_INT, 0, MPI_COMM_WORLD);
    int bad = 0;
    if (rank == 0) {
        char why[256] = "";
        for (int q = 0; q < size && !bad; q++) {
            if (rcs[q]) bad = snprintf(why, sizeof why, "rank %d returned %s", q, tzr_strerror(rcs[q]));
            else if (all[2 * q + 1] != SM_COUNT) bad = snprintf(why, sizeof why, "rank %d got %llu tensors", q, (unsigned long long)all[2 * q + 1]);
            else if (all[2 * q] != expected_digest(q, sharded))
                bad = snprintf(why, sizeof why, "rank %d bytes differ from the generator", q);
        }
        if (bad) printf("FAIL %s_np%d: %s\n", name, size, why);
        else printf("PASS %s_np%d\n", name, size);
        fflush(stdout);
        free(all);
    }
    tzr_shard_result_free(res);
    return bad;
}

static int check(const char *dir) {
    char src[600], man[700];
    snprintf(src, sizeof src, "%s/src.tensors", dir);
    snprintf(man, sizeof man, "%s/s8/model%s", dir, TZR_SHARD_MANIFEST_SUFFIX);
    MPI_Comm world = MPI_COMM_WORLD;
    tzr_comm *c = NULL;
    if (tzr_comm_open(&c, &world)) {
        fprintf(stderr, "rank %d: %s\n", rank, tzr_last_error());
        if (tzr_last_error_code() == TZR_ENOTSUP && rank == 0) printf("SKIP mpi: %s\n", tzr_last_error());
        return tzr_last_error_code() == TZR_ENOTSUP ? 77 : 1;
    }
    int bad = 0;
    bad |= run_mode(c, "independent", src, TZR_COMM_INDEPENDENT, 0, 0);
    bad |= run_mode(c, "independent_manifest", man, TZR_COMM_INDEPENDENT, 0, 0);
    bad |= run_mode(c, "broadcast", src, TZR_COMM_BROADCAST, 65536, 0);
    bad |= run_mode(c, "broadcast_1chunk", src, TZR_COMM_BROADCAST, 64 << 20, 0);
    bad |= run_mode(c, "allgather", src, TZR_COMM_ALLGATHER, 65536, 0);
    bad |= run_mode(c, "allgather_odd_chunk", src, TZR_COMM_ALLGATHER, 100003, 0);
    bad |= run_mode(c, "sharded", man, TZR_COMM_SHARDED, 0, 1);
    bad |= run_mode(c, "sharded_plain_file", src, TZR_COMM_SHARDED, 0, 0);
    /* NCCL/GPU: TZR_ENODEV on every rank where there is none */
    tzr_shard_result *dl = NULL;
    int rc = tzr_comm_load_device(c, src, NULL, 0, &dl), rcs[64] = {0};
    MPI_Gather(&rc, 1, MPI_INT, rcs, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        int nodev = 1, ok = 1;
        for (int q = 0; q < size; q++) nodev &= rcs[q] == TZR_ENODEV, ok &= rcs[q] == 0;
        if (nodev) printf("PASS device_enodev_np%d\n", size);
        else if (ok) printf("PASS device_nccl_np%d\n", size);
        else printf("FAIL device_np%d: ranks disagree or failed (rank 0: %s)\n", size, tzr_strerror(rcs[0])), bad = 1;
    }
    if (rc == 0) tzr_comm_device_free(dl);
    if (rc && rank == 0) fprintf(stderr, "device: %s\n", tzr_last_error());
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
    char tag[32];
    snprintf(tag, sizeof tag, "rank %d failed", fail_rank);
    int ok = fail_rank < 0 || rank == fail_rank ? rc == want
                                                : rc == TZR_ECOMM && strstr(tzr_last_error(), tag) != NULL;
    fprintf(stderr, "rank %d %s: rc %d in %.2fs: %s\n", rank, name, rc, dt, tzr_last_error());
    tzr_shard_result_free(res);
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) {
        if (all_ok) printf("PASS fail_%s_np%d\n", name, size);
        else printf("FAIL fail_%s_np%d: some rank returned the wrong code or message (see stderr)\n", name, size);
        fflush(stdout);
    }
    /* the communicator is still usable after an agreed failure */
    return !all_ok;
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
    /* hash mismatches: rank 0 reads it (broadcast); its owner verifies (allgather) */
    badc |= fail_case(c, "broadcast_hash", bad, TZR_COMM_BROADCAST, 0, TZR_EHASH);
    badc |= fail_case(c, "allgather_hash", bad, TZR_COMM_ALLGATHER, 6 % size, TZR_EHASH);
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
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int rc = 2;
    if (strcmp(argv[1], "check") == 0) rc = check(argv[2]);
    else if (strcmp(argv[1], "fail") == 0) rc = fail(argv[2]);
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
