/* Reading shard manifests: the entries of the usual shape are read
 * without a JSON tree (shard_manifest_fast.c), anything else by jansson's
 * tree. Both must give the same table and the same errors. The manifests
 * here are written out by hand and every expected value is spelled out
 * below, not taken from the reader; which path a text takes is checked
 * with shard_manifest_scan itself. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "shard_internal.h"
#include "text_buf.h"
#include "tzr_shard.h"
#include "tzr_load.h"

#include <jansson.h>

/* Three tensors: one cut along dim 0 into three shards (header SHA-256
 * of shards 0 and 2, the latter in capitals), one replicated 0-d tensor
 * with escapes in its name and a whole-tensor sha256, one cut along dim
 * 1 with an empty slice, members in another order and an unknown member.
 * The dtype holds the NUL of tensorizer's opaque form. */
static const char BASE[] =
    "{\n"
    " \"format\": \"tzr-shards\",\n"
    " \"version\": 1,\n"
    " \"shard_count\": 3,\n"
    " \"shards\": [{\"index\": 0, \"file\": \"a.tensors\", \"size\": 100},\n"
    "  {\"index\": 1, \"file\": \"b.tensors\", \"size\": 200},\n"
    "  {\"index\": 2, \"file\": \"c.tensors\", \"size\": 300}],\n"
    " \"tensors\": [\n"
    "  {\"name\": \"w.q\", \"dtype\": \"<V2\\u0000torch.bfloat16\", \"shape\": [6, 4],\n"
    "   \"slices\": [{\"shard\": 0, \"dim\": 0, \"offset\": 0, \"length\": 2},\n"
    "    {\"shard\": 1, \"dim\": 0, \"offset\": 2, \"length\": 2},\n"
    "    {\"shard\": 2, \"dim\": 0, \"offset\": 4, \"length\": 2}],\n"
    "   \"header_sha256\": {\"0\": \"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\",\n"
    "    \"2\": \"FFEEDDCCBBAA99887766554433221100FFEEDDCCBBAA99887766554433221100\"}},\n"
    "  {\"name\": \"caf\\u00e9 \\\"x\\\"\\/\\t\", \"dtype\": \"<f4\", \"shape\": [], \"replicated\": [2, 0],\n"
    "   \"sha256\": \"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"},\n"
    "  {\"note\": {\"x\": [1, 2.5, null]}, \"slices\": [{\"dim\": 1, \"length\": 5, \"shard\": 1, \"offset\": 0},\n"
    "    {\"length\": 0, \"offset\": 5, \"dim\": 1, \"shard\": 0}], \"shape\": [3, 5], \"dtype\": \"<i8\",\n"
    "   \"name\": \"b\"}\n"
    " ]\n"
    "}\n";

/* The same document as one line, tabs and CRLFs, members reordered. */
static const char REORDERED[] =
    "\r\n{\"tensors\":[{\"dtype\":\"<V2\\u0000torch.bfloat16\",\"name\":\"w.q\",\"header_sha256\":{\"0\":"
    "\"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\",\"2\":"
    "\"FFEEDDCCBBAA99887766554433221100FFEEDDCCBBAA99887766554433221100\"},\"slices\":[{\"offset\":0,\"length\":2,"
    "\"shard\":0,\"dim\":0},{\"dim\":0,\"shard\":1,\"offset\":2,\"length\":2},{\"length\":2,\"offset\":4,\"dim\":0,"
    "\"shard\":2}],\"shape\":[6,4]},\t{\"replicated\":[ 2 ,\t0 ],\"sha256\":"
    "\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\",\"shape\":[ ],\"dtype\":\"<f4\","
    "\"name\":\"caf\\u00E9 \\\"x\\\"/\\u0009\"},{\"name\":\"b\",\"dtype\":\"<i8\",\"shape\":[3,5],\"slices\":[{\"shard\":1,"
    "\"dim\":1,\"offset\":0,\"length\":5},{\"shard\":0,\"dim\":1,\"offset\":5,\"length\":0}]}],\r\n"
    "\t\"shards\":[{\"size\":100,\"file\":\"a.tensors\",\"index\":0},{\"index\":2,\"file\":\"c.tensors\",\"size\":300},"
    "{\"index\":1,\"size\":200,\"file\":\"b.tensors\"}],\"shard_count\":3,\"version\":1,\"format\":\"tzr-shards\"}\r\n";

/* The expected table, byte by byte. */
static const uint8_t SHA_A[32] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa,
                                  0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55,
                                  0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
static const uint8_t SHA_C[32] = {0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99, 0x88, 0x77, 0x66, 0x55,
                                  0x44, 0x33, 0x22, 0x11, 0x00, 0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa,
                                  0x99, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x00};
static const uint8_t SHA_W[32] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45,
                                  0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
                                  0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
static const char NAME1[] = "caf\xc3\xa9 \"x\"/\t"; /* U+00E9 in UTF-8 */
static const char DTYPE0[] = "<V2\0torch.bfloat16"; /* 18 bytes */

typedef struct want_slice {
    int shard;
    uint64_t offset, length;
    const uint8_t *hsha; /* NULL: none recorded */
} want_slice;
#define ANY_HSHA ((const uint8_t *)"") /* recorded, value not checked */

static void check_slices(const shard_entry *e, const want_slice *w, size_t n) {
    CHECKF(e->nslices == n, "'%s': %zu slices, want %zu", e->name, e->nslices, n);
    for (size_t k = 0; k < n && k < e->nslices; k++) {
        const shard_slice *s = &e->slices[k];
        CHECKF(s->shard == w[k].shard && s->offset == w[k].offset && s->length == w[k].length,
               "'%s' slice %zu: shard %d [%llu, +%llu)", e->name, k, s->shard, (unsigned long long)s->offset,
               (unsigned long long)s->length);
        CHECK((s->header_sha != NULL) == (w[k].hsha != NULL));
        if (w[k].hsha && w[k].hsha != ANY_HSHA) CHECK(memcmp(s->header_sha, w[k].hsha, 32) == 0);
    }
}

