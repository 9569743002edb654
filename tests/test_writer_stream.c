/* tzr_writer_add_from: tensors read from a source by the writer's workers.
 * The file must be byte for byte what tzr_writer_add writes from memory
 * (plain and compressed; encrypted files use random nonces, so they are
 * read back instead), whatever the thread count and however adds from
 * memory and from a source mix; a source that fails mid-tensor fails the
 * close, naming the tensor and offset, with nothing at the target; abort
 * with records still queued leaves nothing and stops the workers. */
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "tzr.h"

#define NT 9
static const uint64_t sizes[NT] = {0, 1, 4096, 3 << 20, 8 << 20, (8 << 20) + 3, 100, (17 << 20) + 5, 64};
static uint8_t *blob;   /* all tensors back to back, with 5 bytes between */
static uint64_t offs[NT], blob_len;
static uint64_t shapes[NT][1];
static char names[NT][32];

static void make_blob(void) {
    if (blob) return;
    uint64_t at = 0;
    for (int i = 0; i < NT; i++) offs[i] = at, at += sizes[i] + 5;
    blob_len = at;
    blob = malloc(blob_len);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (uint64_t k = 0; k < blob_len; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        blob[k] = (uint8_t)(k % 3 ? x : x & 7); /* some redundancy: zstd shrinks it */
    }
    for (int i = 0; i < NT; i++) {
        shapes[i][0] = sizes[i];
        snprintf(names[i], sizeof names[i], "layers.%d.weight", i);
    }
}

static tzr_tensor_desc desc(int i) {
    tzr_tensor_desc d = {names[i], strlen(names[i]), TZR_PARAM, 0, NULL, 0, TZR_DTYPE_U8, 1, shapes[i], 0, sizeof(tzr_tensor_desc)};
    return d;
}

/* mode bit k set: tensor k from the source; else borrow bit k set: from
 * memory through the workers (tzr_writer_add_borrowed); else tzr_writer_add. */
static int write_file_b(const char *path, const tzr_writer_options *o, unsigned mode, unsigned borrow,
                        tzr_source *src) {
    tzr_writer *w = NULL;
    int rc = tzr_writer_open(&w, path, o);
    for (int i = 0; i < NT && !rc; i++) {
        tzr_tensor_desc d = desc(i);
        rc = mode >> i & 1     ? tzr_writer_add_from(w, &d, src, offs[i])
             : borrow >> i & 1 ? tzr_writer_add_borrowed(w, &d, blob + offs[i])
                               : tzr_writer_add(w, &d, blob + offs[i]);
    }
    if (rc) {
        tzr_writer_abort(w);
        return rc;
    }
    return tzr_writer_close(w);
}
static int write_file(const char *path, const tzr_writer_options *o, unsigned mode, tzr_source *src) {
    return write_file_b(path, o, mode, 0, src);
}

static void identical_bytes(void) {
    make_blob();
    tzr_source *src = NULL;
    CHECK_OK(tzr_source_open_memory(&src, blob, blob_len, "blob"));
    char ref[512], out[512];
    snprintf(ref, sizeof ref, "%s/ref.tensors", check_tmpdir());
    snprintf(out, sizeof out, "%s/stream.tensors", check_tmpdir());
    for (int comp = 0; comp < 2; comp++) {
        tzr_writer_options o = TZR_WRITER_OPTIONS_INIT;
        if (comp) o.compression = TZR_COMPRESSION_ZSTD, o.frame_size = 1 << 20;
        CHECK_OK(write_file(ref, &o, 0, src));
        static const unsigned modes[] = {0x1ff, 0x0aa, 0x155};
        for (int threads = 1; threads <= 4; threads += 3)
            for (int m = 0; m < 3; m++) {
                o.threads = threads;
                CHECK_OK(write_file(out, &o, modes[m], src));
                CHECKF(check_same_file(ref, out), "compressed %d, %d threads, mode %#x: bytes differ from tzr_writer_add",
                       comp, threads, modes[m]);
                /* borrowed memory: all, mixed with reads from the source, with plain adds */
                static const unsigned from_src[] = {0, 0x0aa, 0x00f}, borrows[] = {0x1ff, 0x155, 0x0f0};
                CHECK_OK(write_file_b(out, &o, from_src[m], borrows[m], src));
                CHECKF(check_same_file(ref, out), "compressed %d, %d threads, borrowed %#x: bytes differ from tzr_writer_add",
                       comp, threads, borrows[m]);
            }
    }
    src->destroy(src);
}

