/* A caller built before the extensible structs grew struct_size: every
 * struct it hands the library (a source, an output and a sink table, a
 * tensor description, load stats, reader options) is a byte buffer of the
 * first layout's size that ends right at a page the process may not
 * touch, so a library read or write past the old layout faults here. Also
 * key material by pointer (crypt_params). Linked against libtzr.so. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <tzr.h>
#include <tzr_load.h>

static int failures;
#define EXPECT(c, ...)                                                   \
    do {                                                                 \
        if (!(c)) {                                                      \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);         \
            fprintf(stderr, __VA_ARGS__);                                \
            fprintf(stderr, " (%s)\n", tzr_last_error());                \
            failures++;                                                  \
        }                                                                \
    } while (0)

/* n bytes that end where an inaccessible page begins (zeroed). */
static void *at_page_end(size_t n) {
    long pg = sysconf(_SC_PAGESIZE);
    uint8_t *m = mmap(NULL, 2 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m + pg, (size_t)pg, PROT_NONE)) abort();
    return m + pg - n;
}

/* ---- a memory output and source of the first layouts ---- */
static uint8_t file[1 << 20];
static size_t file_len;
static int out_pwrite(tzr_output *o, const void *buf, size_t len, uint64_t off) {
    if (off + len > sizeof file) return TZR_EIO;
    memcpy(file + off, buf, len);
    if (off + len > file_len) file_len = (size_t)(off + len);
    return 0;
}
static int out_finish(tzr_output *o) { return 0; }
static void out_abort(tzr_output *o) {}
static void out_destroy(tzr_output *o) {}
static int src_read(tzr_source *s, void *buf, size_t len, uint64_t off) {
    if (off > file_len || len > file_len - off) return TZR_ETRUNC;
    memcpy(buf, file + off, len);
    return 0;
}
static void src_destroy(tzr_source *s) {}

/* ---- a sink of the first layout: bytes into one buffer ---- */
static float got[64];
static void *sink_direct(tzr_sink *s, size_t i, uint64_t off, uint64_t len) { return (uint8_t *)got + off; }
static int sink_submit(tzr_sink *s, int slot, size_t i, uint64_t off, const void *src, size_t len) {
    memcpy((uint8_t *)got + off, src, len);
    return 0;
}
static void sink_destroy(tzr_sink *s) {}

int main(int argc, char **argv) {
    static const uint8_t key[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    float x[64];
    for (int k = 0; k < 64; k++) x[k] = (float)k * 0.5f;
    uint64_t shape[1] = {64};

    /* Write through an old-layout output, old-layout description, with the
     * key given by pointer (the embedded crypt left zero). */
    tzr_output *o = at_page_end(offsetof(tzr_output, struct_size));
    o->pwrite_at = out_pwrite, o->finish = out_finish, o->abort = out_abort, o->destroy = out_destroy;
    o->name = "old-output";
    tzr_crypt_params cp = {key, NULL, 0, 0, 0, NULL};
    tzr_writer_options wo = TZR_WRITER_OPTIONS_INIT;
    wo.crypt_params = &cp;
    tzr_writer *w;
    int rc = tzr_writer_open_output(&w, o, &wo);
    EXPECT(rc == 0, "writer open over an old-layout output");
    tzr_tensor_desc *d = at_page_end(offsetof(tzr_tensor_desc, struct_size));
    d->name = "x", d->name_len = 1, d->type = TZR_PARAM, d->dtype = TZR_DTYPE_F32, d->ndim = 1, d->shape = shape;
    if (!rc) rc = tzr_writer_add(w, d, x);
    EXPECT(rc == 0, "add an old-layout description");
    if (!rc) rc = tzr_writer_close(w);
    EXPECT(rc == 0 && file_len > 0, "close");

    /* Read through an old-layout source with old-size reader options whose
     * key is embedded by value. */
    tzr_source *s = at_page_end(offsetof(tzr_source, struct_size));
    s->read_at = src_read, s->destroy = src_destroy, s->size = file_len, s->name = "old-source";
    tzr_reader_options *ro = at_page_end(offsetof(tzr_reader_options, crypt_params));
    ro->struct_size = offsetof(tzr_reader_options, crypt_params);
    ro->crypt.key = key;
    ro->verify = 1;
    tzr_reader *r = NULL;
    rc = tzr_reader_open_source(&r, s, ro);
    EXPECT(rc == 0 && tzr_reader_encrypted(r), "old-size reader options over an old-layout source");

    /* Load into an old-layout sink with old-layout stats. */
    tzr_sink *k = at_page_end(offsetof(tzr_sink, struct_size));
    k->direct = sink_direct, k->submit = sink_submit, k->destroy = sink_destroy, k->name = "old-sink";
    tzr_load_stats *st = at_page_end(offsetof(tzr_load_stats, struct_size));
    if (!rc) rc = tzr_load(r, k, NULL, st);
    EXPECT(rc == 0 && st->tensors == 1 && st->bytes == sizeof x && st->error_tensor == (size_t)-1,
           "load into an old-layout sink, old-layout stats");
    EXPECT(memcmp(got, x, sizeof x) == 0, "loaded bytes");
    tzr_reader_free(r);

    /* Key by pointer on the reading side too; a wrong embedded key is then
     * not used; without any key the file is refused. */
    tzr_source *s2 = at_page_end(offsetof(tzr_source, struct_size));
    memcpy(s2, s, offsetof(tzr_source, struct_size));
    uint8_t wrong[32] = {0};
    tzr_reader_options nro = TZR_READER_OPTIONS_INIT;
    nro.crypt.key = wrong;
    nro.crypt_params = &cp;
    memset(got, 0, sizeof got);
    rc = tzr_reader_open_source(&r, s2, &nro);
    if (!rc) rc = tzr_reader_read(r, 0, got, sizeof got);
    EXPECT(rc == 0 && memcmp(got, x, sizeof x) == 0, "key by pointer wins over the embedded one");
    tzr_reader_free(r);
    tzr_source *s3 = at_page_end(offsetof(tzr_source, struct_size));
    memcpy(s3, s, offsetof(tzr_source, struct_size));
    rc = tzr_reader_open_source(&r, s3, NULL);
    if (!rc) rc = tzr_reader_read(r, 0, got, sizeof got);
    EXPECT(rc == TZR_ECRYPT, "no key: refused");
    tzr_reader_free(r);
    return failures ? 1 : 0;
}