static void check_table(const shard_table *tb) {
    CHECK(tb->nshards == 3);
    if (tb->nshards != 3) return;
    CHECK(strcmp(tb->files[0], "a.tensors") == 0 && strcmp(tb->files[1], "b.tensors") == 0 &&
          strcmp(tb->files[2], "c.tensors") == 0);
    CHECK(tb->sizes[0] == 100 && tb->sizes[1] == 200 && tb->sizes[2] == 300);
    CHECKF(tb->n == 3, "%zu tensors", tb->n);
    if (tb->n != 3) return;

    const shard_entry *e = &tb->t[0];
    CHECK(e->pub.name_len == 3 && memcmp(e->pub.name, "w.q", 4) == 0);
    CHECK(e->pub.dtype_len == 18 && memcmp(e->pub.dtype_str, DTYPE0, 18) == 0);
    CHECK(e->pub.dtype == TZR_DTYPE_BF16 && e->pub.itemsize == 2);
    CHECK(e->pub.ndim == 2 && e->pub.shape[0] == 6 && e->pub.shape[1] == 4 && e->pub.nbytes == 48);
    CHECK(e->pub.dim == 0 && !e->pub.has_sha256);
    check_slices(e, (want_slice[]){{0, 0, 2, SHA_A}, {1, 2, 2, NULL}, {2, 4, 2, SHA_C}}, 3);

    e = &tb->t[1];
    CHECK(e->pub.name_len == sizeof NAME1 - 1 && memcmp(e->pub.name, NAME1, sizeof NAME1) == 0);
    CHECK(e->pub.dtype_len == 3 && memcmp(e->pub.dtype_str, "<f4", 4) == 0);
    CHECK(e->pub.dtype == TZR_DTYPE_F32 && e->pub.ndim == 0 && e->pub.nbytes == 4);
    CHECK(e->pub.dim == TZR_SHARD_REPLICATED);
    CHECK(e->pub.has_sha256 && memcmp(e->pub.sha256, SHA_W, 32) == 0);
    check_slices(e, (want_slice[]){{2, 0, 0, NULL}, {0, 0, 0, NULL}}, 2);

    e = &tb->t[2];
    CHECK(e->pub.name_len == 1 && memcmp(e->pub.name, "b", 2) == 0);
    CHECK(e->pub.dtype_len == 3 && memcmp(e->pub.dtype_str, "<i8", 4) == 0 && e->pub.dtype == TZR_DTYPE_I64);
    CHECK(e->pub.ndim == 2 && e->pub.shape[0] == 3 && e->pub.shape[1] == 5 && e->pub.nbytes == 120);
    CHECK(e->pub.dim == 1 && !e->pub.has_sha256);
    check_slices(e, (want_slice[]){{1, 0, 5, NULL}, {0, 5, 0, NULL}}, 2);
}

/* text with the first `from` replaced by `to` (malloc'd). */
static char *replace(const char *text, const char *from, const char *to) {
    const char *at = strstr(text, from);
    if (!at) {
        check_fail("'%s' not in the text", from);
        return strdup(text);
    }
    size_t a = (size_t)(at - text), lf = strlen(from), lt = strlen(to), n = strlen(text);
    char *out = malloc(n - lf + lt + 1);
    memcpy(out, text, a);
    memcpy(out + a, to, lt);
    memcpy(out + a + lt, at + lf, n - a - lf + 1);
    return out;
}

/* Which path the text takes: 0 (the scan reads it) or SHARD_RETRY. */
static int path_of(const char *text) {
    shard_table tb;
    memset(&tb, 0, sizeof tb);
    json_t *root = NULL;
    int rc = shard_manifest_scan(text, strlen(text), &tb, &root);
    json_decref(root);
    shard_table_free(&tb);
    return rc;
}

static char mpath[1024];

/* Parse text as a manifest file: shard_json_read, then (when it parses)
 * the table checks every open makes. *tb is left to the caller on 0. */
static int read_text(const char *text, shard_table *tb) {
    check_write_file(mpath, text, strlen(text));
    int side = 0;
    int rc = shard_json_read(mpath, NULL, tb, &side);
    if (!rc) {
        CHECK(side == -1);
        rc = shard_table_validate(tb, mpath);
        if (rc) shard_table_free(tb);
    }
    return rc;
}

static void expect_table(const char *what, const char *text, int path) {
    CHECKF(path_of(text) == path, "%s: want the %s path", what, path ? "jansson" : "scan");
    shard_table tb;
    int rc = read_text(text, &tb);
    CHECKF(rc == 0, "%s: %s", what, tzr_last_error());
    if (rc) return;
    check_table(&tb);
    shard_table_free(&tb);
}

/* The usual shape is read by the scan whatever the member order and
 * whitespace; the same content in forms it leaves to jansson (an escaped
 * key, a repeated member of which jansson keeps the last, header keys
 * out of order) gives the same table. */
static void same_table_both_paths(void) {
    expect_table("as written", BASE, 0);
    expect_table("reordered", REORDERED, 0);
    char *t = replace(BASE, "\"name\": \"w.q\"", "\"n\\u0061me\": \"w.q\"");
    expect_table("escaped key", t, SHARD_RETRY);
    free(t);
    t = replace(BASE, "\"shape\": [3, 5]", "\"shape\": [7], \"shape\": [3, 5]");
    expect_table("repeated member", t, SHARD_RETRY);
    free(t);
    t = replace(BASE, "\"header_sha256\": {\"0\": \"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\",\n"
                      "    \"2\": \"FFEEDDCCBBAA99887766554433221100FFEEDDCCBBAA99887766554433221100\"}",
                "\"header_sha256\": {\"2\": \"FFEEDDCCBBAA99887766554433221100FFEEDDCCBBAA99887766554433221100\",\n"
                "    \"0\": \"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\"}");
    expect_table("header keys out of order", t, SHARD_RETRY);
    free(t);
    /* An empty header key: the tree ignores it (no shard is named ""); the
     * scan leaves it to jansson rather than read a shard number from it. */
    t = replace(BASE, "\"header_sha256\": {\"0\"",
                "\"header_sha256\": {\"\": \"ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff\", \"0\"");
    expect_table("empty header key", t, SHARD_RETRY);
    free(t);
    t = replace(BASE, "\"shard_count\": 3", "\"shard_count\": 3, \"s\\u0068ard_count\": 3");
    expect_table("repeated top-level member", t, SHARD_RETRY);
    free(t);
    /* Slices as libtzr writes them (no space), one of them with a space
     * the exact-text path does not take: the scan still reads both. */
    t = replace(BASE, "{\"shard\": 0, \"dim\": 0, \"offset\": 0, \"length\": 2}",
                "{\"shard\":0,\"dim\":0,\"offset\":0,\"length\":2}");
    char *u = replace(t, "{\"shard\": 1, \"dim\": 0, \"offset\": 2, \"length\": 2}",
                      "{\"shard\":1,\"dim\":0,\"offset\":2, \"length\":2}");
    expect_table("compact slices", u, 0);
    free(t);
    free(u);
}

