/* Sharded checkpoints: split a checkpoint into N shards, reload as M ranks
 * (8->3, 3->8, 4->1, 8->8, rules on load), the per-rank writer with
 * explicit slices, a plain file as a one-shard set, and manifests that
 * disagree with their shards (refused naming the tensor or shard). Every
 * byte is compared with the generator (tests/mpi/shard_model.h). */
#include <dirent.h>
#include <dlfcn.h>
#include <jansson.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "fake_sink.h"
#include "mpi/shard_model.h"
#include "tzr_comm.h"
#include "tzr_http.h"
#include "tzr_load.h"
#include "tzr_shard.h"

static char src_path[256], dir8[256], dir3[256], dir4[256];

static void path_in(char *buf, size_t cap, const char *dir, const char *name) {
    snprintf(buf, cap, "%s/%s", dir, name);
}

static tzr_shard_set *open_set(const char *dir) {
    char m[1024];
    path_in(m, sizeof m, dir, "model" TZR_SHARD_MANIFEST_SUFFIX);
    tzr_shard_set *s = NULL;
    tzr_shard_open_options o = TZR_SHARD_OPEN_OPTIONS_INIT;
    int rc = tzr_shard_open(&s, m, &o);
    if (rc) check_fail("open %s: %s", m, tzr_last_error());
    return s;
}

/* Compare one rank's result with the generator; dims[i] is the target dim
 * (-1 whole) of tensor i. */
static void check_result(const tzr_shard_result *res, int rank, int nranks, const int *dims) {
    CHECK(res->count == SM_COUNT);
    for (size_t i = 0; i < SM_COUNT && i < res->count; i++) {
        const tzr_shard_piece *p = &res->pieces[i];
        int dim = nranks == 1 || SM[i].ndim == 0 ? -1 : dims[i];
        uint64_t off = 0, len = 0, nb;
        if (dim >= 0) sm_chunk(SM[i].shape[dim], nranks, rank, &off, &len);
        uint8_t *want = sm_expected(i, dim, off, len, &nb);
        CHECK(p->name_len == SM[i].name_len && memcmp(p->name, SM[i].name, p->name_len) == 0);
        CHECK(p->dim == dim && p->offset == off && p->length == len && p->nbytes == nb);
        if (p->nbytes == nb && memcmp(p->data, want, nb) != 0) {
            uint64_t k = 0;
            while (((uint8_t *)p->data)[k] == want[k]) k++;
            fprintf(stderr, "  rank %d/%d tensor %s: byte %llu differs (element %llu)\n", rank, nranks, SM[i].name,
                    (unsigned long long)k, (unsigned long long)(k / tzr_dtype_size(SM[i].dtype)));
            check_case_failed = 1;
        }
        free(want);
    }
}

static int default_dims[SM_COUNT];

static void load_all(const char *dir, int nranks, const char *rules, const int *dims) {
    tzr_shard_set *s = open_set(dir);
    if (!s) {
        check_case_failed = 1;
        return;
    }
    for (int r = 0; r < nranks; r++) {
        tzr_shard_result *res = NULL;
        CHECK_OK(tzr_shard_load_rank(s, r, nranks, rules, &res));
        if (res) check_result(res, r, nranks, dims);
        tzr_shard_result_free(res);
    }
    tzr_shard_close(s);
}

static void split_layout(void) {
    char m[1024], side[1024], prefix[1024];
    path_in(m, sizeof m, dir8, "model" TZR_SHARD_MANIFEST_SUFFIX);
    path_in(prefix, sizeof prefix, dir8, "model");
    CHECK(access(m, F_OK) == 0);
    for (int k = 0; k < 8; k++) {
        char path[1024];
        CHECK_OK(tzr_shard_file_name(side, sizeof side, prefix, k, 8, TZR_SHARD_PART_SUFFIX));
        CHECK(access(side, F_OK) != 0); /* sidecars merged and removed */
        CHECK_OK(tzr_shard_file_name(path, sizeof path, prefix, k, 8, ".tensors"));
        tzr_reader *r = NULL;
        tzr_reader_options o = TZR_READER_OPTIONS_INIT;
        o.verify = 1;
        CHECK_OK(tzr_reader_open(&r, path, &o)); /* a plain .tensors file */
        if (!r) continue;
        CHECK(tzr_reader_count(r) == SM_COUNT);
        for (size_t i = 0; i < SM_COUNT; i++) {
            size_t idx;
            CHECK_OK(tzr_reader_find(r, SM[i].name, SM[i].name_len, &idx));
            const tzr_tensor_info *t = tzr_reader_tensor(r, idx);
            uint64_t off = 0, len = 0, nb;
            if (SM[i].dim >= 0) sm_chunk(SM[i].shape[SM[i].dim], 8, k, &off, &len);
            for (uint32_t d = 0; d < SM[i].ndim; d++)
                CHECK(t->shape[d] == ((int)d == SM[i].dim ? len : SM[i].shape[d]));
            uint8_t *want = sm_expected(i, SM[i].dim, off, len, &nb), *got = malloc(nb ? nb : 1);
            CHECK(t->nbytes == nb);
            CHECK_OK(tzr_reader_read(r, idx, got, nb));
            CHECK(memcmp(got, want, nb) == 0);
            free(want);
            free(got);
        }
        tzr_reader_free(r);
    }
    tzr_shard_set *s = open_set(dir8);
    if (!s) return; /* open_set marked the case failed */
    CHECK(tzr_shard_nshards(s) == 8 && tzr_shard_count(s) == SM_COUNT);
    for (size_t i = 0; i < SM_COUNT; i++) {
        const tzr_shard_tensor *t = tzr_shard_tensor_at(s, i);
        CHECK(t->dim == SM[i].dim && t->ndim == SM[i].ndim && t->dtype == SM[i].dtype && t->has_sha256);
    }
    tzr_shard_close(s);
}

static void reload_8_to_3(void) { load_all(dir8, 3, NULL, default_dims); }
static void reload_8_to_8(void) { load_all(dir8, 8, NULL, default_dims); }
static void reload_3_to_8(void) { load_all(dir3, 8, NULL, default_dims); }
static void reload_4_to_1(void) { load_all(dir4, 1, NULL, default_dims); }
/* Resharding N->M into device memory: the fake CUDA runtime's buffers
 * (cudaMalloc'd per piece, every copy checked against live allocations)
 * through the CUDA table sink, read back with cudaMemcpy and compared
 * with the generator. */
static void reload_device(const char *dir, int nranks) {
    char fake[1024];
    const char *build = getenv("TZR_BUILD");
    snprintf(fake, sizeof fake, "%s/tests/libfakecudart.so", build ? build : "build");
    char *abs = realpath(fake, NULL);
    if (!abs) return check_fail("%s missing", fake);
    setenv("TZR_CUDART", abs, 1);
    void *lib = dlopen(abs, RTLD_NOW);
    free(abs);
    int (*dmalloc)(void **, size_t) = lib ? (int (*)(void **, size_t))dlsym(lib, "cudaMalloc") : NULL;
    int (*dfree)(void *) = lib ? (int (*)(void *))dlsym(lib, "cudaFree") : NULL;
    int (*dcopy)(void *, const void *, size_t, int) =
        lib ? (int (*)(void *, const void *, size_t, int))dlsym(lib, "cudaMemcpy") : NULL;
    int (*live)(int) = lib ? (int (*)(int))dlsym(lib, "fake_cuda_live") : NULL;
    if (!dmalloc || !dfree || !dcopy || !live) return check_fail("fake CUDA runtime not loadable");
    tzr_shard_set *s = open_set(dir);
    if (!s) return;
    for (int r = 0; r < nranks; r++) {
        tzr_shard_result *host = NULL; /* the layout (and bytes checked against the generator) */
        CHECK_OK(tzr_shard_load_rank(s, r, nranks, NULL, &host));
        if (!host) continue;
        check_result(host, r, nranks, default_dims);
        void **dev = calloc(host->count, sizeof *dev);
        uint64_t *lens = calloc(host->count, sizeof *lens);
        for (size_t i = 0; i < host->count; i++) {
            lens[i] = host->pieces[i].nbytes;
            CHECK(dmalloc(&dev[i], lens[i] ? lens[i] : 1) == 0);
        }
        tzr_sink *sink = NULL;
        CHECK_OK(tzr_sink_cuda_table_new(&sink, 0, dev, lens, host->count));
        if (sink) CHECK_OK(tzr_shard_load_rank_into(s, r, nranks, NULL, sink, NULL, NULL));
        tzr_sink_free(sink);
        for (size_t i = 0; i < host->count; i++) {
            uint8_t *back = malloc(lens[i] ? lens[i] : 1);
            CHECK(!lens[i] || dcopy(back, dev[i], lens[i], 2) == 0);
            CHECKF(memcmp(back, host->pieces[i].data, lens[i]) == 0, "rank %d/%d tensor %zu: device bytes differ", r,
                   nranks, i);
            free(back);
            CHECK(dfree(dev[i]) == 0);
        }
        free(dev);
        free(lens);
        tzr_shard_result_free(host);
    }
    tzr_shard_close(s);
    CHECK(live(0) == 0 && live(1) == 0); /* the sink freed its pinned staging */
}
static void reload_device_8_to_3(void) { reload_device(dir8, 3); }
static void reload_device_3_to_8(void) { reload_device(dir3, 8); }
static void reload_device_4_to_1(void) { reload_device(dir4, 1); }
static void reload_8_to_5(void) { load_all(dir8, 5, NULL, default_dims); }

