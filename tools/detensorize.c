/* detensorize: list, verify and export tensorizer .tensors checkpoints. */
#include <getopt.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cli.h"
#include "cli_output.h"
#include "tzr_http.h"
#include "tzr_load.h"
#include "tzr_safetensors.h"
#include "tzr_shard.h"

static const char usage[] =
    "Usage: detensorize FILE [FILE ...] [ACTION] [OPTIONS]\n"
    "FILE is a .tensors or safetensors file (told apart by their bytes), a shard\n"
    "manifest (PREFIX.tzr-index.json written by tensorize --shards), a Hugging\n"
    "Face directory or its model.safetensors.index.json, or per-rank files named\n"
    "by a pattern (vLLM's 'model-rank-%03d.tensors'); a path or an http(s):// or\n"
    "s3:// URL (a URL ending in / is a directory). Several FILEs (.safetensors or\n"
    ".tensors, each tensor in one of them) open as one set.\n"
    "\n"
    "Actions (default --list):\n"
    "  -l, --list              table of tensors (name, type, module, dtype, shape, bytes)\n"
    "      --json              with --list: a JSON array, one object per tensor (\"dtype\":\n"
    "                          the stored tensorizer string; \"dtype_name\": bf16, f32, ...)\n"
    "      --sha256            with --list: add data_sha256 (SHA-256 of the loaded bytes)\n"
    "  -V, --verify[=LEVEL]    check every tensor's hashes; one line per bad tensor;\n"
    "                          exit 0 only if all match. LEVEL full (default): CRC32\n"
    "                          and SHA-256, as tensorizer; crc32: CRC32 only, faster,\n"
    "                          catches damage, not a deliberate change (neither hash\n"
    "                          is keyed; encrypted tensors are checked by their MACs)\n"
    "  -o, --output OUT        export to OUT (.safetensors, with __metadata__ {\"format\": \"pt\"};\n"
    "                          .tensors: an uncompressed copy); every CRC32/SHA-256 is\n"
    "                          checked on the way, a mismatch fails and writes nothing\n"
    "      --no-verify         with -o: do not check the hashes (copy a damaged file)\n"
    "                          OUT is atomic, a symbolic link is written through, devices refused\n"
    "      --force             with -o: replace an existing OUT (refused without it)\n"
    "      --index-bytes N     with -o OUT.tensors: index reservation, 1 to 2^30 (default\n"
    "                          262144, as tensorizer; many tensors need more)\n"
    "\n"
    "Options:\n"
    "  -f, --filter GLOB       only tensors whose name matches (repeatable); a filter\n"
    "                          that matches no tensor fails (exit 1)\n"
    "      --key-file PATH     32-byte raw key for encrypted files\n"
    "      --password-file P   password (file contents less one trailing newline)\n"
    "      --ca-bundle PEM     trust these CAs for https:// and s3:// (default:\n"
    "                          $AWS_CA_BUNDLE, else the system's)\n"
    "      --timeout SECONDS   http(s)/s3: fail a connect or a silent server after\n"
    "                          SECONDS, retried (default 60, as the AWS CLI)\n"
    "      --threads N         pipeline threads, 1 to 64 (default: CPUs)\n"
    "      --chunk-mib N       read size in MiB, 1 to 4096 (default 8; 16 from http(s)/s3)\n"
    "      --ring-mib N        staging memory budget in MiB, 1 to 65536 (default 256)\n"
    "      --split-dim RULES   with a rank pattern: how its files were cut,\n"
    "                          \"glob=DIM,glob=replicate,...\" (default: as vLLM cuts\n"
    "                          tensor-parallel layers, TZR_SHARD_RULES_VLLM)\n"
    "  -q, --quiet             no progress bar\n"
    "  -h, --help              this help;  --version  library version\n"
    "\n"
    "Exit status: 0 success, 1 failure (bad data, I/O, verification), 2 usage,\n"
    "128+N stopped by signal N during -o (SIGINT 130, SIGHUP 129, SIGTERM 143: the\n"
    "temporary file is removed and the message says what was kept).\n";

typedef struct opts {
    const char *file, *output;
    const char *const *files; /* several inputs: one set (tzr_shard_open_files) */
    int nfiles;
    int list, json, sha, verify, quiet, no_verify, force;
    uint64_t index_bytes; /* -o X.tensors: index reservation (0: tensorizer's) */
    int verify_level;  /* --verify=LEVEL: TZR_VERIFY_* */
    const char **filters;
    int nfilters;
    const char *rank_rules;
    cli_crypt crypt;
    int threads;
    size_t chunk, ring;
} opts;

/* Display form of stored name bytes: plain text, or the JSON array of a
 * structured (0x1E-prefixed) one. Used for tensors and shard manifests. */
static const char *shown(const char *name, size_t len) {
    return len && (unsigned char)name[0] == 0x1E ? name + 1 : name;
}
static const char *shown_name(const tzr_tensor_info *t) { return shown(t->name, t->name_len); }

static int matches(const opts *o, const char *name) {
    if (o->nfilters == 0) return 1;
    for (int k = 0; k < o->nfilters; k++)
        if (cli_match(o->filters[k], name)) return 1;
    return 0;
}

static int selected(const opts *o, const tzr_tensor_info *t) { return matches(o, shown_name(t)); }