/* Tiling does not depend on the order slices are listed in: out of
 * order is fine, and so is an empty slice listed after a full one that
 * begins where it lies (it overlaps nothing); two slices holding the same
 * index still overlap, in either order. */
static void slice_order(void) {
    static const char *const ok[][2] = {
        {"\"offset\": 0, \"length\": 2}", "\"offset\": 4, \"length\": 2}"}, /* w.q: shard 0 holds the last rows */
        {"\"offset\": 4, \"length\": 2}],", "\"offset\": 0, \"length\": 2}],"},
        {"\"length\": 0, \"offset\": 5", "\"length\": 0, \"offset\": 0"}, /* b: [0, +5) then [0, +0) */
    };
    char *t = replace(BASE, ok[0][0], ok[0][1]);
    char *u = replace(t, ok[1][0], ok[1][1]);
    char *v = replace(u, ok[2][0], ok[2][1]);
    char *w = replace(v, "\"name\": \"w.q\"", "\"n\\u0061me\": \"w.q\"");
    const char *texts[2] = {v, w};
    for (int k = 0; k < 2; k++) {
        shard_table tb;
        int rc = read_text(texts[k], &tb);
        CHECKF(rc == 0, "listed out of order (%s): %s", k ? "jansson" : "scan", tzr_last_error());
        if (rc) continue;
        CHECK(tb.n == 3 && tb.t[0].nslices == 3 && tb.t[0].slices[0].offset == 4 && tb.t[0].slices[2].offset == 0);
        CHECK(tb.t[2].nslices == 2 && tb.t[2].slices[1].offset == 0 && tb.t[2].slices[1].length == 0);
        shard_table_free(&tb);
    }
    free(t);
    free(u);
    free(v);
    free(w);
    /* b's empty slice made full, listed first: [0, +1) then [0, +5). */
    t = replace(BASE, "{\"dim\": 1, \"length\": 5, \"shard\": 1, \"offset\": 0}",
                "{\"dim\": 1, \"length\": 1, \"shard\": 0, \"offset\": 0}, {\"dim\": 1, \"length\": 5, \"shard\": 1, \"offset\": 0}");
    u = replace(t, ",\n    {\"length\": 0, \"offset\": 5, \"dim\": 1, \"shard\": 0}", "");
    shard_table tb;
    int rc = read_text(u, &tb);
    if (!rc) shard_table_free(&tb);
    CHECKF(rc == TZR_EFORMAT && strstr(tzr_last_error(), "tensor 'b'") && strstr(tzr_last_error(), "overlaps"),
           "same start, both full: rc %d: %s", rc, tzr_last_error());
    free(t);
    free(u);
}

/* A malformed manifest: refused with `code` and a message holding w1 and
 * w2, the same whether the scan meets it (it leaves every doubt to
 * jansson) or jansson reads the whole text from the start (an escaped key
 * in the first entry). */
static void expect_refused(const char *what, const char *from, const char *to, int code, const char *w1,
                           const char *w2) {
    char *a = replace(BASE, from, to);
    char *b = replace(a, "\"name\": \"w.q\"", "\"n\\u0061me\": \"w.q\"");
    CHECKF(path_of(b) == SHARD_RETRY, "%s: the escaped key must go to jansson", what);
    char msg[2][1024];
    const char *texts[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        shard_table tb;
        int rc = read_text(texts[k], &tb);
        if (!rc) shard_table_free(&tb);
        snprintf(msg[k], sizeof msg[k], "%s", tzr_last_error());
        CHECKF(rc == code, "%s (%s): rc %d, want %d: %s", what, k ? "jansson" : "scan first", rc, code, msg[k]);
        CHECKF(strstr(msg[k], w1) && (!w2 || strstr(msg[k], w2)), "%s: message '%s' lacks '%s' / '%s'", what,
               msg[k], w1, w2 ? w2 : "");
    }
    CHECKF(strcmp(msg[0], msg[1]) == 0, "%s: messages differ:\n    %s\n    %s", what, msg[0], msg[1]);
    free(a);
    free(b);
}

/* The manifest writer's entry text is what jansson writes for the same
 * entry (compact, ASCII only), for every form: escapes, non-ASCII and
 * structured names, opaque dtypes and runs of one dtype, 0-d and empty
 * extents, replicated, sha256 and header digests. One is spelled out. */
