/* Compressed tensors (libtzr's zstd extension, formats/tensorizer.md
 * section 11): round trips of every element size with and without the
 * byte-plane split, empty/0-d/meta tensors, multi-frame tensors,
 * incompressible data stored raw, encryption on top, pipeline loads into
 * every kind of sink, an uncompressed copy identical to a file written
 * without compression, the feature flag tensorizer refuses, and a table of
 * corrupt inputs with their exact codes. */
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <unistd.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "fake_sink.h"
#include "codec.h"
#include "compress.h"
#include "format.h"
#include "tzr_load.h"

static const uint8_t KEY[32] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11, 12, 13, 14, 15, 16,
                                17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};

enum { D_NORMAL, D_RANDOM, D_ZERO };

typedef struct tspec {
    const char *name;
    tzr_dtype dtype;
    uint32_t ndim;
    uint64_t shape[2];
    int kind;
    int meta;
} tspec;

static uint64_t rng(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Deterministic data: "normal" is bf16-like (narrow high bytes, noisy low
 * bytes), so it compresses with the split; "random" never compresses. */
static uint8_t *make_data(const tspec *t, uint64_t *len, size_t seed) {
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->ndim; d++) n *= t->shape[d];
    uint32_t is = tzr_dtype_size(t->dtype);
    *len = n * is;
    uint8_t *b = malloc(*len ? *len : 1);
    uint64_t x = 0x9E3779B97F4A7C15ull + seed * 7919;
    for (uint64_t e = 0; e < n; e++) {
        uint64_t r = rng(&x);
        for (uint32_t k = 0; k < is; k++) {
            uint8_t v;
            if (t->kind == D_ZERO) v = 0;
            else if (t->kind == D_RANDOM) v = (uint8_t)(r >> (8 * (k % 8)));
            else v = k + 1 == is ? (uint8_t)(0x3c + (r & 3)) : (uint8_t)(r >> (8 * (k % 8)));
            b[e * is + k] = v;
        }
    }
    return b;
}

static uint64_t write_meta_size; /* 0: the writer's default reservation */
static int write_codec;          /* compress with this codec id (0: zstd) */

static int write_set(const char *path, const tspec *ts, size_t n, int compress, int planes_mode,
                     uint64_t frame, const uint8_t *key) {
    tzr_writer_options o = TZR_WRITER_OPTIONS_INIT;
    o.metadata_size = write_meta_size;
    o.crypt.key = key;
    o.compression = compress ? (write_codec ? write_codec : TZR_COMPRESSION_ZSTD) : TZR_COMPRESSION_NONE;
    o.frame_size = frame;
    o.byte_planes = planes_mode;
    o.threads = 3;
    tzr_writer *w;
    int rc = tzr_writer_open(&w, path, &o);
    if (rc) return rc;
    for (size_t i = 0; i < n && !rc; i++) {
        uint64_t len;
        uint8_t *data = make_data(&ts[i], &len, i);
        tzr_tensor_desc d = {ts[i].name, strlen(ts[i].name), TZR_PARAM, 0, NULL, 0, ts[i].dtype,
                             ts[i].ndim, ts[i].shape, ts[i].meta, sizeof(tzr_tensor_desc)};
        rc = tzr_writer_add(w, &d, data);
        free(data);
    }
    if (rc) {
        tzr_writer_abort(w);
        return rc;
    }
    return tzr_writer_close(w);
}

static tzr_reader *open_r(const char *path, const uint8_t *key, int verify) {
    tzr_reader_options o = TZR_READER_OPTIONS_INIT;
    o.crypt.key = key;
    o.verify = verify;
    o.read_headers = 1;
    tzr_reader *r = NULL;
    int rc = tzr_reader_open(&r, path, &o);
    if (rc) check_fail("open %s: %s", path, tzr_last_error());
    return r;
}

/* Every tensor reads back (tzr_reader_read, verified) as its source. */
static void check_reads(tzr_reader *r, const tspec *ts, size_t n) {
    CHECK(tzr_reader_count(r) == n);
    for (size_t i = 0; i < n && i < tzr_reader_count(r); i++) {
        uint64_t len;
        uint8_t *want = make_data(&ts[i], &len, i);
        if (ts[i].meta) memset(want, 0, len);
        const tzr_tensor_info *t = tzr_reader_tensor(r, i);
        CHECK(t->nbytes == len);
        CHECK(t->uncompressed_length == (ts[i].meta ? 0 : len));
        uint8_t *got = malloc(len + 1);
        CHECK_OK(tzr_reader_read(r, i, got, len));
        CHECK(memcmp(got, want, len) == 0);
        CHECK_OK(tzr_reader_verify(r, i));
        free(got);
        free(want);
    }
}

static char dir_path[512];
static const char *tmp(const char *name) {
    static char buf[8][600];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir_path, name);
    return buf[k];
}

/* 4096-byte frames: tensors of 22 KiB make several frames each. */
#define FRAME 4096
static const tspec DTYPES[] = {
    {"u8", TZR_DTYPE_U8, 1, {22000, 0}, D_NORMAL, 0},
    {"bf16", TZR_DTYPE_BF16, 2, {110, 100}, D_NORMAL, 0},
    {"f16", TZR_DTYPE_F16, 1, {11000, 0}, D_NORMAL, 0},
    {"f32", TZR_DTYPE_F32, 2, {50, 110}, D_NORMAL, 0},
    {"f64", TZR_DTYPE_F64, 1, {2750, 0}, D_NORMAL, 0},
    {"c128", TZR_DTYPE_C128, 1, {1375, 0}, D_NORMAL, 0},
    {"zeros", TZR_DTYPE_I32, 1, {100000, 0}, D_ZERO, 0},
    {"noise", TZR_DTYPE_BF16, 1, {30000, 0}, D_RANDOM, 0},
    {"scalar", TZR_DTYPE_F32, 0, {0, 0}, D_NORMAL, 0},
    {"empty", TZR_DTYPE_BF16, 2, {0, 7}, D_NORMAL, 0},
    {"meta", TZR_DTYPE_BF16, 2, {64, 64}, D_NORMAL, 1},
    {"tiny", TZR_DTYPE_F32, 1, {3, 0}, D_ZERO, 0},
};
#define NDT (sizeof DTYPES / sizeof DTYPES[0])

