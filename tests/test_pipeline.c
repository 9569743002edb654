/* The pipelined loader: every byte lands once and correctly under random
 * delays of a fake asynchronous sink that poisons staging memory after each
 * fence; no slot is reused before its fence; read errors, hash mismatches,
 * callback errors and cancellation stop the load cleanly with the first
 * error; memory stays within the ring budget. Run under ASan and TSan too. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <signal.h>

#include "check.h"
#include "fake_sink.h"
#include "gen.h"
#include "thread.h"
#include "tzr_load.h"

static const uint8_t KEY[32] = {7, 7, 7, 7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28};

static char plain_path[512], enc_path[512];
static gen_spec plain_spec = {120, 3 << 20, 20000, 1, NULL};
static gen_spec enc_spec = {30, 5 << 20, 9000, 1, KEY};

static tzr_reader *open_r(const char *path, const uint8_t *key, int verify) {
    tzr_reader_options o = TZR_READER_OPTIONS_INIT;
    o.crypt.key = key;
    o.verify = verify;
    tzr_reader *r = NULL;
    int rc = tzr_reader_open(&r, path, &o);
    if (rc) check_fail("open %s: %s", path, tzr_last_error());
    return r;
}

/* Completion order and count. */
typedef struct order {
    size_t next_min;
    int bad_order;
    size_t calls;
    size_t cancel_after;
    volatile int *cancel;
    int fail_with;
} order;

static int on_tensor(void *ctx, size_t index, const tzr_tensor_info *t) {
    (void)t;
    order *o = ctx;
    if (index < o->next_min) o->bad_order = 1;
    o->next_min = index + 1;
    o->calls++;
    if (o->cancel && o->calls == o->cancel_after) __atomic_store_n(o->cancel, 1, __ATOMIC_RELAXED);
    if (o->fail_with && o->calls == o->cancel_after) return o->fail_with;
    return 0;
}

/* A host (0), null (1) or fake asynchronous (2) sink; *f is the fake. */
static tzr_sink *new_sink(int kind, size_t tensors, fake_sink **f) {
    tzr_sink *s = NULL;
    *f = NULL;
    if (kind == 0) CHECK_OK(tzr_sink_host_new(&s, NULL, NULL));
    else if (kind == 1) CHECK_OK(tzr_sink_null_new(&s));
    else s = &(*f = fake_sink_new(tensors))->base;
    return s;
}

static void check_host(tzr_sink *sink, tzr_reader *r, const gen_spec *s) {
    for (size_t i = 0; i < tzr_reader_count(r); i++) {
        uint64_t len;
        int meta;
        uint8_t *want = gen_expected(s, i, &len, &meta);
        void *got;
        uint64_t glen;
        CHECK_OK(tzr_sink_host_data(sink, i, &got, &glen));
        CHECK(glen == len && memcmp(got, want, len) == 0);
        free(want);
    }
}

static void host_load_variants(void) {
    size_t chunks[] = {4096, 65536, 1 << 20, 8 << 20};
    int threads[] = {1, 2, 4, 8};
    for (int v = 0; v < 2; v++)
        for (size_t c = 0; c < 4; c++) {
            tzr_reader *r = open_r(plain_path, NULL, v);
            if (!r) return;
            tzr_sink *sink;
            CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
            tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
            o.chunk_bytes = chunks[c];
            o.ring_bytes = 4 * chunks[c];
            o.threads = threads[c];
            order ord = {0};
            o.on_tensor = on_tensor;
            o.on_tensor_ctx = &ord;
            tzr_load_stats st;
            CHECK_OK(tzr_load(r, sink, &o, &st));
            CHECK(!ord.bad_order && ord.calls == tzr_reader_count(r));
            CHECK(st.tensors == tzr_reader_count(r));
            CHECK(st.staging_bytes <= 4 * chunks[c] + (3 << 20)); /* big tensors read in place */
            check_host(sink, r, &plain_spec);
            tzr_sink_free(sink);
            tzr_reader_free(r);
        }
}

static void encrypted_load(void) {
    size_t chunks[] = {65536, 4 << 20, 3 << 20};
    for (size_t c = 0; c < 3; c++) {
        tzr_reader *r = open_r(enc_path, KEY, 1);
        if (!r) return;
        tzr_sink *sink;
        CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
        tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
        o.chunk_bytes = chunks[c];
        o.ring_bytes = 32 << 20;
        o.threads = 3;
        CHECK_OK(tzr_load(r, sink, &o, NULL));
        check_host(sink, r, &enc_spec);
        tzr_sink_free(sink);
        tzr_reader_free(r);
    }
}

static void fake_async_sink(void) {
    const char *paths[2] = {plain_path, enc_path};
    const gen_spec *specs[2] = {&plain_spec, &enc_spec};
    for (int k = 0; k < 2; k++)
        for (int verify = 0; verify < 2; verify++)
            for (int round = 0; round < 3; round++) {
                tzr_reader *r = open_r(paths[k], specs[k]->key, verify);
                if (!r) return;
                fake_sink *f = fake_sink_new(tzr_reader_count(r));
                tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
                o.chunk_bytes = round == 0 ? 65536 : round == 1 ? (2 << 20) : (4 << 20);
                o.ring_bytes = 3 * o.chunk_bytes;
                o.threads = 2 + round;
                order ord = {0};
                o.on_tensor = on_tensor;
                o.on_tensor_ctx = &ord;
                CHECK_OK(tzr_load(r, &f->base, &o, NULL));
                CHECK(f->violations == 0);
                CHECK(!ord.bad_order && ord.calls == tzr_reader_count(r));
                for (size_t i = 0; i < tzr_reader_count(r); i++) {
                    uint64_t len;
                    int meta;
                    uint8_t *want = gen_expected(specs[k], i, &len, &meta);
                    CHECK(f->dst[i] && f->len[i] == len && memcmp(f->dst[i], want, len) == 0);
                    int once = 1;
                    for (uint64_t b = 0; f->writes[i] && b < len; b++) once &= f->writes[i][b] == 1;
                    CHECK(once);
                    free(want);
                }
                tzr_sink_free(&f->base);
                tzr_reader_free(r);
            }
}


/* The library's threads leave asynchronous signals to the application's:
 * a SIGTERM sent to the process must not land in a worker (Python, for
 * one, runs its handler only when its main thread learns of it). */
static int (*plain_submit)(tzr_sink *, int, size_t, uint64_t, const void *, size_t);
static atomic_size_t submits_seen, submits_open_to_signals;
static pthread_t loading_thread; /* the caller's: its mask is the caller's business */

static int async_signal_open(void) {
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    return !sigismember(&cur, SIGTERM) || !sigismember(&cur, SIGINT) || !sigismember(&cur, SIGHUP);
}

static int submit_checking_mask(tzr_sink *s, int slot, size_t index, uint64_t off, const void *src, size_t len) {
    if (pthread_equal(pthread_self(), loading_thread)) return plain_submit(s, slot, index, off, src, len);
    atomic_fetch_add(&submits_seen, 1);
    if (async_signal_open()) atomic_fetch_add(&submits_open_to_signals, 1);
    return plain_submit(s, slot, index, off, src, len);
}

static void *report_mask(void *arg) {
    *(int *)arg = async_signal_open() ? 1 : 2;
    return NULL;
}

static void workers_leave_signals_alone(void) {
    sigset_t before, after;
    pthread_sigmask(SIG_BLOCK, NULL, &before);
    CHECK(!sigismember(&before, SIGTERM)); /* else the checks below prove nothing */
    int seen = 0;
    pthread_t t;
    CHECK(tzr_thread_start(&t, report_mask, &seen) == 0);
    pthread_join(t, NULL);
    CHECK(seen == 2);
    pthread_sigmask(SIG_BLOCK, NULL, &after);
    CHECK(!sigismember(&after, SIGTERM) && !sigismember(&after, SIGINT)); /* the caller's mask is back */

    tzr_reader *r = open_r(plain_path, NULL, 0);
    if (!r) return;
    fake_sink *f = fake_sink_new(tzr_reader_count(r));
    plain_submit = f->base.submit;
    loading_thread = pthread_self();
    f->base.submit = submit_checking_mask;
    tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
    o.chunk_bytes = 65536;
    o.ring_bytes = 3 * o.chunk_bytes;
    o.threads = 2;
    CHECK_OK(tzr_load(r, &f->base, &o, NULL));
    CHECK(atomic_load(&submits_seen) > 0);
    CHECK(atomic_load(&submits_open_to_signals) == 0);
    tzr_sink_free(&f->base);
    tzr_reader_free(r);
}

/* Progress: never backwards, never past the total, and at the total at the end. */
typedef struct prog {
    uint64_t last, total;
    int backwards;
} prog;

static void on_progress(void *ctx, uint64_t done, uint64_t total) {
    prog *g = ctx;
    if (done < g->last || done > total) g->backwards = 1;
    g->last = done;
    g->total = total;
}

/* Verified loads, both levels. At the CRC32 level large pieces are hashed
 * apart by the threads that read them and combined in order. Every read
 * size (pieces below and above the size that takes that path), thread
 * count and sink (the fake one poisons staging after each fence) loads
 * the right bytes, verifies clean and reports progress to the total. */