static void entry_text_as_jansson(void) {
    char *t = replace(BASE, "\n ]\n}\n",
                      ",\n  {\"name\": [\"layers\", 1, \"w\\u00e9\"], \"dtype\": \"<V2\\u0000torch.bfloat16\", "
                      "\"shape\": [4], \"replicated\": [1]},\n"
                      "  {\"name\": \"x\\\\y/z\\u0001\", \"dtype\": \"<f4\", \"shape\": [2, 3, 0],\n"
                      "   \"slices\": [{\"shard\": 2, \"dim\": 2, \"offset\": 0, \"length\": 0}]},\n"
                      "  {\"name\": \"t\\u00e9st\", \"dtype\": \"<f4\", \"shape\": [3], \"replicated\": [0, 1, 2]}\n ]\n}\n");
    shard_table tb;
    int rc = read_text(t, &tb);
    free(t);
    CHECKF(rc == 0, "extended manifest: %s", tzr_last_error());
    if (rc) return;
    CHECK(tb.n == 6);
    tzr_text dt = {0};
    const shard_entry *dof = NULL;
    for (size_t i = 0; i < tb.n; i++) {
        tzr_text mine = {0}, ref = {0};
        json_t *j = shard_entry_json(&tb.t[i]);
        CHECK(j != NULL);
        CHECK(shard_entry_text(&mine, &tb.t[i], NULL, &dt, &dof) == 0);
        char *d = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        CHECKF(d && mine.p && strcmp(mine.p, d) == 0, "entry %zu:\n    mine    %s\n    jansson %s", i,
               mine.p ? mine.p : "(none)", d ? d : "(none)");
        if (i == 0)
            CHECKF(mine.p && strcmp(mine.p, "{\"name\":\"w.q\",\"dtype\":\"<V2\\u0000torch.bfloat16\",\"shape\":[6,4],"
                                             "\"slices\":[{\"shard\":0,\"dim\":0,\"offset\":0,\"length\":2},"
                                             "{\"shard\":1,\"dim\":0,\"offset\":2,\"length\":2},"
                                             "{\"shard\":2,\"dim\":0,\"offset\":4,\"length\":2}],\"header_sha256\":{"
                                             "\"0\":\"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\","
                                             "\"2\":\"ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100\"}}") == 0,
                   "w.q: %s", mine.p ? mine.p : "(none)");
        free(d);
        json_decref(j);
        free(mine.p);
        free(ref.p);
    }
    /* A name that is not UTF-8 has no JSON form: 1, as the tree has none. */
    uint64_t one = 1;
    shard_entry *e = shard_table_add(&tb, "\xff\xfe", 2, "<f4", 3, 1, &one, TZR_SHARD_REPLICATED);
    CHECK(e != NULL);
    if (e) {
        tzr_text mine = {0};
        CHECK(shard_entry_text(&mine, e, NULL, &dt, &dof) == 1);
        CHECK(shard_entry_json(e) == NULL);
        free(mine.p);
    }
    free(dt.p);
    shard_table_free(&tb);
}

/* Manifests past the 256 MiB that used to be the bound are read (a
 * 100k-tensor set cut 32 ways writes ~400 MB); past SHARD_JSON_MAX one is
 * refused before any of it is read. */
static void large_manifests(void) {
    FILE *f = fopen(mpath, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(BASE, 1, strlen(BASE), f) == strlen(BASE));
    static char ws[1 << 20];
    memset(ws, '\n', sizeof ws);
    for (int i = 0; i < 300; i++) CHECK(fwrite(ws, 1, sizeof ws, f) == sizeof ws);
    CHECK(fclose(f) == 0);
    shard_table tb;
    int side = 0, rc = shard_json_read(mpath, NULL, &tb, &side);
    CHECKF(rc == 0, "300 MiB manifest: %s", tzr_last_error());
    if (!rc) {
        CHECK(shard_table_validate(&tb, mpath) == 0);
        check_table(&tb);
        shard_table_free(&tb);
    }
    /* sparse: no disk, and never read */
    CHECK(truncate(mpath, (off_t)SHARD_JSON_MAX + 1) == 0);
    rc = shard_json_read(mpath, NULL, &tb, &side);
    if (!rc) shard_table_free(&tb);
    CHECKF(rc == TZR_ELIMIT && strstr(tzr_last_error(), "too large for a shard manifest"), "rc %d: %s", rc,
           tzr_last_error());
    unlink(mpath);
}

/* Version 2's "split": D stands for the slices tzr_shard_chunk cuts over
 * every shard, part p in shard p: the same table as the slices spelled
 * out (even, uneven, and fewer rows than shards), by the scan and by
 * jansson; with slices too, or a dim the tensor lacks, it is refused. */
static void split_form(void) {
    char *a = replace(BASE, "\"slices\": [{\"shard\": 0, \"dim\": 0, \"offset\": 0, \"length\": 2},\n"
                            "    {\"shard\": 1, \"dim\": 0, \"offset\": 2, \"length\": 2},\n"
                            "    {\"shard\": 2, \"dim\": 0, \"offset\": 4, \"length\": 2}]",
                      "\"split\": 0");
    expect_table("w.q as split", a, 0);
    char *b = replace(a, "\"name\": \"w.q\"", "\"n\\u0061me\": \"w.q\"");
    expect_table("w.q as split, jansson", b, SHARD_RETRY);
    free(b);
    /* b: dim 1 of 5 over 3 shards is 2, 2, 1; and t: 2 rows over 3 shards */
    char *c = replace(a, "\"slices\": [{\"dim\": 1, \"length\": 5, \"shard\": 1, \"offset\": 0},\n"
                         "    {\"length\": 0, \"offset\": 5, \"dim\": 1, \"shard\": 0}]",
                      "\"split\": 1");
    /* t and t2 cut 2 rows: one shared slice list (t2's other dim differs) */
    char *d = replace(c, "\n ]\n}\n", ",\n  {\"name\": \"t\", \"dtype\": \"<f4\", \"shape\": [2], \"split\": 0},\n"
                                   "  {\"name\": \"t2\", \"dtype\": \"<f4\", \"shape\": [2, 3], \"split\": 0}\n ]\n}\n");
    char *e = replace(d, "\"name\": \"w.q\"", "\"n\\u0061me\": \"w.q\"");
    const char *texts[2] = {d, e};
    for (int k = 0; k < 2; k++) {
        CHECK(path_of(texts[k]) == (k ? SHARD_RETRY : 0));
        shard_table tb;
        int rc = read_text(texts[k], &tb);
        CHECKF(rc == 0, "uneven split (%s): %s", k ? "jansson" : "scan", tzr_last_error());
        if (rc) continue;
        CHECK(tb.n == 5);
        if (tb.n == 5) {
            check_slices(&tb.t[0], (want_slice[]){{0, 0, 2, ANY_HSHA}, {1, 2, 2, NULL}, {2, 4, 2, ANY_HSHA}}, 3);
            check_slices(&tb.t[2], (want_slice[]){{0, 0, 2, NULL}, {1, 2, 2, NULL}, {2, 4, 1, NULL}}, 3);
            check_slices(&tb.t[3], (want_slice[]){{0, 0, 1, NULL}, {1, 1, 1, NULL}, {2, 2, 0, NULL}}, 3);
            check_slices(&tb.t[4], (want_slice[]){{0, 0, 1, NULL}, {1, 1, 1, NULL}, {2, 2, 0, NULL}}, 3);
            CHECK(tb.t[2].pub.dim == 1 && tb.t[3].pub.dim == 0);
            /* w.q's digests need slices of its own; the others share by cut length */
            CHECK(!tb.t[0].shared && tb.t[2].shared && tb.t[3].shared && tb.t[4].shared);
            CHECK(tb.t[4].slices == tb.t[3].slices && tb.t[2].slices != tb.t[3].slices);
            CHECK(tb.nshared == 3);
        }
        shard_table_free(&tb);
    }
    free(c);
    free(d);
    free(e);
    free(a);
    expect_refused("split and slices", "\"name\": \"b\"", "\"name\": \"b\", \"split\": 1", TZR_EFORMAT, "tensors[2]",
                   "one of slices/replicated/split");
    expect_refused("split past the dims",
                   "\"slices\": [{\"dim\": 1, \"length\": 5, \"shard\": 1, \"offset\": 0},\n"
                   "    {\"length\": 0, \"offset\": 5, \"dim\": 1, \"shard\": 0}]",
                   "\"split\": 2", TZR_EFORMAT, "tensor 'b'", "split dim 2 but 2 dims");
}