static void rules_on_load(void) {
    int whole[SM_COUNT], dims[SM_COUNT];
    for (size_t i = 0; i < SM_COUNT; i++) whole[i] = -1, dims[i] = default_dims[i];
    load_all(dir8, 2, "*=replicate", whole);
    /* Reshard onto other dims: big.weight dim 0 -> 1, embed dim 1 -> 0,
     * the replicated norm -> dim 0, the 3-D tensor dim 1 -> 2. */
    dims[6] = 1, dims[0] = 0, dims[4] = 0, dims[8] = 2;
    load_all(dir8, 3, "big.weight=1,*embed*=0,*norm*=0,*\"w\"]=2", dims);
    tzr_shard_set *s = open_set(dir8);
    tzr_shard_result *res = NULL;
    CHECK_RC(tzr_shard_load_rank(s, 0, 2, "oops", &res), TZR_EINVAL);
    CHECK(strstr(tzr_last_error(), "oops") != NULL);
    CHECK_RC(tzr_shard_load_rank(s, 2, 2, NULL, &res), TZR_EINVAL);
    tzr_shard_close(s);
}

/* A plain file as a one-shard set, cut for 4 ranks. Without verification
 * only the rank's bytes are read; verification reads whole tensors, since
 * their hashes cover them whole. */
/* Any sink: the asynchronous fake (copies later, poisons fenced staging,
 * counts every byte's writes) gets the same bytes as the host result, each
 * exactly once, resharding 8 -> 3 and 3 -> 8 with and without verification
 * and with rules that move the split dims. */
static void load_into_async_sink(void) {
    const char *dirs[2] = {dir8, dir3};
    int nranks[2] = {3, 8};
    for (int k = 0; k < 2; k++)
        for (int verify = 0; verify < 2; verify++) {
            char m[1024];
            path_in(m, sizeof m, dirs[k], "model" TZR_SHARD_MANIFEST_SUFFIX);
            tzr_shard_set *s = NULL;
            tzr_shard_open_options oo = TZR_SHARD_OPEN_OPTIONS_INIT;
            oo.verify = verify;
            CHECK_OK(tzr_shard_open(&s, m, &oo));
            if (!s) continue;
            const char *rules = k ? "big.weight=1" : NULL;
            for (int r = 0; r < nranks[k]; r++) {
                tzr_shard_result *res = NULL;
                CHECK_OK(tzr_shard_load_rank(s, r, nranks[k], rules, &res));
                fake_sink *f = fake_sink_new(SM_COUNT);
                tzr_load_options lo = TZR_LOAD_OPTIONS_INIT;
                lo.chunk_bytes = 64 << 10;
                lo.threads = 3;
                tzr_load_stats st;
                CHECK_OK(tzr_shard_load_rank_into(s, r, nranks[k], rules, &f->base, &lo, &st));
                size_t bad = 0;
                for (size_t i = 0; res && i < res->count; i++) {
                    const tzr_shard_piece *p = &res->pieces[i];
                    if (f->len[i] != p->nbytes || (p->nbytes && memcmp(f->dst[i], p->data, p->nbytes))) bad++;
                    for (uint64_t b = 0; b < p->nbytes && f->writes[i]; b++) bad += f->writes[i][b] != 1;
                }
                CHECK(bad == 0 && f->violations == 0);
                CHECK(res && st.bytes == res->bytes);
                tzr_sink_free(&f->base);
                tzr_shard_result_free(res);
            }
            tzr_shard_close(s);
        }
}

static void plain_file_set(void) {
    for (int verify = 0; verify < 2; verify++) {
        tzr_shard_set *s = NULL;
        tzr_shard_open_options oo = TZR_SHARD_OPEN_OPTIONS_INIT;
        oo.verify = verify;
        CHECK_OK(tzr_shard_open(&s, src_path, &oo));
        if (!s) return;
        CHECK(tzr_shard_nshards(s) == 1 && tzr_shard_count(s) == SM_COUNT);
        int dims[SM_COUNT];
        for (size_t i = 0; i < SM_COUNT; i++) dims[i] = -1;
        dims[6] = 0, dims[1] = 1;
        for (int r = 0; r < 4; r++) {
            tzr_shard_result *res = NULL;
            CHECK_OK(tzr_shard_load_rank(s, r, 4, "big.weight=0,*attn*=1", &res));
            if (res) check_result(res, r, 4, dims);
            /* big.weight (2 MiB): only its quarter, or all of it */
            if (res && !verify) CHECK(res->bytes_read < 2048 * 1024 / 4 + 8192);
            if (res && verify) CHECK(res->bytes_read >= 2048 * 1024);
            tzr_shard_result_free(res);
        }
        tzr_shard_close(s);
    }
}

/* A name the manifest cannot hold (not UTF-8, so no JSON string) is
 * refused when added, naming why, and leaves no sidecar to merge. */
static void writer_name_without_json(void) {
    char dir[256], prefix[1024], side[1100];
    path_in(dir, sizeof dir, check_tmpdir(), "wj");
    mkdir(dir, 0755);
    path_in(prefix, sizeof prefix, dir, "model");
    tzr_shard_writer *w = NULL;
    CHECK_OK(tzr_shard_writer_open(&w, prefix, 0, 1, NULL));
    if (!w) return;
    uint64_t one = 1;
    float v = 1.0f;
    tzr_shard_tensor_desc d = {"\xff\xfe", 2, NULL, 0, TZR_DTYPE_F32, 1, &one, TZR_SHARD_REPLICATED, 0, 0, NULL};
    CHECK_RC(tzr_shard_writer_add(w, &d, &v), TZR_EINVAL);
    CHECKF(strstr(tzr_last_error(), "not valid UTF-8") != NULL, "message: %s", tzr_last_error());
    tzr_shard_writer_abort(w);
    CHECK_OK(tzr_shard_file_name(side, sizeof side, prefix, 0, 1, TZR_SHARD_PART_SUFFIX));
    CHECKF(access(side, F_OK) != 0, "%s left behind", side);
}

/* The per-rank writer: 2 ranks write explicit slices (dim 1 of the embed,
 * uneven dim 0 of the bias, a replicated copy, a 0-d tensor). */