static void crc32_level_loads(void) {
    size_t chunks[] = {4096, 65536, 200000, 1 << 20};
    int threads[] = {1, 3, 4, 2};
    for (size_t c = 0; c < 4; c++)
        for (int sink_kind = 0; sink_kind < 3; sink_kind += 2)
            for (int level = 0; level < 2; level++) {
            tzr_reader *r = open_r(plain_path, NULL, 1);
            if (!r) return;
            fake_sink *f;
            tzr_sink *sink = new_sink(sink_kind, tzr_reader_count(r), &f);
            tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
            o.chunk_bytes = chunks[c];
            o.ring_bytes = 4 * chunks[c];
            o.threads = threads[c];
            o.verify = 1;
            o.verify_level = level ? TZR_VERIFY_CRC32 : TZR_VERIFY_FULL;
            order ord = {0};
            o.on_tensor = on_tensor;
            o.on_tensor_ctx = &ord;
            prog g = {0};
            o.progress = on_progress;
            o.progress_ctx = &g;
            CHECK_OK(tzr_load(r, sink, &o, NULL));
            CHECK(!ord.bad_order && ord.calls == tzr_reader_count(r));
            CHECK(!g.backwards && g.total > (40u << 20) && g.last == g.total);
            if (f) {
                CHECK(f->violations == 0);
                for (size_t i = 0; i < tzr_reader_count(r); i++) {
                    uint64_t len;
                    int meta;
                    uint8_t *want = gen_expected(&plain_spec, i, &len, &meta);
                    CHECK(f->dst[i] && f->len[i] == len && memcmp(f->dst[i], want, len) == 0);
                    free(want);
                }
            } else {
                check_host(sink, r, &plain_spec);
            }
            tzr_sink_free(sink);
            tzr_reader_free(r);
        }
}

/* ---- faulty source ---------------------------------------------------- */
typedef struct faulty {
    tzr_source base;
    tzr_source *inner;
    uint64_t fail_at;      /* a read covering this offset fails */
    int code;
    atomic_int reads;
} faulty;

static int faulty_read(tzr_source *s, void *buf, size_t len, uint64_t off) {
    faulty *f = (faulty *)s;
    atomic_fetch_add(&f->reads, 1);
    if (f->fail_at >= off && f->fail_at < off + len) {
        if (f->code == TZR_ETRUNC) return tzr_set_error(TZR_ETRUNC, "%s: injected short read at offset %llu", s->name, (unsigned long long)off);
        return tzr_set_error(f->code, "%s: injected read error at offset %llu", s->name, (unsigned long long)off);
    }
    return f->inner->read_at(f->inner, buf, len, off);
}

static int faulty_readv(tzr_source *s, const tzr_iovec *iov, int n, uint64_t off) {
    faulty *f = (faulty *)s;
    atomic_fetch_add(&f->reads, 1);
    uint64_t len = 0;
    for (int i = 0; i < n; i++) len += iov[i].len;
    if (f->fail_at >= off && f->fail_at < off + len)
        return tzr_set_error(f->code, "%s: injected vectored read error at offset %llu", s->name, (unsigned long long)off);
    return f->inner->readv_at(f->inner, iov, n, off);
}

static void faulty_destroy(tzr_source *s) {
    faulty *f = (faulty *)s;
    tzr_source_free(f->inner);
    free(f);
}

/* The file at path behind a source whose reads covering fail_at fail. */
static faulty *wrap_faulty(const char *path, uint64_t fail_at, int code) {
    faulty *f = calloc(1, sizeof *f);
    CHECK_OK(tzr_source_open_file(&f->inner, path, 0));
    f->base = *f->inner;
    f->base.read_at = faulty_read;
    f->base.destroy = faulty_destroy;
    f->base.is_cached = NULL; /* the inner source's methods expect its own struct */
    f->base.set_direct = NULL;
    f->base.readv_at = faulty_readv;
    f->base.name = "faulty";
    f->base.ctx = f;
    f->fail_at = fail_at;
    f->code = code;
    return f;
}

static tzr_reader *open_faulty(const char *path, uint64_t fail_at, int code, int verify, const uint8_t *key) {
    faulty *f = wrap_faulty(path, fail_at, code);
    tzr_reader_options o = TZR_READER_OPTIONS_INIT;
    o.verify = verify;
    o.crypt.key = key;
    tzr_reader *r = NULL;
    CHECK_OK(tzr_reader_open_source(&r, &f->base, &o));
    return r;
}

/* A source whose reads are costly (pack_reads, as HTTP/S3 sets it): the
 * loader packs tensors into reads of `chunk` bytes. Every byte lands, in
 * order, through the host sink and the fake asynchronous one, plain and
 * encrypted; plaintext reads never overlap and each read but the last
 * fills its chunk up to one header. */
static tzr_reader *open_packed(const char *path, int verify, const uint8_t *key, faulty **out) {
    tzr_reader *r = open_faulty(path, UINT64_MAX, 0, verify, key);
    faulty *f = (faulty *)tzr_reader_source(r);
    f->base.readv_at = NULL;
    f->base.pack_reads = 1;
    *out = f;
    return r;
}

static void packed_reads(void) {
    const char *paths[2] = {plain_path, enc_path};
    const gen_spec *specs[2] = {&plain_spec, &enc_spec};
    size_t chunks[] = {4096, 65536, 1 << 20, 8 << 20};
    for (int k = 0; k < 2; k++)
        for (int verify = 0; verify < 2; verify++)
            for (size_t c = 0; c < 4; c++)
                for (int async = 0; async < 2; async++) {
                    faulty *src;
                    tzr_reader *r = open_packed(paths[k], verify, specs[k]->key, &src);
                    uint64_t hmax = 0, lo = UINT64_MAX, hi = 0;
                    for (size_t i = 0; i < tzr_reader_count(r); i++) {
                        const tzr_tensor_info *t = tzr_reader_tensor(r, i);
                        if (t->data_offset - t->header_offset > hmax) hmax = t->data_offset - t->header_offset;
                        if (t->header_offset < lo) lo = t->header_offset;
                        if (t->data_offset + t->data_length > hi) hi = t->data_offset + t->data_length;
                    }
                    fake_sink *f;
                    tzr_sink *sink = new_sink(async ? 2 : 0, tzr_reader_count(r), &f);
                    tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
                    o.chunk_bytes = chunks[c];
                    o.ring_bytes = 4 * chunks[c];
                    o.threads = 1 + (int)c;
                    order ord = {0};
                    o.on_tensor = on_tensor;
                    o.on_tensor_ctx = &ord;
                    tzr_load_stats st;
                    CHECK_OK(tzr_load(r, sink, &o, &st));
                    CHECK(!ord.bad_order && ord.calls == tzr_reader_count(r));
                    if (!specs[k]->key) {
                        CHECK(st.bytes_read <= hi - lo);
                        CHECK((st.reads - 1) * (chunks[c] - hmax) <= st.bytes_read);
                    }
                    if (async) {
                        CHECK(f->violations == 0);
                        for (size_t i = 0; i < tzr_reader_count(r); i++) {
                            uint64_t len;
                            int meta;
                            uint8_t *want = gen_expected(specs[k], i, &len, &meta);
                            CHECK(f->dst[i] && f->len[i] == len && memcmp(f->dst[i], want, len) == 0);
                            free(want);
                        }
                    } else {
                        check_host(sink, r, specs[k]);
                    }
                    tzr_sink_free(sink);
                    tzr_reader_free(r);
                }
}

static void read_errors(void) {
    int codes[2] = {TZR_EIO, TZR_ETRUNC};
    for (int c = 0; c < 2; c++)
        for (int sink_kind = 0; sink_kind < 3; sink_kind++) {
            /* Fail inside the data of tensor 13 (a big one), or of tensor 9
             * (small: coalesced, read with one vectored read). */
            tzr_reader *probe = open_r(plain_path, NULL, 0);
            size_t victim = sink_kind == 0 && c == 1 ? 9 : 13;
            const tzr_tensor_info *t = tzr_reader_tensor(probe, victim);
            uint64_t at = t->data_offset + t->data_length / 2;
            tzr_reader_free(probe);
            tzr_reader *r = open_faulty(plain_path, at, codes[c], sink_kind == 1, NULL);
            if (!r) return;
            fake_sink *f;
            tzr_sink *sink = new_sink(sink_kind, tzr_reader_count(r), &f);
            tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
            o.chunk_bytes = 1 << 20;
            o.ring_bytes = 4 << 20;
            o.threads = 4;
            order ord = {0};
            o.on_tensor = on_tensor;
            o.on_tensor_ctx = &ord;
            CHECK_RC(tzr_load(r, sink, &o, NULL), codes[c]);
            char want_name[32];
            snprintf(want_name, sizeof want_name, "layers.%zu.weight", victim);
            if (victim == 13) CHECK(strstr(tzr_last_error(), want_name) != NULL);
            /* A coalesced unit is one vectored read that names its first tensor. */
            else CHECK(strstr(tzr_last_error(), "injected vectored read error") != NULL);
            CHECK(strstr(tzr_last_error(), "offset") != NULL);
            CHECK(ord.calls <= 13 && !ord.bad_order); /* nothing reported past the failure */
            tzr_sink_free(sink);
            tzr_reader_free(r);
        }
}

/* One byte flipped in a copy: in the middle of tensor 20 (small, one
 * piece), or of tensor 21 (3 MiB, many pieces) at its first, a middle or
 * its last byte. Both verify levels, both sinks, fail naming the tensor. */
static void hash_mismatch(void) {
    struct { size_t tensor; int where; const char *name; } flips[] = {
        {20, 1, "layers.20.weight"}, {21, 0, "layers.21.weight"}, {21, 1, "layers.21.weight"},
        {21, 2, "layers.21.weight"}};
    for (size_t k = 0; k < sizeof flips / sizeof flips[0]; k++) {
        size_t n;
        uint8_t *bytes = check_read_file(plain_path, &n);
        tzr_reader *probe = open_r(plain_path, NULL, 0);
        const tzr_tensor_info *t = tzr_reader_tensor(probe, flips[k].tensor);
        uint64_t at = flips[k].where == 0 ? 0 : flips[k].where == 1 ? t->data_length / 2 : t->data_length - 1;
        bytes[t->data_offset + at] ^= 0x40;
        tzr_reader_free(probe);
        for (int level = 0; level < 2; level++)
            for (int sink_kind = 0; sink_kind < 2; sink_kind++) {
                tzr_source *src;
                CHECK_OK(tzr_source_open_memory(&src, bytes, n, "corrupt.tensors"));
                tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
                ro.verify = 1;
                tzr_reader *r;
                CHECK_OK(tzr_reader_open_source(&r, src, &ro));
                tzr_sink *sink;
                if (sink_kind == 0) CHECK_OK(tzr_sink_null_new(&sink));
                else CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
                tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
                o.chunk_bytes = 65536;
                o.threads = 4;
                o.verify_level = level ? TZR_VERIFY_CRC32 : TZR_VERIFY_FULL;
                CHECK_RC(tzr_load(r, sink, &o, NULL), TZR_EHASH);
                CHECKF(strstr(tzr_last_error(), flips[k].name) && strstr(tzr_last_error(), "crc32 mismatch"),
                       "flip %zu level %d: %s", k, level, tzr_last_error());
                tzr_sink_free(sink);
                tzr_reader_free(r);
            }
        free(bytes);
    }
}

