/* The manifest and sidecar JSON (formats/shards.md): writing and parsing a
 * shard table, and merging the per-shard sidecars into the manifest. */
#include "hash.h"
#include "shard_internal.h"
#include "mem.h"
#include "scheme.h"
#include "text_buf.h"
#include "tzr_http.h"

#include <jansson.h>
#include <ctype.h>
#include <stdio.h>
#include <sodium.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static json_t *name_json(const char *name, size_t len) {
    if (len && name[0] == 0x1E) return json_loadb(name + 1, len - 1, JSON_DECODE_ANY, NULL);
    return json_stringn(name, len);
}

/* An entry as a jansson tree: the reference shard_entry_text is tested
 * against. */
json_t *shard_entry_json(const shard_entry *e) {
    json_t *o = json_object(), *shape = json_array(), *sl = json_array();
    if (!o || !shape || !sl) goto fail;
    json_t *nm = name_json(e->name, e->pub.name_len);
    if (!nm) goto fail;
    json_object_set_new(o, "name", nm);
    json_object_set_new(o, "dtype", json_stringn(e->dtype, e->pub.dtype_len));
    for (uint32_t d = 0; d < e->pub.ndim; d++) json_array_append_new(shape, json_integer((json_int_t)e->shape[d]));
    json_object_set_new(o, "shape", shape);
    shape = NULL;
    for (size_t k = 0; k < e->nslices; k++) {
        const shard_slice *s = &e->slices[k];
        if (e->pub.dim == TZR_SHARD_REPLICATED) {
            json_array_append_new(sl, json_integer(s->shard));
        } else {
            json_array_append_new(sl, json_pack("{s:i,s:i,s:I,s:I}", "shard", s->shard, "dim", e->pub.dim,
                                                "offset", (json_int_t)s->offset, "length", (json_int_t)s->length));
        }
    }
    json_object_set_new(o, e->pub.dim == TZR_SHARD_REPLICATED ? "replicated" : "slices", sl);
    sl = NULL;
    if (e->pub.has_sha256) {
        char hex[65];
        sodium_bin2hex(hex, sizeof hex, e->pub.sha256, 32);
        json_object_set_new(o, "sha256", json_string(hex));
    }
    json_t *hs = json_object();
    for (size_t k = 0; hs && k < e->nslices; k++) {
        const shard_slice *s = &e->slices[k];
        if (!s->header_sha) continue;
        char hex[65], key[16];
        /* (snprintf a byte was a fifth of writing a 100k-tensor set) */
        sodium_bin2hex(hex, sizeof hex, s->header_sha, 32);
        snprintf(key, sizeof key, "%d", s->shard);
        json_object_set_new(hs, key, json_string(hex));
    }
    if (hs && json_object_size(hs)) json_object_set_new(o, "header_sha256", hs);
    else json_decref(hs);
    return o;
fail:
    json_decref(o), json_decref(shape), json_decref(sl);
    return NULL;
}

/* json_dump_callback's sink. */
static int text_put(const char *s, size_t len, void *ctx) { return tzr_text_put(ctx, s, len); }

static int text_puts(tzr_text *b, const char *s) { return tzr_text_put(b, s, strlen(s)); }

static int text_u64(tzr_text *b, uint64_t v) {
    char d[24], *q = d + sizeof d;
    do *--q = (char)('0' + v % 10);
    while ((v /= 10));
    return tzr_text_put(b, q, (size_t)(d + sizeof d - q));
}

/* A JSON value as jansson writes it compact and ASCII-only (the rare
 * forms: escapes, structured names). */
static int text_json(tzr_text *b, json_t *v) {
    if (!v) return 1; /* not UTF-8, or a structured name that is not JSON */
    int rc = json_dump_callback(v, text_put, b, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ENCODE_ANY) ? -1 : 0;
    json_decref(v);
    return rc;
}

/* A string: printable ASCII other than '"' and '\\' as it is (what jansson
 * writes for it), anything else through jansson. */
static int text_string(tzr_text *b, const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e || s[i] == '"' || s[i] == '\\')
            return text_json(b, json_stringn(s, len));
    return tzr_text_put(b, "\"", 1) || tzr_text_put(b, s, len) || tzr_text_put(b, "\"", 1) ? -1 : 0;
}

/* One tensor entry, byte for byte what json_dump_callback(entry_json(e),
 * JSON_COMPACT | JSON_ENSURE_ASCII) writes (tests/test_shard_manifest.c
 * compares them): through jansson, a tree per entry and a callback per
 * token were most of writing a 100k-tensor set's sidecars and manifest.
 * *dtype_text caches the previous entry's dtype text (runs of one dtype
 * are the rule; an opaque dtype has an escape). Returns 0, -1 out of
 * memory, or 1 when the name or dtype cannot be written as JSON. */