static void writer_api(void) {
    char dir[256], prefix[1024];
    path_in(dir, sizeof dir, check_tmpdir(), "w2");
    mkdir(dir, 0755);
    path_in(prefix, sizeof prefix, dir, "model");
    size_t pick[] = {0, 3, 4, 5, 2};
    int wdim[] = {1, 0, -1, -1, 1};
    for (int r = 0; r < 2; r++) {
        tzr_shard_writer *w = NULL;
        CHECK_OK(tzr_shard_writer_open(&w, prefix, r, 2, NULL));
        if (!w) return;
        for (size_t q = 0; q < 5; q++) {
            size_t i = pick[q];
            uint64_t off = 0, len = 0, nb;
            if (wdim[q] >= 0) sm_chunk(SM[i].shape[wdim[q]], 2, r, &off, &len);
            uint8_t *data = sm_expected(i, wdim[q], off, len, &nb);
            tzr_shard_tensor_desc d = {SM[i].name, SM[i].name_len, NULL, 0, SM[i].dtype, SM[i].ndim, SM[i].shape,
                                       wdim[q], off, len, NULL};
            CHECK_OK(tzr_shard_writer_add(w, &d, data));
            free(data);
        }
        tzr_shard_tensor_desc bad = {SM_S("x"), NULL, 0, TZR_DTYPE_F32, 1, SM[3].shape, 0, 30, 8, NULL};
        CHECK_RC(tzr_shard_writer_add(w, &bad, "x"), TZR_EINVAL);
        CHECK_OK(tzr_shard_writer_close(w));
    }
    CHECK_OK(tzr_shard_manifest_build(prefix, 2));
    char m[1100];
    snprintf(m, sizeof m, "%s%s", prefix, TZR_SHARD_MANIFEST_SUFFIX);
    tzr_shard_set *s = NULL;
    CHECK_OK(tzr_shard_open(&s, m, NULL));
    if (!s) return;
    for (int nr = 1; nr <= 3; nr++)
        for (int r = 0; r < nr; r++) {
            tzr_shard_result *res = NULL;
            CHECK_OK(tzr_shard_load_rank(s, r, nr, NULL, &res));
            if (!res) continue;
            CHECK(res->count == 5);
            for (size_t q = 0; q < 5 && q < res->count; q++) {
                size_t i = pick[q];
                int dim = nr == 1 ? -1 : wdim[q];
                uint64_t off = 0, len = 0, nb;
                if (dim >= 0) sm_chunk(SM[i].shape[dim], nr, r, &off, &len);
                uint8_t *want = sm_expected(i, dim, off, len, &nb);
                CHECK(res->pieces[q].nbytes == nb && memcmp(res->pieces[q].data, want, nb) == 0);
                free(want);
            }
            tzr_shard_result_free(res);
        }
    tzr_shard_close(s);
}

/* Sidecars that disagree are refused by the merge. */
static void build_rejects(void) {
    char dir[256], prefix[1024];
    path_in(dir, sizeof dir, check_tmpdir(), "wbad");
    mkdir(dir, 0755);
    path_in(prefix, sizeof prefix, dir, "model");
    uint64_t shape[2] = {4, 2};
    float data[8] = {0};
    struct { tzr_dtype dt; uint64_t off, len; } r0[] = {{TZR_DTYPE_F32, 0, 2}, {TZR_DTYPE_F32, 0, 2}, {TZR_DTYPE_F32, 0, 2}},
        r1[] = {{TZR_DTYPE_F16, 2, 2}, {TZR_DTYPE_F32, 1, 3}, {TZR_DTYPE_F32, 3, 1}};
    const char *want[] = {"dtype differs", "overlaps", "gap"};
    for (int c = 0; c < 3; c++) {
        for (int r = 0; r < 2; r++) {
            tzr_shard_writer *w = NULL;
            CHECK_OK(tzr_shard_writer_open(&w, prefix, r, 2, NULL));
            if (!w) return;
            tzr_shard_tensor_desc d = {SM_S("t.weight"), NULL, 0, r ? r1[c].dt : r0[c].dt, 2, shape, 0,
                                       r ? r1[c].off : r0[c].off, r ? r1[c].len : r0[c].len, NULL};
            CHECK_OK(tzr_shard_writer_add(w, &d, data));
            CHECK_OK(tzr_shard_writer_close(w));
        }
        CHECK_RC(tzr_shard_manifest_build(prefix, 2), TZR_EFORMAT);
        if (!strstr(tzr_last_error(), want[c]) || !strstr(tzr_last_error(), "t.weight")) {
            fprintf(stderr, "  case %d: message '%s' lacks '%s'\n", c, tzr_last_error(), want[c]);
            check_case_failed = 1;
        }
    }
    CHECK_RC(tzr_shard_manifest_build(prefix, 3), TZR_EIO); /* sidecars of 3 shards do not exist */
}

/* ---- manifests that disagree with their shards ---- */
static int copy_set(const char *name, char *out, size_t cap) {
    path_in(out, cap, check_tmpdir(), name);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", out, dir8, out);
    return system(cmd);
}

typedef void (*edit_fn)(json_t *root);

/* Entries written as "split": D (formats/shards.md, version 2) spelled
 * out as the slices they stand for, so the edits below can change one:
 * part p of the dim in shard p, cut as tzr_shard_chunk cuts it. */
static void spell_out_splits(json_t *root) {
    int n = (int)json_integer_value(json_object_get(root, "shard_count"));
    json_t *ts = json_object_get(root, "tensors");
    for (size_t i = 0; i < json_array_size(ts); i++) {
        json_t *t = json_array_get(ts, i), *sp = json_object_get(t, "split");
        if (!sp) continue;
        json_int_t d = json_integer_value(sp);
        uint64_t len = (uint64_t)json_integer_value(json_array_get(json_object_get(t, "shape"), (size_t)d));
        json_t *sl = json_array();
        for (int p = 0; p < n; p++) {
            uint64_t off, l;
            tzr_shard_chunk(len, n, p, &off, &l);
            json_array_append_new(sl, json_pack("{s:i,s:I,s:I,s:I}", "shard", p, "dim", d, "offset", (json_int_t)off,
                                                "length", (json_int_t)l));
        }
        json_object_del(t, "split");
        json_object_set_new(t, "slices", sl);
    }
}

static void edit_manifest(const char *dir, edit_fn fn) {
    char m[1024];
    path_in(m, sizeof m, dir, "model" TZR_SHARD_MANIFEST_SUFFIX);
    json_t *root = json_load_file(m, JSON_ALLOW_NUL, NULL);
    spell_out_splits(root);
    fn(root);
    json_dump_file(root, m, JSON_INDENT(1));
    json_decref(root);
}

static json_t *tensor_json(json_t *root, size_t i) { return json_array_get(json_object_get(root, "tensors"), i); }
static void edit_shape(json_t *root) { json_array_set_new(json_object_get(tensor_json(root, 1), "shape"), 1, json_integer(13)); }
static void edit_overlap(json_t *root) {
    json_t *sl = json_array_get(json_object_get(tensor_json(root, 3), "slices"), 2);
    json_object_set_new(sl, "offset", json_integer(json_integer_value(json_object_get(sl, "offset")) - 1));
}
static void edit_gap(json_t *root) {
    json_array_remove(json_object_get(tensor_json(root, 6), "slices"), 5);
}
static void edit_size(json_t *root) {
    json_t *sh = json_array_get(json_object_get(root, "shards"), 5);
    json_object_set_new(sh, "size", json_integer(json_integer_value(json_object_get(sh, "size")) + 1));
}

/* A sha256 with a non-hex digit, or one digit short. */
static void edit_sha(json_t *root, int shorter) {
    json_t *t = tensor_json(root, 1);
    char h[65];
    snprintf(h, sizeof h, "%s", json_string_value(json_object_get(t, "sha256")));
    if (shorter) h[63] = 0;
    else h[10] = 'g';
    json_object_set_new(t, "sha256", json_string(h));
}
static void edit_sha_nonhex(json_t *root) { edit_sha(root, 0); }
static void edit_sha_short(json_t *root) { edit_sha(root, 1); }

static void expect_refused_with(const char *dir, int code, const char *w1, const char *w2,
                                const tzr_shard_open_options *so) {
    char m[1024];
    path_in(m, sizeof m, dir, "model" TZR_SHARD_MANIFEST_SUFFIX);
    tzr_shard_set *s = NULL;
    CHECK_RC(tzr_shard_open(&s, m, so), code);
    CHECK(s == NULL);
    if (!strstr(tzr_last_error(), w1) || (w2 && !strstr(tzr_last_error(), w2))) {
        fprintf(stderr, "  message '%s' lacks '%s' / '%s'\n", tzr_last_error(), w1, w2 ? w2 : "");
        check_case_failed = 1;
    }
    tzr_shard_close(s);
}