/* ---- loads that go on past bad tensors (on_tensor_error) ------------- */
typedef struct bad_log {
    size_t idx[16];
    int code[16];
    size_t n, good;
    int bad_order;
    int named; /* every message names its tensor */
} bad_log;

static int log_bad(void *ctx, size_t i, const tzr_tensor_info *t, int code, const char *msg) {
    bad_log *b = ctx;
    if (b->n && i <= b->idx[b->n - 1]) b->bad_order = 1;
    char name[256];
    snprintf(name, sizeof name, "'%.*s'", (int)t->name_len, t->name);
    if (!strstr(msg, name) || !strstr(msg, "offset")) b->named = 0;
    if (b->n < 16) {
        b->idx[b->n] = i;
        b->code[b->n] = code;
    }
    b->n++;
    return 0;
}

static int log_good(void *ctx, size_t i, const tzr_tensor_info *t) {
    (void)i;
    (void)t;
    ((bad_log *)ctx)->good++;
    return 0;
}

/* A copy of `path` in memory with data bytes of tensors `flip` flipped
 * (the middle of each) and, for `hdr`, a byte of the header's name. */
static uint8_t *damaged_copy(const char *path, const uint8_t *key, const size_t *flip, size_t nflip, size_t hdr,
                             size_t *len) {
    uint8_t *bytes = check_read_file(path, len);
    tzr_reader *probe = open_r(path, key, 0);
    CHECK(bytes && probe);
    if (!bytes || !probe) return bytes;
    for (size_t k = 0; k < nflip; k++) {
        const tzr_tensor_info *t = tzr_reader_tensor(probe, flip[k]);
        bytes[t->data_offset + t->data_length / 2] ^= 0x40;
    }
    if (hdr != (size_t)-1) bytes[tzr_reader_tensor(probe, hdr)->header_offset + 13] ^= 0x20; /* name's first byte */
    tzr_reader_free(probe);
    return bytes;
}

static int load_logged(const uint8_t *bytes, size_t len, const uint8_t *key, int verify, int sink_kind, bad_log *b,
                       tzr_load_stats *st) {
    tzr_source *src;
    tzr_reader *r = NULL;
    tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
    ro.crypt.key = key;
    CHECK_OK(tzr_source_open_memory(&src, bytes, len, "damaged.tensors"));
    CHECK_OK(tzr_reader_open_source(&r, src, &ro));
    if (!r) return -1000;
    fake_sink *f;
    tzr_sink *sink = new_sink(sink_kind, tzr_reader_count(r), &f);
    tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
    o.chunk_bytes = 1 << 20; /* big tensors span several units */
    o.threads = 3;
    o.verify = verify;
    o.on_tensor = log_good;
    o.on_tensor_ctx = b;
    o.on_tensor_error = log_bad;
    o.on_tensor_error_ctx = b;
    memset(b, 0, sizeof *b);
    b->named = 1;
    int rc = tzr_load(r, sink, &o, st);
    /* tensors that passed hold their bytes (unverified plaintext may not) */
    for (size_t i = 0; sink_kind == 0 && (verify || key) && i < tzr_reader_count(r); i++) {
        int was_bad = 0;
        for (size_t k = 0; k < b->n && k < 16; k++) was_bad |= b->idx[k] == i;
        if (was_bad) continue;
        uint64_t want_len, glen;
        int meta;
        uint8_t *want = gen_expected(key ? &enc_spec : &plain_spec, i, &want_len, &meta);
        void *got;
        CHECK(tzr_sink_host_data(sink, i, &got, &glen) == 0 && glen == want_len && !memcmp(got, want, want_len));
        free(want);
    }
    tzr_sink_free(sink);
    tzr_reader_free(r);
    return rc;
}

/* Every bad tensor is reported, in index order, and the load goes on: one
 * read of every byte however many fail. Tensor 14 is a 3 MiB one split
 * into units; 30's header disagrees with the index. */
static void go_on_past_bad_tensors(void) {
    size_t flip[3] = {2, 14, 15}, len;
    uint8_t *bytes = damaged_copy(plain_path, NULL, flip, 3, 30, &len);
    for (int sink_kind = 0; bytes && sink_kind < 3; sink_kind++) {
        bad_log b;
        tzr_load_stats st;
        int rc = load_logged(bytes, len, NULL, 1, sink_kind, &b, &st);
        CHECK_RC(rc, TZR_EHASH);
        CHECK(strstr(tzr_last_error(), "4 of 120 tensors failed") != NULL);
        CHECK(strstr(tzr_last_error(), "layers.2.") != NULL);
        CHECK(st.error_tensor == 2);
        CHECK(b.n == 4 && !b.bad_order && b.named);
        CHECK(b.idx[0] == 2 && b.idx[1] == 14 && b.idx[2] == 15 && b.idx[3] == 30);
        CHECK(b.code[0] == TZR_EHASH && b.code[1] == TZR_EHASH && b.code[2] == TZR_EHASH && b.code[3] == TZR_EFORMAT);
        CHECK(b.good == 116);
        CHECK(st.bytes_read <= len);
    }
    /* Without verification only the header can be found out. */
    bad_log b;
    tzr_load_stats st;
    if (bytes) CHECK_RC(load_logged(bytes, len, NULL, 0, 0, &b, &st), TZR_EFORMAT);
    CHECK(b.n == 1 && b.idx[0] == 30 && b.good == 119);
    free(bytes);
}

/* Encrypted: tensors whose ciphertext is damaged fail to decrypt and are
 * reported; a wrong key is one error, with no tensor reported. */
static void go_on_encrypted_and_wrong_key(void) {
    size_t flip[2] = {1, 7}, len;
    uint8_t *bytes = damaged_copy(enc_path, KEY, flip, 2, (size_t)-1, &len);
    for (int verify = 0; bytes && verify < 2; verify++) {
        bad_log b;
        tzr_load_stats st;
        CHECK_RC(load_logged(bytes, len, KEY, verify, 0, &b, &st), TZR_ECRYPT);
        CHECK(b.n == 2 && b.idx[0] == 1 && b.idx[1] == 7 && b.named);
        CHECK(b.code[0] == TZR_ECRYPT && b.code[1] == TZR_ECRYPT);
        CHECK(b.good == enc_spec.count - 2);
    }
    uint8_t wrong[32];
    memcpy(wrong, KEY, 32);
    wrong[0] ^= 1;
    bad_log b;
    tzr_load_stats st;
    if (bytes) CHECK_RC(load_logged(bytes, len, wrong, 1, 1, &b, &st), TZR_ECRYPT);
    CHECK(strstr(tzr_last_error(), "wrong key or password") != NULL);
    CHECK(b.n == 0);
    free(bytes);
}

/* ---- byte selections (tzr_load_options.select) ---------------------- */
/* Per tensor: whole (i % 3 == 0 or small), the middle half, or 2 groups of
 * 8 strided runs. */
static int pick_bytes(void *ctx, size_t i, const tzr_tensor_info *t, tzr_byte_selection *sel) {
    (void)ctx;
    uint64_t n = t->nbytes;
    if (i % 3 == 0 || n < 256) return 0;
    if (i % 3 == 1) *sel = (tzr_byte_selection){n / 4, n / 2, n / 2, 1, n, 1};
    else *sel = (tzr_byte_selection){3, n / 64, n / 16, 8, n / 2, 2};
    return 1;
}

static int selected_byte(const tzr_byte_selection *s, uint64_t b) {
    for (uint64_t o = 0; o < s->outer_count; o++)
        for (uint64_t j = 0; j < s->count; j++) {
            uint64_t a = s->offset + o * s->outer_stride + j * s->stride;
            if (b >= a && b < a + s->run) return 1;
        }
    return 0;
}

static int bad_pick(void *ctx, size_t i, const tzr_tensor_info *t, tzr_byte_selection *sel) {
    (void)ctx;
    if (i != 1) return 0;
    *sel = (tzr_byte_selection){t->nbytes - 1, 2, 2, 1, 2, 1};
    return 1;
}

/* Exactly the selected bytes land, once each, right; unverified plaintext
 * reads little more than them. */