int shard_entry_text(tzr_text *b, const shard_entry *e, const shard_text_form *form, tzr_text *dtype_text,
                     const shard_entry **dtype_of) {
    static const shard_text_form v1 = {0, NULL};
    if (!form) form = &v1;
    int rc = tzr_text_put(b, "{\"name\":", 8);
    if (!rc && e->pub.name_len && e->name[0] == 0x1E) {
        rc = text_json(b, name_json(e->name, e->pub.name_len));
    } else if (!rc) {
        rc = text_string(b, e->name, e->pub.name_len);
    }
    if (rc) return rc;
    if (!*dtype_of || (*dtype_of)->pub.dtype_len != e->pub.dtype_len ||
        memcmp((*dtype_of)->dtype, e->dtype, e->pub.dtype_len) != 0) {
        dtype_text->len = 0;
        *dtype_of = NULL;
        if ((rc = text_string(dtype_text, e->dtype, e->pub.dtype_len))) return rc;
        *dtype_of = e;
    }
    if (tzr_text_put(b, ",\"dtype\":", 9) || tzr_text_put(b, dtype_text->p, dtype_text->len) ||
        tzr_text_put(b, ",\"shape\":[", 10))
        return -1;
    for (uint32_t d = 0; d < e->pub.ndim; d++)
        if ((d && tzr_text_put(b, ",", 1)) || text_u64(b, e->shape[d])) return -1;
    int rep = e->pub.dim == TZR_SHARD_REPLICATED;
    int split = form->split_over > 0 && shard_entry_is_split(e, form->split_over);
    if (split && (text_puts(b, "],\"split\":") || text_u64(b, (uint64_t)e->pub.dim))) return -1;
    if (!split && text_puts(b, rep ? "],\"replicated\":[" : "],\"slices\":[")) return -1;
    for (size_t k = 0; !split && k < e->nslices; k++) {
        const shard_slice *s = &e->slices[k];
        if (k && tzr_text_put(b, ",", 1)) return -1;
        if (rep) {
            if (text_u64(b, (uint64_t)s->shard)) return -1;
            continue;
        }
        if (tzr_text_put(b, "{\"shard\":", 9) || text_u64(b, (uint64_t)s->shard) || tzr_text_put(b, ",\"dim\":", 7) ||
            text_u64(b, (uint64_t)e->pub.dim) || tzr_text_put(b, ",\"offset\":", 10) || text_u64(b, s->offset) ||
            tzr_text_put(b, ",\"length\":", 10) || text_u64(b, s->length) || tzr_text_put(b, "}", 1))
            return -1;
    }
    if (!split && tzr_text_put(b, "]", 1)) return -1;
    char hex[65];
    if (e->pub.has_sha256) {
        sodium_bin2hex(hex, sizeof hex, e->pub.sha256, 32);
        if (tzr_text_put(b, ",\"sha256\":\"", 11) || tzr_text_put(b, hex, 64) || tzr_text_put(b, "\"", 1)) return -1;
    }
    /* jansson keeps the last of a repeated key, in the first one's place
     * (shards listed in increasing order, the rule, repeat none) */
    int any = 0, increasing = 1;
    for (size_t k = 1; k < e->nslices && increasing; k++) increasing = e->slices[k].shard > e->slices[k - 1].shard;
    for (size_t k = 0; k < e->nslices; k++) {
        const shard_slice *s = &e->slices[k];
        if (!s->header_sha || (form->digests_elsewhere && form->digests_elsewhere[s->shard])) continue;
        size_t last = k;
        int seen = 0;
        for (size_t q = k + 1; q < e->nslices && !increasing; q++)
            if (e->slices[q].shard == s->shard && e->slices[q].header_sha != NULL) last = q;
        for (size_t q = 0; q < k && !seen && !increasing; q++)
            seen = e->slices[q].shard == s->shard && e->slices[q].header_sha != NULL;
        if (seen) continue;
        sodium_bin2hex(hex, sizeof hex, e->slices[last].header_sha, 32);
        if (text_puts(b, any ? ",\"" : ",\"header_sha256\":{\"") || text_u64(b, (uint64_t)s->shard) ||
            tzr_text_put(b, "\":\"", 3) || tzr_text_put(b, hex, 64) || tzr_text_put(b, "\"", 1))
            return -1;
        any = 1;
    }
    return text_puts(b, any ? "}}" : "}") ? -1 : 0;
}