/* -f that selects nothing is a mistake (a typo, the wrong file): fail, as an
 * empty output would pass for a successful one. Returns 1 when printed. */
static int no_match(const opts *o, size_t hits) {
    if (o->nfilters == 0 || hits) return 0;
    char buf[2048];
    size_t n = 0;
    for (int k = 0; k < o->nfilters && n < sizeof buf; k++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s'%s'", k ? " or " : "", o->filters[k]);
    cli_error("%s: no tensor matches %s", o->file, buf);
    return 1;
}

static int filter_cb(void *ctx, size_t index, const tzr_tensor_info *t) {
    (void)index;
    return selected(ctx, t);
}

static const char *type_name(tzr_tensor_type t) {
    return t == TZR_PARAM ? "param" : t == TZR_BUFFER ? "buffer" : "state_dict";
}

static const char *dtype_shown(tzr_dtype d, const char *raw) {
    return d != TZR_DTYPE_UNKNOWN ? tzr_dtype_name(d) : raw;
}

static void shape_text(const uint64_t *shape, uint32_t ndim, char *buf, size_t cap) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (uint32_t d = 0; d < ndim && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%llu", d ? ", " : "", (unsigned long long)shape[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* JSON for a name: a string, or the array a structured name holds. */
static json_t *name_json(const char *name, size_t len) {
    json_t *v = len && (unsigned char)name[0] == 0x1E ? json_loadb(name + 1, len - 1, 0, NULL) : json_stringn(name, len);
    return v ? v : json_null();
}

/* "dtype_name": libtzr's short name ("bf16", "f32", "f8_e4m3fn"), null for
 * a dtype string this library does not know; "dtype" keeps the raw string. */
static json_t *dtype_name_json(tzr_dtype d) {
    return d != TZR_DTYPE_UNKNOWN ? json_string(tzr_dtype_name(d)) : json_null();
}

static json_t *shape_json(const uint64_t *shape, uint32_t ndim) {
    json_t *a = json_array();
    for (uint32_t d = 0; d < ndim; d++) json_array_append_new(a, json_integer((json_int_t)shape[d]));
    return a;
}

static void print_json(json_t *arr) {
    json_dumpf(arr, stdout, JSON_INDENT(1) | JSON_ENSURE_ASCII);
    fputc('\n', stdout);
    json_decref(arr);
}

/* ---- progress ------------------------------------------------------- */
static void on_progress(void *ctx, uint64_t done, uint64_t total) {
    (void)total;
    cli_progress_update(ctx, done);
}

static void load_options(const opts *o, tzr_load_options *lo, cli_progress *pr) {
    lo->threads = o->threads;
    lo->chunk_bytes = o->chunk;
    lo->ring_bytes = o->ring;
    if (!o->quiet) {
        lo->progress = on_progress;
        lo->progress_ctx = pr;
    }
}

/* One load of the selected tensors (-f) into sink behind a progress bar
 * named label; verify forces checking (which also delivers each tensor's
 * pieces in order), else the reader's verify setting holds. */
static int load_selected(const opts *o, tzr_reader *r, tzr_sink *sink, const char *label, int verify, int cancelable,
                         tzr_load_stats *st) {
    tzr_load_options lo = TZR_LOAD_OPTIONS_INIT;
    cli_progress pr;
    cli_progress_begin(&pr, label, 0);
    load_options(o, &lo, &pr);
    if (verify) lo.verify = 1; /* else the reader's own setting */
    lo.filter = filter_cb;
    lo.filter_ctx = (void *)o;
    if (cancelable) lo.cancel = &cli_stop_signal;
    int rc = tzr_load(r, sink, &lo, st);
    cli_progress_end(&pr);
    return rc;
}

/* ---- a sink that hashes each tensor's bytes (in order: verify is on) -- */
typedef struct sha_sink {
    tzr_sink base;
    EVP_MD_CTX **ctx;
    uint64_t *next;
    char (*hex)[65];
    size_t n;
} sha_sink;

static int sha_begin(tzr_sink *s, size_t i, const tzr_tensor_info *t) {
    (void)t;
    sha_sink *h = (sha_sink *)s;
    h->ctx[i] = EVP_MD_CTX_new();
    if (!h->ctx[i] || EVP_DigestInit_ex(h->ctx[i], EVP_sha256(), NULL) != 1)
        return tzr_set_error(TZR_ENOMEM, "cannot create a SHA-256 context");
    return 0;
}

static int sha_submit(tzr_sink *s, int slot, size_t i, uint64_t off, const void *src, size_t len) {
    (void)slot;
    sha_sink *h = (sha_sink *)s;
    if (off != h->next[i]) return tzr_set_error(TZR_EINVAL, "tensor %zu: bytes out of order", i);
    EVP_DigestUpdate(h->ctx[i], src, len);
    h->next[i] += len;
    return 0;
}

static int sha_end(tzr_sink *s, size_t i, const tzr_tensor_info *t) {
    (void)t;
    sha_sink *h = (sha_sink *)s;
    unsigned char d[32];
    unsigned int n = 32;
    EVP_DigestFinal_ex(h->ctx[i], d, &n);
    EVP_MD_CTX_free(h->ctx[i]);
    h->ctx[i] = NULL;
    for (int k = 0; k < 32; k++) sprintf(h->hex[i] + 2 * k, "%02x", d[k]);
    return 0;
}

/* Safetensors: the pipeline's in-order delivery comes with verification,
 * which such a file cannot have; read tensor by tensor instead. */
static int safetensors_sha(const opts *o, tzr_reader *r, char (*hex)[65]) {
    int rc = 0;
    for (size_t i = 0; i < tzr_reader_count(r) && !rc; i++) {
        const tzr_tensor_info *t = tzr_reader_tensor(r, i);
        if (!selected(o, t)) continue;
        unsigned char *buf = malloc(t->nbytes ? (size_t)t->nbytes : 1), d[32];
        if (!buf) return tzr_set_error(TZR_ENOMEM, "out of memory");
        rc = tzr_reader_read(r, i, buf, (size_t)t->nbytes);
        if (!rc) {
            SHA256(buf, (size_t)t->nbytes, d);
            for (int k = 0; k < 32; k++) sprintf(hex[i] + 2 * k, "%02x", d[k]);
        }
        free(buf);
    }
    return rc;
}

static int compute_sha(const opts *o, tzr_reader *r, char (*hex)[65]) {
    if (tzr_reader_format(r) == TZR_FORMAT_SAFETENSORS) return safetensors_sha(o, r, hex);
    size_t n = tzr_reader_count(r);
    sha_sink h = {0};
    h.ctx = calloc(n + 1, sizeof *h.ctx);
    h.next = calloc(n + 1, sizeof *h.next);
    h.hex = hex;
    h.n = n;
    h.base.begin_tensor = sha_begin;
    h.base.submit = sha_submit;
    h.base.end_tensor = sha_end;
    h.base.name = "sha256";
    int rc = load_selected(o, r, &h.base, "sha256", 1, 0, NULL);
    for (size_t i = 0; i < n; i++) EVP_MD_CTX_free(h.ctx[i]);
    free(h.ctx);
    free(h.next);
    return rc;
}

/* ---- --list ------------------------------------------------------------ */
static int list_table(const opts *o, tzr_reader *r, char (*hex)[65]) {
    size_t n = tzr_reader_count(r);
    uint64_t total = 0;
    size_t shown = 0;
    for (size_t i = 0; i < n; i++) {
        const tzr_tensor_info *t = tzr_reader_tensor(r, i);
        if (selected(o, t)) {
            total += t->nbytes;
            shown++;
        }
    }
    char sz[32];
    char kind[32];
    if (tzr_reader_format(r) == TZR_FORMAT_SAFETENSORS) snprintf(kind, sizeof kind, "safetensors");
    else snprintf(kind, sizeof kind, "data version %u", tzr_reader_data_version(r));
    printf("%s: %s, %zu tensors%s, %s%s\n", o->file, kind, n, tzr_reader_encrypted(r) ? ", encrypted" : "",
           cli_size(total, sz, sizeof sz), shown != n ? " selected" : "");
    int z = tzr_reader_compressed(r); /* compressed files: stored size and codec too */
    printf("%6s  %-40s %-10s %6s %-16s %-20s %12s%s%s\n", "#", "name", "type", "module", "dtype", "shape", "bytes",
           z ? "       stored codec" : "", hex ? "  sha256" : "");
    for (size_t i = 0; i < n; i++) {
        const tzr_tensor_info *t = tzr_reader_tensor(r, i);
        if (!selected(o, t)) continue;
        char shape[256];
        shape_text(t->shape, t->ndim, shape, sizeof shape);
        const char *dt = dtype_shown(t->dtype, t->dtype_str);
        char zcol[40] = "";
        const char *codec = tzr_compression_name(t->compression);
        if (z) snprintf(zcol, sizeof zcol, " %12llu %-5s", (unsigned long long)t->stored_length, codec ? codec : "?");
        char nb[4096];
        printf("%6zu  %-40s %-10s %6d %-16s %-20s %12llu%s%s%s%s\n", i, cli_printable(shown_name(t), nb, sizeof nb),
               type_name(t->type),
               t->module_idx, dt, shape, (unsigned long long)t->nbytes, zcol, t->meta ? " (meta)" : "", hex ? "  " : "",
               hex ? hex[i] : "");
    }
    return EXIT_OK;
}

static int list_json(const opts *o, tzr_reader *r, char (*hex)[65]) {
    json_t *arr = json_array();
    for (size_t i = 0; i < tzr_reader_count(r); i++) {
        const tzr_tensor_info *t = tzr_reader_tensor(r, i);
        if (!selected(o, t)) continue;
        json_t *obj = json_object();
        json_object_set_new(obj, "name", name_json(t->name, t->name_len));
        json_object_set_new(obj, "type", json_string(type_name(t->type)));
        json_object_set_new(obj, "module_idx", json_integer(t->module_idx));
        json_object_set_new(obj, "dtype", json_stringn(t->dtype_str, t->dtype_len));
        json_object_set_new(obj, "dtype_name", dtype_name_json(t->dtype));
        json_object_set_new(obj, "shape", shape_json(t->shape, t->ndim));
        json_object_set_new(obj, "data_length", json_integer((json_int_t)t->data_length));
        json_object_set_new(obj, "stored_length", json_integer((json_int_t)t->stored_length));
        const char *codec = tzr_compression_name(t->compression);
        json_object_set_new(obj, "compression", json_string(codec ? codec : "unknown"));
        json_object_set_new(obj, "meta", json_boolean(t->meta));
        if (hex) json_object_set_new(obj, "data_sha256", json_string(hex[i]));
        json_array_append_new(arr, obj);
    }
    print_json(arr);
    return EXIT_OK;
}

/* ---- --verify: report every bad tensor in one pass over the file ----- */
typedef struct verify_state {
    const opts *o;
    unsigned char *done; /* 1 verified, 2 bad */
    size_t bad;
} verify_state;

static int verify_filter(void *ctx, size_t i, const tzr_tensor_info *t) {
    (void)i;
    return selected(((verify_state *)ctx)->o, t);
}

static int verify_done(void *ctx, size_t i, const tzr_tensor_info *t) {
    (void)t;
    ((verify_state *)ctx)->done[i] = 1;
    return 0;
}

static int verify_bad(void *ctx, size_t i, const tzr_tensor_info *t, int code, const char *message) {
    verify_state *v = ctx;
    (void)code;
    char nb[4096];
    printf("BAD %s: %s\n", cli_printable(shown_name(t), nb, sizeof nb), message);
    v->done[i] = 2;
    v->bad++;
    return 0;
}

/* A safetensors file stores no hashes: every selected tensor is read
 * (which proves the bytes are there and readable), and the answer says
 * plainly that nothing could be verified (exit 1). */
static int safetensors_verify(const opts *o, tzr_reader *r) {
    tzr_sink *null;
    int rc = tzr_sink_null_new(&null);
    if (rc) return cli_lib_error(rc);
    tzr_load_stats st = {0};
    rc = load_selected(o, r, null, "read", 0, 0, &st);
    tzr_sink_free(null);
    if (rc) return cli_lib_error(rc);
    char sz[32];
    cli_error("%s: a safetensors file stores no hashes, so nothing was verified; all %zu selected tensors (%s) "
              "were read without error", o->file, (size_t)st.tensors, cli_size(st.bytes, sz, sizeof sz));
    return EXIT_FAIL;
}

static int do_verify(const opts *o, tzr_reader *r) {
    if (tzr_reader_format(r) == TZR_FORMAT_SAFETENSORS) return safetensors_verify(o, r);
    size_t n = tzr_reader_count(r), checked = 0;
    verify_state v = {o, calloc(n + 1, 1), 0};
    tzr_sink *null;
    int rc = tzr_sink_null_new(&null);
    if (rc) return cli_lib_error(rc);
    cli_progress pr;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        if (selected(o, tzr_reader_tensor(r, i))) total += tzr_reader_tensor(r, i)->uncompressed_length;
    cli_progress_begin(&pr, "verify", total);
    double t0 = cli_now();
    tzr_load_options lo = TZR_LOAD_OPTIONS_INIT;
    load_options(o, &lo, &pr);
    lo.verify = 1;
    lo.verify_level = o->verify_level;
    lo.filter = verify_filter;
    lo.filter_ctx = &v;
    lo.on_tensor = verify_done;
    lo.on_tensor_ctx = &v;
    lo.on_tensor_error = verify_bad;
    lo.on_tensor_error_ctx = &v;
    rc = tzr_load(r, null, &lo, NULL);
    size_t bad = v.bad, wanted = 0;
    for (size_t i = 0; i < n; i++) {
        checked += v.done[i] != 0;
        wanted += selected(o, tzr_reader_tensor(r, i));
    }
    if (rc && checked < wanted) { /* not only tensors' failures (I/O, wrong key, ...): stop with it */
        cli_progress_end(&pr);
        free(v.done);
        tzr_sink_free(null);
        return cli_lib_error(rc);
    }
    cli_progress_end(&pr);
    double secs = cli_now() - t0;
    char sz[32];
    fprintf(stderr, "%s: %zu tensors checked, %zu bad, %s in %.2f s (%.2f GB/s)\n", o->file, checked, bad,
            cli_size(total, sz, sizeof sz), secs, secs > 0 ? (double)total / secs / 1e9 : 0);
    if (!bad)
        printf("OK %s: all %zu tensors match their %s\n", o->file, checked,
               o->verify_level == TZR_VERIFY_CRC32 ? "CRC32 (SHA-256 not checked)" : "hashes");
    free(v.done);
    tzr_sink_free(null);
    return bad ? EXIT_FAIL : EXIT_OK;
}

/* ---- -o OUT.safetensors -------------------------------------------------- */
/* tensorizer files keep no safetensors metadata; transformers' from_pretrained
 * wants "format" (and "pt" is what torch checkpoints carry). */
static const char *const st_meta_keys[] = {"format"};
static const char *const st_meta_values[] = {"pt"};

typedef struct st_sink {
    tzr_sink base;
    tzr_st_writer *w;
    size_t *slot_of; /* reader index -> declared index */
    pthread_mutex_t lock;
} st_sink;

static int st_submit(tzr_sink *s, int slot, size_t i, uint64_t off, const void *src, size_t len) {
    (void)slot;
    st_sink *e = (st_sink *)s;
    pthread_mutex_lock(&e->lock);
    int rc = tzr_st_writer_put(e->w, e->slot_of[i], off, src, len);
    pthread_mutex_unlock(&e->lock);
    return rc;
}

/* After the load into e: commit the file, or abort it on a failure or a
 * signal; prints the outcome. */
static int st_finish(const opts *o, st_sink *e, int rc, size_t m, double seconds) {
    if (rc || cli_stop_signal) {
        if (rc && !cli_stop_signal) cli_lib_error(rc);
        tzr_st_writer_abort(e->w);
        return rc ? rc : TZR_ECANCELED;
    }
    rc = tzr_st_writer_close(e->w);
    if (rc && !cli_stop_signal) cli_lib_error(rc);
    else if (!rc && !o->quiet)
        fprintf(stderr, "%s: wrote %zu tensors to %s in %.2f s\n", o->file, m, o->output, seconds);
    return rc;
}

/* Structured names become dot-joined paths ("model.layers.0.w"). */
static char *export_name(const tzr_tensor_info *t) {
    if (!t->structured) return strdup(t->name);
    json_t *arr = json_loadb(t->name + 1, t->name_len - 1, 0, NULL);
    size_t cap = t->name_len + 16, len = 0;
    char *out = calloc(1, cap);
    for (size_t k = 0; arr && k < json_array_size(arr); k++) {
        json_t *v = json_array_get(arr, k);
        char part[64];
        const char *p = json_is_string(v) ? json_string_value(v) : part;
        if (!json_is_string(v)) snprintf(part, sizeof part, "%lld", (long long)json_integer_value(v));
        len += (size_t)snprintf(out + len, cap - len, "%s%s", k ? "." : "", p);
    }
    json_decref(arr);
    return out;
}

/* -o OUT: a local file (written beside it, renamed into place) or an
 * s3:// object (a multipart upload, completed at the end or aborted). */
static int open_output(tzr_output **out, const char *path, int force) {
    if (cli_is_s3(path)) return tzr_output_open_s3(out, path, cli_http(), 0);
    return tzr_output_open_file_flags(out, path, force ? 0 : TZR_OUTPUT_NOREPLACE);
}

/* -o OUT.tensors: a plain (uncompressed, unencrypted) copy tensorizer reads. */
static int export_tensors(const opts *o, tzr_reader *r) {
    tzr_writer *w;
    tzr_writer_options wo = TZR_WRITER_OPTIONS_INIT;
    wo.metadata_size = o->index_bytes; /* an override: tzr_writer_reserve then keeps it */
    wo.no_replace = !o->force; /* a file another run created meanwhile is not replaced either */
    wo.http = cli_http();
    int rc = tzr_writer_open(&w, o->output, &wo);
    uint64_t n = 0, names = 0, dtypes = 0, dims = 0, bytes = 0; /* the index sized for every tensor copied */
    for (size_t i = 0; !rc && i < tzr_reader_count(r); i++) {
        const tzr_tensor_info *t = tzr_reader_tensor(r, i);
        if (!selected(o, t)) continue;
        n++, names += t->name_len, dtypes += t->dtype_len, dims += t->ndim, bytes += t->nbytes;
    }
    if (!rc) rc = tzr_writer_reserve(w, n, names, dtypes, dims, bytes);
    for (size_t i = 0; !rc && i < tzr_reader_count(r); i++) {
        const tzr_tensor_info *t = tzr_reader_tensor(r, i);
        if (!selected(o, t)) continue;
        if (cli_stop_signal) rc = TZR_ECANCELED;
        if (rc) break;
        uint8_t *buf = malloc(t->nbytes ? (size_t)t->nbytes : 1);
        if (!buf) rc = tzr_set_error(TZR_ENOMEM, "out of memory");
        if (!rc) rc = tzr_reader_read(r, i, buf, (size_t)t->nbytes); /* also fills module_idx */
        tzr_tensor_desc d = {t->name, t->name_len, t->type, (uint16_t)t->module_idx, t->dtype_str, t->dtype_len,
                             t->dtype, t->ndim, t->shape, t->meta, sizeof(tzr_tensor_desc)};
        if (!rc) rc = tzr_writer_add(w, &d, buf);
        free(buf);
    }
    if (w && rc) tzr_writer_abort(w);
    else if (w) rc = tzr_writer_close(w);
    if (cli_stop_signal) return cli_output_stopped(!rc);
    return rc ? cli_lib_error(rc) : EXIT_OK;
}

static int do_export(const opts *o, tzr_reader *r) {
    size_t olen = strlen(o->output);
    if (olen >= 8 && strcmp(o->output + olen - 8, ".tensors") == 0) return export_tensors(o, r);
    size_t n = tzr_reader_count(r), m = 0;
    tzr_st_tensor *decl = calloc(n + 1, sizeof *decl);
    char **names = calloc(n + 1, sizeof *names);
    st_sink e = {0};
    e.slot_of = calloc(n + 1, sizeof *e.slot_of);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const tzr_tensor_info *t = tzr_reader_tensor(r, i);
        if (!selected(o, t)) continue;
        if (!tzr_st_dtype_name(t->dtype)) {
            char nb[4096];
            cli_error("%s: tensor '%s': dtype %s has no safetensors equivalent", o->file,
                      cli_printable(shown_name(t), nb, sizeof nb),
                      dtype_shown(t->dtype, t->dtype_str));
            rc = TZR_ENOTSUP;
            break;
        }
        names[m] = export_name(t);
        decl[m].name = names[m];
        decl[m].name_len = strlen(names[m]);
        decl[m].dtype = t->dtype;
        decl[m].ndim = t->ndim;
        decl[m].shape = t->shape;
        decl[m].nbytes = t->nbytes;
        e.slot_of[i] = m++;
    }
    tzr_output *out = NULL;
    if (!rc) rc = open_output(&out, o->output, o->force);
    if (!rc) rc = tzr_st_writer_open(&e.w, out, decl, m, st_meta_keys, st_meta_values, 1);
    if (rc && rc != TZR_ENOTSUP && !cli_stop_signal) cli_lib_error(rc);
    if (!rc) {
        pthread_mutex_init(&e.lock, NULL);
        e.base.submit = st_submit;
        e.base.name = "safetensors";
        tzr_load_stats st;
        rc = load_selected(o, r, &e.base, "export", 0, 1, &st);
        rc = st_finish(o, &e, rc, m, st.seconds);
        pthread_mutex_destroy(&e.lock);
    }
    for (size_t k = 0; k < m; k++) free(names[k]);
    free(names);
    free(decl);
    free(e.slot_of);
    if (cli_stop_signal) return cli_output_stopped(!rc);
    return rc ? EXIT_FAIL : EXIT_OK;
}

/* ---- shard manifests ---------------------------------------------------- */
/* A %d or %0Nd field, as the library reads it: per-rank files (vLLM's
 * model-rank-%03d.tensors). */
static int rank_pattern(const char *path) {
    char first[8300];
    return tzr_shard_rank_path(first, sizeof first, path, 0) == 0;
}

/* A set of files: a tzr manifest, a Hugging Face index, a directory, or
 * a rank pattern. */
static int is_manifest(const char *path) {
    return cli_ends_with(path, TZR_SHARD_MANIFEST_SUFFIX) || cli_ends_with(path, ".index.json") ||
           rank_pattern(path) || cli_is_directory(path);
}

static const char *shard_shown(const tzr_shard_tensor *t) { return shown(t->name, t->name_len); }

static int shard_list(const opts *o, tzr_shard_set *set) {
    size_t n = tzr_shard_count(set);
    if (o->json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++) {
            const tzr_shard_tensor *t = tzr_shard_tensor_at(set, i);
            if (!matches(o, shard_shown(t))) continue;
            json_t *obj = json_object();
            json_object_set_new(obj, "name", name_json(t->name, t->name_len));
            json_object_set_new(obj, "dtype", json_stringn(t->dtype_str, t->dtype_len));
            json_object_set_new(obj, "dtype_name", dtype_name_json(t->dtype));
            json_object_set_new(obj, "shape", shape_json(t->shape, t->ndim));
            json_object_set_new(obj, "nbytes", json_integer((json_int_t)t->nbytes));
            json_object_set_new(obj, "split_dim", t->dim == TZR_SHARD_REPLICATED ? json_null() : json_integer(t->dim));
            json_array_append_new(arr, obj);
        }
        print_json(arr);
        return EXIT_OK;
    }
    printf("%s: %d shards, %zu tensors\n", o->file, tzr_shard_nshards(set), n);
    printf("%6s  %-40s %-16s %-20s %12s  %s\n", "#", "name", "dtype", "shape", "bytes", "split");
    for (size_t i = 0; i < n; i++) {
        const tzr_shard_tensor *t = tzr_shard_tensor_at(set, i);
        if (!matches(o, shard_shown(t))) continue;
        char shape[256];
        shape_text(t->shape, t->ndim, shape, sizeof shape);
        char split[32];
        if (t->dim == TZR_SHARD_REPLICATED) snprintf(split, sizeof split, "replicated");
        else snprintf(split, sizeof split, "dim %d", t->dim);
        const char *dt = dtype_shown(t->dtype, t->dtype_str);
        char nb[4096];
        printf("%6zu  %-40s %-16s %-20s %12llu  %s\n", i, cli_printable(shard_shown(t), nb, sizeof nb), dt, shape,
               (unsigned long long)t->nbytes,
               split);
    }
    return EXIT_OK;
}