static void byte_selections(void) {
    for (int enc = 0; enc < 2; enc++)
        for (int verify = 0; verify < 2; verify++)
            for (int kind = 0; kind < 3; kind += 2) {
                const gen_spec *spec = enc ? &enc_spec : &plain_spec;
                tzr_reader *r = open_r(enc ? enc_path : plain_path, enc ? KEY : NULL, 0);
                if (!r) continue;
                fake_sink *f;
                tzr_sink *sink = new_sink(kind, tzr_reader_count(r), &f);
                tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
                o.chunk_bytes = 1 << 20;
                o.threads = 3;
                o.verify = verify;
                o.select = pick_bytes;
                tzr_load_stats st;
                CHECK_OK(tzr_load(r, sink, &o, &st));
                uint64_t want_bytes = 0, file_bytes = tzr_reader_source(r)->size;
                size_t bad = 0;
                for (size_t i = 0; i < tzr_reader_count(r); i++) {
                    const tzr_tensor_info *t = tzr_reader_tensor(r, i);
                    tzr_byte_selection sel;
                    int has = pick_bytes(NULL, i, t, &sel);
                    uint64_t len;
                    int meta;
                    uint8_t *want = gen_expected(spec, i, &len, &meta);
                    uint8_t *got = NULL;
                    uint64_t glen = 0;
                    if (kind == 0) CHECK_OK(tzr_sink_host_data(sink, i, (void **)&got, &glen));
                    else got = f->dst[i], glen = f->len[i];
                    for (uint64_t b = 0; b < len; b++) {
                        int in = !has || selected_byte(&sel, b);
                        want_bytes += in;
                        if (in && (!got || got[b] != want[b])) bad++;
                        if (kind == 2 && f->writes[i] && f->writes[i][b] != (in ? 1 : 0)) bad++;
                    }
                    free(want);
                }
                CHECK(bad == 0);
                CHECK(st.bytes == want_bytes);
                /* plaintext, unverified: about the selected bytes, far from the file */
                if (!enc && !verify) CHECK(st.bytes_read < file_bytes * 3 / 4);
                if (verify) CHECK(st.bytes_read >= file_bytes - tzr_reader_count(r) * 256 - 300000);
                if (kind == 2) CHECK(f->violations == 0);
                tzr_sink_free(sink);
                tzr_reader_free(r);
            }
    /* A selection outside the tensor is refused, naming it. */
    tzr_reader *r = open_r(plain_path, NULL, 0);
    tzr_sink *sink;
    CHECK_OK(tzr_sink_null_new(&sink));
    tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
    o.select = bad_pick;
    CHECK_RC(tzr_load(r, sink, &o, NULL), TZR_EINVAL);
    CHECK(strstr(tzr_last_error(), "layers.1.weight") && strstr(tzr_last_error(), "byte selection"));
    tzr_sink_free(sink);
    tzr_reader_free(r);
}

static void cancel_and_callback_error(void) {
    for (int mode = 0; mode < 2; mode++) {
        tzr_reader *r = open_r(plain_path, NULL, 1);
        fake_sink *f = fake_sink_new(tzr_reader_count(r));
        volatile int cancel = 0;
        order ord = {0};
        ord.cancel_after = 10;
        if (mode == 0) ord.cancel = &cancel;
        else ord.fail_with = TZR_EINVAL;
        tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
        o.chunk_bytes = 65536;
        o.ring_bytes = 4 * 65536;
        o.threads = 4;
        o.cancel = &cancel;
        o.on_tensor = on_tensor;
        o.on_tensor_ctx = &ord;
        CHECK_RC(tzr_load(r, &f->base, &o, NULL), mode == 0 ? TZR_ECANCELED : TZR_EINVAL);
        CHECK(ord.calls <= (mode == 0 ? 11 : 10));
        tzr_sink_free(&f->base);
        tzr_reader_free(r);
    }
}

static int only_odd(void *ctx, size_t index, const tzr_tensor_info *t) {
    (void)ctx;
    (void)t;
    return index % 2 == 1;
}

static void filter_and_null_budget(void) {
    tzr_reader *r = open_r(plain_path, NULL, 1);
    tzr_sink *sink;
    CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
    tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
    o.filter = only_odd;
    tzr_load_stats st;
    CHECK_OK(tzr_load(r, sink, &o, &st));
    CHECK(st.tensors == tzr_reader_count(r) / 2);
    for (size_t i = 0; i < tzr_reader_count(r); i++) {
        void *d;
        uint64_t len;
        CHECK(tzr_sink_host_data(sink, i, &d, &len) == (i % 2 ? 0 : TZR_ENOTFOUND));
    }
    tzr_sink_free(sink);
    /* Null sink: staging never exceeds the ring budget. */
    CHECK_OK(tzr_sink_null_new(&sink));
    o = (tzr_load_options)TZR_LOAD_OPTIONS_INIT;
    o.ring_bytes = 1 << 20;
    o.chunk_bytes = 256 << 10;
    CHECK_OK(tzr_load(r, sink, &o, &st));
    CHECK(st.staging_bytes <= (1 << 20));
    CHECK(st.bytes_read >= st.bytes - 3 * 6 /* meta bytes are not read */);
    tzr_sink_free(sink);
    tzr_reader_free(r);
}

/* O_DIRECT for the aligned middle of each read (the file lives on the
 * build's file system: tmpfs refuses O_DIRECT). */
static void direct_io(void) {
    char path[512];
    const char *build = getenv("TZR_BUILD");
    snprintf(path, sizeof path, "%s/tests/direct-%d.tensors", build ? build : "build", (int)getpid());
    CHECK_OK(gen_write(&plain_spec, path));
    for (int sink_kind = 0; sink_kind < 3; sink_kind++) {
        tzr_reader *r = open_r(path, NULL, 1);
        if (!r) break;
        tzr_source *src = tzr_reader_source(r);
        int probe = src->set_direct ? src->set_direct(src, 1) : TZR_ENOTSUP;
        if (probe == TZR_ENOTSUP) { /* only a refusal is a skip; any other error fails */
            tzr_reader_free(r);
            check_skip("this file system refuses O_DIRECT");
            break;
        }
        CHECK_OK(probe);
        if (probe) {
            tzr_reader_free(r);
            break;
        }
        src->set_direct(src, 0);
        fake_sink *f;
        tzr_sink *sink = new_sink(sink_kind, tzr_reader_count(r), &f);
        tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
        o.direct_io = TZR_DIRECT_ON;
        o.chunk_bytes = 1 << 20;
        o.threads = 3;
        CHECK_OK(tzr_load(r, sink, &o, NULL));
        if (sink_kind == 0) check_host(sink, r, &plain_spec);
        for (size_t i = 0; f && i < tzr_reader_count(r); i++) {
            uint64_t len;
            int meta;
            uint8_t *want = gen_expected(&plain_spec, i, &len, &meta);
            CHECK(f->dst[i] && f->len[i] == len && memcmp(f->dst[i], want, len) == 0);
            free(want);
        }
        tzr_sink_free(sink);
        tzr_reader_free(r);
    }
    unlink(path);
}


/* The documented default: one thread per online CPU, 2 to 16 (tzr-bench's
 * floor runs on this many). */
static void default_threads(void) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int want = cpus < 2 ? 2 : cpus > 16 ? 16 : (int)cpus;
    CHECKF(tzr_load_default_threads() == want, "%d threads for %ld CPUs", tzr_load_default_threads(), cpus);
}

/* Library-allocated host tensors come from one block (the sink's
 * reserve), even past the 64 MiB blocks it otherwise allocates: 64-byte
 * aligned, disjoint, inside one span of the total plus alignment, and
 * every byte as written. */
static void host_one_block(void) {
    /* Above one 64 MiB block: 9 tensors of 12 MiB. */
    char big_path[600];
    snprintf(big_path, sizeof big_path, "%s/one-block.tensors", check_tmpdir());
    gen_spec big = {60, 12u << 20, 1000, 1, NULL};
    CHECK_OK(gen_write(&big, big_path));
    tzr_reader *r = open_r(big_path, NULL, 0);
    if (!r) return;
    tzr_sink *sink = NULL;
    CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
    CHECK_OK(tzr_load(r, sink, NULL, NULL));
    size_t n = tzr_reader_count(r);
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    uint64_t total = 0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t len, glen;
        int meta;
        uint8_t *want = gen_expected(&big, i, &len, &meta);
        void *got = NULL;
        if (tzr_sink_host_data(sink, i, &got, &glen) || glen != len || (len && memcmp(got, want, len) != 0)) bad++;
        free(want);
        if (!got) continue;
        if ((uintptr_t)got % 64) bad++;
        if ((uintptr_t)got < lo) lo = (uintptr_t)got;
        if ((uintptr_t)got + len > hi) hi = (uintptr_t)got + len;
        total += len;
        for (size_t j = 0; j < i; j++) {
            void *o = NULL;
            uint64_t olen = 0;
            tzr_sink_host_data(sink, j, &o, &olen);
            if (len && olen && (uint8_t *)got < (uint8_t *)o + olen && (uint8_t *)o < (uint8_t *)got + len) bad++;
        }
    }
    CHECK(bad == 0);
    CHECK(total > (64u << 20) && hi - lo <= total + 64 * n);
    tzr_sink_free(sink);
    tzr_reader_free(r);
    unlink(big_path);
}

/* A host sink that gives no place in its memory for every third tensor:
 * a coalesced unit holding one is staged and its pieces submitted, the
 * others are scattered in place; every byte must land either way. */
typedef struct partial_sink {
    tzr_sink base;
    tzr_sink *host;
    int refuse;
    atomic_int submits;
} partial_sink;

static int partial_begin(tzr_sink *s, size_t i, const tzr_tensor_info *t) {
    tzr_sink *h = ((partial_sink *)s)->host;
    return h->begin_tensor(h, i, t);
}
static int partial_reserve(tzr_sink *s, size_t count, uint64_t bytes) {
    tzr_sink *h = ((partial_sink *)s)->host;
    return h->reserve(h, count, bytes);
}
static void *partial_direct(tzr_sink *s, size_t i, uint64_t off, uint64_t len) {
    partial_sink *ps = (partial_sink *)s;
    return ps->refuse && i % 3 == 1 ? NULL : ps->host->direct(ps->host, i, off, len);
}
static int partial_submit(tzr_sink *s, int slot, size_t i, uint64_t off, const void *src, size_t len) {
    partial_sink *ps = (partial_sink *)s;
    atomic_fetch_add(&ps->submits, 1);
    return ps->host->submit(ps->host, slot, i, off, src, len);
}
static void partial_destroy(tzr_sink *s) { free(s); }

