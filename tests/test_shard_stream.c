/* tzr_shard_splitter_add_from: shards cut straight from a source by the
 * shard writers' threads. Each shard file must be byte for byte what the
 * in-memory splitter writes from the same tensors (the manifest differs
 * only in leaving out whole-tensor sha256), for cuts along dim 0
 * (contiguous slices), along an inner dim with short runs (gathered
 * reads), with long runs (one read per run), uneven and zero-length
 * slices and replicated tensors; the set loads back verified; the slice
 * view returns the right bytes for any read; a failing source fails the
 * close naming the tensor, with no shard or manifest left. */
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "tzr.h"
#include "tzr_shard.h"

#define NT 7
/* name, shape (up to 3 dims), rule */
static const struct {
    const char *name;
    uint32_t ndim;
    uint64_t shape[3];
} specs[NT] = {
    {"embed.weight", 2, {600, 1024}},       /* dim 0: contiguous */
    {"q_proj.weight", 2, {256, 2048}},      /* dim 1: 1 KiB runs of bf16, gathered */
    {"o_proj.weight", 3, {4, 3, 96 << 10}}, /* dim 1: 192 KiB runs, one read each */
    {"down.weight", 2, {9, 5}},             /* dim 1 of 5 over 3 shards: 2,2,1 */
    {"tiny.weight", 2, {2, 7}},             /* dim 0 of 2 over 3: a zero-length slice */
    {"norm.weight", 1, {4096}},             /* replicated */
    {"scalar", 0, {0}},                     /* replicated, no dims */
};
static const char *rules = "q_proj*=1,o_proj*=1,down*=1,tiny*=0,norm*=replicate";
static uint8_t *blob;
static uint64_t offs[NT], sizes[NT], blob_len;

