/* Runs of small records (src/file/writer_run.c): with runs (the default)
 * and without (TZR_WRITER_RUNS=0) the writer produces the same bytes, from
 * memory, borrowed memory and a source, with one and several workers; with
 * runs, thousands of small tensors go out in a few large writes (counted
 * at the output) instead of two writes each. A write that fails in the
 * middle of a run fails the write naming the run's tensors and the offset,
 * and leaves neither the target nor the temporary file. The same for the
 * safetensors writer's puts. */
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "tzr.h"
#include "tzr_safetensors.h"

#define NS 3000
static uint8_t *blob;
static uint64_t offs[NS], lens[NS], shapes[NS][1], blob_len;
static char names[NS][24];

/* Sizes 1..8192 bytes, every 700th empty, two large ones (not run material). */
static void make_blob(void) {
    if (blob) return;
    uint64_t x = 88172645463325252ull, at = 0;
    for (int i = 0; i < NS; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        lens[i] = i == 1000 ? (600 << 10) : i == 2000 ? (3 << 20) + 7 : i % 700 == 699 ? 0 : 1 + x % 8192;
        offs[i] = at, at += lens[i] + 3;
        shapes[i][0] = lens[i];
        snprintf(names[i], sizeof names[i], "w.%d", i);
    }
    blob_len = at;
    blob = malloc(blob_len);
    for (uint64_t k = 0; k < blob_len; k++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, blob[k] = (uint8_t)x;
}

/* An output into memory that counts its writes. */
typedef struct {
    tzr_output base;
    uint8_t *buf;
    uint64_t cap, size;
    long writes;
} mem_out;

static int mo_pwrite(tzr_output *o, const void *b, size_t len, uint64_t off) {
    mem_out *m = o->ctx;
    __atomic_add_fetch(&m->writes, 1, __ATOMIC_RELAXED);
    if (off + len > m->cap) return tzr_set_error(TZR_EIO, "mem_out: write past %llu", (unsigned long long)m->cap);
    memcpy(m->buf + off, b, len);
    for (uint64_t e = off + len, s; (s = __atomic_load_n(&m->size, __ATOMIC_RELAXED)) < e;)
        if (__atomic_compare_exchange_n(&m->size, &s, e, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) break;
    return 0;
}
static int mo_finish(tzr_output *o) { return 0; }
static void mo_abort(tzr_output *o) {}
static void mo_destroy(tzr_output *o) {}

static void mo_init(mem_out *m) {
    memset(m, 0, sizeof *m);
    m->cap = blob_len + (4 << 20);
    m->buf = calloc(1, m->cap);
    m->base = (tzr_output){mo_pwrite, mo_finish, mo_abort, mo_destroy, "mem", m, sizeof(tzr_output)};
}

/* how: 0 tzr_writer_add, 1 tzr_writer_add_borrowed, 2 tzr_writer_add_from. */
static int write_all(tzr_writer *w, int how, tzr_source *src) {
    int rc = 0;
    for (int i = 0; i < NS && !rc; i++) {
        tzr_tensor_desc d = {names[i], strlen(names[i]), TZR_PARAM, 0, NULL, 0, TZR_DTYPE_U8, 1, shapes[i], 0,
                             sizeof(tzr_tensor_desc)};
        rc = how == 0 ? tzr_writer_add(w, &d, blob + offs[i])
             : how == 1 ? tzr_writer_add_borrowed(w, &d, blob + offs[i])
                        : tzr_writer_add_from(w, &d, src, offs[i]);
    }
    return rc;
}

static int write_mem(mem_out *m, int runs, int how, int threads, tzr_source *src) {
    mo_init(m);
    if (runs) unsetenv("TZR_WRITER_RUNS");
    else setenv("TZR_WRITER_RUNS", "0", 1);
    tzr_writer_options o = TZR_WRITER_OPTIONS_INIT;
    o.threads = threads;
    tzr_writer *w = NULL;
    int rc = tzr_writer_open_output(&w, &m->base, &o);
    unsetenv("TZR_WRITER_RUNS");
    if (!rc) rc = tzr_writer_reserve(w, NS, 5 * NS, 2 * NS, NS, blob_len);
    if (!rc) rc = write_all(w, how, src);
    if (rc) {
        tzr_writer_abort(w);
        return rc;
    }
    return tzr_writer_close(w);
}

static void same_bytes_fewer_writes(void) {
    make_blob();
    tzr_source *src = NULL;
    CHECK_OK(tzr_source_open_memory(&src, blob, blob_len, "blob"));
    mem_out ref;
    CHECK_OK(write_mem(&ref, 0, 0, 1, src));
    /* Without runs: a header and a data write per non-empty tensor. */
    CHECKF(ref.writes >= 2 * (NS - NS / 700), "%ld writes without runs", ref.writes);
    for (int how = 0; how < 3; how++)
        for (int threads = 1; threads <= 3; threads += 2)
            for (int runs = 0; runs < 2; runs++) {
                mem_out m;
                CHECK_OK(write_mem(&m, runs, how, threads, src));
                CHECKF(m.size == ref.size && memcmp(m.buf, ref.buf, ref.size) == 0,
                       "how %d, %d threads, runs %d: bytes differ", how, threads, runs);
                /* ~13 MiB of small records in runs of at most 2 MiB or 512
                 * records, broken by the empty tensors and the large ones. */
                if (runs) CHECKF(m.writes <= 60, "how %d, %d threads: %ld writes with runs", how, threads, m.writes);
                else CHECKF(m.writes >= 2 * (NS - NS / 700), "how %d: %ld writes without runs", how, m.writes);
                free(m.buf);
            }
    free(ref.buf);
    src->destroy(src);
}

static int dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

/* The file system refuses bytes past a limit (RLIMIT_FSIZE: EFBIG) that
 * falls inside the first run. */
static void failure_mid_run(void) {
    make_blob();
    tzr_source *src = NULL;
    CHECK_OK(tzr_source_open_memory(&src, blob, blob_len, "blob"));
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    for (int how = 0; how < 3; how++) {
        char dir[512], out[600];
        snprintf(dir, sizeof dir, "%s/fail%d", check_tmpdir(), how);
        mkdir(dir, 0755);
        snprintf(out, sizeof out, "%s/f.tensors", dir);
        tzr_writer_options o = TZR_WRITER_OPTIONS_INIT;
        o.threads = 2;
        tzr_writer *w = NULL;
        CHECK_OK(tzr_writer_open(&w, out, &o));
        struct rlimit lim = old;
        lim.rlim_cur = 1 << 20; /* the index ends at ~256 KiB; the first run is ~2 MiB */
        setrlimit(RLIMIT_FSIZE, &lim);
        int rc = write_all(w, how, src);
        if (rc) tzr_writer_abort(w);
        else rc = tzr_writer_close(w);
        setrlimit(RLIMIT_FSIZE, &old);
        const char *msg = tzr_last_error();
        CHECKF(rc == TZR_EIO, "how %d: rc %d: %s", how, rc, msg);
        /* The first run (w.0 onwards) fails; with workers the caller may
         * meet the failure of its own run of an empty tensor first. */
        CHECKF(strstr(msg, how ? "tensors 'w." : "tensors 'w.0' to 'w.") && strstr(msg, "at offset") &&
                   strstr(msg, "File too large") && strstr(msg, "f.tensors"),
               "how %d: message: %s", how, msg);
        struct stat st;
        CHECK(stat(out, &st) != 0);
        CHECKF(dir_entries(dir) == 0, "how %d: %d files left in %s", how, dir_entries(dir), dir);
    }
    src->destroy(src);
}

/* The safetensors writer: every tensor put in two pieces, in order (0),
 * backwards (1), or as two interleaved ascending streams, the first and
 * second half of the tensors, as two pipeline threads put them (2). */
static int st_write(tzr_output *out, int runs, int order) {
    static tzr_st_tensor decl[NS];
    for (int i = 0; i < NS; i++)
        decl[i] = (tzr_st_tensor){names[i], strlen(names[i]), "U8", TZR_DTYPE_U8, 1, shapes[i], 0, lens[i]};
    if (runs) unsetenv("TZR_WRITER_RUNS");
    else setenv("TZR_WRITER_RUNS", "0", 1);
    tzr_st_writer *w = NULL;
    int rc = tzr_st_writer_open(&w, out, decl, NS, NULL, NULL, 0);
    unsetenv("TZR_WRITER_RUNS");
    for (int k = 0; k < NS && !rc; k++) {
        int i = order == 0 ? k : order == 1 ? NS - 1 - k : k % 2 ? NS / 2 + k / 2 : k / 2;
        size_t half = (size_t)lens[i] / 2;
        rc = tzr_st_writer_put(w, (size_t)i, 0, blob + offs[i], half);
        if (!rc) rc = tzr_st_writer_put(w, (size_t)i, half, blob + offs[i] + half, (size_t)lens[i] - half);
    }
    if (rc) {
        tzr_st_writer_abort(w);
        return rc;
    }
    return tzr_st_writer_close(w);
}

static void st_same_bytes_fewer_writes(void) {
    make_blob();
    mem_out ref;
    mo_init(&ref);
    CHECK_OK(st_write(&ref.base, 0, 0));
    CHECKF(ref.writes >= 2 * (NS - NS / 700), "%ld writes without runs", ref.writes);
    for (int order = 0; order < 3; order++) {
        mem_out m;
        mo_init(&m);
        CHECK_OK(st_write(&m.base, 1, order));
        CHECKF(m.size == ref.size && memcmp(m.buf, ref.buf, ref.size) == 0, "order %d: bytes differ", order);
        if (order != 1) CHECKF(m.writes <= 30, "order %d: %ld writes with runs", order, m.writes);
        free(m.buf);
    }
    free(ref.buf);
}

static void st_failure_mid_run(void) {
    make_blob();
    char dir[512], out[600];
    snprintf(dir, sizeof dir, "%s/stfail", check_tmpdir());
    mkdir(dir, 0755);
    snprintf(out, sizeof out, "%s/f.safetensors", dir);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    tzr_output *o = NULL;
    CHECK_OK(tzr_output_open_file(&o, out));
    lim = old;
    lim.rlim_cur = 1 << 20; /* inside the first 2 MiB run */
    setrlimit(RLIMIT_FSIZE, &lim);
    int rc = o ? st_write(o, 1, 0) : TZR_EIO;
    setrlimit(RLIMIT_FSIZE, &old);
    const char *msg = tzr_last_error();
    CHECKF(rc == TZR_EIO, "rc %d: %s", rc, msg);
    CHECKF(strstr(msg, "tensors 'w.0' to 'w.") && strstr(msg, "at offset") && strstr(msg, "File too large"),
           "message: %s", msg);
    struct stat st;
    CHECK(stat(out, &st) != 0);
    CHECKF(dir_entries(dir) == 0, "%d files left in %s", dir_entries(dir), dir);
}

int main(void) {
    RUN(same_bytes_fewer_writes);
    RUN(failure_mid_run);
    RUN(st_same_bytes_fewer_writes);
    RUN(st_failure_mid_run);
    free(blob);
    return check_done();
}