/* The members before "tensors" indented, then one tensor a line: a
 * 100k-tensor manifest is a fifth smaller (so a fifth less to read and
 * scan at every open) than indented throughout, and a grep for a tensor
 * finds its whole entry. Entries are written as they are made, never
 * held as one tree. */
int shard_json_write(const shard_table *tb, int sidecar_shard, const char *path, unsigned flags) {
    /* A manifest (not a sidecar) in version 2's form: "split" entries, and
     * header digests where the hashes file holds them. */
    unsigned char *elsewhere = NULL;
    if (sidecar_shard < 0 && tb->hashes && !(elsewhere = calloc((size_t)tb->nshards, 1)))
        return tzr_fail(TZR_ENOMEM, "out of memory");
    for (int k = 0; elsewhere && k < tb->nshards; k++) elsewhere[k] = (unsigned char)tb->hashes[k].present;
    shard_text_form form = {sidecar_shard < 0 ? tb->nshards : 0, elsewhere};
    json_t *root = json_object(), *shards = json_array();
    tzr_text text = {0}, dtype_text = {0};
    tzr_output *o = NULL;
    uint64_t at = 0;
    int rc = TZR_ENOMEM;
    if (!root || !shards) goto out;
    json_object_set_new(root, "format", json_string(sidecar_shard >= 0 ? SHARD_FORMAT "-part" : SHARD_FORMAT));
    json_object_set_new(root, "version", json_integer(SHARD_VERSION));
    json_object_set_new(root, "shard_count", json_integer(tb->nshards));
    if (sidecar_shard >= 0) json_object_set_new(root, "shard", json_integer(sidecar_shard));
    if (elsewhere) json_object_set_new(root, "header_hashes", json_string(tb->hashes_file));
    for (int k = 0; k < tb->nshards; k++) {
        if (!tb->files[k]) continue;
        json_t *sh = json_pack("{s:i,s:s,s:I}", "index", k, "file", tb->files[k], "size", (json_int_t)tb->sizes[k]);
        if (sh && elsewhere && elsewhere[k]) {
            char hex[65];
            sodium_bin2hex(hex, sizeof hex, tb->hashes[k].sha256, 32);
            json_object_set_new(sh, "header_hashes",
                                json_pack("{s:I,s:I,s:s}", "offset", (json_int_t)tb->hashes[k].offset, "count",
                                          (json_int_t)tb->hashes[k].count, "sha256", hex));
        }
        json_array_append_new(shards, sh);
    }
    json_object_set_new(root, "shards", shards);
    shards = NULL;
    /* "{\n ...\n}": everything but its closing line, then the list. */
    if (json_dump_callback(root, text_put, &text, JSON_INDENT(1) | JSON_ENSURE_ASCII) || text.len < 2 ||
        text.p[text.len - 1] != '}')
        goto out;
    text.len -= 2;
    if (text_puts(&text, ",\n \"tensors\": [")) goto out;
    /* As every output: a temporary file beside path (removed on a signal),
     * published with a rename that, with TZR_OUTPUT_NOREPLACE, fails
     * "exists" rather than replace what another writer put there. Written
     * a few MiB at a time: a 100k-tensor manifest's text grown whole was
     * copied at each doubling. */
    if ((rc = tzr_output_open_file_flags(&o, path, flags))) goto out;
    rc = TZR_ENOMEM;
    const shard_entry *dtype_of = NULL;
    for (size_t i = 0; i < tb->n; i++) {
        int bad = text_puts(&text, i ? ",\n  " : "\n  ") ? -1 : shard_entry_text(&text, &tb->t[i], &form, &dtype_text, &dtype_of);
        if (bad > 0) {
            char nb[TZR_NAMEBUF];
            rc = tzr_fail(TZR_EFORMAT, "tensor '%s': name or dtype cannot be written as JSON",
                          tzr_printable(tb->t[i].name, tb->t[i].pub.name_len, nb, sizeof nb));
        }
        if (bad) goto out;
        if (text.len >= ((size_t)4 << 20)) {
            if ((rc = o->pwrite_at(o, text.p, text.len, at))) goto out;
            at += text.len;
            text.len = 0;
            rc = TZR_ENOMEM;
        }
    }
    if (text_puts(&text, tb->n ? "\n ]\n}\n" : "]\n}\n")) goto out;
    rc = o->pwrite_at(o, text.p, text.len, at);
    if (!rc) rc = o->finish(o);
out:
    if (rc == TZR_ENOMEM) tzr_fail(rc, "out of memory");
    if (o) o->destroy(o); /* unfinished: its temporary file is removed */
    free(text.p);
    free(dtype_text.p);
    free(elsewhere);
    json_decref(root), json_decref(shards);
    return rc;
}