static void roundtrip_dtypes(void) {
    for (int planes = 0; planes < 2; planes++) {
        const char *path = tmp(planes ? "rt_noplanes.tensors" : "rt_planes.tensors");
        CHECK_OK(write_set(path, DTYPES, NDT, 1, planes ? TZR_PLANES_OFF : TZR_PLANES_AUTO, FRAME, NULL));
        tzr_reader *r = open_r(path, NULL, 1);
        if (!r) return;
        CHECK(tzr_reader_compressed(r));
        CHECK(tzr_reader_data_version(r) == 4);
        check_reads(r, DTYPES, NDT);
        for (size_t i = 0; i < NDT; i++) {
            const tzr_tensor_info *t = tzr_reader_tensor(r, i);
            int shrinks = DTYPES[i].kind != D_RANDOM && t->nbytes > 64 && !DTYPES[i].meta;
            CHECK(t->compression == (shrinks ? TZR_COMPRESSION_ZSTD : TZR_COMPRESSION_NONE));
            CHECK(t->stored_length == t->data_length);
            if (shrinks) {
                CHECK(t->data_length < t->nbytes);
                CHECK(t->frame_size == FRAME && t->frames == (t->nbytes + FRAME - 1) / FRAME);
                uint32_t want_planes = !planes && (t->itemsize == 2 || t->itemsize == 4) ? t->itemsize : 1;
                CHECK(t->byte_planes == want_planes);
            } else {
                CHECK(t->data_length == (DTYPES[i].meta ? 0 : t->nbytes));
            }
        }
        tzr_reader_free(r);
    }
}

/* The flags field: bit 1 (value 2) set, so tensorizer 2.11.1 (which refuses
 * any flags value above 1) refuses the file; bit 0 joins it when encrypted. */
static void feature_flags(void) {
    for (int enc = 0; enc < 2; enc++) {
        const char *path = tmp("flags.tensors");
        CHECK_OK(write_set(path, DTYPES, 3, 1, 0, FRAME, enc ? KEY : NULL));
        size_t n;
        uint8_t *b = check_read_file(path, &n);
        CHECK(b && n > 73);
        CHECK(tzr_ld32(b + 5) == 4);
        CHECK(b[9] == (enc ? 3 : 2));
        int rest = 0;
        for (int k = 10; k < 41; k++) rest |= b[k];
        CHECK(rest == 0);
        free(b);
    }
}

/* Uncompressed copy: read every tensor of the compressed file and write
 * them plainly; the result equals the file written without compression. */
static void uncompressed_copy_identical(void) {
    const char *plain = tmp("plain.tensors"), *comp = tmp("comp.tensors"), *copy = tmp("copy.tensors");
    CHECK_OK(write_set(plain, DTYPES, NDT, 0, 0, 0, NULL));
    CHECK_OK(write_set(comp, DTYPES, NDT, 1, 0, FRAME, NULL));
    tzr_reader *r = open_r(comp, NULL, 1);
    if (!r) return;
    tzr_writer *w;
    CHECK_OK(tzr_writer_open(&w, copy, NULL));
    for (size_t i = 0; i < tzr_reader_count(r); i++) {
        const tzr_tensor_info *t = tzr_reader_tensor(r, i);
        uint8_t *buf = malloc(t->nbytes + 1);
        CHECK_OK(tzr_reader_read(r, i, buf, t->nbytes));
        tzr_tensor_desc d = {t->name, t->name_len, t->type, (uint16_t)t->module_idx, t->dtype_str, t->dtype_len,
                             t->dtype, t->ndim, t->shape, t->meta, sizeof(tzr_tensor_desc)};
        CHECK_OK(tzr_writer_add(w, &d, buf));
        free(buf);
    }
    CHECK_OK(tzr_writer_close(w));
    tzr_reader_free(r);
    size_t n1, n2;
    uint8_t *a = check_read_file(plain, &n1), *b = check_read_file(copy, &n2);
    CHECK(a && b && n1 == n2 && memcmp(a, b, n1) == 0);
    free(a);
    free(b);
    /* Hashes cover the uncompressed tensor: a compressed header's hashable
     * form equals the plain header's, so the stored SHA-256 are identical. */
    tzr_reader *rp = open_r(plain, NULL, 0), *rc = open_r(comp, NULL, 0);
    size_t np, nc;
    uint8_t *bp = check_read_file(plain, &np), *bc = check_read_file(comp, &nc);
    for (size_t i = 0; rp && rc && i < NDT; i++) {
        const tzr_tensor_info *tp = tzr_reader_tensor(rp, i), *tc = tzr_reader_tensor(rc, i);
        tzr_tensor_header hp, hc;
        CHECK_OK(tzr_parse_tensor_header(bp + tp->header_offset, tp->data_offset - tp->header_offset, 0, 0, &hp));
        CHECK_OK(tzr_parse_tensor_header(bc + tc->header_offset, tc->data_offset - tc->header_offset, 0, 1, &hc));
        CHECK(hc.comp.present && memcmp(hp.sha256, hc.sha256, 32) == 0 && hp.crc32 == hc.crc32);
    }
    free(bp);
    free(bc);
    tzr_reader_free(rp);
    tzr_reader_free(rc);
}

/* Big enough for several frames, several crypt chunks and several units. */
static const tspec BIG[] = {
    {"embed", TZR_DTYPE_BF16, 2, {1500, 2048}, D_NORMAL, 0},     /* 6 MB */
    {"small.a", TZR_DTYPE_F32, 1, {300, 0}, D_NORMAL, 0},
    {"noise", TZR_DTYPE_U8, 1, {300000, 0}, D_RANDOM, 0},
    {"meta", TZR_DTYPE_F32, 1, {1000, 0}, D_NORMAL, 1},
    {"small.b", TZR_DTYPE_BF16, 1, {5000, 0}, D_NORMAL, 0},
    {"f32big", TZR_DTYPE_F32, 2, {700, 1024}, D_NORMAL, 0},      /* 2.8 MB */
    {"zeros", TZR_DTYPE_I64, 1, {400000, 0}, D_ZERO, 0},        /* 3.2 MB */
    {"empty", TZR_DTYPE_F32, 1, {0, 0}, D_NORMAL, 0},
};
#define NBIG (sizeof BIG / sizeof BIG[0])
static char big_path[600], big_enc_path[600];

static void check_host(tzr_sink *sink, const tspec *ts, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint64_t len;
        uint8_t *want = make_data(&ts[i], &len, i);
        if (ts[i].meta) memset(want, 0, len);
        void *got;
        uint64_t glen;
        CHECK_OK(tzr_sink_host_data(sink, i, &got, &glen));
        CHECK(glen == len && memcmp(got, want, len) == 0);
        free(want);
    }
}