static void scatter_fallback(void) {
    char path[600];
    snprintf(path, sizeof path, "%s/scatter-fallback.tensors", check_tmpdir());
    gen_spec small = {600, 64, 2000, 0, NULL};
    CHECK_OK(gen_write(&small, path));
    for (int refuse = 0; refuse < 2; refuse++) {
        tzr_reader *r = NULL;
        CHECK_OK(tzr_reader_open(&r, path, NULL));
        if (!r) return;
        partial_sink *ps = calloc(1, sizeof *ps);
        CHECK_OK(tzr_sink_host_new(&ps->host, NULL, NULL));
        ps->refuse = refuse;
        ps->base.begin_tensor = partial_begin;
        ps->base.reserve = partial_reserve;
        ps->base.direct = partial_direct;
        ps->base.submit = partial_submit;
        ps->base.destroy = partial_destroy;
        ps->base.name = "partial";
        ps->base.struct_size = sizeof ps->base;
        tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
        o.chunk_bytes = 64 << 10; /* several coalesced units, each with refused tensors */
        o.threads = 2;
        CHECK_OK(tzr_load(r, &ps->base, &o, NULL));
        check_host(ps->host, r, &small);
        /* Every place given: all scattered, nothing submitted; every third
         * refused: the units holding them staged, all their pieces
         * submitted (more than the 200 refused). */
        if (refuse) CHECK(atomic_load(&ps->submits) > 200);
        else CHECK(atomic_load(&ps->submits) == 0);
        tzr_sink_free(ps->host);
        free(ps);
        tzr_reader_free(r);
    }
    unlink(path);
}

/* File offset of index entry k in a .tensors file's bytes, by the
 * format's layout (u16 name length, name, u8 type, u8 dtype length, dtype,
 * u8 ndim, u32 dims, three u64), from the entries at offset 73. */
static size_t entry_at(const uint8_t *b, size_t k) {
    size_t at = 73;
    for (size_t i = 0; i < k; i++) {
        size_t nl = (size_t)b[at] | (size_t)b[at + 1] << 8;
        size_t dl = b[at + 2 + nl + 1];
        size_t nd = b[at + 2 + nl + 2 + dl];
        at += 2 + nl + 2 + dl + 1 + 4 * nd + 24;
    }
    return at;
}

static void put64(uint8_t *p, uint64_t v) {
    for (int k = 0; k < 8; k++) p[k] = (uint8_t)(v >> (8 * k));
}

/* A large index on a local source is parsed through a sliding 64 KiB
 * window: what is found past the first window is reported at its own
 * offset, and an entry larger than the window is read whole. */
/* The index tests' file: n generated entries at <tmp>/<stem>.tensors, its
 * damaged copies to go to <tmp>/<stem>-bad.tensors; its bytes, or NULL. */
static uint8_t *index_fixture(const char *stem, const gen_spec *spec, char *path, char *bad, size_t cap,
                              size_t *len) {
    snprintf(path, cap, "%s/%s.tensors", check_tmpdir(), stem);
    snprintf(bad, cap, "%s/%s-bad.tensors", check_tmpdir(), stem);
    CHECK_OK(gen_write(spec, path));
    *len = 0;
    uint8_t *b = check_read_file(path, len);
    CHECK(b != NULL);
    return b;
}

static void index_window(void) {
    char path[600], bad[600];
    gen_spec many = {3000, 64, 16, 0, NULL};
    size_t len;
    uint8_t *b = index_fixture("window", &many, path, bad, sizeof path, &len);
    if (!b) return;
    size_t e1500 = entry_at(b, 1500), e2000 = entry_at(b, 2000), e2500 = entry_at(b, 2500), e2999 = entry_at(b, 2999);
    CHECK(e1500 > 73 + (64u << 10)); /* all past the first window */
    char want[200];
    tzr_reader *r = NULL;
    /* A duplicate name: entry 2500 named as entry 1500 ("layers.1500.weight"). */
    uint8_t *m = malloc(len);
    memcpy(m, b, len);
    memcpy(m + e2500 + 2, b + e1500 + 2, 18);
    CHECK(check_write_file(bad, m, len) == 0);
    CHECK_RC(tzr_reader_open(&r, bad, NULL), TZR_EDUP);
    snprintf(want, sizeof want, "index entry 2500 at offset %zu", e2500);
    CHECKF(strstr(tzr_last_error(), want) && strstr(tzr_last_error(), "also entry 1500"), "%s", tzr_last_error());
    /* A count lowered to 2000: entry 2000 stands where padding should. */
    memcpy(m, b, len);
    put64(m + 57, 2000);
    CHECK(check_write_file(bad, m, len) == 0);
    CHECK_RC(tzr_reader_open(&r, bad, NULL), TZR_EFORMAT);
    snprintf(want, sizeof want, "offset %zu: the index holds more entries than the 2000", e2000);
    CHECKF(strstr(tzr_last_error(), want) != NULL, "%s", tzr_last_error());
    /* An index region that ends inside the last entry. */
    memcpy(m, b, len);
    put64(m + 65, e2999 + 10 - 73);
    CHECK(check_write_file(bad, m, len) == 0);
    CHECK_RC(tzr_reader_open(&r, bad, NULL), TZR_EFORMAT);
    snprintf(want, sizeof want, "index entry 2999 at offset %zu runs past the %zu-byte index", e2999, e2999 + 10 - 73);
    CHECKF(strstr(tzr_last_error(), want) != NULL, "%s", tzr_last_error());
    free(m);
    free(b);
    /* An entry larger than the window (a 65,535-byte name) past the first one. */
    tzr_writer_options wo = TZR_WRITER_OPTIONS_INIT;
    wo.metadata_size = 1 << 20;
    tzr_writer *w = NULL;
    CHECK_OK(tzr_writer_open(&w, bad, &wo));
    char *longname = malloc(65535);
    memset(longname, 'x', 65535);
    uint8_t byte = 7;
    uint64_t shape[1] = {1};
    for (size_t i = 0; w && i < 2003; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "t.%zu", i);
        const char *name = i == 2000 ? longname : nm;
        size_t nlen = i == 2000 ? 65535 : strlen(nm);
        tzr_tensor_desc d = {name, nlen, TZR_STATE_DICT, 0, NULL, 0, TZR_DTYPE_U8, 1, shape, 0, sizeof(tzr_tensor_desc)};
        byte = (uint8_t)i;
        CHECK_OK(tzr_writer_add(w, &d, &byte));
    }
    if (w) CHECK_OK(tzr_writer_close(w));
    CHECK_OK(tzr_reader_open(&r, bad, NULL));
    if (r) {
        size_t at = 0;
        CHECK(tzr_reader_count(r) == 2003);
        CHECK_OK(tzr_reader_find(r, longname, 65535, &at));
        CHECK(at == 2000);
        CHECK_OK(tzr_reader_find(r, "t.2002", 6, &at));
        CHECK(at == 2002);
        uint8_t got = 0;
        CHECK_OK(tzr_reader_read(r, 2002, &got, 1));
        CHECK(got == (uint8_t)2002);
        tzr_reader_free(r);
    }
    free(longname);
    unlink(bad);
    unlink(path);
}

/* A large index is parsed in two parts at once: a thread takes the
 * entries from 10240 on (of 20000), the opening thread those before. What
 * an open reports must not depend on it: each damaged file below gives,
 * split or not, the message the one-thread parse gives (compared whole),
 * which names the entry and offset written here. A small index is never
 * split, and TZR_INDEX_SPLIT=0 / TZR_INDEX_THREAD=0 turn the split off. */
extern atomic_size_t tzr_reader_split_parts, tzr_reader_split_taken;
extern atomic_int tzr_reader_split_order;
int tzr_reader_totals(const tzr_reader *r, uint64_t *nbytes, uint64_t *stored, size_t *empty);

/* Where entry k's header offset field is, in the file's bytes b. */
static size_t header_field(const uint8_t *b, size_t k) {
    size_t at = entry_at(b, k);
    size_t nl = (size_t)b[at] | (size_t)b[at + 1] << 8;
    size_t dl = b[at + 2 + nl + 1];
    size_t nd = b[at + 2 + nl + 2 + dl];
    return at + 2 + nl + 2 + dl + 1 + 4 * nd;
}

static uint64_t get64le(const uint8_t *p) {
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--) v = v << 8 | p[k];
    return v;
}

/* Open `path` in each mode; every mode must give rc and the same message,
 * holding `want`. Mode 0 (threads off) is the reference; 1: split off;
 * 2: split, the thread parsing its part; 3: split, the opener taking it
 * back (as when the thread gets no CPU in time); 4: as in use. */
static void split_same_error(const char *path, int rc_want, const char *want, int split_taken) {
    static const char *const modes[5][2] = {
        {"TZR_INDEX_THREAD", "0"}, {"TZR_INDEX_SPLIT", "0"}, {NULL, NULL}, {NULL, NULL}, {NULL, NULL}};
    char ref[1024] = "";
    for (int mode = 0; mode < 5; mode++) {
        unsetenv("TZR_INDEX_THREAD");
        unsetenv("TZR_INDEX_SPLIT");
        if (modes[mode][0]) setenv(modes[mode][0], modes[mode][1], 1);
        atomic_store(&tzr_reader_split_order, mode == 2 ? 1 : mode == 3 ? 2 : 0);
        size_t before = atomic_load(&tzr_reader_split_parts);
        tzr_reader *r = NULL;
        int rc = tzr_reader_open(&r, path, NULL);
        atomic_store(&tzr_reader_split_order, 0);
        size_t parts = atomic_load(&tzr_reader_split_parts) - before;
        CHECKF(parts == (mode >= 2 && split_taken ? 1u : 0u), "mode %d: %zu split parts", mode, parts);
        CHECKF(rc == rc_want, "mode %d: rc %d, want %d: %s", mode, rc, rc_want, tzr_last_error());
        if (!rc) {
            tzr_reader_free(r);
            continue;
        }
        if (mode == 0) {
            snprintf(ref, sizeof ref, "%s", tzr_last_error());
            CHECKF(strstr(ref, want) != NULL, "want '%s' in: %s", want, ref);
        } else {
            CHECKF(strcmp(ref, tzr_last_error()) == 0, "mode %d: '%s' against '%s'", mode, tzr_last_error(), ref);
        }
    }
    unsetenv("TZR_INDEX_THREAD");
    unsetenv("TZR_INDEX_SPLIT");
}