/* A name from JSON: a string, or an array rebuilt as a structured name. */
static int name_from_json(json_t *v, char **out, size_t *len) {
    if (json_is_string(v)) {
        *len = json_string_length(v);
        *out = malloc(*len + 1);
        if (!*out) return TZR_ENOMEM;
        memcpy(*out, json_string_value(v), *len + 1);
        return 0;
    }
    if (!json_is_array(v)) return TZR_EFORMAT;
    size_t n = json_array_size(v);
    tzr_name_part *parts = calloc(n ? n : 1, sizeof *parts);
    if (!parts) return TZR_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *p = json_array_get(v, i);
        if (json_is_string(p)) parts[i].str = json_string_value(p);
        else if (json_is_integer(p) && json_integer_value(p) >= 0) parts[i].idx = (uint64_t)json_integer_value(p);
        else {
            free(parts);
            return TZR_EFORMAT;
        }
    }
    int rc = tzr_name_build(parts, n, out, len);
    free(parts);
    return rc;
}

static int parse_u64(json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* 64 hex digits into 32 bytes; non-zero when malformed. */
/* 64 hex digits (libsodium's decoder: sscanf per byte was a fifth of a
 * 100k-tensor manifest's open). */
static int parse_sha(json_t *v, uint8_t out[32]) {
    const char *h = json_string_value(v);
    size_t got = 0;
    if (!h || json_string_length(v) != 64) return 1;
    return sodium_hex2bin(out, 32, h, 64, NULL, &got, NULL) != 0 || got != 32;
}

static int entry_from_json(json_t *o, size_t i, shard_table *tb, const char *path) {
    json_t *jn = json_object_get(o, "name"), *jd = json_object_get(o, "dtype"), *js = json_object_get(o, "shape");
    json_t *jsl = json_object_get(o, "slices"), *jr = json_object_get(o, "replicated");
    json_t *jsp = json_object_get(o, "split");
    json_t *jh = json_object_get(o, "sha256");
    char *name = NULL;
    size_t name_len;
    if (!jn || name_from_json(jn, &name, &name_len) || !json_is_string(jd) || !json_is_array(js) ||
        json_array_size(js) > TZR_MAX_DIMS || json_is_array(jsl) + json_is_array(jr) + json_is_integer(jsp) != 1) {
        free(name);
        return tzr_fail(TZR_EFORMAT, "%s: tensors[%zu]: want name, dtype, shape and one of slices/replicated/split",
                        path, i);
    }
    uint64_t shape[TZR_MAX_DIMS];
    uint32_t ndim = (uint32_t)json_array_size(js);
    for (uint32_t d = 0; d < ndim; d++)
        if (parse_u64(json_array_get(js, d), &shape[d])) {
            free(name);
            return tzr_fail(TZR_EFORMAT, "%s: tensors[%zu]: bad shape", path, i);
        }
    int dim = TZR_SHARD_REPLICATED;
    json_t *first = jsl ? json_array_get(jsl, 0) : NULL;
    if (jsl && (!first || !json_is_integer(json_object_get(first, "dim")))) {
        free(name);
        return tzr_fail(TZR_EFORMAT, "%s: tensors[%zu]: slices need a dim", path, i);
    }
    if (first) dim = (int)json_integer_value(json_object_get(first, "dim"));
    if (jsp) dim = json_integer_value(jsp) < 0 || json_integer_value(jsp) >= TZR_MAX_DIMS ? TZR_MAX_DIMS
                                                                                        : (int)json_integer_value(jsp);
    shard_entry *e = shard_table_add(tb, name, name_len, json_string_value(jd), json_string_length(jd), ndim, shape,
                                     dim);
    char nb[TZR_NAMEBUF];
    const char *nm = tzr_printable(name, name_len, nb, sizeof nb);
    free(name);
    if (!e) return TZR_ENOMEM;
    if (dim != TZR_SHARD_REPLICATED && (dim < 0 || (uint32_t)dim >= ndim))
        return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': split dim %d but %u dims", path, nm, dim, ndim);
    /* Digests of its own in the entry: slices of its own to hold them (an
     * empty object gives none, as in the scan). */
    json_t *own = json_object_get(o, "header_sha256");
    if (jsp && shard_entry_split(tb, e, !own || (json_is_object(own) && json_object_size(own) == 0))) return TZR_ENOMEM;
    json_t *arr = jsl ? jsl : jr;
    for (size_t k = 0; arr && k < json_array_size(arr); k++) {
        json_t *s = json_array_get(arr, k);
        uint64_t shard, off = 0, len = 0;
        int bad;
        if (jsl) {
            json_t *jdim = json_object_get(s, "dim");
            bad = parse_u64(json_object_get(s, "shard"), &shard) || parse_u64(json_object_get(s, "offset"), &off) ||
                  parse_u64(json_object_get(s, "length"), &len) || !json_is_integer(jdim) ||
                  json_integer_value(jdim) != dim;
        } else {
            bad = parse_u64(s, &shard);
        }
        if (bad || shard > TZR_SHARD_MAX)
            return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': slice %zu is malformed (all slices need shard, the same dim, offset, length)",
                            path, nm, k);
        if (shard_entry_add_slice(tb, e, (int)shard, off, len)) return TZR_ENOMEM;
    }
    if (jh) {
        if (parse_sha(jh, e->pub.sha256)) return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': bad sha256", path, nm);
        e->pub.has_sha256 = 1;
    }
    json_t *jhs = json_object_get(o, "header_sha256");
    if (jhs && !json_is_object(jhs))
        return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': header_sha256 must be an object", path, nm);
    for (size_t k = 0; jhs && k < e->nslices; k++) {
        shard_slice *s = &e->slices[k];
        char key[16];
        snprintf(key, sizeof key, "%d", s->shard);
        json_t *v = json_object_get(jhs, key);
        if (!v) continue;
        uint8_t sha[32];
        if (parse_sha(v, sha))
            return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': bad header_sha256 of shard %d", path, nm, s->shard);
        if (shard_slice_set_sha(&tb->arena, s, sha)) return TZR_ENOMEM;
    }
    return 0;
}