static void encrypted_compressed(void) {
    tzr_reader *r = open_r(big_enc_path, KEY, 1);
    if (!r) return;
    CHECK(tzr_reader_encrypted(r) && tzr_reader_compressed(r));
    check_reads(r, BIG, NBIG);
    CHECK(tzr_reader_tensor(r, 0)->compression == TZR_COMPRESSION_ZSTD);
    CHECK(tzr_reader_tensor(r, 0)->data_length > TZR_CRYPT_CHUNK); /* several crypt chunks */
    tzr_reader_free(r);
    /* A wrong key fails cleanly. */
    uint8_t bad[32];
    memcpy(bad, KEY, 32);
    bad[0] ^= 1;
    r = open_r(big_enc_path, bad, 0);
    uint8_t *buf = malloc(tzr_reader_tensor(r, 0)->nbytes);
    CHECK_RC(tzr_reader_read(r, 0, buf, tzr_reader_tensor(r, 0)->nbytes), TZR_ECRYPT);
    free(buf);
    tzr_reader_free(r);
}

static void pipeline_host(void) {
    size_t chunks[] = {4096, 65536, 1 << 20, 8 << 20};
    int threads[] = {1, 2, 4, 3};
    for (int enc = 0; enc < 2; enc++)
        for (int v = 0; v < 2; v++)
            for (size_t c = 0; c < 4; c++) {
                tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
                ro.verify = v;
                ro.crypt.key = enc ? KEY : NULL;
                tzr_reader *r;
                CHECK_OK(tzr_reader_open(&r, enc ? big_enc_path : big_path, &ro)); /* headers lazily */
                tzr_sink *sink;
                CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
                tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
                o.chunk_bytes = chunks[c];
                o.ring_bytes = 6 * chunks[c];
                o.threads = threads[c];
                tzr_load_stats st;
                CHECK_OK(tzr_load(r, sink, &o, &st));
                CHECK(st.tensors == NBIG);
                check_host(sink, BIG, NBIG);
                tzr_sink_free(sink);
                tzr_reader_free(r);
            }
}

static void pipeline_null_budget(void) {
    for (int enc = 0; enc < 2; enc++) {
        tzr_reader *r = open_r(enc ? big_enc_path : big_path, enc ? KEY : NULL, 1);
        if (!r) return;
        tzr_sink *sink;
        CHECK_OK(tzr_sink_null_new(&sink));
        tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
        o.ring_bytes = (enc ? 48 : 16) << 20;
        o.chunk_bytes = 1 << 20;
        o.threads = 4;
        tzr_load_stats st;
        CHECK_OK(tzr_load(r, sink, &o, &st));
        CHECK(st.staging_bytes <= o.ring_bytes);
        uint64_t total = 0, stored = 0;
        for (size_t i = 0; i < NBIG; i++) {
            total += tzr_reader_tensor(r, i)->nbytes; /* meta zeros are delivered bytes too */
            stored += tzr_reader_tensor(r, i)->data_length;
        }
        CHECK(st.bytes == total);
        CHECK(st.bytes_read < total);                       /* compressed reads less */
        CHECK(st.bytes_read >= stored);
        if (enc) CHECK(st.bytes_read <= stored + stored / 4 + 2 * TZR_CRYPT_CHUNK);
        tzr_sink_free(sink);
        tzr_reader_free(r);
    }
}

static void pipeline_async_sink(void) {
    for (int enc = 0; enc < 2; enc++)
        for (int verify = 0; verify < 2; verify++)
            for (int round = 0; round < 2; round++) {
                tzr_reader *r = open_r(enc ? big_enc_path : big_path, enc ? KEY : NULL, verify);
                if (!r) return;
                fake_sink *f = fake_sink_new(NBIG);
                tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
                o.chunk_bytes = round ? (1 << 20) : 65536;
                o.ring_bytes = 4 * o.chunk_bytes;
                o.threads = 3;
                CHECK_OK(tzr_load(r, &f->base, &o, NULL));
                for (size_t i = 0; i < NBIG; i++) {
                    uint64_t len;
                    uint8_t *want = make_data(&BIG[i], &len, i);
                    if (BIG[i].meta) memset(want, 0, len);
                    CHECK(f->dst[i] && memcmp(f->dst[i], want, len) == 0);
                    int once = 1;
                    for (uint64_t b = 0; !BIG[i].meta && b < len; b++) once &= f->writes[i][b] == 1;
                    CHECK(once);
                    free(want);
                }
                tzr_sink_free(&f->base);
                tzr_reader_free(r);
            }
}

/* ---- corrupt inputs --------------------------------------------------- */
typedef struct located {
    uint64_t hoff, doff, dlen;
    size_t comp_at;           /* file offset of the compression block's u64 length */
    tzr_comp_info ci;
} located;

/* Find tensor i's compression block in a file image. */
static int locate(const uint8_t *b, size_t n, size_t i, located *L) {
    tzr_source *src;
    tzr_source_open_memory(&src, b, n, "probe");
    tzr_reader *r;
    if (tzr_reader_open_source(&r, src, NULL)) return -1;
    const tzr_tensor_info *t = tzr_reader_tensor(r, i);
    L->hoff = t->header_offset;
    L->doff = t->data_offset;
    L->dlen = t->data_length;
    tzr_reader_free(r);
    tzr_tensor_header h;
    if (tzr_parse_tensor_header(b + L->hoff, L->doff - L->hoff, 0, 1, &h)) return -1;
    L->comp_at = L->hoff + h.comp_start;
    L->ci = h.comp;
    return 0;
}

/* Open (headers at open) then read and load everything; the first failure's
 * code, with the message checked to name the tensor where one is given. */