static void lacks(const char *w1, const char *w2) {
    if (!strstr(tzr_last_error(), w1) || (w2 && !strstr(tzr_last_error(), w2))) {
        fprintf(stderr, "  message '%s' lacks '%s' / '%s'\n", tzr_last_error(), w1, w2 ? w2 : "");
        check_case_failed = 1;
    }
}

/* A shard that does not hold what the manifest says: shards open at
 * first use, so the set opens, and every use of that shard fails with
 * the same code and message, each time (nothing half-checked is handed
 * out). With network settings (the caller's, borrowed only while
 * opening) every shard is opened, and checked, by tzr_shard_open. */
static void expect_refused_at_use(const char *dir, int code, const char *w1, const char *w2) {
    char m[1024];
    path_in(m, sizeof m, dir, "model" TZR_SHARD_MANIFEST_SUFFIX);
    tzr_shard_set *s = NULL;
    CHECK_OK(tzr_shard_open(&s, m, NULL));
    if (!s) return;
    for (int round = 0; round < 2; round++) {
        tzr_shard_result *res = NULL;
        CHECK_RC(tzr_shard_load_rank(s, 0, 8, NULL, &res), code);
        CHECK(res == NULL);
        lacks(w1, w2);
        lacks("shard 0 of 8", NULL);
        CHECK(tzr_shard_reader(s, 3) == NULL);
        CHECK(tzr_last_error_code() == code);
        lacks(w1, w2);
        lacks("shard 3 of 8", NULL);
        CHECK_RC(tzr_shard_check_headers(s, 5), code);
        lacks("shard 5 of 8", NULL);
    }
    tzr_shard_close(s);
    tzr_http_options http = TZR_HTTP_OPTIONS_INIT;
    tzr_shard_open_options so = TZR_SHARD_OPEN_OPTIONS_INIT;
    so.http = &http;
    s = NULL;
    CHECK_RC(tzr_shard_open(&s, m, &so), code);
    CHECK(s == NULL);
    lacks(w1, w2);
    lacks("shard 0 of 8", NULL);
    tzr_shard_close(s);
}

static void expect_refused(const char *dir, int code, const char *w1, const char *w2) {
    expect_refused_with(dir, code, w1, w2, NULL);
}

/* Version 2's header digests file (formats/shards.md): gone, or too short
 * for the sections, every shard fails at first use naming it; one byte
 * changed in shard 3's section fails shard 3 alone (TZR_EHASH), while
 * another rank's load goes on. */
static void bad_hashes_file(void) {
    char d[256], f[1024], m[1024];
    if (copy_set("hashes_missing", d, sizeof d)) return check_fail("cp failed");
    path_in(f, sizeof f, d, "model" TZR_SHARD_HASHES_SUFFIX);
    CHECK(unlink(f) == 0);
    expect_refused_at_use(d, TZR_EIO, "model.tzr-hashes", "is missing");

    copy_set("hashes_short", d, sizeof d);
    path_in(f, sizeof f, d, "model" TZR_SHARD_HASHES_SUFFIX);
    CHECK(truncate(f, 31) == 0);
    expect_refused_at_use(d, TZR_EFORMAT, "model.tzr-hashes", "too few");

    copy_set("hashes_flipped", d, sizeof d);
    path_in(f, sizeof f, d, "model" TZR_SHARD_HASHES_SUFFIX);
    path_in(m, sizeof m, d, "model" TZR_SHARD_MANIFEST_SUFFIX);
    json_t *root = json_load_file(m, JSON_ALLOW_NUL, NULL);
    json_t *h3 = json_object_get(json_array_get(json_object_get(root, "shards"), 3), "header_hashes");
    CHECK(json_integer_value(json_object_get(h3, "count")) > 0);
    long at = (long)json_integer_value(json_object_get(h3, "offset")) + 5;
    json_decref(root);
    FILE *fp = fopen(f, "r+b");
    CHECK(fp != NULL);
    if (!fp) return;
    int c = (fseek(fp, at, SEEK_SET), fgetc(fp));
    CHECK(c != EOF && fseek(fp, at, SEEK_SET) == 0 && fputc(c ^ 1, fp) != EOF);
    fclose(fp);
    tzr_shard_set *s = NULL;
    CHECK_OK(tzr_shard_open(&s, m, NULL));
    if (!s) return;
    tzr_shard_result *res = NULL;
    CHECK_RC(tzr_shard_load_rank(s, 3, 8, NULL, &res), TZR_EHASH);
    lacks("shard 3 of 8", "differ from the manifest's sha256");
    CHECK_OK(tzr_shard_load_rank(s, 0, 8, NULL, &res));
    tzr_shard_result_free(res);
    tzr_shard_close(s);

    /* A section one digest short, its SHA-256 made to match (OpenSSL's,
     * not the library's): the count no longer fits shard 5's slices. */
    copy_set("hashes_count", d, sizeof d);
    path_in(f, sizeof f, d, "model" TZR_SHARD_HASHES_SUFFIX);
    path_in(m, sizeof m, d, "model" TZR_SHARD_MANIFEST_SUFFIX);
    root = json_load_file(m, JSON_ALLOW_NUL, NULL);
    json_t *h5 = json_object_get(json_array_get(json_object_get(root, "shards"), 5), "header_hashes");
    json_int_t off = json_integer_value(json_object_get(h5, "offset")), cnt = json_integer_value(json_object_get(h5, "count"));
    uint8_t sec[32 * 64], sha[32];
    char hex[65];
    CHECK(cnt > 1 && cnt <= 64);
    fp = fopen(f, "rb");
    CHECK(fp && fseek(fp, (long)off, SEEK_SET) == 0 && cnt <= 64 && fread(sec, 32, (size_t)cnt, fp) == (size_t)cnt);
    if (fp) fclose(fp);
    SHA256(sec, 32 * (size_t)(cnt - 1), sha);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", sha[i]);
    json_object_set_new(h5, "count", json_integer(cnt - 1));
    json_object_set_new(h5, "sha256", json_string(hex));
    json_dump_file(root, m, JSON_INDENT(1));
    json_decref(root);
    s = NULL;
    CHECK_OK(tzr_shard_open(&s, m, NULL));
    if (!s) return;
    CHECK(tzr_shard_reader(s, 5) == NULL);
    CHECK(tzr_last_error_code() == TZR_EFORMAT);
    char want[64];
    snprintf(want, sizeof want, "%lld header digests for %lld slices", (long long)cnt - 1, (long long)cnt);
    lacks("shard 5 of 8", want);
    CHECK(tzr_shard_reader(s, 4) != NULL);
    tzr_shard_close(s);
}

static void bad_manifests(void) {
    char d[256], f[1024];
    if (copy_set("bad_shape", d, sizeof d)) return check_fail("cp failed");
    edit_manifest(d, edit_shape);
    expect_refused_at_use(d, TZR_EFORMAT, "layers.0.attn.weight", "local shape differs");

    copy_set("bad_missing", d, sizeof d);
    path_in(f, sizeof f, d, "model-rank-00003-of-00008.tensors");
    unlink(f);
    expect_refused(d, TZR_EIO, "shard 3 of 8", "missing");

    copy_set("bad_size", d, sizeof d);
    edit_manifest(d, edit_size);
    expect_refused(d, TZR_EFORMAT, "shard 5 of 8", "manifest says");

    copy_set("bad_grown", d, sizeof d);
    path_in(f, sizeof f, d, "model-rank-00002-of-00008.tensors");
    FILE *fp = fopen(f, "ab");
    fputc(0, fp);
    fclose(fp);
    expect_refused(d, TZR_EFORMAT, "shard 2 of 8", "bytes but the manifest says");

    copy_set("bad_overlap", d, sizeof d);
    edit_manifest(d, edit_overlap);
    expect_refused(d, TZR_EFORMAT, "layers.0.bias", "overlaps");

    copy_set("bad_gap", d, sizeof d);
    edit_manifest(d, edit_gap);
    expect_refused(d, TZR_EFORMAT, "big.weight", "gap");

    copy_set("bad_sha_hex", d, sizeof d);
    edit_manifest(d, edit_sha_nonhex);
    expect_refused(d, TZR_EFORMAT, "layers.0.attn.weight", "bad sha256");

    copy_set("bad_sha_short", d, sizeof d);
    edit_manifest(d, edit_sha_short);
    expect_refused(d, TZR_EFORMAT, "layers.0.attn.weight", "bad sha256");

    copy_set("bad_json", d, sizeof d);
    path_in(f, sizeof f, d, "model" TZR_SHARD_MANIFEST_SUFFIX);
    check_write_file(f, "{\"format\": \"tzr-shards\",", 24);
    expect_refused(d, TZR_EFORMAT, "model.tzr-index.json", NULL);
}