static int do_verify(const opts *o, tzr_reader *r);

/* Every shard's headers against the manifest's header_sha256 (a swapped
 * shard has good hashes of its own), then its hashes (each shard is a
 * plain .tensors file); tiling, shard sizes and slice shapes were checked
 * when the manifest was opened. */
static int shard_verify(const opts *o, tzr_shard_set *set) {
    int status = EXIT_OK;
    for (int k = 0; k < tzr_shard_nshards(set); k++) {
        opts one = *o;
        char name[4096];
        snprintf(name, sizeof name, "%s (shard %d)", o->file, k);
        one.file = name;
        one.nfilters = 0;
        if (tzr_shard_check_headers(set, k)) { /* is it the file the manifest lists? */
            cli_lib_error(tzr_last_error_code());
            status = EXIT_FAIL;
        } else if (do_verify(&one, tzr_shard_reader(set, k)) != EXIT_OK)
            status = EXIT_FAIL;
    }
    return status;
}

/* Reassemble whole tensors (one rank of one) and write them out. */
static int shard_filter_cb(void *ctx, size_t i, const tzr_tensor_info *t) {
    (void)i;
    return matches(ctx, shown(t->name, t->name_len));
}

/* Streams every tensor through the pipeline into the safetensors writer:
 * memory stays within the ring budget, not the model's size. */
