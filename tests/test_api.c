/* The API promises of tzr.h that every entry point must keep: options
 * structs read through struct_size (NULL = defaults, older and shorter
 * structs work, unknown sizes refused naming the struct), errors that say
 * which tensor and offset they concern without parsing the message, and
 * frees that never overwrite the failure they clean up after. Pure: needs
 * no server, always runs. */
#include "check.h"
#include "tzr_http.h"
#include "tzr_load.h"
#include "tzr_safetensors.h"
#include "tzr_shard.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static const uint8_t KEY[32] = {7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                                16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
static char plain_path[512], enc_path[512];

/* Two f32 tensors, "alpha" then "beta", optionally encrypted with KEY. */
static int write_two(const char *path, const uint8_t *key) {
    tzr_writer_options o = TZR_WRITER_OPTIONS_INIT;
    o.crypt.key = key;
    tzr_writer *w;
    int rc = tzr_writer_open(&w, path, &o);
    if (rc) return rc;
    float a[64], b[256];
    for (int i = 0; i < 64; i++) a[i] = (float)i;
    for (int i = 0; i < 256; i++) b[i] = (float)(1000 - i);
    uint64_t sa[1] = {64}, sb[2] = {16, 16};
    tzr_tensor_desc da = {"alpha", 5, TZR_PARAM, 0, NULL, 0, TZR_DTYPE_F32, 1, sa, 0, sizeof(tzr_tensor_desc)};
    tzr_tensor_desc db = {"beta", 4, TZR_PARAM, 0, NULL, 0, TZR_DTYPE_F32, 2, sb, 0, sizeof(tzr_tensor_desc)};
    rc = tzr_writer_add(w, &da, a);
    if (!rc) rc = tzr_writer_add(w, &db, b);
    if (rc) {
        tzr_writer_abort(w);
        return rc;
    }
    return tzr_writer_close(w);
}