/* Each rank of a job that saved a shard per rank reads its own shard
 * alone: with shard 5's index naming a tensor otherwise (same size, so
 * the open's file checks pass), ranks 0-4 and 6-7 of 8 load their pieces
 * byte-exact (no other shard is opened, or they would fail), and rank 5
 * fails naming shard 5 and the tensor it lacks. */
static void rank_reads_its_shard(void) {
    char d[256], f[1024];
    if (copy_set("one_bad", d, sizeof d)) return check_fail("cp failed");
    path_in(f, sizeof f, d, "model-rank-00005-of-00008.tensors");
    size_t len = 0;
    uint8_t *b = (uint8_t *)check_read_file(f, &len);
    if (!b) return check_fail("read %s", f);
    const char *name = "layers.0.attn.weight";
    uint8_t *at = memmem(b, len, name, strlen(name));
    if (!at) return free(b), check_fail("no '%s' in shard 5", name);
    at[strlen(name) - 1] = 'u'; /* layers.0.attn.weighu */
    check_write_file(f, b, len);
    free(b);
    tzr_shard_set *s = open_set(d);
    if (!s) return;
    for (int r = 0; r < 8; r++) {
        tzr_shard_result *res = NULL;
        if (r == 5) {
            CHECK_RC(tzr_shard_load_rank(s, r, 8, NULL, &res), TZR_EFORMAT);
            lacks("shard 5 of 8", "'layers.0.attn.weight' is not in");
            continue;
        }
        CHECK_OK(tzr_shard_load_rank(s, r, 8, NULL, &res));
        if (res) check_result(res, r, 8, default_dims);
        tzr_shard_result_free(res);
    }
    tzr_shard_close(s);
}

/* Ranks of one set loading on threads at once, two threads per rank (so
 * two ask for each shard together): each opens the shards it reads at
 * first use, once, and gets its own pieces (tsan watches the opens). */
typedef struct rank_thread {
    tzr_shard_set *s;
    int rank, rc;
    tzr_shard_result *res;
} rank_thread;

static void *load_one_rank(void *arg) {
    rank_thread *t = arg;
    t->rc = tzr_shard_load_rank(t->s, t->rank, 4, NULL, &t->res);
    return NULL;
}

/* Eight threads on one fresh set: threads 0-3 load ranks 0-3 of 4,
 * threads 4-7 run `others` with ranks 0-3 again. Each must succeed, and
 * each load gets its own pieces. */