static int shard_export(const opts *o, tzr_shard_set *set) {
    size_t n = tzr_shard_count(set), m = 0;
    tzr_st_tensor *decl = calloc(n + 1, sizeof *decl);
    st_sink e = {0};
    e.slot_of = calloc(n + 1, sizeof *e.slot_of);
    int rc = 0;
    uint64_t total = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const tzr_shard_tensor *t = tzr_shard_tensor_at(set, i);
        if (!matches(o, shard_shown(t))) continue;
        if (!tzr_st_dtype_name(t->dtype)) {
            char nb[4096];
            cli_error("%s: tensor '%s' has no safetensors dtype", o->file, cli_printable(shard_shown(t), nb, sizeof nb));
            rc = TZR_ENOTSUP;
            break;
        }
        decl[m].name = t->name;
        decl[m].name_len = t->name_len;
        decl[m].dtype = t->dtype;
        decl[m].ndim = t->ndim;
        decl[m].shape = t->shape;
        decl[m].nbytes = t->nbytes;
        total += t->nbytes;
        e.slot_of[i] = m++;
    }
    tzr_output *out = NULL;
    if (!rc) rc = open_output(&out, o->output, o->force);
    if (!rc) rc = tzr_st_writer_open(&e.w, out, decl, m, st_meta_keys, st_meta_values, 1);
    if (rc && rc != TZR_ENOTSUP && !cli_stop_signal) cli_lib_error(rc);
    if (!rc) {
        pthread_mutex_init(&e.lock, NULL);
        e.base.submit = st_submit;
        e.base.name = "safetensors";
        tzr_load_options lo = TZR_LOAD_OPTIONS_INIT;
        cli_progress pr;
        cli_progress_begin(&pr, "export", total);
        load_options(o, &lo, &pr);
        lo.filter = shard_filter_cb;
        lo.filter_ctx = (void *)o;
        tzr_load_stats st;
        lo.cancel = &cli_stop_signal;
        rc = tzr_shard_load_rank_into(set, 0, 1, NULL, &e.base, &lo, &st);
        cli_progress_end(&pr);
        rc = st_finish(o, &e, rc, m, st.seconds);
        pthread_mutex_destroy(&e.lock);
    }
    free(decl);
    free(e.slot_of);
    if (cli_stop_signal) return cli_output_stopped(!rc);
    return rc ? EXIT_FAIL : EXIT_OK;
}