static void index_split_parse(void) {
    char path[600], bad[600];
    gen_spec many = {20000, 64, 16, 0, NULL};
    size_t len;
    uint8_t *b = index_fixture("split", &many, path, bad, sizeof path, &len);
    if (!b) return;
    uint8_t *m = malloc(len);
    char want[200];
    /* Undamaged: the same table every way (lookups across the split, every
     * byte loaded): split off, the thread's part, the part taken back. */
    for (int split = 0; split < 3; split++) {
        if (!split) setenv("TZR_INDEX_SPLIT", "0", 1);
        atomic_store(&tzr_reader_split_order, split);
        size_t before = atomic_load(&tzr_reader_split_parts), taken = atomic_load(&tzr_reader_split_taken);
        tzr_reader *r = open_r(path, NULL, 0);
        CHECK(atomic_load(&tzr_reader_split_parts) - before == (split ? 1u : 0u));
        CHECKF(atomic_load(&tzr_reader_split_taken) - taken == (split == 2 ? 1u : 0u), "split %d", split);
        atomic_store(&tzr_reader_split_order, 0);
        unsetenv("TZR_INDEX_SPLIT");
        if (!r) continue;
        CHECK(tzr_reader_count(r) == 20000);
        static const size_t probe[] = {0, 10239, 10240, 10241, 19999};
        for (size_t k = 0; k < sizeof probe / sizeof probe[0]; k++) {
            char nm[64];
            size_t at = (size_t)-1;
            snprintf(nm, sizeof nm, "layers.%zu.weight", probe[k]);
            CHECK_OK(tzr_reader_find(r, nm, strlen(nm), &at));
            CHECKF(at == probe[k], "%s at %zu", nm, at);
            const tzr_tensor_info *t = tzr_reader_tensor(r, probe[k]);
            CHECK(t->header_offset == get64le(b + header_field(b, probe[k])));
        }
        uint64_t nbytes = 0, stored = 0;
        size_t empty = 1;
        CHECK_OK(tzr_reader_totals(r, &nbytes, &stored, &empty));
        CHECK(nbytes == get64le(b + 41) && stored == nbytes && empty == 0);
        tzr_sink *sink = NULL;
        CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
        CHECK_OK(tzr_load(r, sink, NULL, NULL));
        check_host(sink, r, &many);
        tzr_sink_free(sink);
        tzr_reader_free(r);
    }
    size_t e3000 = entry_at(b, 3000), e10239 = entry_at(b, 10239), e10240 = entry_at(b, 10240);
    size_t e15000 = entry_at(b, 15000), e19000 = entry_at(b, 19000);
    /* A name that is not UTF-8 in the second part, and a later one. */
    memcpy(m, b, len);
    m[e15000 + 2] = 0xff;
    m[e19000 + 2] = 0xff;
    CHECK(check_write_file(bad, m, len) == 0);
    snprintf(want, sizeof want, "(index entry 15000 at offset %zu): tensor name is not valid UTF-8", e15000);
    split_same_error(bad, TZR_EFORMAT, want, 1);
    /* One in each part: the first part's. */
    m[e3000 + 2] = 0xff;
    CHECK(check_write_file(bad, m, len) == 0);
    snprintf(want, sizeof want, "(index entry 3000 at offset %zu): tensor name is not valid UTF-8", e3000);
    split_same_error(bad, TZR_EFORMAT, want, 1);
    /* The last entry of the first part, and the first of the second. */
    memcpy(m, b, len);
    m[e10239 + 2] = 0xff;
    m[e19000 + 2] = 0xff;
    CHECK(check_write_file(bad, m, len) == 0);
    snprintf(want, sizeof want, "(index entry 10239 at offset %zu): tensor name is not valid UTF-8", e10239);
    split_same_error(bad, TZR_EFORMAT, want, 1);
    memcpy(m, b, len);
    m[e10240 + 2] = 0xff;
    CHECK(check_write_file(bad, m, len) == 0);
    snprintf(want, sizeof want, "(index entry 10240 at offset %zu): tensor name is not valid UTF-8", e10240);
    split_same_error(bad, TZR_EFORMAT, want, 1);
    /* The first entry of the second part overlaps the first part's last
     * record (its header offset is entry 10239's): only the join can see
     * it; a later error in the second part must not be reported instead. */
    memcpy(m, b, len);
    uint64_t h10239 = get64le(b + header_field(b, 10239));
    put64(m + header_field(m, 10240), h10239);
    CHECK(check_write_file(bad, m, len) == 0);
    snprintf(want, sizeof want, "(index entry 10240 at offset %zu): header offset %llu overlaps", e10240,
             (unsigned long long)h10239);
    split_same_error(bad, TZR_EFORMAT, want, 1);
    m[e19000 + 2] = 0xff;
    CHECK(check_write_file(bad, m, len) == 0);
    split_same_error(bad, TZR_EFORMAT, want, 1);
    /* Duplicates across the parts: the first in index order. */
    memcpy(m, b, len);
    memcpy(m + e19000 + 2, b + entry_at(b, 12000) + 2, 19); /* 19000 named as 12000 (both in the second part) */
    memcpy(m + e15000 + 2, b + entry_at(b, 11000) + 2, 19); /* 15000 as 11000 */
    CHECK(check_write_file(bad, m, len) == 0);
    snprintf(want, sizeof want, "(index entry 15000 at offset %zu): duplicate name (also entry 11000)", e15000);
    split_same_error(bad, TZR_EDUP, want, 1);
    memcpy(m, b, len);
    memcpy(m + e19000 + 2, b + entry_at(b, 10000) + 2, 19); /* across the split */
    CHECK(check_write_file(bad, m, len) == 0);
    snprintf(want, sizeof want, "(index entry 19000 at offset %zu): duplicate name (also entry 10000)", e19000);
    split_same_error(bad, TZR_EDUP, want, 1);
    /* Cut inside the second part. */
    memcpy(m, b, len);
    put64(m + 65, e15000 + 10 - 73);
    CHECK(check_write_file(bad, m, len) == 0);
    snprintf(want, sizeof want, "index entry 15000 at offset %zu runs past", e15000);
    split_same_error(bad, TZR_EFORMAT, want, 1);
    /* A count lowered to 19000: entry 19000 stands where the padding
     * after the second part should be (checked through that part's window). */
    memcpy(m, b, len);
    put64(m + 57, 19000);
    CHECK(check_write_file(bad, m, len) == 0);
    snprintf(want, sizeof want, "offset %zu: the index holds more entries than the 19000", e19000);
    split_same_error(bad, TZR_EFORMAT, want, 1);
    free(m);
    free(b);
    unlink(bad);
    unlink(path);
    /* 19000 entries (also split at 10240), the index cut inside the last
     * entry of the first part: the thread's length pass runs out of index
     * too. The count still fits the shorter index (29 bytes an entry at
     * least), so the parse is reached. */
    gen_spec mid = {19000, 64, 16, 0, NULL};
    CHECK_OK(gen_write(&mid, path));
    b = check_read_file(path, &len);
    CHECK(b != NULL);
    if (b) {
        size_t e10230 = entry_at(b, 10230);
        CHECKF(e10230 + 10 - 73 >= 19000 * 29, "%zu", e10230);
        put64(b + 65, e10230 + 10 - 73);
        CHECK(check_write_file(bad, b, len) == 0);
        snprintf(want, sizeof want, "index entry 10230 at offset %zu runs past", e10230);
        split_same_error(bad, TZR_EFORMAT, want, 1);
        free(b);
    }
    unlink(bad);
    unlink(path);
    /* A small index (3000 entries): never split. */
    gen_spec few = {3000, 64, 16, 0, NULL};
    CHECK_OK(gen_write(&few, path));
    split_same_error(path, 0, "", 0);
    unlink(path);
}

/* A large index has its names entered on a helper thread while the parse
 * goes on (TZR_INDEX_THREAD=0: after it, on the opening thread). Both
 * paths, each checked to be taken: the same lookups and bytes, the same
 * first duplicate (across the helper's batches of 4096), and a parse error
 * after a duplicate still wins, as in the one-thread order. */
extern atomic_size_t tzr_reader_helper_names;
extern atomic_int tzr_reader_helper_sync;