static void encrypted_reads_back(void) {
    make_blob();
    tzr_source *src = NULL;
    CHECK_OK(tzr_source_open_memory(&src, blob, blob_len, "blob"));
    static const uint8_t key[32] = "0123456789abcdef0123456789abcdef";
    tzr_writer_options o = TZR_WRITER_OPTIONS_INIT;
    o.crypt.key = key;
    o.threads = 3;
    char out[512];
    snprintf(out, sizeof out, "%s/enc.tensors", check_tmpdir());
    CHECK_OK(write_file_b(out, &o, 0x0fe, 0x100, src));
    tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
    ro.crypt.key = key;
    ro.verify = 1;
    tzr_reader *r = NULL;
    CHECK_OK(tzr_reader_open(&r, out, &ro));
    for (int i = 0; r && i < NT; i++) {
        uint8_t *buf = malloc(sizes[i] + 1);
        CHECK_OK(tzr_reader_read(r, (size_t)i, buf, sizes[i]));
        CHECKF(memcmp(buf, blob + offs[i], sizes[i]) == 0, "tensor %d differs after decryption", i);
        free(buf);
    }
    tzr_reader_free(r);
    src->destroy(src);
}

/* A source that fails reads touching [bad_from, bad_to). */
typedef struct failing { tzr_source base; uint64_t bad_from, bad_to; } failing;
static int failing_read(tzr_source *s, void *buf, size_t len, uint64_t off) {
    failing *f = (failing *)s;
    if (off + len > f->bad_from && off < f->bad_to) return tzr_set_error(TZR_EIO, "injected read failure");
    memcpy(buf, blob + off, len);
    return 0;
}
static void failing_destroy(tzr_source *s) { free(s); }

static void source_failure(void) {
    make_blob();
    failing *f = calloc(1, sizeof *f);
    f->base.read_at = failing_read;
    f->base.destroy = failing_destroy;
    f->base.size = blob_len;
    f->base.name = "failing";
    f->bad_from = offs[7] + (9 << 20); /* inside tensor 7's second chunk */
    f->bad_to = f->bad_from + 1;
    char out[512];
    snprintf(out, sizeof out, "%s/fail.tensors", check_tmpdir());
    tzr_writer_options o = TZR_WRITER_OPTIONS_INIT;
    o.threads = 2;
    CHECK_RC(write_file(out, &o, 0x1ff, &f->base), TZR_EIO);
    CHECKF(strstr(tzr_last_error(), "layers.7.weight") != NULL, "message: %s", tzr_last_error());
    CHECK(strstr(tzr_last_error(), "input offset") != NULL);
    CHECK(strstr(tzr_last_error(), "injected") != NULL);
    struct stat st;
    CHECK(stat(out, &st) != 0); /* nothing at the target */
    f->base.destroy(&f->base);
}

static void abort_with_queue(void) {
    make_blob();
    tzr_source *src = NULL;
    CHECK_OK(tzr_source_open_memory(&src, blob, blob_len, "blob"));
    char out[512];
    snprintf(out, sizeof out, "%s/aborted.tensors", check_tmpdir());
    tzr_writer_options o = TZR_WRITER_OPTIONS_INIT;
    o.threads = 1;
    tzr_writer *w = NULL;
    CHECK_OK(tzr_writer_open(&w, out, &o));
    for (int i = 0; w && i < NT; i++) {
        tzr_tensor_desc d = desc(i);
        CHECK_OK(tzr_writer_add_from(w, &d, src, offs[i]));
    }
    tzr_tensor_desc dup = desc(3);
    CHECK_RC(tzr_writer_add_from(w, &dup, src, offs[3]), TZR_EDUP); /* checked at once, like tzr_writer_add */
    tzr_writer_abort(w);
    struct stat st;
    CHECK(stat(out, &st) != 0);
    src->destroy(src);
}

int main(void) {
    RUN(identical_bytes);
    RUN(encrypted_reads_back);
    RUN(source_failure);
    RUN(abort_with_queue);
    free(blob);
    return check_done();
}