/* The whole JSON text at path, a local file or an http(s)/s3 URL: a
 * manifest goes wherever a checkpoint file does. Read into huge pages
 * (free with free()): a 41 MB manifest mapped from the page cache was
 * scanned at a third of the speed whenever the cache held it in 4 KiB
 * pages (a fault per page on the VMs we measured), and copying it into
 * fresh 4 KiB pages was a sixth of the open; its copy into 2 MiB pages
 * costs 4 ms. */
int shard_json_bytes(const char *path, const tzr_http_options *http, char **out, size_t *len) {
    *out = NULL;
    tzr_source *src = NULL;
    int rc = tzr_source_open_path(&src, path, 0, http);
    if (rc == TZR_ENOTFOUND && !tzr_is_url(path))
        return tzr_fail(TZR_EIO, "cannot open '%s': No such file or directory", path);
    if (rc) return rc;
    if (src->size > SHARD_JSON_MAX || src->size > SIZE_MAX / 2) {
        rc = tzr_fail(TZR_ELIMIT, "%s: %llu bytes is too large for a shard manifest (at most %llu)", path,
                      (unsigned long long)src->size, (unsigned long long)SHARD_JSON_MAX);
        goto out;
    }
    *len = (size_t)src->size;
    if (!(*out = tzr_alloc_big(*len ? *len : 1))) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    else rc = src->read_at(src, *out, *len, 0);
out:
    tzr_source_free(src);
    if (rc) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

int shard_json_read(const char *path, const tzr_http_options *http, shard_table *tb, int *sidecar_shard) {
    memset(tb, 0, sizeof *tb);
    json_t *root = NULL;
    char *text;
    size_t tlen = 0;
    int rc = shard_json_bytes(path, http, &text, &tlen);
    if (rc) return rc;
    /* The entries of the usual shape without a tree; else all by jansson. */
    rc = shard_manifest_scan(text, tlen, tb, &root);
    int fast = rc == 0;
    if (rc == SHARD_RETRY) {
        shard_table_free(tb);
        json_error_t jerr;
        root = json_loadb(text, tlen, JSON_ALLOW_NUL, &jerr);
        rc = root ? 0 : tzr_fail(TZR_EFORMAT, "%s: line %d: %s", path, jerr.line, jerr.text);
    }
    free(text);
    if (rc) {
        shard_table_free(tb);
        return rc;
    }
    const char *fmt = json_string_value(json_object_get(root, "format"));
    json_t *jv = json_object_get(root, "version"), *jn = json_object_get(root, "shard_count");
    json_t *jsh = json_object_get(root, "shards"), *jt = json_object_get(root, "tensors");
    int side = fmt && strcmp(fmt, SHARD_FORMAT "-part") == 0;
    if (!fmt || (!side && strcmp(fmt, SHARD_FORMAT) != 0) || !json_is_integer(jn) || !json_is_array(jsh) ||
        !json_is_array(jt)) {
        rc = tzr_fail(TZR_EFORMAT, "%s: not a tzr shard manifest (want format, shard_count, shards, tensors)", path);
        goto out;
    }
    if (!json_is_integer(jv) || json_integer_value(jv) < 1 || json_integer_value(jv) > SHARD_VERSION) {
        rc = tzr_fail(TZR_EVERSION, "%s: manifest version %lld is not supported (want 1 to %d)", path,
                      (long long)json_integer_value(jv), SHARD_VERSION);
        goto out;
    }
    json_int_t n = json_integer_value(jn);
    if (n < 1 || n > TZR_SHARD_MAX) {
        rc = tzr_fail(TZR_EFORMAT, "%s: shard_count %lld out of range", path, (long long)n);
        goto out;
    }
    tb->nshards = (int)n;
    tb->files = calloc((size_t)n, sizeof *tb->files);
    tb->sizes = calloc((size_t)n, sizeof *tb->sizes);
    if (!tb->files || !tb->sizes) {
        rc = tzr_fail(TZR_ENOMEM, "out of memory");
        goto out;
    }
    *sidecar_shard = -1;
    if (side) {
        json_t *js = json_object_get(root, "shard");
        if (!json_is_integer(js) || json_integer_value(js) < 0 || json_integer_value(js) >= n) {
            rc = tzr_fail(TZR_EFORMAT, "%s: bad shard number", path);
            goto out;
        }
        *sidecar_shard = (int)json_integer_value(js);
    }
    /* Version 2: the file of header digests, a section per shard. */
    json_t *jhf = json_object_get(root, "header_hashes");
    const char *hfile = json_string_value(jhf);
    if (jhf && (!hfile || !*hfile || strchr(hfile, '/'))) {
        rc = tzr_fail(TZR_EFORMAT, "%s: header_hashes must be a plain file name", path);
        goto out;
    }
    if (hfile && (!(tb->hashes_file = strdup(hfile)) || !(tb->hashes = calloc((size_t)n, sizeof *tb->hashes)))) {
        rc = tzr_fail(TZR_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t k = 0; k < json_array_size(jsh); k++) {
        json_t *s = json_array_get(jsh, k), *jhs = json_object_get(s, "header_hashes");
        uint64_t idx, size;
        const char *file = json_string_value(json_object_get(s, "file"));
        if (parse_u64(json_object_get(s, "index"), &idx) || idx >= (uint64_t)n ||
            parse_u64(json_object_get(s, "size"), &size) || !file || strchr(file, '/') || tb->files[idx]) {
            rc = tzr_fail(TZR_EFORMAT, "%s: shards[%zu]: want a unique index, a plain file name and a size", path, k);
            goto out;
        }
        if (jhs) {
            struct shard_hashes *h = tb->hashes ? &tb->hashes[idx] : NULL;
            if (!h || parse_u64(json_object_get(jhs, "offset"), &h->offset) ||
                parse_u64(json_object_get(jhs, "count"), &h->count) || h->count > (UINT64_MAX - h->offset) / 32 ||
                parse_sha(json_object_get(jhs, "sha256"), h->sha256)) {
                rc = tzr_fail(TZR_EFORMAT, "%s: shards[%zu]: header_hashes wants offset, count and sha256 (and the "
                              "manifest a header_hashes file)", path, k);
                goto out;
            }
            h->present = 1;
        }
        if (!(tb->files[idx] = strdup(file))) {
            rc = tzr_fail(TZR_ENOMEM, "out of memory");
            goto out;
        }
        tb->sizes[idx] = size;
    }
    for (size_t i = 0; !fast && i < json_array_size(jt) && !rc; i++)
        rc = entry_from_json(json_array_get(jt, i), i, tb, path);
    if (rc == TZR_ENOMEM) tzr_fail(rc, "out of memory");
out:
    json_decref(root);
    if (rc) shard_table_free(tb);
    return rc;
}

/* --------------------------------------------------------------- merging */
static int merge_part(shard_table *m, const shard_table *p, int k, const char *path) {
    for (size_t i = 0; i < p->n; i++) {
        const shard_entry *s = &p->t[i];
        char nb[TZR_NAMEBUF];
        const char *nm = tzr_printable(s->name, s->pub.name_len, nb, sizeof nb);
        size_t j;
        shard_entry *e;
        if (shard_table_find(m, s->name, s->pub.name_len, &j) == 0) {
            e = &m->t[j];
            if (e->pub.dtype_len != s->pub.dtype_len || memcmp(e->dtype, s->dtype, s->pub.dtype_len))
                return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': dtype differs from an earlier shard", path, nm);
            if (e->pub.ndim != s->pub.ndim || memcmp(e->shape, s->shape, s->pub.ndim * sizeof *s->shape))
                return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': global shape differs from an earlier shard", path, nm);
            if (e->pub.dim != s->pub.dim)
                return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': split dim %d but an earlier shard says %d", path, nm,
                                s->pub.dim, e->pub.dim);
            if (e->pub.has_sha256 && s->pub.has_sha256 && memcmp(e->pub.sha256, s->pub.sha256, 32))
                return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': sha256 differs from an earlier shard", path, nm);
        } else {
            e = shard_table_add(m, s->name, s->pub.name_len, s->dtype, s->pub.dtype_len, s->pub.ndim, s->shape,
                                s->pub.dim);
            if (!e) return TZR_ENOMEM;
        }
        if (s->pub.has_sha256 && !e->pub.has_sha256) {
            memcpy(e->pub.sha256, s->pub.sha256, 32);
            e->pub.has_sha256 = 1;
        }
        for (size_t q = 0; q < s->nslices; q++) {
            if (s->slices[q].shard != k)
                return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': sidecar of shard %d claims a slice of shard %d", path,
                                nm, k, s->slices[q].shard);
            if (shard_entry_add_slice(m, e, k, s->slices[q].offset, s->slices[q].length)) return TZR_ENOMEM;
            shard_slice *added = &e->slices[e->nslices - 1];
            if (s->slices[q].header_sha && shard_slice_set_sha(&m->arena, added, s->slices[q].header_sha))
                return TZR_ENOMEM;
        }
    }
    return 0;
}