static void run_side_by_side(void *(*others)(void *)) {
    tzr_shard_set *s = open_set(dir8);
    if (!s) return;
    rank_thread t[8];
    pthread_t th[8];
    for (int i = 0; i < 8; i++) {
        t[i] = (rank_thread){s, i % 4, -1, NULL};
        CHECK(pthread_create(&th[i], NULL, i < 4 ? load_one_rank : others, &t[i]) == 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        CHECKF(t[i].rc == 0, "thread %d (rank %d of 4): %d", i, t[i].rank, t[i].rc);
        if (t[i].res) check_result(t[i].res, t[i].rank, 4, default_dims);
        tzr_shard_result_free(t[i].res);
    }
    tzr_shard_close(s);
}

static void ranks_side_by_side(void) { run_side_by_side(load_one_rank); }

/* Loads of ranks side by side with tzr_shard_reader and
 * tzr_shard_check_headers of every shard, highest first, on other threads:
 * lazy opens of one shard met from all sides, four rounds of fresh sets. */
static void *check_all_shards(void *arg) {
    rank_thread *t = arg;
    t->rc = 0;
    for (int k = 7; k >= 0; k--) {
        tzr_reader *r = tzr_shard_reader(t->s, k);
        if (!r || !tzr_reader_count(r)) t->rc = -100;
        if (tzr_shard_check_headers(t->s, k)) t->rc = tzr_last_error_code();
    }
    return NULL;
}

static void ranks_and_checks_side_by_side(void) {
    for (int round = 0; round < 4 && !check_case_failed; round++) run_side_by_side(check_all_shards);
}

/* A shard file gone at its first use (moved after the open) fails that
 * use, naming it; it is not kept as the shard's verdict: moved back, the
 * next use opens it and the rank loads byte-exact. */
static void shard_back_after_missing(void) {
    char d[256], f[1024], away[1100];
    if (copy_set("moved", d, sizeof d)) return check_fail("cp failed");
    tzr_shard_set *s = open_set(d);
    if (!s) return;
    path_in(f, sizeof f, d, "model-rank-00003-of-00008.tensors");
    snprintf(away, sizeof away, "%s.away", f);
    CHECK(rename(f, away) == 0);
    tzr_shard_result *res = NULL;
    CHECK_RC(tzr_shard_load_rank(s, 3, 8, NULL, &res), TZR_EIO);
    lacks("shard 3 of 8", "is missing");
    CHECK(rename(away, f) == 0);
    CHECK_OK(tzr_shard_load_rank(s, 3, 8, NULL, &res));
    if (res) check_result(res, 3, 8, default_dims);
    tzr_shard_result_free(res);
    tzr_shard_close(s);
}

/* The shard files are checked on several threads: with several of them
 * broken, every open reports the lowest broken one (as a one-by-one open
 * does), with its own message, whichever thread met it. */
static void first_broken_shard_reported(void) {
    char d[256], f[1024];
    if (copy_set("bad_several", d, sizeof d)) return check_fail("cp failed");
    for (int k = 3; k <= 6; k++) { /* 3..6 grown by a byte */
        char name[64];
        snprintf(name, sizeof name, "model-rank-%05d-of-00008.tensors", k);
        path_in(f, sizeof f, d, name);
        FILE *fp = fopen(f, "ab");
        if (!fp) return check_fail("open %s", f);
        fputc(0, fp);
        fclose(fp);
    }
    path_in(f, sizeof f, d, "model-rank-00007-of-00008.tensors");
    unlink(f); /* and 7 missing */
    /* With network settings every shard is opened at open, on threads. */
    tzr_http_options http = TZR_HTTP_OPTIONS_INIT;
    tzr_shard_open_options eager = TZR_SHARD_OPEN_OPTIONS_INIT;
    eager.http = &http;
    for (int round = 0; round < 20 && !check_case_failed; round++) {
        expect_refused(d, TZR_EFORMAT, "shard 3 of 8: ", "bytes but the manifest says");
        expect_refused_with(d, TZR_EFORMAT, "shard 3 of 8: ", "bytes but the manifest says", &eager);
    }
    path_in(f, sizeof f, d, "model-rank-00001-of-00008.tensors");
    unlink(f); /* now 1 missing first: its code too */
    for (int round = 0; round < 20 && !check_case_failed; round++) {
        expect_refused(d, TZR_EIO, "shard 1 of 8: ", "is missing");
        expect_refused_with(d, TZR_EIO, "shard 1 of 8: ", "is missing", &eager);
    }
}

/* A flipped data byte in a shard: hash mismatch naming the tensor. */
static void corrupt_shard_data(void) {
    char d[256], f[1024];
    if (copy_set("bad_data", d, sizeof d)) return check_fail("cp failed");
    path_in(f, sizeof f, d, "model-rank-00001-of-00008.tensors");
    tzr_reader *r = NULL;
    CHECK_OK(tzr_reader_open(&r, f, NULL));
    if (!r) return;
    size_t idx;
    CHECK_OK(tzr_reader_find(r, SM_S("big.weight"), &idx));
    uint64_t off = tzr_reader_tensor(r, idx)->data_offset + 1000;
    tzr_reader_free(r);
    FILE *fp = fopen(f, "r+b");
    fseek(fp, (long)off, SEEK_SET);
    int c = fgetc(fp);
    fseek(fp, (long)off, SEEK_SET);
    fputc(c ^ 0x55, fp);
    fclose(fp);
    tzr_shard_set *s = open_set(d);
    if (!s) return;
    tzr_shard_result *res = NULL;
    CHECK_RC(tzr_shard_load_rank(s, 0, 1, NULL, &res), TZR_EHASH);
    CHECK(strstr(tzr_last_error(), "big.weight") != NULL);
    CHECK_RC(tzr_shard_load_rank(s, 0, 2, NULL, &res), TZR_EHASH); /* shards 0-3 whole */
    CHECK_OK(tzr_shard_load_rank(s, 1, 2, NULL, &res));            /* shards 4-7 */
    tzr_shard_result_free(res);
    res = NULL;
    CHECK_RC(tzr_shard_load_rank(s, 0, 8, NULL, &res), TZR_OK); /* only shard 0 */
    tzr_shard_result_free(res);
    res = NULL;
    CHECK_RC(tzr_shard_load_rank(s, 1, 8, NULL, &res), TZR_EHASH); /* shard 1 whole: hash-checked */
    tzr_shard_close(s);
}

/* Every tensor replicated on two shards (as `tensorize --shards 2` of a
 * file): a rank reads each from holder rank % holders, whole, and a shard
 * that holds everything whole loads as a plain file. Shard 1's copy of
 * one tensor is changed (unverified open), so the holder read shows. */
static int keep_even(void *ctx, size_t index, const tzr_tensor_info *t) {
    (void)ctx;
    (void)t;
    return index % 2 == 0;
}

static void replicated_holders(void) {
    char d[256], prefix[1024], f[1024];
    path_in(d, sizeof d, check_tmpdir(), "rep2");
    mkdir(d, 0755);
    path_in(prefix, sizeof prefix, d, "model");
    tzr_reader *r = NULL;
    CHECK_OK(tzr_reader_open(&r, src_path, NULL));
    if (!r) return;
    CHECK_OK(tzr_shard_split(r, prefix, 2, "*=replicate", NULL));
    tzr_reader_free(r);
    r = NULL;
    CHECK_OK(tzr_shard_file_name(f, sizeof f, prefix, 1, 2, ".tensors"));
    CHECK_OK(tzr_reader_open(&r, f, NULL));
    if (!r) return;
    const size_t changed = 4; /* layers.0.norm.weight */
    size_t idx;
    CHECK_OK(tzr_reader_find(r, SM[changed].name, SM[changed].name_len, &idx));
    uint64_t off = tzr_reader_tensor(r, idx)->data_offset;
    tzr_reader_free(r);
    FILE *fp = fopen(f, "r+b");
    if (!fp) return check_fail("open %s", f);
    fseek(fp, (long)off, SEEK_SET);
    int c = fgetc(fp);
    fseek(fp, (long)off, SEEK_SET);
    fputc(c ^ 0x55, fp);
    fclose(fp);
    char m[1024];
    path_in(m, sizeof m, d, "model" TZR_SHARD_MANIFEST_SUFFIX);
    tzr_shard_set *s = NULL;
    tzr_shard_open_options o = TZR_SHARD_OPEN_OPTIONS_INIT;
    o.verify = 0;
    CHECK_OK(tzr_shard_open(&s, m, &o));
    if (!s) return;
    for (size_t i = 0; i < SM_COUNT; i++) CHECK(tzr_shard_tensor_at(s, i)->dim == TZR_SHARD_REPLICATED);
    int whole[SM_COUNT];
    for (size_t i = 0; i < SM_COUNT; i++) whole[i] = -1;
    tzr_shard_result *res = NULL;
    CHECK_OK(tzr_shard_load_rank(s, 0, 1, NULL, &res)); /* holder 0: every byte as generated */
    if (res) check_result(res, 0, 1, whole);
    tzr_shard_result_free(res);
    res = NULL;
    CHECK_OK(tzr_shard_load_rank(s, 2, 4, "*=replicate", &res)); /* holder 2 % 2 = 0 */
    if (res) check_result(res, 2, 4, whole);
    tzr_shard_result_free(res);
    res = NULL;
    for (int with_filter = 0; with_filter < 2; with_filter++) { /* holder 3 % 2 = 1 */
        tzr_sink *sink = NULL;
        CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
        tzr_load_options lo = TZR_LOAD_OPTIONS_INIT;
        if (with_filter) lo.filter = keep_even;
        CHECK_OK(tzr_shard_load_rank_into(s, 3, 4, "*=replicate", sink, &lo, NULL));
        for (size_t i = 0; sink && i < SM_COUNT; i++) {
            void *data = NULL;
            uint64_t len = 0, nb;
            int rc = tzr_sink_host_data(sink, i, &data, &len);
            if (with_filter && i % 2) {
                CHECK(rc == TZR_ENOTFOUND);
                continue;
            }
            CHECK_OK(rc);
            uint8_t *want = sm_expected(i, -1, 0, 0, &nb);
            CHECK(len == nb);
            if (i == changed && nb) want[0] ^= 0x55; /* holder 1's copy */
            if (data && len == nb) CHECK(memcmp(data, want, nb) == 0);
            free(want);
        }
        tzr_sink_free(sink);
    }
    tzr_shard_close(s);
}

/* Built without MPI the multi-rank API says so instead of failing oddly. */
/* A shard file replaced by another valid one with the same tensor shapes
 * (a different checkpoint's shard 1): every file passes its own hashes,
 * but the manifest's per-shard header sha256 no longer matches. Caught
 * with and without the whole-tensor sha256, also for a rank whose piece
 * comes from that shard alone, through a sink too; ranks not reading it
 * still load. */
static void strip_global_sha(json_t *root) {
    json_t *ts = json_object_get(root, "tensors"), *t;
    size_t k;
    json_array_foreach(ts, k, t) json_object_del(t, "sha256");
}

static void replaced_shard(void) {
    char other[1024], d[256], pre[1024], from[1024], to[1024];
    path_in(other, sizeof other, check_tmpdir(), "other.tensors");
    tzr_writer *w = NULL;
    CHECK_OK(tzr_writer_open(&w, other, NULL));
    for (size_t i = 0; w && i < SM_COUNT; i++) {
        uint64_t nb;
        uint8_t *data = sm_expected(i, -1, 0, 0, &nb);
        for (uint64_t k = 0; k < nb; k++) data[k] ^= 0x40; /* same shapes, other bytes */
        tzr_tensor_desc td = {SM[i].name, SM[i].name_len, SM[i].name[0] == 0x1E ? TZR_STATE_DICT : TZR_PARAM, 0, NULL,
                              0, SM[i].dtype, SM[i].ndim, SM[i].shape, 0, sizeof(tzr_tensor_desc)};
        CHECK_OK(tzr_writer_add(w, &td, data));
        free(data);
    }
    CHECK_OK(tzr_writer_close(w));
    path_in(d, sizeof d, check_tmpdir(), "other8");
    mkdir(d, 0755);
    path_in(pre, sizeof pre, d, "model");
    tzr_reader *r = NULL;
    CHECK_OK(tzr_reader_open(&r, other, NULL));
    CHECK_OK(tzr_shard_split(r, pre, 8, SM_RULES, NULL));
    tzr_reader_free(r);
    char mine[256];
    if (copy_set("replaced", mine, sizeof mine)) return check_fail("cp failed");
    path_in(from, sizeof from, d, "model-rank-00001-of-00008.tensors");
    path_in(to, sizeof to, mine, "model-rank-00001-of-00008.tensors");
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
    if (system(cmd) != 0) return check_fail("cp failed");
    for (int pass = 0; pass < 2; pass++) {
        if (pass) edit_manifest(mine, strip_global_sha);
        tzr_shard_set *s = open_set(mine);
        if (!s) return;
        tzr_shard_result *res = NULL;
        CHECK_RC(tzr_shard_load_rank(s, 0, 1, NULL, &res), TZR_EHASH);
        CHECK(strstr(tzr_last_error(), "shard 1: tensor") != NULL);
        CHECK_RC(tzr_shard_load_rank(s, 1, 8, NULL, &res), TZR_EHASH); /* shard 1's slices only */
        CHECK(strstr(tzr_last_error(), "shard 1: tensor") && strstr(tzr_last_error(), "replaced"));
        CHECK_OK(tzr_shard_load_rank(s, 2, 8, NULL, &res)); /* shard 2 is the listed file */
        tzr_shard_result_free(res);
        res = NULL;
        /* the same through a sink */
        fake_sink *fs = fake_sink_new(SM_COUNT);
        CHECK_RC(tzr_shard_load_rank_into(s, 1, 8, NULL, &fs->base, NULL, NULL), TZR_EHASH);
        tzr_sink_free(&fs->base);
        tzr_shard_close(s);
    }
}

/* A directory NAME under the test directory, made, and the paths a split
 * there uses: DIR/src.tensors (src may be NULL), the prefix DIR/model and
 * its manifest. */
enum { DIR_CAP = 256, PATH_CAP = 1024 };
static void set_dir(const char *name, char dir[DIR_CAP], char src[PATH_CAP], char prefix[PATH_CAP],
                    char man[PATH_CAP]) {
    path_in(dir, DIR_CAP, check_tmpdir(), name);
    mkdir(dir, 0755);
    if (src) path_in(src, PATH_CAP, dir, "src.tensors");
    path_in(prefix, PATH_CAP, dir, "model");
    path_in(man, PATH_CAP, dir, "model" TZR_SHARD_MANIFEST_SUFFIX);
}

/* With the file options' no_replace the manifest is published as the
 * shard files are: one another writer put there meanwhile (here before
 * the split) is kept, the split fails "exists", and nothing of its set is
 * left (shards, sidecars, temporaries). Without it the manifest is replaced. */
static void split_no_replace_manifest(void) {
    char dir[DIR_CAP], prefix[PATH_CAP], m[PATH_CAP];
    set_dir("noreplace", dir, NULL, prefix, m);
    FILE *f = fopen(m, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs("theirs\n", f);
    fclose(f);
    tzr_reader *r = NULL;
    CHECK_OK(tzr_reader_open(&r, src_path, NULL));
    if (!r) return;
    tzr_writer_options wo = TZR_WRITER_OPTIONS_INIT;
    wo.no_replace = 1;
    tzr_shard_split_options so = TZR_SHARD_SPLIT_OPTIONS_INIT;
    so.file = &wo;
    CHECK_RC(tzr_shard_split(r, prefix, 2, SM_RULES, &so), TZR_EIO);
    CHECK(strstr(tzr_last_error(), "model" TZR_SHARD_MANIFEST_SUFFIX " exists") != NULL);
    char buf[64] = {0};
    f = fopen(m, "r");
    CHECK(f && fgets(buf, sizeof buf, f) && strcmp(buf, "theirs\n") == 0);
    if (f) fclose(f);
    DIR *d = opendir(dir);
    int others = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "model" TZR_SHARD_MANIFEST_SUFFIX)) {
            printf("  left: %s\n", e->d_name);
            others++;
        }
    if (d) closedir(d);
    CHECK(d != NULL && others == 0);
    CHECK_OK(tzr_shard_split(r, prefix, 2, SM_RULES, NULL)); /* replaces */
    tzr_shard_set *s = open_set(dir);
    CHECK(s && tzr_shard_nshards(s) == 2);
    tzr_shard_close(s);
    tzr_reader_free(r);
}

