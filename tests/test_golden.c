/* Compatibility with tensorizer 2.11.1: every golden file reads back as its
 * manifest says, every hash verifies, and the writer reproduces every
 * unencrypted golden file byte for byte from the manifest's tensors. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "golden.h"
#include "tzr_load.h"

static golden_file *G;
static int NG;

static int open_golden(const golden_file *g, tzr_reader **r, int verify, int use_password) {
    char path[512];
    golden_path(g, path, sizeof path);
    tzr_reader_options o = TZR_READER_OPTIONS_INIT;
    o.verify = verify;
    o.read_headers = 1; /* module_idx comes from the headers */
    if (g->has_key && !use_password) o.crypt.key = g->key;
    if (g->password && (use_password || !g->has_key)) {
        o.crypt.password = g->password;
        o.crypt.password_len = strlen(g->password);
    }
    return tzr_reader_open(r, path, &o);
}

static void check_contents(const golden_file *g, tzr_reader *r) {
    CHECK(tzr_reader_count(r) == g->n);
    for (size_t i = 0; i < g->n && i < tzr_reader_count(r); i++) {
        const golden_tensor *e = &g->t[i];
        const tzr_tensor_info *t = tzr_reader_tensor(r, i);
        CHECK(t->name_len == e->name_len && memcmp(t->name, e->name, e->name_len) == 0);
        CHECK(t->structured == e->structured);
        CHECK((int)t->type == e->type);
        CHECK(t->module_idx == e->module_idx);
        CHECK(t->dtype_len == e->dtype_len && memcmp(t->dtype_str, e->dtype, e->dtype_len) == 0);
        CHECK(t->ndim == e->ndim);
        for (uint32_t d = 0; d < t->ndim && d < e->ndim; d++) CHECK(t->shape[d] == e->shape[d]);
        CHECK(t->meta == e->meta);
        size_t idx;
        CHECK_OK(tzr_reader_find(r, e->name, e->name_len, &idx));
        CHECK(idx == i);
        unsigned char *buf = malloc(t->nbytes + 1);
        memset(buf, 0xAB, t->nbytes + 1);
        CHECK_OK(tzr_reader_read(r, i, buf, t->nbytes));
        CHECK(golden_data_ok(e, buf, t->nbytes));
        CHECK(buf[t->nbytes] == 0xAB); /* nothing written past the tensor */
        CHECK_OK(tzr_reader_verify(r, i));
        free(buf);
    }
}

static void golden_reads(void) {
    for (int f = 0; f < NG; f++) {
        tzr_reader *r = NULL;
        int rc = open_golden(&G[f], &r, 1, 0);
        CHECK_RC(rc, 0);
        if (rc) continue;
        check_contents(&G[f], r);
        tzr_reader_free(r);
    }
}

/* The pipelined load of every golden file, headers not read at open, not
 * verified (plaintext headers read with data are then checked, not kept),
 * verified, and verified at the CRC32 level on three threads (against the
 * CRC32s tensorizer stored): bytes and module indices as tensorizer's
 * manifest says. */
static void golden_pipeline_loads(void) {
    size_t known = 0; /* module indices learnt from headers only checked */
    for (int f = 0; f < NG; f++)
        for (int verify = 0; verify < 3; verify++) {
            char path[512];
            golden_path(&G[f], path, sizeof path);
            tzr_reader_options o = TZR_READER_OPTIONS_INIT;
            o.verify = verify;
            if (G[f].has_key) o.crypt.key = G[f].key;
            else if (G[f].password) {
                o.crypt.password = G[f].password;
                o.crypt.password_len = strlen(G[f].password);
            }
            tzr_reader *r = NULL;
            CHECK_OK(tzr_reader_open(&r, path, &o));
            if (!r) continue;
            tzr_sink *sink = NULL;
            CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
            tzr_load_options lo = TZR_LOAD_OPTIONS_INIT;
            if (verify == 2) {
                lo.verify_level = TZR_VERIFY_CRC32;
                lo.chunk_bytes = 65536;
                lo.threads = 3;
            }
            CHECK_OK(tzr_load(r, sink, &lo, NULL));
            for (size_t i = 0; i < G[f].n && i < tzr_reader_count(r); i++) {
                const golden_tensor *e = &G[f].t[i];
                const tzr_tensor_info *t = tzr_reader_tensor(r, i);
                /* Verified: every header was read. Otherwise only those read
                 * with their data (not meta tensors, not large ones read in
                 * place) are known, and a known one must be right. */
                if (verify) CHECK(t->module_idx == e->module_idx);
                else CHECK(t->module_idx == e->module_idx || t->module_idx == -1);
                known += !verify && t->module_idx != -1;
                void *d = NULL;
                uint64_t len = 0;
                CHECK_OK(tzr_sink_host_data(sink, i, &d, &len));
                CHECK(golden_data_ok(e, d, len));
            }
            tzr_sink_free(sink);
            tzr_reader_free(r);
        }
    CHECK(known > 0);
}