static int manifest_path(char *buf, size_t cap, const char *prefix) {
    if ((size_t)snprintf(buf, cap, "%s%s", prefix, TZR_SHARD_MANIFEST_SUFFIX) >= cap)
        return tzr_fail(TZR_ELIMIT, "prefix '%s' is too long", prefix);
    return 0;
}

int tzr_shard_manifest_build(const char *prefix, int nshards) { return shard_manifest_write(prefix, nshards, 0); }

/* Version 2 keeps each slice's header digest out of the manifest (they
 * were 60% of it: a 100k-tensor set cut 32 ways wrote 394 MB for every
 * rank to read): PREFIX.tzr-hashes holds them, shard by shard, each shard's
 * in the order the manifest lists its slices, and the manifest each
 * section's place and SHA-256. A shard gets a section when every slice it
 * holds has a digest; the rest stay in the entries. Written before the
 * manifest, atomically as every output. */
static int hashes_write(shard_table *m, const char *prefix, unsigned flags, char *path, size_t cap) {
    int n = m->nshards, rc = 0;
    uint64_t *count = calloc((size_t)n, sizeof *count), total = 0;
    unsigned char *all = malloc((size_t)n);
    uint8_t *buf = NULL;
    if (!count || !all) {
        rc = tzr_fail(TZR_ENOMEM, "out of memory");
        goto out;
    }
    memset(all, 1, (size_t)n);
    for (size_t i = 0; i < m->n; i++)
        for (size_t q = 0; q < m->t[i].nslices; q++) {
            const shard_slice *sl = &m->t[i].slices[q];
            count[sl->shard]++;
            all[sl->shard] &= (unsigned char)(sl->header_sha != NULL);
        }
    if (!(m->hashes = calloc((size_t)n, sizeof *m->hashes))) {
        rc = tzr_fail(TZR_ENOMEM, "out of memory");
        goto out;
    }
    for (int k = 0; k < n; k++)
        if (all[k] && count[k]) {
            m->hashes[k] = (struct shard_hashes){total, count[k], {0}, 1, NULL};
            total += 32 * count[k];
        }
    if (!total) { /* nothing to put there: no file, digests (if any) in the entries */
        free(m->hashes);
        m->hashes = NULL;
        goto out;
    }
    if (!(buf = tzr_alloc_big((size_t)total))) {
        rc = tzr_fail(TZR_ENOMEM, "out of memory");
        goto out;
    }
    uint64_t *at = count; /* reused: each section's next digest */
    for (int k = 0; k < n; k++) at[k] = m->hashes[k].offset;
    for (size_t i = 0; i < m->n; i++)
        for (size_t q = 0; q < m->t[i].nslices; q++) {
            const shard_slice *sl = &m->t[i].slices[q];
            if (!m->hashes[sl->shard].present) continue;
            memcpy(buf + at[sl->shard], sl->header_sha, 32);
            at[sl->shard] += 32;
        }
    for (int k = 0; k < n; k++)
        if (m->hashes[k].present) tzr_sha256(buf + m->hashes[k].offset, 32 * m->hashes[k].count, m->hashes[k].sha256);
    const char *base = strrchr(prefix, '/');
    if ((size_t)snprintf(path, cap, "%s%s", prefix, SHARD_HASHES_SUFFIX) >= cap ||
        !(m->hashes_file = malloc(strlen(base ? base + 1 : prefix) + sizeof SHARD_HASHES_SUFFIX))) {
        rc = tzr_fail(TZR_ELIMIT, "prefix '%s' is too long", prefix);
        goto out;
    }
    sprintf(m->hashes_file, "%s%s", base ? base + 1 : prefix, SHARD_HASHES_SUFFIX);
    tzr_output *o;
    if (!(rc = tzr_output_open_file_flags(&o, path, flags))) {
        rc = o->pwrite_at(o, buf, (size_t)total, 0);
        if (!rc) rc = o->finish(o);
        o->destroy(o);
    }
out:
    if (rc) *path = 0; /* nothing published */
    free(count);
    free(all);
    free(buf);
    return rc;
}