/* Tensors cut evenly over every shard share one slice list per cut
 * length when the set opens (test_shard_manifest checks the sharing); the
 * shard tensor's index and header digest of each live per shard. 20 tensors of 12 rows and 4 of 7, cut 3 ways:
 * every rank's bytes, a verified load, and each shard's header check.
 * Then shard 1 and 2 disagree with the manifest on the last tensor only
 * (found after the shared entries took their digests): those shards fail
 * every use, shard 0 still loads and checks. */
enum { SH_N = 24, SH_BIG = 20 };
static int16_t sh_value(int t, uint64_t e) { return (int16_t)(t * 100 + (int)e); }
static void sh_check_rank(tzr_shard_set *s, int rank) {
    tzr_shard_result *res = NULL;
    CHECK_OK(tzr_shard_load_rank(s, rank, 3, NULL, &res));
    for (size_t i = 0; res && i < res->count && i < SH_N; i++) {
        const tzr_shard_piece *p = &res->pieces[i];
        uint64_t rows = i < SH_BIG ? 12 : 7, cols = i < SH_BIG ? 5 : 3, off, len;
        tzr_shard_chunk(rows, 3, rank, &off, &len);
        CHECK(p->dim == 0 && p->offset == off && p->length == len && p->nbytes == len * cols * 2);
        const int16_t *v = p->data;
        for (uint64_t e = 0; p->nbytes == len * cols * 2 && e < len * cols; e++)
            if (v[e] != sh_value((int)i, off * cols + e)) {
                check_fail("rank %d tensor %zu element %llu: %d", rank, i, (unsigned long long)e, v[e]);
                break;
            }
    }
    CHECK(res && res->count == SH_N);
    tzr_shard_result_free(res);
}

static void shared_splits(void) {
    char dir[DIR_CAP], src[PATH_CAP], prefix[PATH_CAP], m[PATH_CAP];
    set_dir("shared", dir, src, prefix, m);
    tzr_writer *w = NULL;
    CHECK_OK(tzr_writer_open(&w, src, NULL));
    for (int t = 0; w && t < SH_N; t++) {
        uint64_t shape[2] = {t < SH_BIG ? 12 : 7, t < SH_BIG ? 5 : 3};
        int16_t v[60];
        for (uint64_t e = 0; e < shape[0] * shape[1]; e++) v[e] = sh_value(t, e);
        char nm[32];
        snprintf(nm, sizeof nm, "experts.%d.w", t);
        tzr_tensor_desc d = {nm, strlen(nm), TZR_PARAM, 0, NULL, 0, TZR_DTYPE_I16, 2, shape, 0, sizeof(tzr_tensor_desc)};
        CHECK_OK(tzr_writer_add(w, &d, v));
    }
    if (w) CHECK_OK(tzr_writer_close(w));
    tzr_reader *r = NULL;
    CHECK_OK(tzr_reader_open(&r, src, NULL));
    if (r) CHECK_OK(tzr_shard_split(r, prefix, 3, "*=0", NULL));
    tzr_reader_free(r);
    tzr_shard_set *s = NULL;
    CHECK_OK(tzr_shard_open(&s, m, NULL)); /* verifying */
    if (!s) return;
    for (int rank = 0; rank < 3; rank++) sh_check_rank(s, rank);
    for (int k = 0; k < 3; k++) CHECK_OK(tzr_shard_check_headers(s, k));
    tzr_shard_close(s);

    /* The last tensor's rows spelled out as 3, 1, 3 (written 3, 2, 2). */
    json_t *root = json_load_file(m, JSON_ALLOW_NUL, NULL);
    json_t *last = json_array_get(json_object_get(root, "tensors"), SH_N - 1);
    CHECK(json_object_get(last, "split") != NULL);
    json_object_del(last, "split");
    json_object_set_new(last, "slices",
                        json_pack("[{s:i,s:i,s:i,s:i},{s:i,s:i,s:i,s:i},{s:i,s:i,s:i,s:i}]", "shard", 0, "dim", 0,
                                  "offset", 0, "length", 3, "shard", 1, "dim", 0, "offset", 3, "length", 1, "shard",
                                  2, "dim", 0, "offset", 4, "length", 3));
    CHECK(json_dump_file(root, m, JSON_INDENT(1)) == 0);
    json_decref(root);
    s = NULL;
    CHECK_OK(tzr_shard_open(&s, m, NULL));
    if (!s) return;
    for (int round = 0; round < 2; round++) { /* the same failure at every use */
        CHECK(tzr_shard_reader(s, 1) == NULL);
        CHECK(tzr_last_error_code() == TZR_EFORMAT);
        lacks("experts.23.w", "local shape differs");
    }
    tzr_shard_result *res = NULL;
    CHECK_RC(tzr_shard_load_rank(s, 1, 3, NULL, &res), TZR_EFORMAT);
    sh_check_rank(s, 0);
    CHECK_OK(tzr_shard_check_headers(s, 0));
    CHECK_RC(tzr_shard_check_headers(s, 2), TZR_EFORMAT);
    tzr_shard_close(s);
}