static int try_image(uint8_t *b, size_t n, const char *must_name) {
    tzr_source *src;
    tzr_source_open_memory(&src, b, n, "corrupt.tensors");
    tzr_reader_options o = TZR_READER_OPTIONS_INIT;
    o.verify = 1;
    tzr_reader *r;
    int rc = tzr_reader_open_source(&r, src, &o);
    if (rc) return rc;
    for (size_t i = 0; i < tzr_reader_count(r) && !rc; i++) {
        const tzr_tensor_info *t = tzr_reader_tensor(r, i);
        uint8_t *buf = malloc(t->nbytes + 1);
        rc = tzr_reader_read(r, i, buf, t->nbytes);
        free(buf);
    }
    if (rc && must_name && !(strstr(tzr_last_error(), must_name) && strstr(tzr_last_error(), "offset")))
        fprintf(stderr, "  message lacks tensor or offset: %s\n", tzr_last_error()), check_case_failed = 1;
    /* The pipeline agrees on the code. */
    int lrc = 0;
    if (tzr_reader_count(r)) {
        tzr_sink *sink;
        tzr_sink_null_new(&sink);
        tzr_load_options lo = TZR_LOAD_OPTIONS_INIT;
        lo.chunk_bytes = 8192;
        lo.threads = 2;
        lrc = tzr_load(r, sink, &lo, NULL);
        tzr_sink_free(sink);
        if (lrc != rc) fprintf(stderr, "  pipeline gave %d, reader %d: %s\n", lrc, rc, tzr_last_error()), check_case_failed = 1;
    }
    tzr_reader_free(r);
    return rc;
}

/* ---- frame directory (§11.5) ----------------------------------------- */
/* Where the directory's magic sits in a file image (0: none). */
static size_t find_dir(const uint8_t *b, size_t n) {
    for (size_t k = 73; k + 8 <= n; k++)
        if (memcmp(b + k, TZR_DIR_MAGIC, 8) == 0) return k;
    return 0;
}

/* The same tensors without a directory: a reservation that holds the
 * entries but not the directory's 16-byte prefix. */
static int write_without_dir(const char *with_dir, const char *path, const tspec *ts, size_t n, uint64_t frame) {
    size_t len;
    uint8_t *b = check_read_file(with_dir, &len);
    size_t at = b ? find_dir(b, len) : 0;
    free(b);
    if (!at) return -1;
    write_meta_size = at - 73 + 8;
    int rc = write_set(path, ts, n, 1, 0, frame, NULL);
    write_meta_size = 0;
    return rc;
}

/* Damaged headers, with and without a frame directory: with one, a header
 * that differs from it is refused for that; without, each check of the
 * header's own block has to catch the damage. */
static void corrupt_table_with(int with_dir) {
    const char *path = tmp("corrupt_src.tensors"), *plain = tmp("corrupt_plain.tensors");
    CHECK_OK(write_set(path, DTYPES, 4, 1, 0, FRAME, NULL)); /* bf16 is tensor 1, 5 frames */
    if (!with_dir) {
        const char *nodir = tmp("corrupt_nodir.tensors");
        CHECK_OK(write_without_dir(path, nodir, DTYPES, 4, FRAME));
        path = nodir;
    }
    CHECK_OK(write_set(plain, DTYPES, 4, 0, 0, 0, NULL));
    size_t n, pn;
    uint8_t *orig = check_read_file(path, &n), *porig = check_read_file(plain, &pn);
    located L;
    if (!orig || !porig || locate(orig, n, 1, &L)) {
        CHECK(0);
        return;
    }
    CHECK(L.ci.codec == TZR_CODEC_ZSTD && L.ci.nframes == 6);
    uint64_t body = L.comp_at + 8; /* codec u8, planes u8, frame u32, ulen u64, F u32, sizes */
    uint64_t f1_at = L.doff + tzr_comp_frame(&L.ci, 0);
    struct {
        const char *what;
        int code;
        int plain_base;
        uint64_t at;
        int op; /* 0 xor byte, 1 add to u32, 2 add to u64, 3 swap frames 0/last, 4 set byte */
        int64_t val;
    } cases[] = {
        {"corrupt frame magic", TZR_EFORMAT, 0, f1_at, 0, 0x55},
        {"frame table entry past the data", TZR_EFORMAT, 0, body + 18 + 4, 1, 1000},
        {"frame table entry shrunk", TZR_EFORMAT, 0, body + 18, 1, -1},
        {"frame count mismatch", TZR_EFORMAT, 0, body + 14, 1, 1},
        {"uncompressed length != shape", TZR_EFORMAT, 0, body + 6, 2, -2},
        {"uncompressed length off by frames", TZR_EFORMAT, 0, body + 6, 2, 3 * FRAME},
        {"frame decompresses to the wrong size", TZR_EFORMAT, 0, 0, 3, 0},
        {"unknown codec", TZR_EFORMAT, 0, body, 4, 7},
        {"bad plane count", TZR_EFORMAT, 0, body + 1, 4, 3},
        {"planes disagree with dtype", TZR_EFORMAT, 0, body + 1, 4, 4},
        {"frame size not a multiple of 64", TZR_EFORMAT, 0, body + 2, 1, 1},
        {"block length wrong", TZR_EFORMAT, 0, L.comp_at, 2, 4},
        {"flag set without blocks", TZR_EFORMAT, 1, 9, 5, 2},
        {"block without flag", TZR_EFORMAT, 0, 9, 4, 0},
        {"compressed flag in v3", TZR_EVERSION, 0, 5, 4, 3},
        {"unknown flag bit 2", TZR_EVERSION, 0, 9, 4, 6},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t len = cases[k].plain_base ? pn : n;
        uint8_t *b = malloc(len);
        memcpy(b, cases[k].plain_base ? porig : orig, len);
        uint64_t at = cases[k].at;
        switch (cases[k].op) {
        case 0: b[at] ^= (uint8_t)cases[k].val; break;
        case 1: tzr_st32(b + at, (uint32_t)(tzr_ld32(b + at) + cases[k].val)); break;
        case 2: tzr_st64(b + at, (uint64_t)(tzr_ld64(b + at) + cases[k].val)); break;
        case 3: {
            /* Swap the first (full) and the last (short) frame, table too. */
            uint32_t a = tzr_comp_frame(&L.ci, 0), z = tzr_comp_frame(&L.ci, L.ci.nframes - 1);
            uint8_t *fa = malloc(a), *fz = malloc(z);
            memcpy(fa, orig + L.doff, a);
            memcpy(fz, orig + L.doff + L.dlen - z, z);
            memmove(b + L.doff + z, orig + L.doff + a, L.dlen - a - z);
            memcpy(b + L.doff, fz, z);
            memcpy(b + L.doff + L.dlen - a, fa, a);
            tzr_st32(b + body + 18, z);
            tzr_st32(b + body + 18 + 4 * (L.ci.nframes - 1), a);
            free(fa);
            free(fz);
            break;
        }
        case 4: b[at] = (uint8_t)cases[k].val; break;
        case 5: b[5] = 4; b[at] = (uint8_t)cases[k].val; break;
        }
        int rc = try_image(b, len, cases[k].op == 0 || cases[k].op == 3 ? "'bf16'" : NULL);
        if (rc != cases[k].code) {
            fprintf(stderr, "  case '%s' (%s directory): got %d (%s), want %d\n", cases[k].what,
                    with_dir ? "with" : "without", rc, tzr_last_error(), cases[k].code);
            check_case_failed = 1;
        }
        free(b);
    }
    /* A flipped byte inside a frame never loads silently: zstd refuses it
     * or the hash of the uncompressed bytes does. */
    for (uint64_t k = 0; k < tzr_comp_frame(&L.ci, 0); k += 97) {
        uint8_t *b = malloc(n);
        memcpy(b, orig, n);
        b[L.doff + k] ^= 0x10;
        int rc = try_image(b, n, NULL);
        CHECK(rc == TZR_EFORMAT || rc == TZR_EHASH);
        free(b);
    }
    free(orig);
    free(porig);
}

