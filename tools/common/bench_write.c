/* Write benchmark (see bench_write.h). Public API only. */
#include "bench_write.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tzr_safetensors.h"
#include "tzr_shard.h"

enum { FLOOR, ADD_FROM, DIRECT, ADD_MEMORY, ADD_BORROWED, ENCRYPTED, COMPRESSED, SHARDS2, NCASES };
static const char *case_names[NCASES] = {"floor: read+write+fsync (dd)", "tzr_writer_add_from (tensorize)",
                                         "add_from, O_DIRECT (--direct)",
                                         "tzr_writer_add from memory", "tzr_writer_add_borrowed (python)",
                                         "add_from, encrypted",
                                         "add_from, zstd level 1", "2 shards, splitter add_from (--shards 2)"};

static int in_mem(int k) { return k == ADD_MEMORY || k == ADD_BORROWED; }

static int floor_copy(const char *in, const char *out) {
    int fi = open(in, O_RDONLY), fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    size_t cap = (size_t)8 << 20;
    char *buf = malloc(cap);
    int rc = fi < 0 || fo < 0 || !buf;
    for (ssize_t n; !rc && (n = read(fi, buf, cap)) > 0;)
        if (write(fo, buf, (size_t)n) != n) rc = 1;
    if (!rc && fsync(fo) != 0) rc = 1;
    if (fi >= 0) close(fi);
    if (fo >= 0) close(fo);
    free(buf);
    return rc;
}

/* Runs one case; returns 0 and the seconds of the timed part. */
static int run_case(int k, const char *in, const char *out, const uint8_t *key, double *secs) {
    if (k == FLOOR) {
        double t0 = cli_now();
        int rc = floor_copy(in, out);
        *secs = cli_now() - t0;
        return rc;
    }
    tzr_st_file *f = NULL;
    int rc = tzr_st_open(&f, in);
    if (rc) return rc;
    size_t n = tzr_st_count(f);
    void **mem = NULL;
    int in_memory = in_mem(k);
    if (in_memory) { /* the tensors in the caller's memory, as after training */
        mem = calloc(n ? n : 1, sizeof *mem);
        for (size_t i = 0; mem && i < n; i++) {
            const tzr_st_tensor *t = tzr_st_get(f, i);
            if ((mem[i] = malloc(t->nbytes ? t->nbytes : 1))) memcpy(mem[i], tzr_st_data(f, i), t->nbytes);
        }
    }
    tzr_source *src = NULL;
    if (!rc && !in_memory) rc = tzr_source_open_file(&src, in, 0);
    tzr_writer_options wo = TZR_WRITER_OPTIONS_INIT;
    if (k == ENCRYPTED) wo.crypt.key = key;
    if (k == COMPRESSED) wo.compression = TZR_COMPRESSION_ZSTD;
    if (k == DIRECT) wo.direct = 1;
    double t0 = cli_now();
    tzr_writer *w = NULL;
    tzr_shard_splitter *sp = NULL;
    if (!rc && k == SHARDS2) rc = tzr_shard_splitter_open(&sp, out, 2, NULL, NULL);
    else if (!rc) rc = tzr_writer_open(&w, out, &wo);
    for (size_t i = 0; !rc && i < n; i++) {
        const tzr_st_tensor *t = tzr_st_get(f, i);
        tzr_tensor_desc d = {t->name, t->name_len, TZR_STATE_DICT, 0, NULL, 0, t->dtype, t->ndim, t->shape, 0, sizeof(tzr_tensor_desc)};
        rc = k == ADD_MEMORY     ? tzr_writer_add(w, &d, mem[i])
             : k == ADD_BORROWED ? tzr_writer_add_borrowed(w, &d, mem[i])
             : sp                ? tzr_shard_splitter_add_from(sp, &d, src, t->data_offset)
                                 : tzr_writer_add_from(w, &d, src, t->data_offset);
    }
    if (w) rc = rc ? (tzr_writer_abort(w), rc) : tzr_writer_close(w);
    if (sp) rc = rc ? (tzr_shard_splitter_abort(sp), rc) : tzr_shard_splitter_close(sp);
    *secs = cli_now() - t0;
    if (rc) fprintf(stderr, "bench --write: %s: %s\n", case_names[k], tzr_last_error());
    for (size_t i = 0; mem && i < n; i++) free(mem[i]);
    free(mem);
    if (src) src->destroy(src);
    tzr_st_free(f);
    return rc;
}