/* 6,000 tensors overflow tensorizer's 256 KiB index: a split sizes every
 * shard's index for them with no metadata_size given (each shard holds an
 * entry for every tensor), and the set loads back byte-exact; a shard
 * writer told its tensors by tzr_shard_writer_reserve does the same. */
#define MANY 6000
static void split_many_small_sizes_indexes(void) {
    char dir[DIR_CAP], src[PATH_CAP], prefix[PATH_CAP], man[PATH_CAP];
    set_dir("many", dir, src, prefix, man);
    tzr_writer *w = NULL;
    CHECK_OK(tzr_writer_open(&w, src, NULL));
    if (!w) return;
    CHECK_OK(tzr_writer_reserve(w, MANY, MANY * 16, MANY * 7, MANY, MANY * 16));
    for (uint32_t i = 0; i < MANY; i++) {
        char name[32];
        snprintf(name, sizeof name, "experts.%05u.w", i); /* 14 bytes */
        uint32_t v[4] = {i, i * 7u, ~i, 0xA5A5A5A5u ^ i};
        uint64_t shape[1] = {4};
        tzr_tensor_desc d = {name, strlen(name), TZR_PARAM, 0, NULL, 0, TZR_DTYPE_I32, 1, shape, 0,
                             sizeof(tzr_tensor_desc)};
        CHECK_OK(tzr_writer_add(w, &d, v));
    }
    CHECK_OK(tzr_writer_close(w));
    tzr_reader *r = NULL;
    CHECK_OK(tzr_reader_open(&r, src, NULL));
    if (!r) return;
    CHECK_OK(tzr_shard_split(r, prefix, 2, NULL, NULL));
    tzr_reader_free(r);
    tzr_shard_set *s = NULL;
    CHECK_OK(tzr_shard_open(&s, man, NULL));
    if (!s) return;
    tzr_shard_result *res = NULL;
    CHECK_OK(tzr_shard_load_rank(s, 0, 1, NULL, &res));
    int bad = 0;
    for (size_t i = 0; res && i < res->count; i++) {
        const tzr_shard_piece *pc = &res->pieces[i];
        uint32_t k = (uint32_t)atoi(pc->name + strlen("experts."));
        uint32_t v[4] = {k, k * 7u, ~k, 0xA5A5A5A5u ^ k};
        bad += pc->nbytes != sizeof v || memcmp(pc->data, v, sizeof v) != 0;
    }
    CHECKF(res && res->count == MANY && bad == 0, "%zu pieces, %d wrong", res ? res->count : 0, bad);
    tzr_shard_result_free(res);
    tzr_shard_close(s);
    /* the writer API: without reserve the 4,5xxth tensor fails "index full" */
    for (int reserve = 0; reserve < 2; reserve++) {
        tzr_shard_writer *sw = NULL;
        char pre[1024];
        path_in(pre, sizeof pre, dir, reserve ? "w1" : "w0");
        CHECK_OK(tzr_shard_writer_open(&sw, pre, 0, 1, NULL));
        if (!sw) return;
        if (reserve) CHECK_OK(tzr_shard_writer_reserve(sw, MANY, MANY * 14, MANY * 5, MANY, MANY * 16));
        int rc = 0;
        for (uint32_t i = 0; i < MANY && !rc; i++) {
            char name[32];
            snprintf(name, sizeof name, "experts.%05u.w", i);
            uint32_t v[4] = {i, 0, 0, 0};
            uint64_t shape[1] = {4};
            tzr_shard_tensor_desc d = {name, strlen(name), NULL, 0, TZR_DTYPE_I32, 1, shape,
                                       TZR_SHARD_REPLICATED, 0, 0, NULL};
            rc = tzr_shard_writer_add(sw, &d, v);
        }
        if (reserve) {
            CHECK_OK(rc);
            CHECK_OK(tzr_shard_writer_close(sw));
        } else {
            CHECK_RC(rc, TZR_ELIMIT);
            CHECKF(strstr(tzr_last_error(), "index full") != NULL, "%s", tzr_last_error());
            tzr_shard_writer_abort(sw);
        }
    }
}

static void comm_without_mpi(void) {
#ifdef TZR_HAVE_MPI
    check_skip("built with MPI (tests/mpi_test.sh covers it)");
#else
    tzr_comm *c = (tzr_comm *)1;
    CHECK_RC(tzr_comm_open(&c, NULL), TZR_ENOTSUP);
    CHECK(c == NULL && strstr(tzr_last_error(), "without MPI") != NULL);
    tzr_shard_result *res = (tzr_shard_result *)1;
    CHECK_RC(tzr_comm_load(NULL, src_path, NULL, &res, NULL), TZR_ENOTSUP);
    CHECK(res == NULL);
    CHECK_RC(tzr_comm_load_device(NULL, src_path, NULL, 0, &res), TZR_ENOTSUP);
#endif
}

int main(void) {
    snprintf(src_path, sizeof src_path, "%s/src.tensors", check_tmpdir());
    path_in(dir8, sizeof dir8, check_tmpdir(), "s8");
    path_in(dir3, sizeof dir3, check_tmpdir(), "s3");
    path_in(dir4, sizeof dir4, check_tmpdir(), "s4");
    for (size_t i = 0; i < SM_COUNT; i++) default_dims[i] = SM[i].dim;
    int rc = sm_write(src_path);
    tzr_reader *r = NULL;
    if (!rc) rc = tzr_reader_open(&r, src_path, NULL);
    const char *dirs[] = {dir8, dir3, dir4};
    int ns[] = {8, 3, 4};
    for (int k = 0; k < 3 && !rc; k++) {
        char prefix[1024];
        mkdir(dirs[k], 0755);
        path_in(prefix, sizeof prefix, dirs[k], "model");
        /* 8 shards: big.weight by the default rule; 3 and 4 by a rule (uneven for 3) */
        rc = tzr_shard_split(r, prefix, ns[k], k ? SM_RULES ",big.weight=0" : SM_RULES, NULL);
    }
    tzr_reader_free(r);
    if (rc) {
        printf("FAIL setup: %s\n", tzr_last_error());
        return 1;
    }
    RUN(split_layout);
    RUN(reload_8_to_3);
    RUN(reload_8_to_8);
    RUN(reload_3_to_8);
    RUN(reload_4_to_1);
    RUN(reload_8_to_5);
    RUN(reload_device_8_to_3);
    RUN(reload_device_3_to_8);
    RUN(reload_device_4_to_1);
    RUN(rules_on_load);
    RUN(plain_file_set);
    RUN(load_into_async_sink);
    RUN(writer_api);
    RUN(writer_name_without_json);
    RUN(build_rejects);
    RUN(bad_manifests);
    RUN(bad_hashes_file);
    RUN(rank_reads_its_shard);
    RUN(ranks_side_by_side);
    RUN(ranks_and_checks_side_by_side);
    RUN(shard_back_after_missing);
    RUN(first_broken_shard_reported);
    RUN(corrupt_shard_data);
    RUN(replaced_shard);
    RUN(split_no_replace_manifest);
    RUN(split_many_small_sizes_indexes);
    RUN(shared_splits);
    RUN(comm_without_mpi);
    RUN(replicated_holders);
    return check_done();
}