static int shard_main(const opts *o) {
    tzr_shard_open_options so = TZR_SHARD_OPEN_OPTIONS_INIT;
    so.verify = !o->no_verify;
    so.rank_rules = o->rank_rules; /* NULL: vLLM's */
    so.http = cli_http();
    cli_crypt_apply(&o->crypt, &so.crypt); /* encrypted shard files */
    tzr_shard_set *set;
    int rc = o->nfiles > 1 ? tzr_shard_open_files(&set, o->files, (size_t)o->nfiles, &so)
                           : tzr_shard_open(&set, o->file, &so);
    if (rc) return o->output && cli_stop_signal ? cli_output_stopped(0) : cli_lib_error(rc);
    size_t hits = 0;
    for (size_t i = 0; i < tzr_shard_count(set); i++) hits += matches(o, shard_shown(tzr_shard_tensor_at(set, i)));
    if (no_match(o, hits)) {
        tzr_shard_close(set);
        return EXIT_FAIL;
    }
    int status;
    if (o->sha) {
        cli_error("--sha256 is not available for shard manifests");
        status = EXIT_USAGE;
    } else if (o->verify) {
        status = shard_verify(o, set);
    } else if (o->output) {
        status = shard_export(o, set);
    } else {
        status = shard_list(o, set);
    }
    tzr_shard_close(set);
    return status;
}