static void golden_versions(void) {
    static const struct { const char *file; uint32_t version; int enc; } want[] = {
        {"plain_v1.tensors", 1, 0}, {"structured_v1.tensors", 1, 0}, {"bf16_v2.tensors", 2, 0},
        {"meta_v4.tensors", 4, 0},  {"enc_key_v3.tensors", 3, 1},    {"enc_pwhash_v3.tensors", 3, 1},
        {"enc_meta_v4.tensors", 4, 1}};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        for (int f = 0; f < NG; f++) {
            if (strcmp(G[f].file, want[k].file)) continue;
            tzr_reader *r;
            CHECK_OK(open_golden(&G[f], &r, 0, 0));
            if (!r) continue;
            CHECK(tzr_reader_data_version(r) == want[k].version);
            CHECK(tzr_reader_encrypted(r) == want[k].enc);
            tzr_reader_free(r);
        }
}

static void golden_password(void) {
    for (int f = 0; f < NG; f++) {
        if (!G[f].password) continue;
        tzr_reader *r;
        CHECK_OK(open_golden(&G[f], &r, 1, 1));
        if (!r) continue;
        check_contents(&G[f], r);
        tzr_reader_free(r);
    }
}

static void golden_bf16_dtype(void) {
    for (int f = 0; f < NG; f++) {
        if (strcmp(G[f].file, "bf16_v2.tensors")) continue;
        tzr_reader *r;
        CHECK_OK(open_golden(&G[f], &r, 0, 0));
        const tzr_tensor_info *t = tzr_reader_tensor(r, 0);
        CHECK(t->dtype == TZR_DTYPE_BF16 && t->opaque && t->itemsize == 2);
        tzr_reader_free(r);
    }
}

static void golden_structured_bytes(void) {
    /* The raw bytes tensorizer stored, written out by hand. */
    for (int f = 0; f < NG; f++) {
        if (strcmp(G[f].file, "structured_v1.tensors")) continue;
        tzr_reader *r;
        CHECK_OK(open_golden(&G[f], &r, 0, 0));
        const char want[] = "\x1e[\"model\",\"layers\",0,\"w\"]";
        const tzr_tensor_info *t = tzr_reader_tensor(r, 0);
        CHECK(t->name_len == sizeof want - 1 && memcmp(t->name, want, sizeof want - 1) == 0);
        tzr_reader_free(r);
    }
}

static void golden_wrong_key(void) {
    for (int f = 0; f < NG; f++) {
        if (!G[f].has_key) continue;
        char path[512];
        golden_path(&G[f], path, sizeof path);
        tzr_reader_options o = TZR_READER_OPTIONS_INIT;
        unsigned char bad[32];
        memcpy(bad, G[f].key, 32);
        bad[0] ^= 1;
        o.crypt.key = bad;
        tzr_reader *r;
        CHECK_OK(tzr_reader_open(&r, path, &o));
        if (!r) continue;
        unsigned char buf[64];
        CHECK_RC(tzr_reader_read(r, 0, buf, sizeof buf), TZR_ECRYPT);
        CHECK(strstr(tzr_last_error(), "'small'") != NULL);
        tzr_reader_free(r);
        /* No key at all. */
        CHECK_OK(tzr_reader_open(&r, path, NULL));
        CHECK_RC(tzr_reader_read(r, 0, buf, sizeof buf), TZR_ECRYPT);
        CHECK(strstr(tzr_last_error(), "key or password") != NULL);
        tzr_reader_free(r);
    }
    /* Wrong password. */
    for (int f = 0; f < NG; f++) {
        if (!G[f].password) continue;
        char path[512];
        golden_path(&G[f], path, sizeof path);
        tzr_reader_options o = TZR_READER_OPTIONS_INIT;
        o.crypt.password = "tesT";
        o.crypt.password_len = 4;
        tzr_reader *r;
        CHECK_OK(tzr_reader_open(&r, path, &o));
        unsigned char buf[64];
        CHECK_RC(tzr_reader_read(r, 0, buf, sizeof buf), TZR_ECRYPT);
        tzr_reader_free(r);
    }
    /* A key for an unencrypted file. */
    char path[512];
    snprintf(path, sizeof path, "%s/plain_v1.tensors", check_golden_dir());
    tzr_reader_options o = TZR_READER_OPTIONS_INIT;
    unsigned char key[32] = {0};
    o.crypt.key = key;
    tzr_reader *r;
    CHECK_RC(tzr_reader_open(&r, path, &o), TZR_ECRYPT);
}