static void index_names_helper(void) {
    char path[600], bad[600];
    gen_spec many = {20000, 64, 16, 0, NULL};
    size_t len;
    uint8_t *b = index_fixture("names", &many, path, bad, sizeof path, &len);
    if (!b) return;
    uint8_t *m = malloc(len);
    size_t e10000 = entry_at(b, 10000), e11000 = entry_at(b, 11000), e12000 = entry_at(b, 12000);
    size_t e19000 = entry_at(b, 19000);
    size_t e19999 = entry_at(b, 19999);
    /* 0: no helper; 1: the parse waits for it after each batch, so it
     * enters all 9 whole batches of 2048 and the opener the last 1568;
     * 2: as in use, any share of whole batches. */
    for (int helper = 0; helper < 3; helper++) {
        if (helper) unsetenv("TZR_INDEX_THREAD");
        else setenv("TZR_INDEX_THREAD", "0", 1);
        atomic_store(&tzr_reader_helper_sync, helper == 1);
        size_t before = atomic_load(&tzr_reader_helper_names);
        tzr_reader *r = open_r(path, NULL, 0);
        size_t helped = atomic_load(&tzr_reader_helper_names) - before;
        CHECKF(helper == 0 ? helped == 0 : helper == 1 ? helped == 9 * 2048 : helped <= 9 * 2048 && helped % 2048 == 0,
               "helper %d: %zu", helper, helped);
        if (r) {
            CHECK(tzr_reader_count(r) == 20000);
            static const size_t probe[] = {0, 1, 4095, 4096, 4097, 8191, 16384, 19998, 19999};
            for (size_t k = 0; k < sizeof probe / sizeof probe[0]; k++) {
                char nm[64];
                size_t at = (size_t)-1;
                snprintf(nm, sizeof nm, "layers.%zu.weight", probe[k]);
                CHECK_OK(tzr_reader_find(r, nm, strlen(nm), &at));
                CHECKF(at == probe[k], "%s at %zu", nm, at);
            }
            CHECK_RC(tzr_reader_find(r, "layers.20000.weight", 19, &(size_t){0}), TZR_ENOTFOUND);
            tzr_sink *sink = NULL;
            CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
            CHECK_OK(tzr_load(r, sink, NULL, NULL));
            check_host(sink, r, &many);
            tzr_sink_free(sink);
            tzr_reader_free(r);
        }
        char want[200];
        /* Entry 19000 named as entry 10000, and 12000 as 11000 (another
         * batch): the first duplicate in index order is 12000. */
        memcpy(m, b, len);
        memcpy(m + e19000 + 2, b + e10000 + 2, 19);
        memcpy(m + e12000 + 2, b + e11000 + 2, 19);
        CHECK(check_write_file(bad, m, len) == 0);
        r = NULL;
        CHECK_RC(tzr_reader_open(&r, bad, NULL), TZR_EDUP);
        snprintf(want, sizeof want, "index entry 12000 at offset %zu", e12000);
        CHECKF(strstr(tzr_last_error(), want) && strstr(tzr_last_error(), "also entry 11000"), "%s", tzr_last_error());
        /* 19000 named as 10000 alone: found across batches. */
        memcpy(m, b, len);
        memcpy(m + e19000 + 2, b + e10000 + 2, 19);
        CHECK(check_write_file(bad, m, len) == 0);
        CHECK_RC(tzr_reader_open(&r, bad, NULL), TZR_EDUP);
        snprintf(want, sizeof want, "index entry 19000 at offset %zu", e19000);
        CHECKF(strstr(tzr_last_error(), want) && strstr(tzr_last_error(), "also entry 10000"), "%s", tzr_last_error());
        /* That duplicate, and the index cut inside its last entry: the parse error wins. */
        put64(m + 65, e19999 + 10 - 73);
        CHECK(check_write_file(bad, m, len) == 0);
        CHECK_RC(tzr_reader_open(&r, bad, NULL), TZR_EFORMAT);
        snprintf(want, sizeof want, "index entry 19999 at offset %zu runs past", e19999);
        CHECKF(strstr(tzr_last_error(), want) != NULL, "%s", tzr_last_error());
    }
    unsetenv("TZR_INDEX_THREAD");
    atomic_store(&tzr_reader_helper_sync, 0);
    free(m);
    free(b);
    unlink(bad);
    unlink(path);
}

/* Open reads the prologue and the start of the index together: one read
 * when the entries end within it; for the rest of a larger index (3000
 * entries pass 64 KiB) one more read where reads are requests, and on a
 * local source reads of the first read's 64 KiB buffer, which slides
 * along the index (no index-sized buffer); a read error in the rest fails
 * the open with the source's message. */
static void open_reads(void) {
    char many_path[600];
    snprintf(many_path, sizeof many_path, "%s/many-index.tensors", check_tmpdir());
    gen_spec many = {3000, 64, 16, 0, NULL};
    CHECK_OK(gen_write(&many, many_path));
    const char *paths[2] = {plain_path, many_path};
    /* The index region's length (prologue offset 65) past the first read
     * (73 + 64 KiB bytes of the file): the window reads at least
     * rest / 64 KiB times, and at most once more per 64 KiB less an entry
     * (each read keeps the entry cut at the window's end; these are short). */
    size_t flen = 0;
    uint8_t *fb = check_read_file(many_path, &flen);
    CHECK(fb && flen > 89);
    uint64_t mlen = 0;
    for (int b = 0; fb && b < 8; b++) mlen |= (uint64_t)fb[65 + b] << (8 * b);
    free(fb);
    uint64_t rest = mlen > (64u << 10) ? mlen - (64u << 10) : 0;
    int win_lo = (int)((rest + (64u << 10) - 1) / (64u << 10)), win_hi = (int)((rest + (63u << 10) - 1) / (63u << 10));
    CHECK(win_lo >= 1);
    /* One read for the prologue and the start of the index, those of the
     * rest, and one of the 8-byte end marker: at open from a local source,
     * by the load (beside its data) where reads are requests. */
    for (int k = 0; k < 4; k++) {
        int packed = k >= 2;
        faulty *f = wrap_faulty(paths[k % 2], UINT64_MAX, 0);
        f->base.pack_reads = packed;
        if (packed) f->base.readv_at = NULL;
        tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
        ro.verify = 1;
        tzr_reader *r = NULL;
        CHECK_OK(tzr_reader_open_source(&r, &f->base, &ro));
        if (!r) continue;
        int reads = atomic_load(&f->reads);
        if (k == 1) CHECK(reads >= 1 + win_lo + 1 && reads <= 1 + win_hi + 1);
        else CHECK(reads == (k % 2 == 0 ? 1 : 2) + !packed);
        const gen_spec *spec = k % 2 == 0 ? &plain_spec : &many;
        CHECK(tzr_reader_count(r) == spec->count);
        tzr_sink *sink = NULL;
        CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
        CHECK_OK(tzr_load(r, sink, NULL, NULL));
        size_t bad = 0;
        for (size_t i = 0; i < tzr_reader_count(r); i++) {
            uint64_t len, glen = 0;
            int meta;
            uint8_t *want = gen_expected(spec, i, &len, &meta);
            void *got = NULL;
            size_t found = (size_t)-1;
            const tzr_tensor_info *t = tzr_reader_tensor(r, i);
            if (tzr_reader_find(r, t->name, t->name_len, &found) || found != i) bad++;
            if (tzr_sink_host_data(sink, i, &got, &glen) || glen != len || (len && memcmp(got, want, len) != 0)) bad++;
            free(want);
        }
        CHECK(bad == 0);
        tzr_sink_free(sink);
        tzr_reader_free(r);
    }
    /* A marker that is not zero: refused at open from a local source, by
     * the load where reads are requests. */
    size_t len;
    uint8_t *b = check_read_file(plain_path, &len);
    CHECK(b && len > 8);
    char bad_path[600];
    snprintf(bad_path, sizeof bad_path, "%s/bad-marker.tensors", check_tmpdir());
    if (b) b[len - 3] ^= 1;
    CHECK(b && check_write_file(bad_path, b, len) == 0);
    free(b);
    for (int packed = 0; packed < 2; packed++) {
        faulty *bf = wrap_faulty(bad_path, UINT64_MAX, 0);
        bf->base.pack_reads = packed;
        if (packed) bf->base.readv_at = NULL;
        tzr_reader *br = NULL;
        int orc = tzr_reader_open_source(&br, &bf->base, NULL);
        CHECK(orc == (packed ? 0 : TZR_EFORMAT));
        if (br) {
            tzr_sink *sink = NULL;
            CHECK_OK(tzr_sink_null_new(&sink));
            CHECK_RC(tzr_load(br, sink, NULL, NULL), TZR_EFORMAT);
            tzr_sink_free(sink);
            tzr_reader_free(br);
        }
        CHECK(strstr(tzr_last_error(), "end-of-tensors marker is not zero") != NULL);
    }
    unlink(bad_path);
    /* The second read fails: the open fails with it. */
    faulty *f = wrap_faulty(many_path, 73 + (100u << 10), TZR_EIO);
    tzr_reader *r = NULL;
    CHECK(tzr_reader_open_source(&r, &f->base, NULL) == TZR_EIO);
    CHECK(r == NULL);
    CHECK(strstr(tzr_last_error(), "injected read error") != NULL);
    unlink(many_path);
}

/* Overlapped planning (local plaintext loads without verification:
 * workers run the first units while the calling thread plans the rest).
 * The hook holds planning back so workers catch up and wait. Every tensor
 * is reported once, in order, and only once its bytes are in place; a
 * cancel, a failure of planning part way (workers running) and a
 * destination error while planning all stop it with their own error; a
 * plan at its bound (every tensor just over a chunk: two pieces each)
 * fits; TZR_PLAN_OVERLAP=0 loads the same. */
extern int (*tzr_load_plan_hook)(size_t units);
static volatile int hook_cancel_at, hook_fail_at, *hook_cancel;
static int slow_plan(size_t units) {
    if (hook_cancel && (int)units == hook_cancel_at) __atomic_store_n(hook_cancel, 1, __ATOMIC_RELAXED);
    if (hook_fail_at && (int)units == hook_fail_at) return TZR_EIO;
    if (units % 8 == 0) usleep(2000); /* the workers catch up */
    return 0;
}

/* The bound file's tensors: 4097 bytes each. */
static uint8_t *bound_bytes(size_t i) {
    uint8_t *b = malloc(4097);
    for (size_t k = 0; b && k < 4097; k++) b[k] = (uint8_t)(i * 31 + k * 7);
    return b;
}

static uint8_t *bound_gen(void *ctx, size_t i, uint64_t *len, int *meta) {
    (void)ctx;
    *len = 4097, *meta = 0;
    return bound_bytes(i);
}

typedef struct seen {
    tzr_sink *sink;
    const gen_spec *spec;
    size_t next, calls;
    int bad;
} seen;

static int check_on_report(void *ctx, size_t i, const tzr_tensor_info *t) {
    seen *s = ctx;
    if (i < s->next) s->bad++;
    s->next = i + 1;
    s->calls++;
    uint64_t len = 4097;
    int meta;
    uint8_t *want = s->spec ? gen_expected(s->spec, i, &len, &meta) : bound_bytes(i);
    void *got;
    uint64_t glen;
    if (tzr_sink_host_data(s->sink, i, &got, &glen) || glen != len || (len && memcmp(got, want, len) != 0)) s->bad++;
    /* From the header, as the writer put it (-1: its header was not read,
     * as for tensors without data or read from their data on). */
    if (t->module_idx != -1 && t->module_idx != (int)(i % 5)) s->bad++;
    free(want);
    return 0;
}