static void malformed_same_errors(void) {
    expect_refused("fraction in shape", "[3, 5]", "[3, 5.0]", TZR_EFORMAT, "tensors[2]", "bad shape");
    expect_refused("negative extent", "[3, 5]", "[3, -5]", TZR_EFORMAT, "tensors[2]", "bad shape");
    expect_refused("no dtype", "\"dtype\": \"<i8\"", "\"dtypo\": \"<i8\"", TZR_EFORMAT, "tensors[2]",
                   "want name, dtype, shape");
    expect_refused("slices and replicated", "\"name\": \"b\"", "\"name\": \"b\", \"replicated\": [0]", TZR_EFORMAT,
                   "tensors[2]", "one of slices/replicated");
    expect_refused("slice dims differ", "\"offset\": 5, \"dim\": 1", "\"offset\": 5, \"dim\": 0", TZR_EFORMAT,
                   "tensor 'b'", "slice 1 is malformed");
    expect_refused("split dim past the shape", "{\"dim\": 1, \"length\": 5", "{\"dim\": 2, \"length\": 5",
                   TZR_EFORMAT, "tensor 'b'", "split dim 2 but 2 dims");
    expect_refused("shard past the limit", "\"replicated\": [2, 0]", "\"replicated\": [2, 100000]", TZR_EFORMAT,
                   "tensor 'caf", "slice 1 is malformed");
    expect_refused("sha256 not hex", "0123456789abcdef0123", "0123456789abcdefg123", TZR_EFORMAT, "tensor 'caf",
                   "bad sha256");
    /* next to the hex digits' ranges: '/' ':' '@' 'G' '`' 'g' */
    expect_refused("sha256 ':'", "0123456789abcdef0123", "0123456789abcdef:123", TZR_EFORMAT, "tensor 'caf",
                   "bad sha256");
    expect_refused("sha256 '`'", "456789abcdef\"}", "456789abcde`\"}", TZR_EFORMAT, "tensor 'caf", "bad sha256");
    expect_refused("header sha '@'", "\"2\": \"FFEE", "\"2\": \"F@EE", TZR_EFORMAT, "tensor 'w.q'",
                   "bad header_sha256 of shard 2");
    expect_refused("header sha 'G'", "\"0\": \"0011", "\"0\": \"00G1", TZR_EFORMAT, "tensor 'w.q'",
                   "bad header_sha256 of shard 0");
    expect_refused("header sha '/'", "ccddeeff\",\n", "ccddee/f\",\n", TZR_EFORMAT, "tensor 'w.q'",
                   "bad header_sha256 of shard 0");
    expect_refused("sha256 short", "\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"",
                   "\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\"", TZR_EFORMAT, "tensor 'caf",
                   "bad sha256");
    expect_refused("header_sha256 not an object", "\"name\": \"b\"", "\"name\": \"b\", \"header_sha256\": []",
                   TZR_EFORMAT, "tensor 'b'", "header_sha256 must be an object");
    expect_refused("header sha short", "\"2\": \"FFEEDDCCBBAA99887766554433221100FF",
                   "\"2\": \"FFEEDDCCBBAA99887766554433221100F", TZR_EFORMAT, "tensor 'w.q'",
                   "bad header_sha256 of shard 2");
    expect_refused("overlap", "\"length\": 0, \"offset\": 5", "\"length\": 1, \"offset\": 4", TZR_EFORMAT,
                   "tensor 'b'", "overlaps");
    expect_refused("gap", "\"length\": 5, \"shard\": 1", "\"length\": 4, \"shard\": 1", TZR_EFORMAT, "tensor 'b'",
                   "gap in dim 1: [4, 5)");
    expect_refused("slice past the extent", "\"length\": 0, \"offset\": 5", "\"length\": 1, \"offset\": 5",
                   TZR_EFORMAT, "tensor 'b'", "passes its length 5");
    expect_refused("shard out of range", "\"replicated\": [2, 0]", "\"replicated\": [3, 0]", TZR_EFORMAT,
                   "tensor 'caf", "shard 3 out of range");
    expect_refused("bad dtype", "\"<i8\"", "\"<q9\"", TZR_EFORMAT, "tensor 'b'", "bad dtype string");
    expect_refused("trailing comma", "\"name\": \"b\"}", "\"name\": \"b\"},", TZR_EFORMAT, "line ", NULL);
    expect_refused("text after the document", "\n ]\n}\n", "\n ]\n} x\n", TZR_EFORMAT, "line ", NULL);
    expect_refused("raw control byte in a name", "\"name\": \"b\"", "\"name\": \"b\x01\"", TZR_EFORMAT, "line ", NULL);
    expect_refused("version", "\"version\": 1", "\"version\": 3", TZR_EVERSION, "version 3", "1 to 2");
}