int shard_manifest_write(const char *prefix, int nshards, unsigned flags) {
    char path[4096], dir[4096];
    int rc = manifest_path(path, sizeof path, prefix);
    if (rc) return rc;
    if (nshards < 1 || nshards > TZR_SHARD_MAX)
        return tzr_fail(TZR_EINVAL, "shard count %d out of range (1..%d)", nshards, TZR_SHARD_MAX);
    snprintf(dir, sizeof dir, "%s", prefix);
    char *slash = strrchr(dir, '/');
    if (slash) slash[1] = 0;
    else dir[0] = 0;
    shard_table m = {0};
    m.nshards = nshards;
    m.files = calloc((size_t)nshards, sizeof *m.files);
    m.sizes = calloc((size_t)nshards, sizeof *m.sizes);
    if (!m.files || !m.sizes) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    for (int k = 0; k < nshards && !rc; k++) {
        char side[4096];
        shard_table p;
        int which;
        if ((rc = tzr_shard_file_name(side, sizeof side, prefix, k, nshards, TZR_SHARD_PART_SUFFIX))) break;
        if ((rc = shard_json_read(side, NULL, &p, &which))) {
            tzr_fail_prefix(rc, "shard %d of %d: ", k, nshards);
            break;
        }
        if (which != k || p.nshards != nshards || !p.files[k])
            rc = tzr_fail(TZR_EFORMAT, "%s: sidecar is for shard %d of %d with file %s, want shard %d of %d", side,
                          which, p.nshards, p.files[which >= 0 && which < p.nshards ? which : 0] ? "set" : "missing",
                          k, nshards);
        if (!rc) {
            char full[8300];
            struct stat st;
            snprintf(full, sizeof full, "%s%s", dir, p.files[k]);
            if (stat(full, &st) != 0)
                rc = tzr_fail(TZR_EIO, "shard %d: cannot stat '%s'", k, full);
            else if ((uint64_t)st.st_size != p.sizes[k])
                rc = tzr_fail(TZR_EFORMAT, "shard %d: '%s' has %llu bytes but its sidecar says %llu", k, full,
                              (unsigned long long)st.st_size, (unsigned long long)p.sizes[k]);
        }
        if (!rc && !(m.files[k] = strdup(p.files[k]))) rc = tzr_fail(TZR_ENOMEM, "out of memory");
        if (!rc) {
            m.sizes[k] = p.sizes[k];
            rc = merge_part(&m, &p, k, side);
        }
        shard_table_free(&p);
    }
    if (!rc) rc = shard_table_validate(&m, path);
    char hpath[4096] = "";
    if (!rc) rc = hashes_write(&m, prefix, flags, hpath, sizeof hpath);
    if (!rc) rc = shard_json_write(&m, -1, path, flags);
    /* The manifest was not published: neither is the digests file (this
     * build put it there: with NOREPLACE nothing was there before, else
     * its finish had failed), so a failed build leaves nothing new. */
    if (rc && *hpath) unlink(hpath);
    for (int k = 0; k < nshards && !rc; k++) {
        char side[4096];
        if (!tzr_shard_file_name(side, sizeof side, prefix, k, nshards, TZR_SHARD_PART_SUFFIX)) unlink(side);
    }
    shard_table_free(&m);
    return rc;
}
