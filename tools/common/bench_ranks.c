/* Multi-rank load benchmark (see bench_ranks.h). Uses only the public
 * libtzr API, so it links into every tool without MPI headers. */
#include "bench_ranks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "tzr_comm.h"
#include "tzr_load.h"

/* Rank 0: f32 tensors [rows, 256], rows a multiple of 24 (splits evenly
 * over 1, 2, 3, 4, 6, 8 ranks), pseudo-random data. */
static int generate(const char *path, uint64_t size, int ntensors) {
    uint64_t row = 256 * 4, rows = size / (uint64_t)ntensors / row / 24 * 24;
    if (rows == 0) rows = 24;
    uint64_t nbytes = rows * row;
    uint64_t *data = malloc(nbytes);
    if (!data) return tzr_set_error(TZR_ENOMEM, "out of memory");
    tzr_writer *w;
    int rc = tzr_writer_open(&w, path, NULL);
    /* Every tensor is known up front: reserve exactly their index (an
     * MoE-sized --tensors would overflow tensorizer's 256 KiB default). */
    uint64_t name_bytes = 0;
    size_t dtype_len = 0;
    tzr_dtype_string(TZR_DTYPE_F32, &dtype_len);
    for (int t = 0; t < ntensors; t++) name_bytes += (uint64_t)snprintf(NULL, 0, "layers.%d.weight", t);
    if (!rc) rc = tzr_writer_reserve(w, (uint64_t)ntensors, name_bytes,
                                     (uint64_t)ntensors * dtype_len,
                                     2 * (uint64_t)ntensors, (uint64_t)ntensors * nbytes);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int t = 0; t < ntensors && !rc; t++) {
        for (uint64_t k = 0; k < nbytes / 8; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            data[k] = x;
        }
        char name[64];
        snprintf(name, sizeof name, "layers.%d.weight", t);
        uint64_t shape[2] = {rows, 256};
        tzr_tensor_desc d = {name, strlen(name), TZR_PARAM, 0, NULL, 0, TZR_DTYPE_F32, 2, shape, 0, sizeof(tzr_tensor_desc)};
        rc = tzr_writer_add(w, &d, data);
    }
    free(data);
    if (rc) {
        tzr_writer_abort(w);
        return rc;
    }
    return tzr_writer_close(w);
}

static int prepare(tzr_comm *c, const char *file, const char *prefix, uint64_t size, int ntensors) {
    int rc = 0;
    if (tzr_comm_rank(c) == 0) {
        struct stat st;
        char man[4200];
        snprintf(man, sizeof man, "%s%s", prefix, TZR_SHARD_MANIFEST_SUFFIX);
        if (stat(file, &st) != 0 || (uint64_t)st.st_size < size / 2 || (uint64_t)st.st_size > size * 2)
            rc = generate(file, size, ntensors), unlink(man);
        tzr_reader *r = NULL;
        if (!rc && stat(man, &st) != 0 && !(rc = tzr_reader_open(&r, file, NULL)))
            rc = tzr_shard_split(r, prefix, tzr_comm_size(c), NULL, NULL);
        tzr_reader_free(r);
    }
    return tzr_comm_agree(c, rc);
}

typedef struct row {
    char label[48];
    double seconds, per_rank, total;
} row;

/* The baseline: rank 0 alone loads the file with tzr_load into host
 * memory (what every mode is compared with), the others wait. */
static int single_file(tzr_comm *c, const char *file, int verify, double *seconds, double *bytes) {
    int rc = 0;
    *seconds = 0, *bytes = 0;
    if (tzr_comm_rank(c) == 0) {
        tzr_reader *r = NULL;
        tzr_sink *sink = NULL;
        tzr_load_options lo = TZR_LOAD_OPTIONS_INIT;
        lo.verify = verify;
        tzr_load_stats st = {0};
        double t0 = cli_now();
        rc = tzr_reader_open(&r, file, NULL);
        if (!rc) rc = tzr_sink_host_new(&sink, NULL, NULL);
        if (!rc) rc = tzr_load(r, sink, &lo, &st);
        *seconds = cli_now() - t0;
        *bytes = (double)st.bytes;
        tzr_sink_free(sink);
        tzr_reader_free(r);
    }
    rc = tzr_comm_agree(c, rc);
    if (!rc) rc = tzr_comm_max(c, seconds);
    if (!rc) rc = tzr_comm_max(c, bytes);
    return rc;
}