static int write_manifest_tensors(const golden_file *g, const char *out, const tzr_writer_options *wo) {
    tzr_writer *w;
    int rc = tzr_writer_open(&w, out, wo);
    if (rc) return rc;
    /* Declared up front, as tensorize does: files this small keep 256 KiB. */
    uint64_t names = 0, dtypes = 0, dims = 0;
    for (size_t i = 0; i < g->n; i++) names += g->t[i].name_len, dtypes += g->t[i].dtype_len, dims += g->t[i].ndim;
    if ((rc = tzr_writer_reserve(w, g->n, names, dtypes, dims, 0))) {
        tzr_writer_abort(w);
        return rc;
    }
    for (size_t i = 0; i < g->n; i++) {
        const golden_tensor *e = &g->t[i];
        tzr_tensor_desc d = {0};
        d.name = e->name;
        d.name_len = e->name_len;
        d.type = (tzr_tensor_type)e->type;
        d.module_idx = (uint16_t)e->module_idx;
        d.dtype_str = e->dtype;
        d.dtype_len = e->dtype_len;
        d.ndim = e->ndim;
        d.shape = e->shape;
        d.meta = e->meta;
        rc = tzr_writer_add(w, &d, e->data);
        if (rc) {
            tzr_writer_abort(w);
            return rc;
        }
    }
    return tzr_writer_close(w);
}

static void writer_reproduces_golden(void) {
    int done = 0;
    for (int f = 0; f < NG; f++) {
        const golden_file *g = &G[f];
        if (g->has_key || g->password) continue;
        char out[512], gpath[512];
        snprintf(out, sizeof out, "%s/%s", check_tmpdir(), g->file);
        golden_path(g, gpath, sizeof gpath);
        CHECK_OK(write_manifest_tensors(g, out, NULL));
        size_t a = 0, b = 0;
        unsigned char *mine = check_read_file(out, &a), *theirs = check_read_file(gpath, &b);
        CHECK(mine && theirs);
        if (!mine || !theirs) continue;
        CHECK(a == g->size && b == g->size);
        int same = a == b && memcmp(mine, theirs, a) == 0;
        if (!same) {
            size_t k = 0;
            while (k < a && k < b && mine[k] == theirs[k]) k++;
            fprintf(stderr, "  %s: first difference at byte %zu\n", g->file, k);
        }
        CHECK(same);
        char hex[65];
        golden_sha256_hex(mine, a, hex);
        CHECK(strcmp(hex, g->sha256) == 0);
        free(mine);
        free(theirs);
        done++;
    }
    CHECK(done == 4);
}