/* The table's name index (built by the first find, kept by later adds):
 * a writer refuses a repeated name, takes a name back when its dtype is
 * refused, and a merge of many split tensors finds each in both shards. */
static void many_names_merge(void) {
    char prefix[1024];
    snprintf(prefix, sizeof prefix, "%s/many", check_tmpdir());
    enum { N = 700 };
    uint64_t shape[1] = {2};
    uint8_t data[4] = {1, 2, 3, 4};
    for (int r = 0; r < 2; r++) {
        tzr_shard_writer *w = NULL;
        CHECK_OK(tzr_shard_writer_open(&w, prefix, r, 2, NULL));
        if (!w) return;
        for (int i = 0; i < N; i++) {
            char nm[32];
            snprintf(nm, sizeof nm, "t.%d", r ? N - 1 - i : i); /* shard 1 adds them backwards */
            tzr_shard_tensor_desc d = {nm, strlen(nm), NULL, 0, TZR_DTYPE_I16, 1, shape, 0, (uint64_t)r, 1, NULL};
            if (i == 5) {
                tzr_shard_tensor_desc bad = d;
                bad.dtype_str = "<q9";
                bad.dtype_len = 3;
                CHECK_RC(tzr_shard_writer_add(w, &bad, data), TZR_EINVAL); /* taken back ... */
            }
            CHECK_OK(tzr_shard_writer_add(w, &d, data + 2 * r));         /* ... so this is no repeat */
            if (i == 7) CHECK_RC(tzr_shard_writer_add(w, &d, data), TZR_EDUP);
        }
        CHECK_OK(tzr_shard_writer_close(w));
    }
    CHECK_OK(tzr_shard_manifest_build(prefix, 2));
    char m[1100];
    snprintf(m, sizeof m, "%s" TZR_SHARD_MANIFEST_SUFFIX, prefix);
    shard_table tb;
    int side;
    CHECK_OK(shard_json_read(m, NULL, &tb, &side));
    CHECK(tb.n == N);
    for (size_t i = 0; i < tb.n && i < N; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "t.%zu", i);
        const shard_entry *e = &tb.t[i];
        CHECKF(e->pub.name_len == strlen(nm) && memcmp(e->name, nm, strlen(nm)) == 0, "entry %zu is '%s'", i, e->name);
        /* version 2: the header digests are in the hashes file */
        check_slices(e, (want_slice[]){{0, 0, 1, NULL}, {1, 1, 1, NULL}}, 2);
        if (check_case_failed) break;
    }
    CHECK(tb.hashes_file && strcmp(tb.hashes_file, "many.tzr-hashes") == 0);
    CHECK(tb.hashes && tb.hashes[0].present && tb.hashes[0].offset == 0 && tb.hashes[0].count == N &&
          tb.hashes[1].present && tb.hashes[1].offset == 32 * N && tb.hashes[1].count == N);
    char hp[1100];
    struct stat st;
    snprintf(hp, sizeof hp, "%s.tzr-hashes", prefix);
    CHECK(stat(hp, &st) == 0 && st.st_size == 64 * N);
    size_t idx = 0;
    CHECK_OK(shard_table_find(&tb, "t.699", 5, &idx));
    CHECK(idx == 699);
    CHECK_RC(shard_table_find(&tb, "t.700", 5, &idx), TZR_ENOTFOUND);
    shard_table_free(&tb);
}

/* The open finds each slice's tensor in its shard by trying the one after
 * the last found first: a shard that holds them in another order (here
 * shard 1 swaps each pair) must still map every slice to its own tensor,
 * and a load must deliver each tensor's own bytes. */
static void shard_order_differs(void) {
    char prefix[1024];
    snprintf(prefix, sizeof prefix, "%s/order", check_tmpdir());
    enum { N = 41 };
    uint64_t shape[1] = {2};
    for (int r = 0; r < 2; r++) {
        tzr_shard_writer *w = NULL;
        CHECK_OK(tzr_shard_writer_open(&w, prefix, r, 2, NULL));
        if (!w) return;
        for (int q = 0; q < N; q++) {
            int i = r == 1 && (q ^ 1) < N ? q ^ 1 : q;
            char nm[32];
            snprintf(nm, sizeof nm, "t.%d", i);
            int16_t v = (int16_t)(100 * i + r);
            tzr_shard_tensor_desc d = {nm, strlen(nm), NULL, 0, TZR_DTYPE_I16, 1, shape, 0, (uint64_t)r, 1, NULL};
            CHECK_OK(tzr_shard_writer_add(w, &d, &v));
        }
        CHECK_OK(tzr_shard_writer_close(w));
    }
    CHECK_OK(tzr_shard_manifest_build(prefix, 2));
    char m[1100];
    snprintf(m, sizeof m, "%s" TZR_SHARD_MANIFEST_SUFFIX, prefix);
    tzr_shard_set *s = NULL;
    CHECK_OK(tzr_shard_open(&s, m, NULL));
    if (!s) return;
    CHECK(s->tb.n == N);
    for (size_t i = 0; i < s->tb.n; i++) {
        const shard_entry *e = &s->tb.t[i];
        for (size_t q = 0; q < e->nslices; q++) {
            tzr_reader *r = tzr_shard_reader(s, e->slices[q].shard); /* opened at first use */
            const tzr_tensor_info *t = r ? tzr_reader_tensor(r, shard_slice_local_of(&s->tb, i, &e->slices[q])) : NULL;
            CHECKF(t && t->name_len == e->pub.name_len && memcmp(t->name, e->name, t->name_len) == 0,
                   "'%s' slice %zu maps to '%s'", e->name, q, t ? t->name : "(none)");
        }
    }
    tzr_shard_result *res = NULL;
    CHECK_OK(tzr_shard_load_rank(s, 0, 1, NULL, &res));
    for (size_t i = 0; res && i < res->count && i < N; i++) {
        int16_t got[2];
        CHECK(res->pieces[i].nbytes == 4);
        memcpy(got, res->pieces[i].data, 4);
        CHECKF(got[0] == (int16_t)(100 * i) && got[1] == (int16_t)(100 * i + 1), "t.%zu holds %d %d", i, got[0],
               got[1]);
    }
    tzr_shard_result_free(res);
    tzr_shard_close(s);
}