int bench_ranks_main(int argc, char **argv) {
    uint64_t size = (uint64_t)512 << 20, chunk = 0;
    const char *file = "/tmp/tzr-bench-ranks.tensors", *modes = "independent,broadcast,allgather,sharded";
    int ntensors = 64, reps = 1, json = 0, keep = 0, verify = 1, device = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--ranks")) continue;
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--keep")) keep = 1;
        else if (!strcmp(a, "--no-verify")) verify = 0;
        else if (v && !strcmp(a, "--device")) {
            if (cli_int("--device", v, 0, 1024, &device)) return EXIT_USAGE;
            i++;
        }
        else if (v && !strcmp(a, "--size")) {
            if (cli_bytes("--size", v, 1, (uint64_t)1 << 44, &size)) return EXIT_USAGE;
            i++;
        } else if (v && !strcmp(a, "--file")) file = v, i++;
        else if (v && !strcmp(a, "--tensors")) {
            if (cli_int("--tensors", v, 1, 1000000, &ntensors)) return EXIT_USAGE;
            i++;
        } else if (v && !strcmp(a, "--chunk")) {
            if (cli_bytes("--chunk", v, 4096, (uint64_t)1 << 32, &chunk)) return EXIT_USAGE;
            i++;
        } else if (v && !strcmp(a, "--reps")) {
            if (cli_int("--reps", v, 1, 1000, &reps)) return EXIT_USAGE;
            i++;
        }
        else if (v && !strcmp(a, "--modes")) modes = v, i++;
        else {
            fprintf(stderr, "bench --ranks: unknown option '%s'\n", a);
            return EXIT_USAGE;
        }
    }
    if (!size || ntensors < 1 || reps < 1) {
        fprintf(stderr, "bench --ranks: bad --size, --tensors or --reps\n");
        return EXIT_USAGE;
    }
    tzr_comm *c = NULL;
    int rc = tzr_comm_open(&c, NULL);
    if (rc) {
        fprintf(stderr, "bench --ranks: %s\n", tzr_last_error());
        return EXIT_FAIL;
    }
    int me = tzr_comm_rank(c), n = tzr_comm_size(c);
    char prefix[4096], manifest[4200];
    snprintf(prefix, sizeof prefix, "%s.n%d", file, n);
    snprintf(manifest, sizeof manifest, "%s%s", prefix, TZR_SHARD_MANIFEST_SUFFIX);
    if ((rc = prepare(c, file, prefix, size, ntensors))) {
        if (me == 0) fprintf(stderr, "bench --ranks: %s\n", tzr_last_error());
        tzr_comm_free(c);
        return EXIT_FAIL;
    }
    row rows[2 * TZR_COMM_MODES + 4];
    int nrows = 0;
    double base = 0, bytes0 = 0, h2d = 0;
    for (int r = 0; r < reps && !rc; r++) {
        double t, b;
        if (!(rc = single_file(c, file, verify, &t, &b)) && (!base || t < base)) base = t, bytes0 = b;
    }
    if (!rc) {
        rows[nrows] = (row){"", base, bytes0 / base / 1e9, bytes0 / base / 1e9};
        snprintf(rows[nrows++].label, sizeof rows[0].label, "single file, rank 0 alone");
    }
    if (!rc && device >= 0 && tzr_cuda_h2d_bandwidth(device, (size_t)256 << 20, 5, &h2d)) h2d = 0;
    char list[256];
    snprintf(list, sizeof list, "%s", modes);
    /* host modes, then (with --device) the same into GPU memory; broadcast
     * also as one chunk (read everything, then send: no overlap) */
    for (int dev = 0; dev < (device >= 0 ? 2 : 1) && !rc; dev++) {
        snprintf(list, sizeof list, "%s", modes);
        char *save = NULL;
        for (char *tok = strtok_r(list, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
            tzr_comm_mode m;
            if ((rc = tzr_comm_mode_parse(tok, &m))) break;
            for (int sync = 0; sync < (m == TZR_COMM_BROADCAST ? 2 : 1) && !rc; sync++) {
                tzr_comm_load_options o = TZR_COMM_LOAD_OPTIONS_INIT;
                o.mode = m;
                o.chunk_bytes = sync ? (size_t)1 << 30 : chunk;
                o.verify = verify;
                double best = 0, bytes = 0;
                for (int r = 0; r < reps && !rc; r++) {
                    tzr_shard_result *res = NULL;
                    tzr_device_result *dres = NULL;
                    tzr_comm_stats st = {0};
                    tzr_comm_barrier(c);
                    double t0 = cli_now();
                    const char *path = m == TZR_COMM_SHARDED ? manifest : file;
                    rc = dev ? tzr_comm_load_device(c, path, &o, device, &dres, &st)
                             : tzr_comm_load(c, path, &o, &res, &st);
                    double dt = cli_now() - t0;
                    tzr_comm_max(c, &dt);
                    if (!best || dt < best) best = dt, bytes = (double)st.bytes;
                    tzr_shard_result_free(res);
                    tzr_device_result_free(dres);
                }
                if (rc) break;
                double total = bytes;
                tzr_comm_sum(c, &total);
                double mine = bytes;
                tzr_comm_max(c, &mine);
                row *w = &rows[nrows++];
                *w = (row){"", best, mine / best / 1e9, total / best / 1e9};
                snprintf(w->label, sizeof w->label, "%s%s%s", dev ? "device " : "", tzr_comm_mode_name(m),
                         sync ? " (one chunk)" : "");
            }
        }
    }
    if (rc && me == 0) fprintf(stderr, "bench --ranks: %s\n", tzr_last_error());
    if (!rc && me == 0) {
        if (json) printf("[");
        else {
            printf("%d rank(s), %s, %s%s\n", n, verify ? "hashes checked" : "no hash checks",
                   device >= 0 ? "device rows on GPU " : "host memory", device >= 0 ? "" : "");
            if (h2d > 0) printf("pinned cudaMemcpy host-to-device: %.2f GB/s (the device rows' floor)\n", h2d);
            printf("| ranks | mode | seconds | GB/s per rank | GB/s total | time vs single file |\n");
            printf("|---|---|---|---|---|---|\n");
        }
        for (int i = 0; i < nrows; i++) {
            const row *w = &rows[i];
            if (json)
                printf("%s{\"ranks\":%d,\"mode\":\"%s\",\"seconds\":%.4f,\"gbps_per_rank\":%.3f,\"gbps_total\":%.3f,"
                       "\"vs_single_file\":%.3f}",
                       i ? "," : "", n, w->label, w->seconds, w->per_rank, w->total, w->seconds / base);
            else
                printf("| %d | %s | %.3f | %.2f | %.2f | %.2fx |\n", n, w->label, w->seconds, w->per_rank, w->total,
                       w->seconds / base);
        }
        if (json) printf("]\n");
        fflush(stdout);
    }
    if (!keep && me == 0) {
        char cmd[9000];
        snprintf(cmd, sizeof cmd, "rm -f '%s'-rank-*-of-*.tensors '%s'", prefix, manifest);
        if (system(cmd) != 0) { /* best effort */ }
    }
    tzr_comm_free(c);
    return rc ? EXIT_FAIL : EXIT_OK;
}