/* The output file, or the shard case's files and manifest at that prefix. */
static void remove_outputs(const char *out) {
    char name[4400];
    unlink(out);
    for (int k = 0; k < 2; k++)
        if (!tzr_shard_file_name(name, sizeof name, out, k, 2, ".tensors")) unlink(name);
    snprintf(name, sizeof name, "%s%s", out, TZR_SHARD_MANIFEST_SUFFIX);
    unlink(name);
    snprintf(name, sizeof name, "%s%s", out, TZR_SHARD_HASHES_SUFFIX);
    unlink(name);
}

typedef struct write_case {
    int k;
    const char *in, *out;
    const uint8_t *key;
} write_case;

static int child_case(void *ctx, void *out) {
    const write_case *wc = ctx;
    return run_case(wc->k, wc->in, wc->out, wc->key, out);
}

int bench_write_main(int argc, char **argv) {
    const char *in = NULL, *dir = "/tmp", *key_file = NULL;
    int repeat = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && !strcmp(a, "--write")) in = v, i++;
        else if (v && !strcmp(a, "--out")) dir = v, i++;
        else if (v && !strcmp(a, "--key-file")) key_file = v, i++;
        else if (v && !strcmp(a, "--repeat")) {
            if (cli_int("--repeat", v, 1, 100, &repeat)) return EXIT_USAGE;
            i++;
        } else {
            fprintf(stderr, "bench --write: unknown option '%s' (see tools/common/bench_write.h)\n", a);
            return EXIT_USAGE;
        }
    }
    if (!in) {
        fprintf(stderr, "bench --write: needs a .safetensors input (tzr-bench --make-sample makes one)\n");
        return EXIT_USAGE;
    }
    uint8_t key[32];
    FILE *kf = fopen(key_file ? key_file : "/dev/urandom", "rb");
    if (!kf || fread(key, 1, 32, kf) != 32) {
        fprintf(stderr, "bench --write: cannot read 32 key bytes from %s\n", key_file ? key_file : "/dev/urandom");
        if (kf) fclose(kf);
        return EXIT_USAGE;
    }
    fclose(kf);
    tzr_st_file *f = NULL;
    if (tzr_st_open(&f, in)) {
        fprintf(stderr, "bench --write: %s\n", tzr_last_error());
        return EXIT_FAIL;
    }
    uint64_t bytes = 0;
    for (size_t i = 0; i < tzr_st_count(f); i++) bytes += tzr_st_get(f, i)->nbytes;
    tzr_st_free(f);
    char out[4200];
    snprintf(out, sizeof out, "%s/tzr-bench-write-%d.tensors", dir, (int)getpid());
    double best[NCASES] = {0};
    long rss[NCASES] = {0};
    for (int rep = 0; rep < repeat; rep++)
        for (int k = 0; k < NCASES; k++) {
            write_case wc = {k, in, out, key};
            double s = 0;
            long kib = 0;
            int rc = 1;
            if (cli_run_child(child_case, &wc, &s, sizeof s, &rc, &kib) != CLI_CHILD_OK || rc) {
                fprintf(stderr, "bench --write: case '%s' failed\n", case_names[k]);
                remove_outputs(out);
                return EXIT_FAIL;
            }
            if (!best[k] || s < best[k]) best[k] = s;
            if (kib > rss[k]) rss[k] = kib;
            remove_outputs(out);
        }
    printf("%s: %.0f MiB of tensor data, best of %d, output in %s\n", in, bytes / 1048576.0, repeat, dir);
    printf("| case | seconds | GB/s | time vs floor | peak RSS MiB |\n|---|---|---|---|---|\n");
    for (int k = 0; k < NCASES; k++)
        printf("| %s | %.3f | %.2f | %.2fx | %ld%s |\n", case_names[k], best[k], bytes / best[k] / 1e9,
               best[k] / best[FLOOR], rss[k] / 1024, in_mem(k) ? " (holds the model)" : "");
    return EXIT_OK;
}