/* ---- long lists, read in two halves on two threads ---- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if ((size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        b->cap = 2 * b->cap + (size_t)k + 1;
        b->p = realloc(b->p, b->cap);
    }
}

enum { BIG_N = 12000 };
static uint8_t big_sha(size_t i, int k) { return (uint8_t)(i * 31 + (size_t)k * 7); }

/* Entry i of the generated list: even ones replicated on both shards with a
 * sha256, odd ones cut along dim 0 (i % 5 + 1 rows on shard 0, 3 on shard
 * 1) in a bfloat16 dtype with its escape; extra: text put in entry `at`
 * (a member, e.g. one whose value holds entry-like objects). */
static char *big_manifest(size_t at, const char *extra) {
    sbuf b = {malloc(1 << 16), 0, 1 << 16};
    put(&b, "{\n \"format\": \"tzr-shards\",\n \"version\": 1,\n \"shard_count\": 2,\n"
            " \"shards\": [{\"index\": 0, \"file\": \"a.tensors\", \"size\": 1},"
            " {\"index\": 1, \"file\": \"b.tensors\", \"size\": 2}],\n \"tensors\": [\n");
    for (size_t i = 0; i < BIG_N; i++) {
        put(&b, "  {\n   \"name\": \"t.%zu\",\n", i);
        if (i == at) put(&b, "   %s,\n", extra);
        if (i % 2 == 0) {
            put(&b, "   \"dtype\": \"<f4\",\n   \"shape\": [%zu, 2],\n   \"replicated\": [0, 1],\n   \"sha256\": \"", i % 7);
            for (int k = 0; k < 32; k++) put(&b, "%02x", big_sha(i, k));
            put(&b, "\"\n  }");
        } else {
            put(&b, "   \"dtype\": \"<V2\\u0000torch.bfloat16\",\n   \"shape\": [%zu],\n   \"slices\": [\n"
                    "    {\"shard\": 0, \"dim\": 0, \"offset\": 0, \"length\": %zu},\n"
                    "    {\"shard\": 1, \"dim\": 0, \"offset\": %zu, \"length\": 3}\n   ]\n  }",
                i % 5 + 4, i % 5 + 1, i % 5 + 1);
        }
        put(&b, i + 1 < BIG_N ? ",\n" : "\n");
    }
    put(&b, " ]\n}\n");
    return b.p;
}

static void check_big(const shard_table *tb) {
    CHECKF(tb->n == BIG_N, "%zu entries", tb->n);
    for (size_t i = 0; i < tb->n && i < BIG_N && !check_case_failed; i++) {
        const shard_entry *e = &tb->t[i];
        char nm[32];
        snprintf(nm, sizeof nm, "t.%zu", i);
        CHECKF(e->pub.name_len == strlen(nm) && strcmp(e->name, nm) == 0, "entry %zu is '%s'", i, e->name);
        if (i % 2 == 0) {
            CHECK(e->pub.dtype == TZR_DTYPE_F32 && e->pub.ndim == 2 && e->pub.shape[0] == i % 7 &&
                  e->pub.shape[1] == 2 && e->pub.dim == TZR_SHARD_REPLICATED && e->pub.has_sha256);
            for (int k = 0; k < 32; k++) CHECK(e->pub.sha256[k] == big_sha(i, k));
            check_slices(e, (want_slice[]){{0, 0, 0, NULL}, {1, 0, 0, NULL}}, 2);
        } else {
            CHECK(e->pub.dtype_len == 18 && memcmp(e->pub.dtype_str, DTYPE0, 18) == 0);
            CHECK(e->pub.ndim == 1 && e->pub.shape[0] == i % 5 + 4 && e->pub.dim == 0 && !e->pub.has_sha256);
            check_slices(e, (want_slice[]){{0, 0, i % 5 + 1, NULL}, {1, i % 5 + 1, 3, NULL}}, 2);
        }
    }
}

static void expect_big(const char *what, const char *text, int path) {
    CHECKF(path_of(text) == path, "%s: want the %s path", what, path ? "jansson" : "scan");
    shard_table tb;
    int rc = read_text(text, &tb);
    CHECKF(rc == 0, "%s: %s", what, tzr_last_error());
    if (rc) return;
    check_big(&tb);
    shard_table_free(&tb);
}

/* Long lists (past the size the scan splits at), as written, and with
 * what its second thread must not take: entry-like objects inside an entry
 * at the middle (it would start there; the first thread passes that place
 * inside the entry, so the list is read alone), an entry the scan leaves
 * to jansson after the middle, and a malformed one there (the same
 * message as jansson's). Every value comes from the generator above. */