static void corrupt_table(void) {
    corrupt_table_with(1);
    corrupt_table_with(0);
}


typedef struct counting {
    tzr_source base;
    tzr_source *inner;
    atomic_int reads;
    pthread_mutex_t lock;
    uint64_t (*seen)[2]; /* every read's offset and length */
    size_t nseen, cap;
} counting;

static int counting_read(tzr_source *s, void *buf, size_t len, uint64_t off) {
    counting *c = (counting *)s;
    atomic_fetch_add(&c->reads, 1);
    pthread_mutex_lock(&c->lock);
    if (c->nseen == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->seen = realloc(c->seen, c->cap * sizeof *c->seen);
    }
    c->seen[c->nseen][0] = off;
    c->seen[c->nseen++][1] = len;
    pthread_mutex_unlock(&c->lock);
    return c->inner->read_at(c->inner, buf, len, off);
}

/* Reads of tensor i's header alone (nothing of its data). */
static int header_only_reads(counting *c, const tzr_tensor_info *t) {
    int k = 0;
    for (size_t j = 0; j < c->nseen; j++)
        k += c->seen[j][0] <= t->header_offset && c->seen[j][0] + c->seen[j][1] <= t->data_offset &&
             c->seen[j][0] + c->seen[j][1] > t->header_offset;
    return k;
}

static void counting_destroy(tzr_source *s) {
    counting *c = (counting *)s;
    tzr_source_free(c->inner);
    pthread_mutex_destroy(&c->lock);
    free(c->seen);
    free(c);
}