static void *null_for(void *ctx, size_t index, const tzr_tensor_info *t) {
    (void)t;
    static uint8_t room[1 << 16];
    return index == *(size_t *)ctx ? NULL : room; /* bytes land over each other: only the error matters */
}

static void overlapped_planning(void) {
    char path[600], over_path[600];
    snprintf(path, sizeof path, "%s/overlap.tensors", check_tmpdir());
    snprintf(over_path, sizeof over_path, "%s/overlap-bound.tensors", check_tmpdir());
    gen_spec spec = {6000, 9000, 3000, 1, NULL};
    CHECK_OK(gen_write(&spec, path));
    /* Every tensor 4097 bytes, chunk 4096: two pieces and two units each. */
    CHECK_OK(gen_write_from(over_path, 300, bound_gen, NULL, NULL));
    tzr_load_plan_hook = slow_plan;
    for (int off = 0; off < 2; off++) {
        if (off) setenv("TZR_PLAN_OVERLAP", "0", 1);
        tzr_reader *r = open_r(path, NULL, 0);
        tzr_sink *sink;
        CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
        seen sn = {sink, &spec, 0, 0, 0};
        tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
        o.chunk_bytes = 32 << 10;
        o.threads = 3;
        o.on_tensor = check_on_report;
        o.on_tensor_ctx = &sn;
        CHECK_OK(tzr_load(r, sink, &o, NULL));
        CHECK(sn.bad == 0 && sn.calls == tzr_reader_count(r));
        tzr_sink_free(sink);
        /* Cancel while planning: the cancel is the error. */
        volatile int cancel = 0;
        hook_cancel = &cancel;
        hook_cancel_at = 40;
        CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
        sn = (seen){sink, &spec, 0, 0, 0};
        o.cancel = &cancel;
        CHECK_RC(tzr_load(r, sink, &o, NULL), off ? 0 : TZR_ECANCELED);
        if (!off) CHECK(strstr(tzr_last_error(), "load canceled") != NULL);
        CHECK(sn.bad == 0 && (off ? sn.calls == tzr_reader_count(r) : sn.calls < tzr_reader_count(r)));
        hook_cancel = NULL;
        o.cancel = NULL;
        tzr_sink_free(sink);
        /* Planning fails part way, workers running: its error, nothing
         * reported past what was complete. */
        hook_fail_at = 60;
        CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
        sn = (seen){sink, &spec, 0, 0, 0};
        int rc = tzr_load(r, sink, &o, NULL);
        CHECK(rc == (off ? 0 : TZR_EIO));
        if (!off) CHECK(strstr(tzr_last_error(), "planning stopped after 60 units") != NULL);
        CHECK(sn.bad == 0);
        hook_fail_at = 0;
        tzr_sink_free(sink);
        /* A destination the caller cannot give (tensor 4000): the same
         * error with and without overlap, nothing reported. */
        size_t refuse = 4000;
        CHECK_OK(tzr_sink_host_new(&sink, null_for, &refuse));
        sn = (seen){sink, &spec, 0, 0, 0};
        tzr_load_stats st;
        CHECK_RC(tzr_load(r, sink, &o, &st), TZR_EINVAL);
        CHECK(strstr(tzr_last_error(), "layers.4000.weight': the destination callback returned NULL") != NULL);
        CHECK(st.error_tensor == 4000 && sn.calls == 0);
        tzr_sink_free(sink);
        tzr_reader_free(r);
        /* At the plan's bound. */
        r = open_r(over_path, NULL, 0);
        CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
        sn = (seen){sink, NULL, 0, 0, 0};
        o.chunk_bytes = 4096;
        CHECK_OK(tzr_load(r, sink, &o, NULL));
        CHECK(sn.bad == 0 && sn.calls == tzr_reader_count(r));
        tzr_sink_free(sink);
        tzr_reader_free(r);
        unsetenv("TZR_PLAN_OVERLAP");
    }
    tzr_load_plan_hook = NULL;
    unlink(path);
    unlink(over_path);
}

/* The run's header check compares a plaintext header with the index in
 * place; what it cannot vouch for goes to the full parse, which names the
 * fault: an unknown hash entry type in tensor 7's header. */
static void header_check_in_place(void) {
    tzr_reader *r = open_r(plain_path, NULL, 0);
    const tzr_tensor_info *t = tzr_reader_tensor(r, 7);
    uint64_t at = t->header_offset + 8 + 2 + 1 + 2 + t->name_len + 1 + t->dtype_len + 1 + 4 * t->ndim + 2 + 1;
    tzr_reader_free(r);
    size_t len;
    uint8_t *b = check_read_file(plain_path, &len);
    CHECK(b && at < len && b[at] == 0 /* CRC32 first */);
    char bad_path[600];
    snprintf(bad_path, sizeof bad_path, "%s/bad-hash-type.tensors", check_tmpdir());
    if (b) b[at] = 9;
    CHECK(b && check_write_file(bad_path, b, len) == 0);
    free(b);
    /* Checked in place (overlap on), by the full parse (off), and by a
     * verify's own parse of a tensor hashed alone (both levels): one
     * message, naming the tensor. */
    char first[1024] = "";
    for (int mode = 0; mode < 4; mode++) {
        if (mode == 1) setenv("TZR_PLAN_OVERLAP", "0", 1);
        r = open_r(bad_path, NULL, 0);
        tzr_sink *sink;
        CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
        tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
        o.verify = mode >= 2;
        o.verify_level = mode == 3 ? TZR_VERIFY_CRC32 : TZR_VERIFY_FULL;
        CHECK_RC(tzr_load(r, sink, &o, NULL), TZR_EFORMAT);
        CHECK(strstr(tzr_last_error(), "unknown hash type 9 with length 4") != NULL);
        CHECK(strstr(tzr_last_error(), "layers.7.weight") != NULL);
        CHECK(tzr_last_error_tensor() && strcmp(tzr_last_error_tensor(), "layers.7.weight") == 0);
        if (mode == 0) snprintf(first, sizeof first, "%s", tzr_last_error());
        else if (strcmp(first, tzr_last_error()) != 0) check_fail("mode %d: \"%s\", not \"%s\"", mode, tzr_last_error(), first);
        tzr_sink_free(sink);
        tzr_reader_free(r);
        unsetenv("TZR_PLAN_OVERLAP");
    }
    unlink(bad_path);
}

/* A verify hashes the header bytes it read with the data, not the index:
 * a module index changed in a small tensor's header (which the index does
 * not hold, so no header check sees it) fails the CRC32 and SHA-256 of
 * that tensor, and an unverified load takes it. */
static void verify_hashes_header_bytes(void) {
    tzr_reader *r = open_r(plain_path, NULL, 0);
    size_t k = 0;
    while (k < tzr_reader_count(r) && tzr_reader_tensor(r, k)->data_length >= ((uint64_t)64 << 10)) k++;
    CHECK(k < tzr_reader_count(r));
    if (k >= tzr_reader_count(r)) {
        tzr_reader_free(r);
        return;
    }
    const tzr_tensor_info *t = tzr_reader_tensor(r, k);
    uint64_t at = t->header_offset + 8; /* the module index */
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)t->name_len, t->name);
    tzr_reader_free(r);
    size_t len;
    uint8_t *b = check_read_file(plain_path, &len);
    CHECK(b && at + 1 < len);
    char bad_path[600];
    snprintf(bad_path, sizeof bad_path, "%s/bad-module.tensors", check_tmpdir());
    if (b) b[at] ^= 0x40;
    CHECK(b && check_write_file(bad_path, b, len) == 0);
    free(b);
    for (int mode = 0; mode < 3; mode++) {
        r = open_r(bad_path, NULL, 0);
        tzr_sink *sink;
        CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
        tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
        o.verify = mode > 0;
        o.verify_level = mode == 2 ? TZR_VERIFY_CRC32 : TZR_VERIFY_FULL;
        if (mode == 0) {
            CHECK_OK(tzr_load(r, sink, &o, NULL));
        } else {
            CHECK_RC(tzr_load(r, sink, &o, NULL), TZR_EHASH);
            CHECK(strstr(tzr_last_error(), "crc32 mismatch") != NULL);
            CHECK(tzr_last_error_tensor() && strcmp(tzr_last_error_tensor(), name) == 0);
        }
        tzr_sink_free(sink);
        tzr_reader_free(r);
    }
    unlink(bad_path);
}

int main(void) {
    snprintf(plain_path, sizeof plain_path, "%s/plain.tensors", check_tmpdir());
    snprintf(enc_path, sizeof enc_path, "%s/enc.tensors", check_tmpdir());
    if (gen_write(&plain_spec, plain_path) || gen_write(&enc_spec, enc_path)) {
        printf("FAIL setup: %s\n", tzr_last_error());
        return 1;
    }
    RUN(host_load_variants);
    RUN(encrypted_load);
    RUN(fake_async_sink);
    RUN(workers_leave_signals_alone);
    RUN(crc32_level_loads);
    RUN(packed_reads);
    RUN(read_errors);
    RUN(hash_mismatch);
    RUN(go_on_past_bad_tensors);
    RUN(go_on_encrypted_and_wrong_key);
    RUN(byte_selections);
    RUN(cancel_and_callback_error);
    RUN(filter_and_null_budget);
    RUN(direct_io);
    RUN(open_reads);
    RUN(index_window);
    RUN(index_names_helper);
    RUN(index_split_parse);
    RUN(scatter_fallback);
    RUN(host_one_block);
    RUN(default_threads);
    RUN(overlapped_planning);
    RUN(header_check_in_place);
    RUN(verify_hashes_header_bytes);
    return check_done();
}