static void long_lists_in_halves(void) {
    char *t = big_manifest(SIZE_MAX, NULL);
    CHECK(strlen(t) >= 2 * shard_scan_split_min); /* (big enough to be split) */
    expect_big("long list", t, 0);
    free(t);
    static const char fake[] = "{\"name\": \"fake\", \"dtype\": \"<f4\", \"shape\": [], \"replicated\": [0]}";
    char note[4096];
    snprintf(note, sizeof note, "\"note\": [{}, %s, {\"x\": 1}, %s]", fake, fake);
    for (size_t at = BIG_N / 2 - 2; at <= BIG_N / 2 + 2; at++) {
        t = big_manifest(at, note);
        expect_big("entry-like objects at the middle", t, 0);
        free(t);
    }
    t = big_manifest(BIG_N * 3 / 4, "\"n\\u0061me2\": 0");
    expect_big("an escaped key after the middle", t, SHARD_RETRY);
    free(t);
    for (size_t at = BIG_N / 4; at < BIG_N; at += BIG_N / 2) {
        char *a = big_manifest(at, "\"header_sha256\": []"), *b = replace(a, "\"name\": \"t.0\"", "\"n\\u0061me\": \"t.0\"");
        char msg[2][1024];
        const char *texts[2] = {a, b};
        int rcs[2];
        for (int k = 0; k < 2; k++) {
            shard_table tb;
            rcs[k] = read_text(texts[k], &tb);
            if (!rcs[k]) shard_table_free(&tb);
            snprintf(msg[k], sizeof msg[k], "%s", tzr_last_error());
        }
        CHECKF(rcs[0] == TZR_EFORMAT && rcs[1] == TZR_EFORMAT, "bad header_sha256 at %zu: rc %d / %d", at, rcs[0], rcs[1]);
        char want[64];
        snprintf(want, sizeof want, "tensor 't.%zu'", at);
        CHECKF(strstr(msg[0], want) && strstr(msg[0], "header_sha256 must be an object"), "message: %s", msg[0]);
        CHECKF(strcmp(msg[0], msg[1]) == 0, "bad header_sha256 at %zu: messages differ:\n    %s\n    %s", at, msg[0],
               msg[1]);
        free(a);
        free(b);
    }
}

/* The small documents above again, each entry list split however short
 * (where the middle falls inside slices, names and sha strings). */
static void small_lists_in_halves(void) {
    size_t keep = shard_scan_split_min;
    shard_scan_split_min = 0;
    same_table_both_paths();
    malformed_same_errors();
    shard_scan_split_min = keep;
}

/* A Hugging Face index read both ways (the scan, and jansson's tree
 * alone): the names in the index's order, each one's file as an index
 * into the files sorted by name. */
static void expect_hf(const char *text, int scan, int scanned, size_t n, const char *const *names, const uint32_t *file,
                      size_t nfiles, const char *const *files) {
    shard_hf_map m;
    char *copy = strdup(text);
    CHECK(copy);
    CHECK_OK(shard_hf_index_parse("i.json", copy, strlen(text), scan, &m));
    CHECKF(m.n == n && m.nfiles == nfiles, "scan %d: %zu names, %zu files", scan, m.n, m.nfiles);
    CHECKF(!m.text == !scanned && !m.root == !!scanned, "scan %d: read by the %s", scan, m.text ? "scan" : "tree");
    for (size_t i = 0; i < n && i < m.n; i++)
        CHECKF(!strcmp(m.names[i], names[i]) && m.file[i] == file[i], "scan %d: name %zu is '%s' in file %u", scan, i,
               m.names[i], m.file[i]);
    for (size_t k = 0; k < nfiles && k < m.nfiles; k++) CHECK(!strcmp(m.files[k], files[k]));
    shard_hf_map_free(&m);
}

static void expect_hf_error(const char *text, const char *want) {
    for (int scan = 0; scan < 2; scan++) {
        shard_hf_map m;
        char *copy = strdup(text);
        CHECK(copy);
        CHECK_RC(shard_hf_index_parse("i.json", copy, strlen(text), scan, &m), TZR_EFORMAT);
        CHECKF(strstr(tzr_last_error(), want), "scan %d: %s", scan, tzr_last_error());
    }
}

static void hf_index_forms(void) {
    static const char sorted[] = "{\n  \"metadata\": {\n    \"total_size\": 96\n  },\n  \"weight_map\": {\n"
                                 "    \"a.bias\": \"model-00002-of-00002.safetensors\",\n"
                                 "    \"a.weight\": \"model-00001-of-00002.safetensors\",\n"
                                 "    \"b.weight\": \"model-00001-of-00002.safetensors\"\n  }\n}\n";
    static const char *const s_names[] = {"a.bias", "a.weight", "b.weight"};
    static const char *const s_files[] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    static const uint32_t s_file[] = {1, 0, 0};
    /* Out of order, an escaped name (jansson reads that one), metadata last. */
    static const char unsorted[] = "{\"weight_map\": {\"z\": \"f2\", \"b\": \"f1\", \"a\": \"f2\"}, \"metadata\": {}}";
    static const char escaped[] = "{\"weight_map\": {\"z\": \"f2\", \"\\u0062\": \"f1\", \"a\": \"f2\"}}";
    static const char *const u_names[] = {"z", "b", "a"};
    static const char *const u_files[] = {"f1", "f2"};
    static const uint32_t u_file[] = {1, 0, 1};
    for (int scan = 0; scan < 2; scan++) {
        expect_hf(sorted, scan, scan, 3, s_names, s_file, 2, s_files);
        expect_hf(unsorted, scan, scan, 3, u_names, u_file, 2, u_files);
        expect_hf(escaped, scan, 0, 3, u_names, u_file, 2, u_files);
    }
    /* A name twice, in order and out of it: refused as jansson refuses it. */
    expect_hf_error("{\"weight_map\": {\"a\": \"f\", \"a\": \"f\"}}", "duplicate object key");
    expect_hf_error("{\"weight_map\": {\"b\": \"f\", \"a\": \"g\", \"b\": \"f\"}}", "duplicate object key");
    expect_hf_error("{\"weight_map\": {\"a\": \"sub/f\"}}", "weight_map entry 'a' must name a file beside the index");
    expect_hf_error("{\"weight_map\": {\"a\": \"..\"}}", "weight_map entry 'a' must name a file beside the index");
    expect_hf_error("{\"metadata\": {}}", "no \"weight_map\" object");
}

int main(void) {
    snprintf(mpath, sizeof mpath, "%s/m" TZR_SHARD_MANIFEST_SUFFIX, check_tmpdir());
    RUN(same_table_both_paths);
    RUN(malformed_same_errors);
    RUN(slice_order);
    RUN(entry_text_as_jansson);
    RUN(large_manifests);
    RUN(split_form);
    RUN(many_names_merge);
    RUN(shard_order_differs);
    RUN(long_lists_in_halves);
    RUN(small_lists_in_halves);
    RUN(hf_index_forms);
    return check_done();
}