static int count_of(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* ------------------------------------------------------------ options */

/* An options struct with room after it, so a struct_size larger than
 * ours stays inside the caller's memory. */
#define ROOMY(type) union { type o; unsigned char bytes[sizeof(type) + 64]; }

#define REFUSED(call, type)                                                            \
    do {                                                                               \
        CHECK_RC(call, TZR_EINVAL);                                                    \
        CHECKF(strstr(tzr_last_error(), #type) && strstr(tzr_last_error(), "struct_size"), \
               "message does not name " #type ": %s", tzr_last_error());                \
    } while (0)

/* struct_size 0 (never initialised) and ours + 8 (a newer header) are
 * refused at every entry point that takes an options struct, before any
 * other work (no file, socket or request). */
static void opts_unknown_size_refused(void) {
    const size_t bad[2] = {0, 8};
    for (int k = 0; k < 2; k++) {
        char what[64];
        snprintf(what, sizeof what, "%s", k ? "larger" : "zero");
        {
            ROOMY(tzr_reader_options) u;
            memset(&u, 0, sizeof u);
            u.o.struct_size = k ? sizeof u.o + bad[k] : 0;
            tzr_reader *r = (tzr_reader *)1;
            REFUSED(tzr_reader_open(&r, plain_path, &u.o), tzr_reader_options);
            CHECK(r == NULL);
            tzr_source *src;
            CHECK_OK(tzr_source_open_file(&src, plain_path, 0));
            REFUSED(tzr_reader_open_source(&r, src, &u.o), tzr_reader_options); /* src freed */
        }
        {
            ROOMY(tzr_writer_options) u;
            memset(&u, 0, sizeof u);
            u.o.struct_size = k ? sizeof u.o + bad[k] : 0;
            char p[600];
            snprintf(p, sizeof p, "%s/refused_%s.tensors", check_tmpdir(), what);
            tzr_writer *w = (tzr_writer *)1;
            REFUSED(tzr_writer_open(&w, p, &u.o), tzr_writer_options);
            CHECK(w == NULL);
        }
        {
            ROOMY(tzr_load_options) u;
            memset(&u, 0, sizeof u);
            u.o.struct_size = k ? sizeof u.o + bad[k] : 0;
            tzr_reader *r;
            tzr_sink *s;
            CHECK_OK(tzr_reader_open(&r, plain_path, NULL));
            CHECK_OK(tzr_sink_null_new(&s));
            REFUSED(tzr_load(r, s, &u.o, NULL), tzr_load_options);
            tzr_sink_free(s);
            tzr_reader_free(r);
        }
        {
            ROOMY(tzr_http_options) u;
            memset(&u, 0, sizeof u);
            u.o.struct_size = k ? sizeof u.o + bad[k] : 0;
            tzr_source *s = (tzr_source *)1;
            /* port 9 (discard) on loopback: refused before any connection */
            REFUSED(tzr_source_open_url(&s, "http://127.0.0.1:9/x.tensors", &u.o), tzr_http_options);
            CHECK(s == NULL);
            tzr_output *o = (tzr_output *)1;
            REFUSED(tzr_output_open_s3(&o, "s3://bucket/key.tensors", &u.o, 0), tzr_http_options);
            CHECK(o == NULL);
        }
        {
            ROOMY(tzr_shard_open_options) u;
            memset(&u, 0, sizeof u);
            u.o.struct_size = k ? sizeof u.o + bad[k] : 0;
            tzr_shard_set *s = (tzr_shard_set *)1;
            REFUSED(tzr_shard_open(&s, plain_path, &u.o), tzr_shard_open_options);
            CHECK(s == NULL);
        }
        {
            ROOMY(tzr_shard_writer_options) u;
            memset(&u, 0, sizeof u);
            u.o.struct_size = k ? sizeof u.o + bad[k] : 0;
            char p[600];
            snprintf(p, sizeof p, "%s/refused_shard_%s", check_tmpdir(), what);
            tzr_shard_writer *w = (tzr_shard_writer *)1;
            REFUSED(tzr_shard_writer_open(&w, p, 0, 1, &u.o), tzr_shard_writer_options);
            CHECK(w == NULL);
        }
        {
            ROOMY(tzr_shard_split_options) u;
            memset(&u, 0, sizeof u);
            u.o.struct_size = k ? sizeof u.o + bad[k] : 0;
            char p[600];
            snprintf(p, sizeof p, "%s/refused_split_%s", check_tmpdir(), what);
            tzr_reader *r;
            CHECK_OK(tzr_reader_open(&r, plain_path, NULL));
            REFUSED(tzr_shard_split(r, p, 2, NULL, &u.o), tzr_shard_split_options);
            tzr_reader_free(r);
        }
    }
}

/* NULL options are the defaults everywhere. */
static void opts_null_is_defaults(void) {
    tzr_reader *r;
    CHECK_OK(tzr_reader_open(&r, plain_path, NULL));
    tzr_sink *s;
    CHECK_OK(tzr_sink_null_new(&s));
    CHECK_OK(tzr_load(r, s, NULL, NULL));
    tzr_sink_free(s);
    tzr_reader_free(r);
    tzr_shard_set *set;
    CHECK_OK(tzr_shard_open(&set, plain_path, NULL));
    tzr_shard_close(set);
}

/* A caller built against the first tzr_writer_options (no compression
 * fields) passes a shorter struct: only its bytes are read, the rest are
 * defaults. The struct lies at the end of an exact-size allocation (an
 * over-read is a sanitizer report) after bytes of 0xff that would be an
 * unknown compression if they were taken for fields. */
static void opts_older_caller_works(void) {
    size_t first = offsetof(tzr_writer_options, compression);
    unsigned char *mem = malloc(sizeof(tzr_writer_options));
    memset(mem, 0xff, sizeof(tzr_writer_options));
    tzr_writer_options *o = (tzr_writer_options *)mem;
    memset(o, 0, first);
    o->struct_size = first;
    o->metadata_size = 8192;
    char p[600];
    snprintf(p, sizeof p, "%s/older.tensors", check_tmpdir());
    tzr_writer *w;
    CHECK_OK(tzr_writer_open(&w, p, o));
    free(mem);
    if (!w) return;
    float x[4] = {1, 2, 3, 4};
    uint64_t sh[1] = {4};
    tzr_tensor_desc d = {"x", 1, TZR_PARAM, 0, NULL, 0, TZR_DTYPE_F32, 1, sh, 0, sizeof(tzr_tensor_desc)};
    CHECK_OK(tzr_writer_add(w, &d, x));
    CHECK_OK(tzr_writer_close(w));
    /* The reader: a struct of exactly struct_size bytes, nothing after. */
    tzr_reader_options *ro = malloc(sizeof *ro);
    tzr_reader_options init = TZR_READER_OPTIONS_INIT;
    *ro = init;
    ro->verify = 1;
    tzr_reader *r;
    CHECK_OK(tzr_reader_open(&r, p, ro));
    free(ro);
    if (!r) return;
    CHECK(tzr_reader_count(r) == 1 && !tzr_reader_compressed(r));
    CHECK(tzr_reader_tensor(r, 0)->data_offset < 76 + 8192 + 200); /* the old caller's metadata_size was used */
    float back[4];
    CHECK_OK(tzr_reader_read(r, 0, back, sizeof back));
    CHECK(memcmp(back, x, sizeof x) == 0);
    tzr_reader_free(r);
}

/* Callers built before tzr_load_options grew on_tensor_error and select,
 * and before tzr_http_options grew its timeouts: the shorter structs are
 * accepted (exact-size allocations, so an over-read is a sanitizer report),
 * the new fields keep their defaults. */
static void opts_older_load_and_http(void) {
    /* byte buffers of exactly the older size: only struct_size is written
     * here, through memcpy, as the library reads it */
    size_t first = offsetof(tzr_load_options, on_tensor_error);
    tzr_load_options init = TZR_LOAD_OPTIONS_INIT;
    unsigned char *lo = malloc(first);
    memcpy(lo, &init, first);
    memcpy(lo, &first, sizeof first);
    tzr_reader *r;
    CHECK_OK(tzr_reader_open(&r, enc_path, NULL));
    tzr_sink *s;
    CHECK_OK(tzr_sink_null_new(&s));
    /* the file needs a key: fails the usual way, past the options check */
    if (r) CHECK_RC(tzr_load(r, s, (const tzr_load_options *)lo, NULL), TZR_ECRYPT);
    size_t shorter = first - 1;
    memcpy(lo, &shorter, sizeof shorter);
    if (r) CHECK_RC(tzr_load(r, s, (const tzr_load_options *)lo, NULL), TZR_EINVAL);
    free(lo);
    tzr_sink_free(s);
    tzr_reader_free(r);
    size_t hfirst = offsetof(tzr_http_options, stall_timeout_s);
    tzr_http_options hinit = TZR_HTTP_OPTIONS_INIT;
    unsigned char *ho = malloc(hfirst);
    memcpy(ho, &hinit, hfirst);
    memcpy(ho, &hfirst, sizeof hfirst);
    tzr_source *src = NULL;
    /* nothing listens on port 1: a network error, not an options error */
    int rc = tzr_source_open_url(&src, "http://127.0.0.1:1/x.tensors", (const tzr_http_options *)ho);
    CHECKF(rc != 0 && rc != TZR_EINVAL, "rc %d: %s", rc, tzr_last_error());
    free(ho);
}

/* ------------------------------------------------------------ errors */

/* A missing key: TZR_ECRYPT with cause TZR_CAUSE_KEY, tied to the tensor. */
static void error_cause_missing_key(void) {
    tzr_reader *r;
    CHECK_OK(tzr_reader_open(&r, enc_path, NULL));
    if (!r) return;
    float buf[256];
    CHECK_RC(tzr_reader_read(r, 1, buf, sizeof buf), TZR_ECRYPT);
    CHECK(tzr_last_error_cause() == TZR_CAUSE_KEY);
    CHECK(tzr_last_error_tensor() && strcmp(tzr_last_error_tensor(), "beta") == 0);
    /* Through the pipeline, too (what detensorize --verify steers by). */
    tzr_sink *s;
    CHECK_OK(tzr_sink_null_new(&s));
    tzr_load_stats st;
    CHECK_RC(tzr_load(r, s, NULL, &st), TZR_ECRYPT);
    CHECK(tzr_last_error_cause() == TZR_CAUSE_KEY);
    CHECK(tzr_last_error_tensor() && strcmp(tzr_last_error_tensor(), "alpha") == 0);
    tzr_sink_free(s);
    tzr_reader_free(r);
}

/* A wrong key: the decryption failure names the tensor once, and the
 * error state holds the tensor and the data offset; not a key cause
 * (a wrong key and corrupt data look alike to one MAC). */
static void error_tensor_and_offset(void) {
    tzr_reader_options o = TZR_READER_OPTIONS_INIT;
    uint8_t bad[32];
    memcpy(bad, KEY, 32);
    bad[5] ^= 0x40;
    o.crypt.key = bad;
    tzr_reader *r;
    CHECK_OK(tzr_reader_open(&r, enc_path, &o));
    if (!r) return;
    float buf[256];
    CHECK_RC(tzr_reader_read(r, 1, buf, sizeof buf), TZR_ECRYPT);
    const tzr_tensor_info *t = tzr_reader_tensor(r, 1);
    CHECKF(count_of(tzr_last_error(), "tensor '") == 1, "tensor named %d times: %s",
           count_of(tzr_last_error(), "tensor '"), tzr_last_error());
    CHECK(tzr_last_error_tensor() && strcmp(tzr_last_error_tensor(), "beta") == 0);
    CHECK(tzr_last_error_offset() == t->data_offset);
    CHECK(tzr_last_error_cause() == TZR_CAUSE_NONE);
    tzr_sink *s;
    CHECK_OK(tzr_sink_host_new(&s, NULL, NULL));
    tzr_load_stats st;
    CHECK_RC(tzr_load(r, s, NULL, &st), TZR_ECRYPT);
    CHECK(st.error_tensor == 0);
    CHECKF(count_of(tzr_last_error(), "tensor '") == 1, "tensor named %d times: %s",
           count_of(tzr_last_error(), "tensor '"), tzr_last_error());
    CHECK(tzr_last_error_tensor() && strcmp(tzr_last_error_tensor(), "alpha") == 0);
    CHECK(tzr_last_error_offset() != TZR_NO_OFFSET);
    tzr_sink_free(s);
    tzr_reader_free(r);
}

/* A hash mismatch found by the pipeline carries the tensor; a failure
 * tied to no tensor carries none; a new failure forgets the old place. */
static void error_hash_and_untied(void) {
    size_t n;
    unsigned char *bytes = check_read_file(plain_path, &n);
    CHECK(bytes != NULL);
    if (!bytes) return;
    tzr_reader *r;
    CHECK_OK(tzr_reader_open(&r, plain_path, NULL));
    uint64_t at = tzr_reader_tensor(r, 1)->data_offset + 17;
    tzr_reader_free(r);
    bytes[at] ^= 1;
    tzr_source *src;
    CHECK_OK(tzr_source_open_memory(&src, bytes, n, "flipped"));
    tzr_reader_options o = TZR_READER_OPTIONS_INIT;
    o.verify = 1;
    CHECK_OK(tzr_reader_open_source(&r, src, &o));
    tzr_sink *s;
    CHECK_OK(tzr_sink_null_new(&s));
    CHECK_RC(tzr_load(r, s, NULL, NULL), TZR_EHASH);
    CHECK(tzr_last_error_tensor() && strcmp(tzr_last_error_tensor(), "beta") == 0);
    size_t idx;
    CHECK_RC(tzr_reader_find(r, "gamma", 5, &idx), TZR_ENOTFOUND);
    CHECK(tzr_last_error_tensor() == NULL && tzr_last_error_offset() == TZR_NO_OFFSET);
    tzr_sink_free(s);
    tzr_reader_free(r);
    free(bytes);
    CHECK_RC(tzr_reader_open(&r, "/nonexistent/x.tensors", NULL), tzr_last_error_code());
    CHECK(tzr_last_error_code() != 0 && tzr_last_error_tensor() == NULL);
}

/* ------------------------------------------------- frees keep the error */

/* A source, a sink and an output whose cleanup callbacks record errors of
 * their own (as a custom implementation may). */
static tzr_source *inner_src;
static void noisy_src_destroy(tzr_source *s) {
    tzr_set_error(TZR_EIO, "source destroy overwrote the error");
    tzr_source_free(inner_src);
    free(s);
}
static int noisy_read_at(tzr_source *s, void *buf, size_t len, uint64_t off) {
    return inner_src->read_at(inner_src, buf, len, off);
}
static tzr_source *noisy_source(void) {
    CHECK_OK(tzr_source_open_file(&inner_src, plain_path, 0));
    tzr_source *s = calloc(1, sizeof *s);
    s->read_at = noisy_read_at;
    s->destroy = noisy_src_destroy;
    s->size = inner_src->size;
    s->name = "noisy";
    return s;
}

static void noisy_sink_destroy(tzr_sink *s) {
    tzr_set_error(TZR_EIO, "sink destroy overwrote the error");
    free(s);
}
static int noisy_submit(tzr_sink *s, int slot, size_t index, uint64_t off, const void *src, size_t len) {
    return 0;
}

static int out_write(tzr_output *o, const void *buf, size_t len, uint64_t off) { return 0; }
static int finish_fails;
static int out_finish(tzr_output *o) {
    return finish_fails ? tzr_set_error(TZR_EIO, "finish failed: disk full") : 0;
}
static void out_abort(tzr_output *o) { tzr_set_error(TZR_EIO, "output abort overwrote the error"); }
static void out_destroy(tzr_output *o) {
    tzr_set_error(TZR_EIO, "output destroy overwrote the error");
    free(o);
}

#define KEPT(msg_part, code)                                                             \
    CHECKF(tzr_last_error_code() == (code) && strstr(tzr_last_error(), msg_part) != NULL, \
           "want %d '%s', have %d '%s'", (int)(code), msg_part, tzr_last_error_code(), tzr_last_error())

static tzr_output *noisy_output(void) {
    tzr_output *o = calloc(1, sizeof *o);
    o->pwrite_at = out_write;
    o->finish = out_finish;
    o->abort = out_abort;
    o->destroy = out_destroy;
    o->name = "noisy-out";
    return o;
}

/* A close that fails reports its own failure, not what the output's abort
 * and destroy recorded after it. */
static void failed_close_keeps_the_error(void) {
    finish_fails = 1;
    tzr_writer *w;
    CHECK_OK(tzr_writer_open_output(&w, noisy_output(), NULL));
    if (w) {
        CHECK_RC(tzr_writer_close(w), TZR_EIO);
        KEPT("finish failed: disk full", TZR_EIO);
    }
    finish_fails = 0;
    uint64_t sh[1] = {4};
    tzr_st_tensor t[1];
    memset(t, 0, sizeof t);
    t[0].name = "hole";
    t[0].name_len = 4;
    t[0].dtype = TZR_DTYPE_F32;
    t[0].ndim = 1;
    t[0].shape = sh;
    t[0].nbytes = 16;
    tzr_st_writer *sw;
    CHECK_OK(tzr_st_writer_open(&sw, noisy_output(), t, 1, NULL, NULL, 0));
    if (!sw) return;
    CHECK_RC(tzr_st_writer_close(sw), TZR_EINVAL); /* nothing was put */
    KEPT("only 0 of 16 bytes were put", TZR_EINVAL);
}

static void frees_keep_the_error(void) {
    /* reader (its source's destroy runs) */
    tzr_reader *r;
    CHECK_OK(tzr_reader_open_source(&r, noisy_source(), NULL));
    if (!r) return;
    char small[1];
    CHECK_RC(tzr_reader_read(r, 1, small, sizeof small), TZR_EINVAL);
    char first[1100];
    snprintf(first, sizeof first, "%s", tzr_last_error());
    tzr_reader_free(r);
    KEPT(first, TZR_EINVAL);
    /* a failing open frees the source it was given */
    ROOMY(tzr_reader_options) u;
    memset(&u, 0, sizeof u);
    CHECK_RC(tzr_reader_open_source(&r, noisy_source(), &u.o), TZR_EINVAL);
    KEPT("tzr_reader_options", TZR_EINVAL);
    /* sink */
    tzr_sink *s = calloc(1, sizeof *s);
    s->submit = noisy_submit;
    s->destroy = noisy_sink_destroy;
    tzr_set_error(TZR_EHASH, "the first failure");
    tzr_sink_free(s);
    KEPT("the first failure", TZR_EHASH);
    /* writer abort (the output's abort and destroy run) */
    tzr_output *o = calloc(1, sizeof *o);
    o->pwrite_at = out_write;
    o->finish = out_finish;
    o->abort = out_abort;
    o->destroy = out_destroy;
    o->name = "noisy-out";
    tzr_writer *w;
    CHECK_OK(tzr_writer_open_output(&w, o, NULL));
    if (!w) return;
    uint64_t sh[1] = {1};
    tzr_tensor_desc d = {"x", 1, TZR_PARAM, 0, "not a dtype", 11, TZR_DTYPE_UNKNOWN, 1, sh, 0, sizeof(tzr_tensor_desc)};
    float x = 1;
    CHECK(tzr_writer_add(w, &d, &x) != 0);
    int code = tzr_last_error_code();
    snprintf(first, sizeof first, "%s", tzr_last_error());
    tzr_writer_abort(w);
    KEPT(first, code);
    /* a writer refused at open destroys the output it was given */
    o = calloc(1, sizeof *o);
    o->pwrite_at = out_write;
    o->finish = out_finish;
    o->abort = out_abort;
    o->destroy = out_destroy;
    ROOMY(tzr_writer_options) wu;
    memset(&wu, 0, sizeof wu);
    CHECK_RC(tzr_writer_open_output(&w, o, &wu.o), TZR_EINVAL);
    KEPT("tzr_writer_options", TZR_EINVAL);
}

int main(void) {
    snprintf(plain_path, sizeof plain_path, "%s/plain.tensors", check_tmpdir());
    snprintf(enc_path, sizeof enc_path, "%s/enc.tensors", check_tmpdir());
    if (write_two(plain_path, NULL) || write_two(enc_path, KEY)) {
        printf("FAIL setup: %s\n", tzr_last_error());
        return 1;
    }
    RUN(opts_unknown_size_refused);
    RUN(opts_null_is_defaults);
    RUN(opts_older_caller_works);
    RUN(opts_older_load_and_http);
    RUN(error_cause_missing_key);
    RUN(error_tensor_and_offset);
    RUN(error_hash_and_untied);
    RUN(frees_keep_the_error);
    RUN(failed_close_keeps_the_error);
    return check_done();
}