static void encrypted_round_trip(void) {
    for (int f = 0; f < NG; f++) {
        const golden_file *g = &G[f];
        if (!g->has_key && !g->password) continue;
        char out[512];
        snprintf(out, sizeof out, "%s/rt_%s", check_tmpdir(), g->file);
        tzr_writer_options wo = TZR_WRITER_OPTIONS_INIT;
        if (g->has_key) {
            wo.crypt.key = g->key;
        } else {
            wo.crypt.password = g->password;
            wo.crypt.password_len = strlen(g->password);
            wo.crypt.opslimit = 1;
            wo.crypt.memlimit = 8192;
        }
        /* Tensors the manifest gives only by hash come from the golden
         * file (checked against that hash in golden_reads). */
        golden_file copy = *g;
        copy.t = calloc(g->n, sizeof *copy.t);
        tzr_reader *gr;
        CHECK_OK(open_golden(g, &gr, 1, 0));
        for (size_t i = 0; i < g->n; i++) {
            copy.t[i] = g->t[i];
            if (!g->t[i].data && !g->t[i].meta && gr) {
                const tzr_tensor_info *t = tzr_reader_tensor(gr, i);
                copy.t[i].data = malloc(t->nbytes);
                copy.t[i].data_len = t->nbytes;
                CHECK_OK(tzr_reader_read(gr, i, copy.t[i].data, t->nbytes));
            }
        }
        tzr_reader_free(gr);
        CHECK_OK(write_manifest_tensors(&copy, out, &wo));
        /* Same shape as the golden file: the size is deterministic. */
        size_t a = 0;
        unsigned char *mine = check_read_file(out, &a);
        CHECK(mine && a == g->size);
        free(mine);
        tzr_reader_options o = TZR_READER_OPTIONS_INIT;
        o.verify = 1;
        o.read_headers = 1;
        if (g->has_key) o.crypt.key = g->key;
        else {
            o.crypt.password = g->password;
            o.crypt.password_len = strlen(g->password);
        }
        tzr_reader *r;
        CHECK_OK(tzr_reader_open(&r, out, &o));
        if (!r) continue;
        check_contents(g, r);
        tzr_reader_free(r);
        for (size_t i = 0; i < g->n; i++)
            if (copy.t[i].data != g->t[i].data) free(copy.t[i].data);
        free(copy.t);
    }
}

static void writer_rejects(void) {
    char out[512];
    snprintf(out, sizeof out, "%s/rejects.tensors", check_tmpdir());
    tzr_writer *w;
    CHECK_OK(tzr_writer_open(&w, out, NULL));
    uint64_t shape[1] = {2};
    float data[2] = {1, 2};
    tzr_tensor_desc d = {"a", 1, TZR_PARAM, 0, NULL, 0, TZR_DTYPE_F32, 1, shape, 0, sizeof(tzr_tensor_desc)};
    CHECK_OK(tzr_writer_add(w, &d, data));
    CHECK_RC(tzr_writer_add(w, &d, data), TZR_EDUP);
    tzr_tensor_desc empty = d;
    empty.name_len = 0;
    CHECK_RC(tzr_writer_add(w, &empty, data), TZR_EINVAL);
    tzr_tensor_desc structured = d;
    structured.name = "\x1e[\"x\"]";
    structured.name_len = 6;
    CHECK_RC(tzr_writer_add(w, &structured, data), TZR_EINVAL); /* needs state_dict */
    uint64_t huge[1] = {(uint64_t)1 << 32};
    tzr_tensor_desc big = d;
    big.name = "b";
    big.shape = huge;
    CHECK_RC(tzr_writer_add(w, &big, data), TZR_ELIMIT);
    CHECK_OK(tzr_writer_close(w));
    tzr_reader *r;
    CHECK_OK(tzr_reader_open(&r, out, NULL));
    CHECK(r && tzr_reader_count(r) == 1);
    tzr_reader_free(r);
}

static void writer_index_overflow(void) {
    char out[512];
    snprintf(out, sizeof out, "%s/overflow.tensors", check_tmpdir());
    tzr_writer_options wo = TZR_WRITER_OPTIONS_INIT;
    wo.metadata_size = 100; /* room for two 33-byte entries */
    tzr_writer *w;
    CHECK_OK(tzr_writer_open(&w, out, &wo));
    uint64_t shape[1] = {1};
    float v = 1;
    tzr_tensor_desc d = {"t0", 2, TZR_PARAM, 0, NULL, 0, TZR_DTYPE_F32, 1, shape, 0, sizeof(tzr_tensor_desc)};
    CHECK_OK(tzr_writer_add(w, &d, &v)); /* 29+2+3+4 = 38 bytes */
    d.name = "t1";
    CHECK_OK(tzr_writer_add(w, &d, &v));
    d.name = "t2";
    CHECK_RC(tzr_writer_add(w, &d, &v), TZR_ELIMIT);
    CHECK(strstr(tzr_last_error(), "index full") != NULL);
    CHECK_OK(tzr_writer_close(w));
    tzr_reader *r;
    CHECK_OK(tzr_reader_open(&r, out, NULL));
    CHECK(r && tzr_reader_count(r) == 2);
    tzr_reader_free(r);
}

/* tzr_writer_reserve: the index is exactly the declared entries once they
 * outgrow 256 KiB; only before the first tensor; metadata_size wins. */