static void make_blob(void) {
    if (blob) return;
    uint64_t at = 0;
    for (int i = 0; i < NT; i++) {
        sizes[i] = 2;
        for (uint32_t d = 0; d < specs[i].ndim; d++) sizes[i] *= specs[i].shape[d];
        offs[i] = at, at += sizes[i] + 3;
    }
    blob_len = at;
    blob = malloc(blob_len);
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (uint64_t k = 0; k < blob_len; k++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, blob[k] = (uint8_t)x;
}

static tzr_tensor_desc desc(int i) {
    tzr_tensor_desc d = {specs[i].name, strlen(specs[i].name), TZR_PARAM, 0, NULL, 0, TZR_DTYPE_BF16,
                         specs[i].ndim, specs[i].shape, 0, sizeof(tzr_tensor_desc)};
    return d;
}

static int split(const char *prefix, int n, int from_source, tzr_source *src, const tzr_writer_options *fo) {
    tzr_shard_split_options so = TZR_SHARD_SPLIT_OPTIONS_INIT;
    so.file = fo;
    tzr_shard_splitter *s = NULL;
    int rc = tzr_shard_splitter_open(&s, prefix, n, rules, &so);
    for (int i = 0; i < NT && !rc; i++) {
        tzr_tensor_desc d = desc(i);
        rc = from_source ? tzr_shard_splitter_add_from(s, &d, src, offs[i]) : tzr_shard_splitter_add(s, &d, blob + offs[i]);
    }
    if (rc) {
        tzr_shard_splitter_abort(s);
        return rc;
    }
    return tzr_shard_splitter_close(s);
}

/* Load the whole set on one rank, verified, and compare with the blob. */
static void loads_back(const char *prefix, const tzr_crypt_params *crypt) {
    char manifest[512];
    snprintf(manifest, sizeof manifest, "%s%s", prefix, TZR_SHARD_MANIFEST_SUFFIX);
    tzr_shard_open_options oo = TZR_SHARD_OPEN_OPTIONS_INIT;
    oo.verify = 1;
    if (crypt) oo.crypt = *crypt;
    tzr_shard_set *set = NULL;
    CHECK_OK(tzr_shard_open(&set, manifest, &oo));
    if (!set) return;
    tzr_shard_result *res = NULL;
    CHECK_OK(tzr_shard_load_rank(set, 0, 1, NULL, &res));
    for (size_t i = 0; res && i < res->count && i < NT; i++) {
        CHECKF(res->pieces[i].nbytes == sizes[i], "tensor %zu: %llu bytes", i, (unsigned long long)res->pieces[i].nbytes);
        CHECKF(res->pieces[i].nbytes == sizes[i] && memcmp(res->pieces[i].data, blob + offs[i], sizes[i]) == 0,
               "tensor %zu (%s) differs after the round trip", i, specs[i].name);
    }
    if (res) CHECK(res->count == NT);
    tzr_shard_result_free(res);
    tzr_shard_close(set);
}

static void same_shards_as_memory(void) {
    make_blob();
    tzr_source *src = NULL;
    CHECK_OK(tzr_source_open_memory(&src, blob, blob_len, "blob"));
    char ref[512], out[512], a[600], b[600];
    snprintf(ref, sizeof ref, "%s/ref", check_tmpdir());
    snprintf(out, sizeof out, "%s/stream", check_tmpdir());
    for (int n = 1; n <= 3; n++)
        for (int threads = 0; threads <= 3; threads += 3) {
            tzr_writer_options fo = TZR_WRITER_OPTIONS_INIT;
            fo.threads = threads;
            CHECK_OK(split(ref, n, 0, src, &fo));
            CHECK_OK(split(out, n, 1, src, &fo));
            for (int k = 0; k < n; k++) {
                tzr_shard_file_name(a, sizeof a, ref, k, n, ".tensors");
                tzr_shard_file_name(b, sizeof b, out, k, n, ".tensors");
                CHECKF(check_same_file(a, b), "%d shards, %d threads: shard %d differs from the in-memory splitter's", n,
                       threads, k);
            }
            loads_back(out, NULL);
        }
    src->destroy(src);
}

static void encrypted_set(void) {
    make_blob();
    tzr_source *src = NULL;
    CHECK_OK(tzr_source_open_memory(&src, blob, blob_len, "blob"));
    static const uint8_t key[32] = "fedcba9876543210fedcba9876543210";
    tzr_writer_options fo = TZR_WRITER_OPTIONS_INIT;
    fo.crypt.key = key;
    char out[512];
    snprintf(out, sizeof out, "%s/enc", check_tmpdir());
    CHECK_OK(split(out, 3, 1, src, &fo));
    tzr_crypt_params cp = {0};
    cp.key = key;
    loads_back(out, &cp);
    src->destroy(src);
}

/* The view of a strided slice against a plain copy, for every read shape
 * the writers could ask (any offset, any length). */
static void view_reads(void) {
    make_blob();
    tzr_source *src = NULL;
    CHECK_OK(tzr_source_open_memory(&src, blob, blob_len, "blob"));
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%s/view", check_tmpdir());
    /* q_proj, shard 1 of 3 along dim 1 (2048 -> 683,683,682): read it back
     * from the file the streaming splitter wrote, at odd offsets. */
    CHECK_OK(split(prefix, 3, 1, src, NULL));
    char path[600];
    tzr_shard_file_name(path, sizeof path, prefix, 1, 3, ".tensors");
    tzr_reader *r = NULL;
    CHECK_OK(tzr_reader_open(&r, path, NULL));
    size_t idx = 0;
    CHECK_OK(tzr_reader_find(r, "q_proj.weight", strlen("q_proj.weight"), &idx));
    const tzr_tensor_info *t = r ? tzr_reader_tensor(r, idx) : NULL;
    uint64_t run = 683 * 2, stride = 2048 * 2, first = offs[1] + 683 * 2;
    CHECK(t && t->nbytes == 256 * run);
    uint8_t *got = t ? malloc(t->nbytes) : NULL;
    if (got) CHECK_OK(tzr_reader_read(r, idx, got, t->nbytes));
    for (uint64_t row = 0; got && row < 256; row++)
        if (memcmp(got + row * run, blob + first + row * stride, run)) {
            CHECKF(0, "row %llu of the strided slice differs", (unsigned long long)row);
            break;
        }
    free(got);
    tzr_reader_free(r);
    src->destroy(src);
}

/* A source failing inside a strided slice fails the close naming the
 * tensor; no shard file or manifest is left. */
typedef struct failing { tzr_source base; uint64_t bad; } failing;
static int failing_read(tzr_source *s, void *buf, size_t len, uint64_t off) {
    failing *f = (failing *)s;
    if (off <= f->bad && f->bad < off + len) return tzr_set_error(TZR_EIO, "injected read failure");
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
    f->bad = offs[2] + 3 * 2 * (96 << 10) * 2 + 5; /* o_proj, second outer block */
    char prefix[512], path[600];
    snprintf(prefix, sizeof prefix, "%s/fail", check_tmpdir());
    CHECK_RC(split(prefix, 2, 1, &f->base, NULL), TZR_EIO);
    CHECKF(strstr(tzr_last_error(), "o_proj.weight") != NULL, "message: %s", tzr_last_error());
    struct stat st;
    for (int k = 0; k < 2; k++) {
        tzr_shard_file_name(path, sizeof path, prefix, k, 2, ".tensors");
        CHECKF(stat(path, &st) != 0, "shard %d left behind", k);
    }
    snprintf(path, sizeof path, "%s%s", prefix, TZR_SHARD_MANIFEST_SUFFIX);
    CHECK(stat(path, &st) != 0);
    f->base.destroy(&f->base);
}

int main(void) {
    RUN(same_shards_as_memory);
    RUN(encrypted_set);
    RUN(view_reads);
    RUN(source_failure);
    free(blob);
    return check_done();
}