static int run(opts *o, int argc, char **argv);

int main(int argc, char **argv) {
    cli_prog = "detensorize";
    cli_index_option = "--index-bytes";
    opts o = {0};
    o.filters = calloc((size_t)argc + 1, sizeof *o.filters);
    if (!o.filters) return EXIT_FAIL;
    int status = run(&o, argc, argv);
    cli_crypt_clear(&o.crypt);
    free(o.filters);
    return status;
}

/* Everything main does; main frees what o holds on every path. */
static int run(opts *o, int argc, char **argv) {
    enum { O_JSON = 256, O_SHA, O_KEY, O_PW, O_THREADS, O_CHUNK, O_RING, O_VERSION, O_CA, O_NO_VERIFY, O_TIMEOUT, O_FORCE,
           O_RULES, O_INDEX };
    static const struct option longs[] = {
        {"list", no_argument, 0, 'l'},          {"json", no_argument, 0, O_JSON},
        {"sha256", no_argument, 0, O_SHA},      {"verify", optional_argument, 0, 'V'},
        {"output", required_argument, 0, 'o'},  {"filter", required_argument, 0, 'f'},
        {"key-file", required_argument, 0, O_KEY}, {"password-file", required_argument, 0, O_PW},
        {"threads", required_argument, 0, O_THREADS}, {"chunk-mib", required_argument, 0, O_CHUNK},
        {"ring-mib", required_argument, 0, O_RING}, {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'},          {"version", no_argument, 0, O_VERSION},
        {"ca-bundle", required_argument, 0, O_CA}, {"no-verify", no_argument, 0, O_NO_VERIFY},
        {"timeout", required_argument, 0, O_TIMEOUT}, {"force", no_argument, 0, O_FORCE},
        {"split-dim", required_argument, 0, O_RULES}, {"index-bytes", required_argument, 0, O_INDEX},
        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "lVo:f:qh", longs, NULL)) != -1) {
        switch (c) {
        case 'l': o->list = 1; break;
        case O_JSON: o->json = 1; break;
        case O_SHA: o->sha = 1; break;
        case 'V':
            o->verify = 1;
            if (!optarg || strcmp(optarg, "full") == 0) o->verify_level = TZR_VERIFY_FULL;
            else if (strcmp(optarg, "crc32") == 0) o->verify_level = TZR_VERIFY_CRC32;
            else {
                cli_error("--verify=%s: the level is full or crc32", optarg);
                return EXIT_USAGE;
            }
            break;
        case 'o': o->output = optarg; break;
        case 'f': o->filters[o->nfilters++] = optarg; break;
        case O_KEY: if (cli_load_key_file(&o->crypt, optarg)) return EXIT_USAGE; break;
        case O_PW: if (cli_load_password_file(&o->crypt, optarg)) return EXIT_USAGE; break;
        case O_CA: if (cli_set_ca_bundle(optarg)) return EXIT_USAGE; break;
        case O_TIMEOUT: if (cli_set_timeout(optarg)) return EXIT_USAGE; break;
        case O_THREADS: if (cli_int("--threads", optarg, 1, 64, &o->threads)) return EXIT_USAGE; break;
        case O_CHUNK: if (cli_mib("--chunk-mib", optarg, 1, 4096, &o->chunk)) return EXIT_USAGE; break;
        case O_RING: if (cli_mib("--ring-mib", optarg, 1, 65536, &o->ring)) return EXIT_USAGE; break;
        case O_NO_VERIFY: o->no_verify = 1; break;
        case O_FORCE: o->force = 1; break;
        case O_RULES: o->rank_rules = optarg; break;
        case O_INDEX: if (cli_uint("--index-bytes", optarg, 1, (uint64_t)1 << 30, &o->index_bytes)) return EXIT_USAGE; break;
        case 'q': o->quiet = 1; break;
        case 'h': fputs(usage, stdout); return EXIT_OK;
        case O_VERSION: printf("detensorize (libtzr %s)\n", tzr_version_string()); return EXIT_OK;
        default: fputs(usage, stderr); return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        cli_error("no input file (see --help)");
        return EXIT_USAGE;
    }
    o->file = argv[optind];
    o->files = (const char *const *)argv + optind;
    o->nfiles = argc - optind;
    static char label[4200]; /* what messages call a list of inputs */
    if (o->nfiles > 1) snprintf(label, sizeof label, "%s (+%d more)", o->file, o->nfiles - 1), o->file = label;
    if (o->list + o->verify + (o->output != NULL) > 1) {
        cli_error("choose one of --list, --verify, -o");
        return EXIT_USAGE;
    }
    if (o->index_bytes && !(o->output && cli_ends_with(o->output, ".tensors"))) {
        cli_error("--index-bytes goes with -o OUT.tensors");
        return EXIT_USAGE;
    }
    if (o->no_verify && !o->output) {
        cli_error("--no-verify goes with -o");
        return EXIT_USAGE;
    }
    if ((o->json || o->sha) && (o->verify || o->output)) {
        cli_error("--json and --sha256 go with --list");
        return EXIT_USAGE;
    }
    if (o->crypt.have_key && o->crypt.password) {
        cli_error("give --key-file or --password-file, not both");
        return EXIT_USAGE;
    }
    if (o->rank_rules && (o->nfiles > 1 || !rank_pattern(o->file))) {
        cli_error("--split-dim goes with per-rank files named by a pattern (model-rank-%%03d.tensors)");
        return EXIT_USAGE;
    }
    if (o->output) {
        if (cli_output_check(o->output, o->force)) return EXIT_FAIL;
        cli_output_guard(o->output, NULL);
    }
    if (o->nfiles > 1 || is_manifest(o->file)) return shard_main(o); /* a key opens encrypted shard files */
    tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
    ro.read_headers = !o->verify && !o->output; /* --list shows module indices */
    /* -o rewrites the data: check each tensor in the read that feeds the
     * writer, so a corrupt input never comes out as a file that verifies. */
    ro.verify = o->output && !o->no_verify;
    cli_crypt_apply(&o->crypt, &ro.crypt);
    ro.http = cli_http();
    tzr_reader *r;
    int rc = tzr_reader_open(&r, o->file, &ro);
    if (rc) return o->output && cli_stop_signal ? cli_output_stopped(0) : cli_lib_error(rc);
    size_t hits = 0;
    for (size_t i = 0; i < tzr_reader_count(r); i++) hits += selected(o, tzr_reader_tensor(r, i));
    if (no_match(o, hits)) {
        tzr_reader_free(r);
        return EXIT_FAIL;
    }
    int status;
    if (o->verify) {
        status = do_verify(o, r);
    } else if (o->output) {
        status = do_export(o, r);
    } else {
        char (*hex)[65] = NULL;
        status = EXIT_OK;
        if (o->sha) {
            hex = calloc(tzr_reader_count(r) + 1, sizeof *hex);
            rc = compute_sha(o, r, hex);
            if (rc) status = cli_lib_error(rc);
        }
        if (status == EXIT_OK) status = o->json ? list_json(o, r, hex) : list_table(o, r, hex);
        free(hex);
    }
    tzr_reader_free(r);
    return status;
}