static void writer_reserve(void) {
    char out[512];
    snprintf(out, sizeof out, "%s/reserve.tensors", check_tmpdir());
    enum { N = 20000 };
    tzr_writer *w;
    CHECK_OK(tzr_writer_open(&w, out, NULL));
    uint64_t shape[1] = {1}, names = 0;
    char name[32];
    for (int i = 0; i < N; i++) names += (uint64_t)snprintf(name, sizeof name, "moe.%d", i);
    CHECK_OK(tzr_writer_reserve(w, N, names, 3 * N, N, 4 * N));
    float v = 2;
    tzr_tensor_desc d = {name, 0, TZR_PARAM, 0, NULL, 0, TZR_DTYPE_F32, 1, shape, 0, sizeof(tzr_tensor_desc)};
    for (int i = 0; i < N; i++) {
        d.name_len = (size_t)snprintf(name, sizeof name, "moe.%d", i);
        CHECK_OK(tzr_writer_add(w, &d, &v));
    }
    CHECK_RC(tzr_writer_reserve(w, 1, 1, 3, 1, 4), TZR_EINVAL); /* records are placed */
    CHECK_OK(tzr_writer_close(w));
    size_t len = 0;
    unsigned char *b = check_read_file(out, &len);
    uint64_t m = 0;
    for (int k = 7; b && len > 73 && k >= 0; k--) m = m << 8 | b[65 + k];
    /* 29 + name + "<f4" + one dim, per formats/tensorizer.md 3 */
    CHECKF(m == 36ull * N + names, "index %llu bytes", (unsigned long long)m);
    free(b);
    tzr_reader *r;
    CHECK_OK(tzr_reader_open(&r, out, NULL));
    CHECK(r && tzr_reader_count(r) == N);
    tzr_reader_free(r);

    tzr_writer_options wo = TZR_WRITER_OPTIONS_INIT;
    wo.metadata_size = 100; /* an override: reserve keeps it */
    CHECK_OK(tzr_writer_open(&w, out, &wo));
    CHECK_OK(tzr_writer_reserve(w, 3, 6, 9, 3, 12));
    d.name = "t0", d.name_len = 2;
    CHECK_OK(tzr_writer_add(w, &d, &v));
    d.name = "t1";
    CHECK_OK(tzr_writer_add(w, &d, &v));
    d.name = "t2";
    CHECK_RC(tzr_writer_add(w, &d, &v), TZR_ELIMIT);
    CHECK(strstr(tzr_last_error(), "metadata_size") != NULL);
    tzr_writer_abort(w);
}

static void writer_atomic(void) {
    char out[512];
    snprintf(out, sizeof out, "%s/atomic.tensors", check_tmpdir());
    CHECK(check_write_file(out, "precious", 8) == 0);
    tzr_writer *w;
    CHECK_OK(tzr_writer_open(&w, out, NULL));
    uint64_t shape[1] = {1};
    float v = 1;
    tzr_tensor_desc d = {"t", 1, TZR_PARAM, 0, NULL, 0, TZR_DTYPE_F32, 1, shape, 0, sizeof(tzr_tensor_desc)};
    CHECK_OK(tzr_writer_add(w, &d, &v));
    tzr_writer_abort(w);
    size_t n = 0;
    unsigned char *b = check_read_file(out, &n);
    CHECK(b && n == 8 && memcmp(b, "precious", 8) == 0);
    free(b);
    /* No temporary files are left behind. */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | grep -c tmp > /dev/null", check_tmpdir());
    CHECK(system(cmd) != 0);
    /* A directory that does not exist: clean error, nothing created. */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x.tensors", check_tmpdir());
    CHECK_RC(tzr_writer_open(&w, bad, NULL), TZR_EIO);
}

int main(void) {
    NG = golden_load(&G);
    if (NG <= 0) {
        printf("FAIL golden_manifest: cannot load\n");
        return 1;
    }
    RUN(golden_reads);
    RUN(golden_pipeline_loads);
    RUN(golden_versions);
    RUN(golden_password);
    RUN(golden_bf16_dtype);
    RUN(golden_structured_bytes);
    RUN(golden_wrong_key);
    RUN(writer_reproduces_golden);
    RUN(encrypted_round_trip);
    RUN(writer_rejects);
    RUN(writer_index_overflow);
    RUN(writer_reserve);
    RUN(writer_atomic);
    return check_done();
}