/* A counting source over inner (a file or memory source). */
static counting *wrap_counting(tzr_source *inner) {
    counting *c = calloc(1, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
    c->inner = inner;
    c->base = *c->inner;
    c->base.read_at = counting_read;
    c->base.readv_at = NULL;
    c->base.is_cached = NULL;
    c->base.set_direct = NULL;
    c->base.destroy = counting_destroy;
    c->base.ctx = c;
    return c;
}

static tzr_reader *open_counting(const char *path, counting **out) {
    tzr_source *file = NULL;
    CHECK_OK(tzr_source_open_file(&file, path, 0));
    counting *c = wrap_counting(file);
    *out = c;
    tzr_reader *r = NULL;
    CHECK_OK(tzr_reader_open_source(&r, &c->base, NULL));
    return r;
}

/* The writer puts every compression block in the index reservation; a
 * reader then knows the frame tables at open (one index read), and the pipeline
 * never reads a zstd tensor's header on its own: its first unit carries it.
 * Without the directory every header is read first. Both load the same
 * bytes. */
static void frame_directory(void) {
    const char *nodir = tmp("big_nodir.tensors");
    CHECK_OK(write_without_dir(big_path, nodir, BIG, NBIG, 1 << 20));
    size_t len;
    uint8_t *b = check_read_file(nodir, &len);
    CHECK(b && find_dir(b, len) == 0);
    free(b);
    const char *paths[2] = {big_path, nodir};
    for (int k = 0; k < 2; k++)
        for (int v = 0; v < 2; v++) {
            counting *c;
            tzr_reader *r = open_counting(paths[k], &c);
            if (!r) continue;
            /* one read for prologue and index (with its frame directory),
             * one of the 8-byte end marker */
            CHECK(atomic_load(&c->reads) == 2);
            /* With the directory, frame counts are known before any header. */
            CHECK(k == 1 || (tzr_reader_tensor(r, 0)->compression == TZR_COMPRESSION_ZSTD &&
                             tzr_reader_tensor(r, 0)->frames > 1));
            CHECK(k == 0 || tzr_reader_tensor(r, 0)->compression == -1);
            int before = atomic_load(&c->reads);
            tzr_sink *sink;
            CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
            tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
            o.chunk_bytes = 1 << 20;
            o.threads = 3;
            o.verify = v;
            tzr_load_stats st;
            CHECK_OK(tzr_load(r, sink, &o, &st));
            check_host(sink, BIG, NBIG);
            CHECK((size_t)atomic_load(&c->reads) > (size_t)before);
            int alone = 0, zstd = 0;
            for (size_t i = 0; i < NBIG; i++) {
                const tzr_tensor_info *t = tzr_reader_tensor(r, i);
                if (t->compression != TZR_COMPRESSION_ZSTD || t->data_length == 0) continue;
                zstd++;
                alone += header_only_reads(c, t) > 0;
            }
            CHECK(zstd >= 4);
            if (k == 0) CHECK(alone == 0);
            else CHECK(alone == zstd);
            tzr_sink_free(sink);
            tzr_reader_free(r);
        }
    unlink(nodir);
}

/* A damaged directory: refused at open when it is inconsistent in itself
 * or with the index, and at load when a header disagrees with it. */
static void corrupt_directory(void) {
    const char *path = tmp("dir_src.tensors");
    CHECK_OK(write_set(path, DTYPES, 4, 1, 0, FRAME, NULL)); /* bf16 is tensor 1 */
    size_t n;
    uint8_t *orig = check_read_file(path, &n);
    size_t at = orig ? find_dir(orig, n) : 0;
    CHECK(at != 0);
    if (!at) {
        free(orig);
        return;
    }
    /* Tensor 1's block inside the directory: after tensor 0's. */
    size_t b0 = at + 16, b1 = b0 + 8 + (size_t)tzr_ld64(orig + b0);
    struct {
        const char *what;
        size_t at;
        int op; /* 1 add to u32, 2 add to u64, 4 set byte */
        int64_t val;
        int at_open;
        const char *msg;
    } cases[] = {
        {"directory runs past the index", at + 8, 2, 1 << 20, 1, "frame directory"},
        {"bytes after the last block", at + 8, 2, 4, 1, "after the last tensor's block"},
        {"frame table entry changed", b1 + 8 + 18, 1, 1, 1, "'bf16'"},
        {"block length wrong", b1, 2, 4, 1, "'bf16'"},
        {"planes differ from the header", b1 + 8 + 1, 4, 1, 0, "disagrees with the frame directory"},
        {"ulen disagrees with the shape", b1 + 8 + 6, 2, -2, 1, "'bf16'"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        uint8_t *b = malloc(n);
        memcpy(b, orig, n);
        uint8_t *q = b + cases[k].at;
        if (cases[k].op == 1) tzr_st32(q, (uint32_t)(tzr_ld32(q) + cases[k].val));
        else if (cases[k].op == 2) tzr_st64(q, (uint64_t)(tzr_ld64(q) + cases[k].val));
        else *q = (uint8_t)cases[k].val;
        tzr_source *src;
        tzr_source_open_memory(&src, b, n, "dir.tensors");
        tzr_reader *r = NULL;
        int orc = tzr_reader_open_source(&r, src, NULL);
        int rc = orc ? orc : try_image(b, n, NULL);
        if (rc != TZR_EFORMAT || (orc != 0) != cases[k].at_open || !strstr(tzr_last_error(), cases[k].msg) ||
            !strstr(tzr_last_error(), "offset")) {
            fprintf(stderr, "  case '%s': got %d at %s (%s)\n", cases[k].what, rc, orc ? "open" : "load",
                    tzr_last_error());
            check_case_failed = 1;
        }
        tzr_reader_free(r);
        free(b);
    }
    free(orig);
}

/* With a directory and no verification, every header is still checked by
 * a load: a damaged name in the header of a zstd tensor (carried by its
 * first unit), of a tensor stored raw and of a meta tensor (both read
 * ahead) fails the load naming the tensor and its offset. */
static void directory_headers_checked(void) {
    size_t n;
    uint8_t *orig = check_read_file(big_path, &n);
    if (!orig) {
        CHECK(0);
        return;
    }
    CHECK(find_dir(orig, n) != 0);
    const char *names[] = {"embed", "noise", "meta"};
    for (int k = 0; k < 3; k++) {
        tzr_source *src;
        tzr_source_open_memory(&src, orig, n, "probe");
        tzr_reader *r = NULL;
        CHECK_OK(tzr_reader_open_source(&r, src, NULL));
        size_t i = 0;
        CHECK_OK(tzr_reader_find(r, names[k], strlen(names[k]), &i));
        uint64_t hoff = tzr_reader_tensor(r, i)->header_offset;
        CHECK(k != 1 || tzr_reader_tensor(r, i)->compression == TZR_COMPRESSION_NONE);
        tzr_reader_free(r);
        uint8_t *b = malloc(n);
        memcpy(b, orig, n);
        b[hoff + 13] ^= 0x20; /* first byte of the name (after size, module, type, name length) */
        tzr_source_open_memory(&src, b, n, "damaged.tensors");
        CHECK_OK(tzr_reader_open_source(&r, src, NULL));
        tzr_sink *sink;
        CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
        tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
        o.verify = 0;
        o.threads = 2;
        int rc = tzr_load(r, sink, &o, NULL);
        if (rc != TZR_EFORMAT || !strstr(tzr_last_error(), names[k]) || !strstr(tzr_last_error(), "offset")) {
            fprintf(stderr, "  header of '%s' damaged: got %d (%s)\n", names[k], rc, tzr_last_error());
            check_case_failed = 1;
        }
        tzr_sink_free(sink);
        tzr_reader_free(r);
        free(b);
    }
    free(orig);
}

/* From a source whose reads are requests (pack_reads), small compressed
 * tensors lying back to back share reads, as small plaintext ones do:
 * 300 tensors of 4 KB load in a handful of reads, byte for byte, into the
 * host sink, the null sink (verified) and the fake asynchronous sink (each
 * byte once), with and without a frame directory; a big tensor in the
 * middle still gets reads of its own. */
static void packed_small_compressed(void) {
    enum { NSMALL = 301 };
    static tspec many[NSMALL];
    static char names[NSMALL][16];
    for (int i = 0; i < NSMALL; i++) {
        snprintf(names[i], sizeof names[i], "t.%d", i);
        many[i] = (tspec){names[i], TZR_DTYPE_BF16, 1, {2000, 0}, D_NORMAL, 0};
    }
    many[150] = (tspec){"big", TZR_DTYPE_BF16, 2, {1000, 1024}, D_NORMAL, 0}; /* 2 MB, 1 MiB frames */
    const char *path = tmp("many_small.tensors"), *nodir = tmp("many_small_nodir.tensors");
    CHECK_OK(write_set(path, many, NSMALL, 1, 0, 1 << 20, NULL));
    CHECK_OK(write_without_dir(path, nodir, many, NSMALL, 1 << 20));
    const char *paths[2] = {path, nodir};
    for (int k = 0; k < 2; k++)
        for (int mode = 0; mode < 3; mode++) {
            counting *c;
            tzr_reader *r = open_counting(paths[k], &c);
            if (!r) continue;
            c->base.pack_reads = 1;
            int verify = mode == 1;
            tzr_sink *sink = NULL;
            fake_sink *f = NULL;
            if (mode == 0) CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
            else if (mode == 1) CHECK_OK(tzr_sink_null_new(&sink));
            else sink = &(f = fake_sink_new(NSMALL))->base;
            tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
            o.chunk_bytes = 256 << 10;
            o.ring_bytes = 16 * o.chunk_bytes;
            o.threads = 3;
            o.verify = verify;
            tzr_load_stats st;
            CHECK_OK(tzr_load(r, sink, &o, &st));
            CHECK(st.tensors == NSMALL);
            /* ~1.2 MB of stored small tensors in 256 KiB reads, plus the big one. */
            if (st.reads > 12) fprintf(stderr, "  %s, mode %d: %llu reads\n", k ? "no directory" : "directory", mode,
                                       (unsigned long long)st.reads), check_case_failed = 1;
            for (int i = 0; i < NSMALL && mode != 1; i++) {
                uint64_t len;
                uint8_t *want = make_data(&many[i], &len, (size_t)i);
                if (mode == 0) {
                    void *got;
                    uint64_t glen;
                    CHECK_OK(tzr_sink_host_data(sink, (size_t)i, &got, &glen));
                    CHECK(glen == len && memcmp(got, want, len) == 0);
                } else {
                    CHECK(f->dst[i] && memcmp(f->dst[i], want, len) == 0);
                    int once = 1;
                    for (uint64_t b = 0; b < len; b++) once &= f->writes[i][b] == 1;
                    CHECK(once);
                }
                free(want);
            }
            tzr_sink_free(sink);
            tzr_reader_free(r);
        }
}

/* A load with on_tensor_error goes on past compressed tensors whose
 * frames are damaged (whole-unit frames, a multi-frame tensor, and packed
 * small tensors from a request source), reporting each in index order. */
typedef struct bad_seen {
    size_t idx[8], n, good;
} bad_seen;
static int seen_bad(void *ctx, size_t i, const tzr_tensor_info *t, int code, const char *msg) {
    bad_seen *b = ctx;
    (void)t;
    if ((code == TZR_EFORMAT || code == TZR_EHASH) && strstr(msg, "offset") && b->n < 8) b->idx[b->n] = i;
    else if (b->n < 8) b->idx[b->n] = (size_t)-2;
    b->n++;
    return 0;
}
static int seen_good(void *ctx, size_t i, const tzr_tensor_info *t) {
    (void)i;
    (void)t;
    ((bad_seen *)ctx)->good++;
    return 0;
}

static void go_on_past_bad_frames(void) {
    const char *many_path = tmp("many_small.tensors"); /* written by packed_small_compressed */
    struct {
        const char *path;
        size_t bad[2], count;
        int packed;
    } files[2] = {{big_path, {0, 4}, NBIG, 0}, {many_path, {10, 200}, 301, 1}};
    for (int k = 0; k < 2; k++)
        for (int verify = 0; verify < 2; verify++) {
            size_t len;
            uint8_t *b = check_read_file(files[k].path, &len);
            CHECK(b != NULL);
            if (!b) continue;
            for (int j = 0; j < 2; j++) {
                located L;
                CHECK(locate(b, len, files[k].bad[j], &L) == 0);
                for (uint64_t x = L.dlen / 3; x < L.dlen / 3 + 64 && x < L.dlen; x++) b[L.doff + x] ^= 0x55;
            }
            tzr_source *mem = NULL;
            CHECK_OK(tzr_source_open_memory(&mem, b, len, "frames.tensors"));
            counting *c = wrap_counting(mem);
            c->base.pack_reads = files[k].packed;
            tzr_reader *r = NULL;
            CHECK_OK(tzr_reader_open_source(&r, &c->base, NULL));
            if (!r) {
                free(b);
                continue;
            }
            tzr_sink *sink;
            CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
            bad_seen seen = {{0}, 0, 0};
            tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
            o.chunk_bytes = 256 << 10;
            o.threads = 3;
            o.verify = verify;
            o.on_tensor = seen_good;
            o.on_tensor_ctx = &seen;
            o.on_tensor_error = seen_bad;
            o.on_tensor_error_ctx = &seen;
            int rc = tzr_load(r, sink, &o, NULL);
            /* zstd frames carry no checksum: damage that still decodes is
             * found by verification alone */
            if (verify) {
                CHECK(rc == TZR_EFORMAT || rc == TZR_EHASH);
                CHECK(seen.n == 2 && seen.idx[0] == files[k].bad[0] && seen.idx[1] == files[k].bad[1]);
            } else {
                CHECK(rc == (seen.n ? TZR_EFORMAT : 0));
                for (size_t j = 0; j < seen.n && j < 8; j++)
                    CHECK(seen.idx[j] == files[k].bad[0] || seen.idx[j] == files[k].bad[1]);
            }
            CHECK(seen.good + seen.n == files[k].count);
            tzr_sink_free(sink);
            tzr_reader_free(r);
            free(b);
        }
}

static void writer_options(void) {
    tzr_writer_options o = TZR_WRITER_OPTIONS_INIT;
    o.compression = TZR_COMPRESSION_ZSTD;
    o.frame_size = 1000; /* not a multiple of 64 */
    tzr_writer *w;
    CHECK_RC(tzr_writer_open(&w, tmp("bad.tensors"), &o), TZR_EINVAL);
    o.frame_size = 0;
    o.compression = 9;
    CHECK_RC(tzr_writer_open(&w, tmp("bad.tensors"), &o), TZR_EINVAL);
    /* An old caller's struct (without the compression fields) writes plain. */
    o = (tzr_writer_options)TZR_WRITER_OPTIONS_INIT;
    o.compression = TZR_COMPRESSION_ZSTD;
    o.struct_size = offsetof(tzr_writer_options, compression);
    CHECK_OK(tzr_writer_open(&w, tmp("old.tensors"), &o));
    tzr_writer_abort(w);
}

/* ---- the codec table ------------------------------------------------- */
/* A codec only this test's table has (id 7): byte runs as (count, byte)
 * pairs, written here from its definition, not from the library. */
static size_t rle_bound(size_t len) { return 2 * len; }
static void *rle_new_enc(int level) { return malloc(1); }
static void *rle_new_dec(void) { return malloc(1); }
static int rle_encode(void *e, uint8_t *dst, size_t cap, const uint8_t *src, size_t n, size_t *got, char *msg,
                      size_t mcap) {
    size_t o = 0;
    for (size_t k = 0; k < n;) {
        size_t run = 1;
        while (k + run < n && run < 255 && src[k + run] == src[k]) run++;
        dst[o++] = (uint8_t)run;
        dst[o++] = src[k];
        k += run;
    }
    *got = o;
    return 0;
}
static int rle_decode(void *d, uint8_t *dst, size_t want, const uint8_t *src, size_t n, char *msg, size_t mcap) {
    size_t o = 0;
    for (size_t k = 0; k + 1 < n; k += 2) {
        if (src[k] > want - o) {
            snprintf(msg, mcap, "rle frame runs past %zu bytes", want);
            return -1;
        }
        memset(dst + o, src[k + 1], src[k]);
        o += src[k];
    }
    if (o != want || n % 2) {
        snprintf(msg, mcap, "rle frame holds %zu bytes, the shape needs %zu", o, want);
        return -1;
    }
    return 0;
}
static const tzr_codec RLE = {7, "test-rle", rle_bound, rle_new_enc, free, rle_encode, rle_new_dec, free, rle_decode};

static const tspec RUNS[] = {
    {"runs_f32", TZR_DTYPE_F32, 1, {30000, 0}, D_ZERO, 0},
    {"runs_bf16", TZR_DTYPE_BF16, 2, {100, 70}, D_ZERO, 0},
    {"runs_small", TZR_DTYPE_U8, 1, {300, 0}, D_ZERO, 0},
    {"noise", TZR_DTYPE_U8, 1, {5000, 0}, D_RANDOM, 0}, /* does not shrink: stored raw */
};
#define NRUNS (sizeof RUNS / sizeof RUNS[0])

/* A codec registered in a table loads through the reader and the pipeline
 * with no other change; the same file under the library's own table (no
 * row 7) is refused at open, or at load without a frame directory, never
 * delivered as if the stored bytes were the tensor. */
static void codec_table(void) {
    static const tzr_codec *const with_rle[] = {&tzr_codec_zstd, &RLE};
    const char *path = tmp("rle.tensors"), *nodir = tmp("rle_nodir.tensors");
    tzr_codec_table_use(with_rle, 2);
    write_codec = 7;
    CHECK_OK(write_set(path, RUNS, NRUNS, 1, 0, FRAME, NULL));
    CHECK_OK(write_without_dir(path, nodir, RUNS, NRUNS, FRAME));
    write_codec = 0;
    CHECK(tzr_compression_name(7) && strcmp(tzr_compression_name(7), RLE.name) == 0);
    const char *paths[] = {path, nodir};
    for (int k = 0; k < 2; k++) {
        tzr_reader *r = open_r(paths[k], NULL, 1);
        if (!r) break;
        check_reads(r, RUNS, NRUNS);
        CHECK(tzr_reader_tensor(r, 0)->compression == 7 && tzr_reader_tensor(r, 0)->frames == 30);
        CHECK(tzr_reader_tensor(r, 0)->data_length < 30000 * 4 / 10);
        CHECK(tzr_reader_tensor(r, 3)->compression == TZR_COMPRESSION_NONE);
        tzr_reader_free(r);
        tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
        CHECK_OK(tzr_reader_open(&r, paths[k], &ro));
        tzr_sink *sink;
        CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
        tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
        o.chunk_bytes = 8192;
        o.threads = 2;
        CHECK_OK(tzr_load(r, sink, &o, NULL));
        check_host(sink, RUNS, NRUNS);
        tzr_sink_free(sink);
        tzr_reader_free(r);
    }
    tzr_codec_table_use(NULL, 0);
    /* Names as the tools print them: the built-in table's only. */
    CHECK(strcmp(tzr_compression_name(TZR_COMPRESSION_NONE), "none") == 0);
    CHECK(strcmp(tzr_compression_name(TZR_COMPRESSION_ZSTD), "zstd") == 0);
    CHECK(tzr_compression_name(7) == NULL && tzr_compression_name(-1) == NULL && tzr_compression_name(2) == NULL);
    /* The directory carries every block: refused at open. */
    tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
    tzr_reader *r = NULL;
    CHECK_RC(tzr_reader_open(&r, path, &ro), TZR_EFORMAT);
    CHECKF(strstr(tzr_last_error(), "unknown compression codec 7") && strstr(tzr_last_error(), "runs_f32"), "%s",
           tzr_last_error());
    /* Without one: open reads no header, so the load (and a read) refuse. */
    CHECK_OK(tzr_reader_open(&r, nodir, &ro));
    tzr_sink *sink;
    CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
    tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
    CHECK_RC(tzr_load(r, sink, &o, NULL), TZR_EFORMAT);
    CHECKF(strstr(tzr_last_error(), "unknown compression codec 7"), "%s", tzr_last_error());
    tzr_sink_free(sink);
    uint8_t *buf = malloc(120000);
    CHECK_RC(tzr_reader_read(r, 0, buf, 120000), TZR_EFORMAT);
    CHECKF(strstr(tzr_last_error(), "unknown compression codec 7"), "%s", tzr_last_error());
    free(buf);
    tzr_reader_free(r);
    /* Headers read at open: refused at open. */
    ro.read_headers = 1;
    CHECK_RC(tzr_reader_open(&r, nodir, &ro), TZR_EFORMAT);
    /* A writer asked for a codec without a row is refused. */
    tzr_writer_options wo = TZR_WRITER_OPTIONS_INIT;
    wo.compression = 7;
    tzr_writer *w;
    CHECK_RC(tzr_writer_open(&w, tmp("no_row.tensors"), &wo), TZR_EINVAL);
}

/* Byte planes against their definition: plane k holds byte k of every
 * element, in order; every length (vector body and scalar tail), 2 and 4. */
static void planes_split_join(void) {
    uint8_t src[4 * 100], planes[4 * 100], back[4 * 100];
    for (size_t i = 0; i < sizeof src; i++) src[i] = (uint8_t)(i * 37 + 11);
    unsigned widths[2] = {2, 4};
    for (int w = 0; w < 2; w++)
        for (size_t n = 0; n <= 100; n++) {
            unsigned k = widths[w];
            size_t len = n * k;
            tzr_planes_split(planes, src, len, k);
            int ok = 1;
            for (size_t i = 0; i < n; i++)
                for (unsigned b = 0; b < k; b++) ok &= planes[b * n + i] == src[i * k + b];
            CHECK(ok);
            memset(back, 0xAA, sizeof back);
            tzr_planes_join(back, planes, len, k);
            CHECK(memcmp(back, src, len) == 0 && (len == sizeof back || back[len] == 0xAA));
        }
}

int main(void) {
    snprintf(dir_path, sizeof dir_path, "%s", check_tmpdir());
    snprintf(big_path, sizeof big_path, "%s/big.tensors", dir_path);
    snprintf(big_enc_path, sizeof big_enc_path, "%s/big_enc.tensors", dir_path);
    if (write_set(big_path, BIG, NBIG, 1, 0, 1 << 20, NULL) || write_set(big_enc_path, BIG, NBIG, 1, 0, 1 << 20, KEY)) {
        printf("FAIL setup: %s\n", tzr_last_error());
        return 1;
    }
    RUN(planes_split_join);
    RUN(roundtrip_dtypes);
    RUN(feature_flags);
    RUN(uncompressed_copy_identical);
    RUN(encrypted_compressed);
    RUN(pipeline_host);
    RUN(pipeline_null_budget);
    RUN(pipeline_async_sink);
    RUN(corrupt_table);
    RUN(frame_directory);
    RUN(corrupt_directory);
    RUN(directory_headers_checked);
    RUN(packed_small_compressed);
    RUN(go_on_past_bad_frames);
    RUN(writer_options);
    RUN(codec_table);
    return check_done();
}
