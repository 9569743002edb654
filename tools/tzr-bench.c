/* tzr-bench: how fast does libtzr load a checkpoint here, next to the
 * physical floor measured in the same run (a raw read of the same file,
 * pinned cudaMemcpy for the device path)? Each case runs in a child
 * process so its peak RSS is its own. Prints a table, or --json. */
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_compress.h"
#include "bench_ranks.h"
#include "bench_write.h"
#include "cli.h"
#include "hash.h" /* tzr_crc32: the library's own CRC32, for the crc32 reference row */
#include "mem.h"  /* tzr_alloc_big: the host sink's allocation, for the floor */
#include "tzr_http.h"
#include "tzr_load.h"
#include "tzr_safetensors.h"
#include "tzr_shard.h"

static const char usage[] =
    "Usage: tzr-bench [OPTIONS]\n"
    "Generates an LLM-shaped checkpoint (embedding, per-layer attention/MLP\n"
    "weights and norms, bf16 with normal-distributed values) as .tensors and\n"
    ".safetensors, then times, on the same file: a raw read (the floor, on\n"
    "as many threads as the loads), libtzr into host memory, with hash\n"
    "verification, into the null sink, the CUDA sink (--cuda), and a\n"
    "many-small-tensors file. ratio: the raw read's time over the case's\n"
    "(same file; the peer and CUDA rows: GB/s over the floor's GB/s).\n"
    "\n"
    "  --size-mib N      checkpoint size (default 1024)\n"
    "  --layers N        transformer layers (default 16)\n"
    "  --small N         tensors in the small-tensor case (default 100000, 4 KiB each; 0 = skip)\n"
    "  --dir DIR         where to write the files (default /tmp)\n"
    "  --file PATH       benchmark this existing .tensors file instead; a shard\n"
    "                    manifest (*.json): raw read of its shard files, the\n"
    "                    set's open, and open + load of rank 0 of 1 (host, null)\n"
    "  --cold            also measure after dropping the file from the page cache\n"
    "  --cuda            also measure the CUDA device sink (needs a GPU)\n"
    "  --threads N       pipeline threads;  --chunk-mib N  read size;  --ring-mib N  budget\n"
    "  --repeat N        runs per case, best kept (default 3)\n"
    "  --keep            keep the generated files\n"
    "  --make-sample P   only write an LLM-shaped .safetensors file P and exit\n"
    "  --cases LIST      only these: raw,open,host,host-crc32,host-verify,null,\n"
    "                    null-crc32,null-verify,peer,sha,crc32 (open: the reader's\n"
    "                    open alone, the index's share of every load row; SHA-256\n"
    "                    and CRC32 on one core: the bounds of the verify levels),\n"
    "                    cuda,cuda-crc32,cuda-verify (with --cuda)\n"
    "  --json            JSON lines instead of the table\n"
    "  --source URL      load an s3:// or http(s):// checkpoint instead, sweeping\n"
    "                    --inflight LIST (default 8,16,32) x --range-mib LIST (8,16)\n"
    "                    into --sink null|host|cuda; --floor-gbps G --floor-name N\n"
    "                    give the best external download measured in the same run\n"
    "\n"
    "  --compress [OPTS] zstd extension: size ratio, compression speed, loads\n"
    "                    local and rate-limited (see tools/common/bench_compress.h)\n"
    "  --write F.safetensors [OPTS]  write benchmark against a read+write+fsync\n"
    "                    floor (see tools/common/bench_write.h)\n"
    "  --ranks [OPTS]    multi-rank load benchmark; run under mpirun (see\n"
    "                    tools/common/bench_ranks.h for its options)\n";

typedef struct cfg {
    uint64_t size;
    int layers;
    size_t small;
    const char *dir, *file, *sample;
    int cold, cuda, threads, repeat, keep, json;
    size_t chunk, ring;
    const char *cases;
    /* --source URL: sweep over concurrency and range size */
    const char *source, *sweep_inflight, *sweep_range, *sink, *floor_name;
    double floor_gbps;
    int inflight;
    size_t range;
    long inflights[16], ranges[16]; /* the sweep, parsed from the lists */
    int ni, nr;
} cfg;

/* Every name in --cases is a case: one that is not would select nothing. */
static int bad_cases(const char *list) {
    static const char *known[] = {"raw", "open", "host", "host-verify", "host-crc32", "null", "null-verify",
                                  "null-crc32", "peer", "sha", "crc32", "cuda", "cuda-crc32", "cuda-verify"};
    for (const char *p = list;;) {
        size_t len = strcspn(p, ",");
        int ok = 0;
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
            ok |= strlen(known[k]) == len && strncmp(known[k], p, len) == 0;
        if (!ok) {
            char names[256] = "";
            for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? "," : "", known[k]);
            cli_error("--cases: '%.*s' in '%s' is not one of %s", (int)len, p, list, names);
            return 1;
        }
        if (!p[len]) return 0;
        p += len + 1;
    }
}

/* --cases raw,host,host-verify,null,null-verify,peer (default: all). */
static int wanted(const cfg *c, const char *name) {
    if (!c->cases) return 1;
    size_t n = strlen(name);
    for (const char *p = c->cases; (p = strstr(p, name)); p += n)
        if ((p == c->cases || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
    return 0;
}

/* ---- synthetic checkpoint ------------------------------------------- */
typedef struct spec_tensor {
    char name[96];
    uint64_t shape[2];
    uint32_t ndim;
} spec_tensor;

/* Hidden size h, MLP 4h/... : pick h so the total lands near size. */
static size_t llm_layout(uint64_t size, int layers, spec_tensor **out) {
    uint64_t vocab = 32000;
    /* bytes ~= 2*(2*vocab*h + layers*(4h^2 + 3*h*ffn)) with ffn = 8h/3 */
    double a = 2.0 * layers * (4 + 8), b = 2.0 * 2 * vocab;
    double h = (-b + sqrt(b * b + 4 * a * (double)size)) / (2 * a);
    uint64_t hid = (uint64_t)h / 64 * 64;
    if (hid < 64) hid = 64;
    uint64_t ffn = hid * 8 / 3 / 64 * 64;
    size_t n = 0, cap = 3 + (size_t)layers * 9;
    spec_tensor *t = calloc(cap, sizeof *t);
#define ADD(nm, d0, d1, nd)                                                  \
    do {                                                                     \
        snprintf(t[n].name, sizeof t[n].name, "%s", nm);                     \
        t[n].shape[0] = d0;                                                  \
        t[n].shape[1] = d1;                                                  \
        t[n].ndim = nd;                                                      \
        n++;                                                                 \
    } while (0)
    ADD("model.embed_tokens.weight", vocab, hid, 2);
    char nm[96];
    static const char *attn[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
    for (int l = 0; l < layers; l++) {
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
        ADD(nm, hid, 0, 1);
        for (int k = 0; k < 4; k++) {
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.%s.weight", l, attn[k]);
            ADD(nm, hid, hid, 2);
        }
        snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
        ADD(nm, hid, 0, 1);
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.gate_proj.weight", l);
        ADD(nm, ffn, hid, 2);
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.up_proj.weight", l);
        ADD(nm, ffn, hid, 2);
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.down_proj.weight", l);
        ADD(nm, hid, ffn, 2);
    }
    ADD("model.norm.weight", hid, 0, 1);
    ADD("lm_head.weight", vocab, hid, 2);
#undef ADD
    *out = t;
    return n;
}

/* bf16 of approximately normal values (Irwin-Hall of 4 uniforms), the
 * distribution real weights have; norms are near 1. */
static void fill_bf16(uint8_t *p, uint64_t count, uint64_t seed, int norm) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (uint64_t i = 0; i < count; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        float u = (float)((x & 0xFFFF) + ((x >> 16) & 0xFFFF) + ((x >> 32) & 0xFFFF) + (x >> 48)) / 65536.0f - 2.0f;
        float v = norm ? 1.0f + 0.05f * u : 0.02f * u * 1.7320508f;
        uint32_t bits;
        memcpy(&bits, &v, 4);
        p[2 * i] = (uint8_t)(bits >> 16);
        p[2 * i + 1] = (uint8_t)(bits >> 24);
    }
}

static const tzr_writer_options *write_opts; /* --compress: its writer options */

static int write_checkpoints(const cfg *c, const char *tensors_path, const char *st_path) {
    spec_tensor *t;
    size_t n = llm_layout(c->size, c->layers, &t);
    tzr_writer *w = NULL;
    int rc = tensors_path ? tzr_writer_open(&w, tensors_path, write_opts) : 0;
    tzr_st_tensor *decl = calloc(n, sizeof *decl);
    for (size_t i = 0; i < n; i++) {
        decl[i].name = t[i].name;
        decl[i].name_len = strlen(t[i].name);
        decl[i].dtype = TZR_DTYPE_BF16;
        decl[i].ndim = t[i].ndim;
        decl[i].shape = t[i].shape;
        decl[i].nbytes = 2 * t[i].shape[0] * (t[i].ndim == 2 ? t[i].shape[1] : 1);
    }
    tzr_st_writer *sw = NULL;
    tzr_output *out = NULL;
    if (!rc && st_path) rc = tzr_output_open_file(&out, st_path);
    if (!rc && st_path) rc = tzr_st_writer_open(&sw, out, decl, n, NULL, NULL, 0);
    for (size_t i = 0; i < n && !rc; i++) {
        uint8_t *buf = malloc(decl[i].nbytes);
        fill_bf16(buf, decl[i].nbytes / 2, i + 1, t[i].ndim == 1);
        if (w) {
            tzr_tensor_desc d = {t[i].name, strlen(t[i].name), TZR_STATE_DICT, 0, NULL, 0, TZR_DTYPE_BF16,
                                 t[i].ndim, t[i].shape, 0, sizeof(tzr_tensor_desc)};
            rc = tzr_writer_add(w, &d, buf);
        }
        if (!rc && sw) rc = tzr_st_writer_put(sw, i, 0, buf, decl[i].nbytes);
        free(buf);
    }
    if (w) {
        if (rc) tzr_writer_abort(w);
        else rc = tzr_writer_close(w);
    }
    if (sw) {
        if (rc) tzr_st_writer_abort(sw);
        else rc = tzr_st_writer_close(sw);
    }
    free(decl);
    free(t);
    return rc;
}

static int write_small(const char *path, size_t count) {
    tzr_writer_options wo = TZR_WRITER_OPTIONS_INIT;
    wo.metadata_size = (uint64_t)count * 64 + 4096;
    tzr_writer *w;
    int rc = tzr_writer_open(&w, path, &wo);
    uint8_t buf[4096];
    for (size_t i = 0; i < count && !rc; i++) {
        char nm[48];
        snprintf(nm, sizeof nm, "t.%zu", i);
        fill_bf16(buf, 2048, i + 7, 0);
        uint64_t shape[1] = {2048};
        tzr_tensor_desc d = {nm, strlen(nm), TZR_STATE_DICT, 0, NULL, 0, TZR_DTYPE_BF16, 1, shape, 0, sizeof(tzr_tensor_desc)};
        rc = tzr_writer_add(w, &d, buf);
    }
    if (rc) {
        tzr_writer_abort(w);
        return rc;
    }
    return tzr_writer_close(w);
}

/* Write the files in a child process. Each case is measured in a child
 * forked from this process: had the writer's heap (a name per tensor,
 * index buffers) grown here, every child would first copy-on-write the
 * pages it reuses from it, 4 KiB at a time, and measure that instead of
 * loading (it halved the 100k-tensor ratio on our VM). A loader runs in a
 * fresh process in practice. */
typedef struct write_job {
    const cfg *c;
    const char *tpath, *spath, *smallpath;
} write_job;

static int write_job_run(const write_job *j) {
    return j->smallpath ? write_small(j->smallpath, j->c->small) : write_checkpoints(j->c, j->tpath, j->spath);
}

static int write_child(void *ctx, void *out) {
    int rc = write_job_run(ctx);
    snprintf(out, 1024, "%s", rc ? tzr_last_error() : "");
    return rc;
}

static int write_in_child(const write_job *j) {
    char msg[1024] = "";
    int rc = 0, how = cli_run_child(write_child, (void *)j, msg, sizeof msg, &rc, NULL);
    if (how == CLI_CHILD_NOT_STARTED) return write_job_run(j);
    if (how == CLI_CHILD_DIED) return tzr_set_error(TZR_EIO, "writer process died");
    if (rc) tzr_set_error(rc, "%s", msg);
    return rc;
}

/* ---- cases ------------------------------------------------------------ */
typedef enum {
    C_RAW, C_HOST, C_HOST_VERIFY, C_NULL, C_NULL_VERIFY, C_CUDA, C_ST_COPY, C_H2D, C_HOST_CRC32, C_NULL_CRC32,
    C_SHA_CORE, C_CRC_CORE, C_CUDA_CRC32, C_CUDA_VERIFY, C_OPEN, C_SET_RAW, C_SET_OPEN, C_SET_HOST, C_SET_NULL,
    C_SET_RANK
} case_kind;
static const char *case_names[] = {"raw read (floor)", "libtzr -> host", "libtzr -> host + verify",
                                   "libtzr -> null", "libtzr -> null + verify", "libtzr -> cuda",
                                   "safetensors mmap+copy (peer)", "pinned cudaMemcpy H2D (floor)",
                                   "libtzr -> host + verify crc32", "libtzr -> null + verify crc32",
                                   "SHA-256, one core (reference)", "CRC32, one core (reference)",
                                   "libtzr -> cuda + verify crc32", "libtzr -> cuda + verify",
                                   "libtzr open alone (index)",
                                   "raw read, every shard (floor)", "set open (shards at first use)",
                                   "set open + load -> host", "set open + load -> null",
                                   "set open + rank 0 of N -> host"};
_Static_assert(sizeof case_names / sizeof *case_names == C_SET_RANK + 1, "a name for every case kind");

typedef struct result {
    double seconds;
    uint64_t bytes;
    long maxrss_kib;
    int rc;
    char err[400];
    uint64_t requests, retries;
    double open_s;       /* set cases: the open's share of seconds */
    uint64_t bytes_read; /* set cases: bytes read from shard files */
    int shards;          /* set cases: the set's shard count */
} result;

static void drop_cache(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

typedef struct raw_job {
    int fd;
    uint8_t *buf;
    uint64_t size, chunk;
    uint64_t *next;
    pthread_mutex_t *lock;
} raw_job;

static void *raw_worker(void *arg) {
    raw_job *j = arg;
    for (;;) {
        pthread_mutex_lock(j->lock);
        uint64_t off = *j->next;
        *j->next += j->chunk;
        pthread_mutex_unlock(j->lock);
        if (off >= j->size) break;
        uint64_t len = j->size - off < j->chunk ? j->size - off : j->chunk;
        uint64_t done = 0;
        while (done < len) {
            ssize_t n = pread(j->fd, j->buf + off + done, len - done, (off_t)(off + done));
            if (n <= 0) return NULL;
            done += (uint64_t)n;
        }
    }
    return NULL;
}

/* The floor's threads: as many as the loads it is the floor of (tzr_load's
 * default: one per CPU, 2 to 16, or --threads). With 2 on a 16-core host,
 * the 100k x 4 KiB host load there (16 threads) beat its "floor". */
static int floor_threads(const cfg *c) { return c->threads > 0 ? c->threads : tzr_load_default_threads(); }

/* The floor: the whole file into one buffer with parallel large preads. */
static int raw_read(const char *path, int threads, uint64_t *bytes) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return tzr_set_error(TZR_EIO, "%s: cannot open", path);
    struct stat st;
    fstat(fd, &st);
    uint64_t size = (uint64_t)st.st_size, next = 0;
    /* The host sink's own allocation (whole 2 MiB huge pages, the last one
     * included), so the floor measures reading, not page faults. A tail
     * left to 4 KiB pages cost up to 511 faults, about 5 ms on a VM, and
     * flattered every ratio. */
    uint8_t *buf = tzr_alloc_big((size_t)size);
    if (!buf) return tzr_set_error(TZR_ENOMEM, "out of memory");
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    raw_job j = {fd, buf, size, 8 << 20, &next, &lock};
    pthread_t th[64];
    for (int i = 0; i < threads; i++) pthread_create(&th[i], NULL, raw_worker, &j);
    for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
    close(fd);
    free(buf);
    *bytes = size;
    return 0;
}

/* The reader's open alone (prologue, index, name table): the part of
 * every load row that no raw read has, and that runs before any data. */
static int open_alone(const char *path, uint64_t *bytes) {
    tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
    tzr_reader *r;
    int rc = tzr_reader_open(&r, path, &ro);
    if (rc) return rc;
    *bytes = 0; /* no tensor bytes: no GB/s */
    tzr_reader_free(r);
    return 0;
}

static int st_copy(const char *path, uint64_t *bytes) {
    tzr_st_file *f;
    int rc = tzr_st_open(&f, path);
    if (rc) return rc;
    *bytes = 0;
    /* What safetensors' load does: mmap, then copy each tensor into its
     * own (plain malloc) buffer, all kept until the end. */
    size_t n = tzr_st_count(f);
    void **dst = calloc(n + 1, sizeof *dst);
    for (size_t i = 0; i < n; i++) {
        const tzr_st_tensor *t = tzr_st_get(f, i);
        dst[i] = malloc(t->nbytes ? t->nbytes : 1);
        memcpy(dst[i], tzr_st_data(f, i), t->nbytes);
        *bytes += t->nbytes;
    }
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < n; i++) {
        if (tzr_st_get(f, i)->nbytes) sink ^= ((uint8_t *)dst[i])[0];
        free(dst[i]);
    }
    (void)sink;
    free(dst);
    tzr_st_free(f);
    return 0;
}

/* What one core hashes: SHA-256 (the bound of a full verify) over 256 MiB
 * in 8 MiB pieces, from memory already touched. */
static int sha_core(uint64_t *bytes) {
    size_t piece = 8 << 20, n = 32;
    uint8_t *buf = malloc(piece), md[32];
    if (!buf) return tzr_set_error(TZR_ENOMEM, "out of memory");
    for (size_t i = 0; i < piece; i++) buf[i] = (uint8_t)(i * 131 + 7);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned int len = 32;
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    for (size_t i = 0; i < n; i++) EVP_DigestUpdate(ctx, buf, piece);
    EVP_DigestFinal_ex(ctx, md, &len);
    EVP_MD_CTX_free(ctx);
    free(buf);
    *bytes = (uint64_t)piece * n;
    return 0;
}

/* The same for CRC32 as the library computes it (the bound of the crc32
 * verify level): 1 GiB in 8 MiB pieces, from memory already touched. Timed
 * here, without the setup, which would be a fifth of it at this speed. */
static int crc_core(uint64_t *bytes, double *seconds) {
    size_t piece = 8 << 20, n = 128;
    uint8_t *buf = malloc(piece);
    if (!buf) return tzr_set_error(TZR_ENOMEM, "out of memory");
    for (size_t i = 0; i < piece; i++) buf[i] = (uint8_t)(i * 131 + 7);
    uint32_t crc = 0;
    double t0 = cli_now();
    for (size_t i = 0; i < n; i++) crc = tzr_crc32(crc, buf, piece);
    *seconds = cli_now() - t0;
    volatile uint32_t keep = crc;
    (void)keep;
    free(buf);
    *bytes = (uint64_t)piece * n;
    return 0;
}

/* A shard set (manifest): its shard files' raw read, or its open alone,
 * or open + load of rank 0 of 1 (every tensor whole). */
static int run_set(const cfg *c, case_kind k, const char *path, uint64_t *bytes, result *res) {
    tzr_shard_open_options so = TZR_SHARD_OPEN_OPTIONS_INIT;
    so.verify = 0;
    tzr_shard_set *s;
    double t0 = cli_now();
    int rc = tzr_shard_open(&s, path, &so);
    if (rc) return rc;
    /* The raw read takes its paths from the shards' readers, which a set
     * opens on first use: opened here, inside the untimed open. */
    for (int i = 0; k == C_SET_RAW && i < tzr_shard_nshards(s) && !rc; i++)
        if (!tzr_shard_reader(s, i)) rc = tzr_last_error_code();
    res->open_s = cli_now() - t0;
    res->shards = tzr_shard_nshards(s);
    *bytes = 0;
    if (k == C_SET_RAW) {
        /* Paths from the open; only the reads are timed (the caller
         * subtracts open_s). */
        for (int i = 0; i < tzr_shard_nshards(s) && !rc; i++) {
            uint64_t b = 0;
            rc = raw_read(tzr_reader_source(tzr_shard_reader(s, i))->name, floor_threads(c), &b);
            *bytes += b;
        }
        res->bytes_read = *bytes;
    } else if (k != C_SET_OPEN) {
        tzr_sink *sink = NULL;
        rc = k == C_SET_NULL ? tzr_sink_null_new(&sink) : tzr_sink_host_new(&sink, NULL, NULL);
        tzr_load_options lo = TZR_LOAD_OPTIONS_INIT;
        lo.threads = c->threads;
        lo.chunk_bytes = c->chunk;
        lo.ring_bytes = c->ring;
        tzr_load_stats st;
        /* rank 0 of as many ranks as shards: what each rank of a job that
         * saved one shard per rank reads back */
        int nranks = k == C_SET_RANK ? tzr_shard_nshards(s) : 1;
        if (!rc) rc = tzr_shard_load_rank_into(s, 0, nranks, NULL, sink, &lo, &st);
        if (!rc) *bytes = st.bytes, res->bytes_read = st.bytes_read;
        tzr_sink_free(sink);
    }
    tzr_shard_close(s);
    return rc;
}

static int run_case(const cfg *c, case_kind k, const char *path, uint64_t *bytes, result *res) {
    if (k >= C_SET_RAW) return run_set(c, k, path, bytes, res);
    if (k == C_SHA_CORE) return sha_core(bytes);
    if (k == C_RAW) return raw_read(path, floor_threads(c), bytes);
    if (k == C_OPEN) return open_alone(path, bytes);
    if (k == C_ST_COPY) return st_copy(path, bytes);
    tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
    tzr_reader *r;
    tzr_source *src = NULL;
    int rc;
    if (c->source) {
        tzr_http_options ho = TZR_HTTP_OPTIONS_INIT;
        ho.range_bytes = c->range;
        ho.max_inflight = c->inflight;
        rc = tzr_source_open_url(&src, path, &ho);
        if (!rc) rc = tzr_reader_open_source(&r, src, &ro);
    } else {
        rc = tzr_reader_open(&r, path, &ro);
    }
    if (rc) return rc;
    tzr_sink *sink = NULL;
    if (k == C_HOST || k == C_HOST_VERIFY || k == C_HOST_CRC32) rc = tzr_sink_host_new(&sink, NULL, NULL);
    else if (k == C_CUDA || k == C_CUDA_CRC32 || k == C_CUDA_VERIFY) rc = tzr_sink_cuda_new(&sink, 0, NULL, NULL);
    else rc = tzr_sink_null_new(&sink);
    tzr_load_options lo = TZR_LOAD_OPTIONS_INIT;
    lo.threads = c->source ? c->inflight : c->threads;
    lo.chunk_bytes = c->source ? c->range : c->chunk;
    lo.ring_bytes = c->ring;
    lo.verify = k == C_HOST_VERIFY || k == C_NULL_VERIFY || k == C_CUDA_VERIFY || k == C_HOST_CRC32 ||
                k == C_NULL_CRC32 || k == C_CUDA_CRC32;
    lo.verify_level = k == C_HOST_CRC32 || k == C_NULL_CRC32 || k == C_CUDA_CRC32 ? TZR_VERIFY_CRC32 : TZR_VERIFY_FULL;
    tzr_load_stats st;
    if (!rc) rc = tzr_load(r, sink, &lo, &st);
    if (!rc) *bytes = st.bytes;
    tzr_http_stats hs;
    if (src && tzr_source_http_stats(src, &hs) == 0) {
        res->requests = hs.requests;
        res->retries = hs.retries;
    }
    tzr_sink_free(sink);
    tzr_reader_free(r);
    return rc;
}

typedef struct child_case {
    const cfg *c;
    case_kind k;
    const char *path;
} child_case;

static int child_measure(void *ctx, void *out) {
    const child_case *cc = ctx;
    result *res = out;
    memset(res, 0, sizeof *res);
    double t0 = cli_now();
    if (cc->k == C_H2D) { /* CUDA only ever runs in children: contexts do not survive fork */
        double gbps = 0;
        res->bytes = (uint64_t)8 * (256 << 20);
        res->rc = tzr_cuda_h2d_bandwidth(0, 256 << 20, 8, &gbps);
        res->seconds = gbps > 0 ? (double)res->bytes / (gbps * 1e9) : 0;
    } else if (cc->k == C_CRC_CORE) {
        res->rc = crc_core(&res->bytes, &res->seconds);
    } else {
        if (cc->k == C_CUDA || cc->k == C_CUDA_CRC32 || cc->k == C_CUDA_VERIFY) {
            /* The device context (hundreds of ms) is made before the clock
             * starts: a process that loads onto a GPU has one already. */
            tzr_sink *warm = NULL;
            if (tzr_sink_cuda_new(&warm, 0, NULL, NULL) == 0) tzr_sink_free(warm);
            t0 = cli_now();
        }
        res->rc = run_case(cc->c, cc->k, cc->path, &res->bytes, res);
        res->seconds = cli_now() - t0;
        if (cc->k == C_SET_RAW) res->seconds -= res->open_s; /* the floor is the reads alone */
    }
    if (res->rc) snprintf(res->err, sizeof res->err, "%s", tzr_last_error());
    return 0;
}

/* One case in a child process: seconds, bytes and that child's peak RSS. */
static result measure(const cfg *c, case_kind k, const char *path, int cold) {
    result best = {0};
    best.rc = 1;
    child_case cc = {c, k, path};
    for (int rep = 0; rep < c->repeat; rep++) {
        if (cold) drop_cache(path);
        result res;
        long rss = 0;
        if (cli_run_child(child_measure, &cc, &res, sizeof res, NULL, &rss) != CLI_CHILD_OK) {
            snprintf(best.err, sizeof best.err, "child died");
            break;
        }
        res.maxrss_kib = rss;
        if (res.rc) {
            best = res;
            break;
        }
        if (best.rc || res.seconds < best.seconds) best = res;
    }
    return best;
}

/* ratio: against a raw read of the same file (floor_s > 0), the floor's
 * time over the case's: both read every byte of the file, but a load
 * counts only the tensor bytes it delivers, so a ratio of GB/s would
 * charge it for the headers and index it must read as well (4% of the
 * 100k x 4 KiB file). Otherwise (another file, the H2D copy), of GB/s. */
static void report(const cfg *c, const char *group, case_kind k, const result *r, double floor_gbps,
                   double floor_s, const char *floor_name) {
    double gbps = r->rc || r->seconds <= 0 ? 0 : (double)r->bytes / r->seconds / 1e9;
    double ratio = r->rc || r->seconds <= 0 ? 0 : floor_s > 0 ? floor_s / r->seconds
                                                  : floor_gbps > 0 ? gbps / floor_gbps : 0;
    /* The open row moves no tensor bytes: no GB/s or ratio ("-", JSON null). */
    int rated = k != C_OPEN;
    char g[32] = "-", q[32] = "-";
    if (c->json) {
        if (rated) snprintf(g, sizeof g, "%.3f", gbps), snprintf(q, sizeof q, "%.3f", ratio);
        else strcpy(g, "null"), strcpy(q, "null");
        printf("{\"case\":\"%s\",\"group\":\"%s\",\"ok\":%s,\"seconds\":%.4f,\"bytes\":%llu,\"gbps\":%s,"
               "\"ratio\":%s,\"floor\":\"%s\",\"peak_rss_mib\":%.1f}\n",
               case_names[k], group, r->rc ? "false" : "true", r->seconds, (unsigned long long)r->bytes, g, q,
               rated ? floor_name : "none", r->maxrss_kib / 1024.0);
        return;
    }
    if (r->rc) {
        printf("| %-11s | %-30s | %8s | %7s | %6s | %9s | %s\n", group, case_names[k], "-", "-", "-", "-", r->err);
        return;
    }
    if (rated) snprintf(g, sizeof g, "%.2f", gbps), snprintf(q, sizeof q, "%.2f", ratio);
    printf("| %-11s | %-30s | %8.3f | %7s | %6s | %9.0f |\n", group, case_names[k], r->seconds, g, q,
           r->maxrss_kib / 1024.0);
}

/* --file MANIFEST: rows for a shard set. A load of rank 0 of 1 reads one
 * holder of each tensor (a replicated set: one shard file), so its ratio
 * is against the raw read's time for the bytes it read, at the floor's
 * rate; "load" rows are the same runs less their open. */
static int bench_set(cfg *c, const char *path) {
    if (!c->json) {
        printf("shard set: %s, raw read on %d threads, best of %d runs each; ratio: the raw read's time for the "
               "bytes read over the case's\n\n", path, floor_threads(c), c->repeat);
        printf("| %-36s | %8s | %8s | %7s | %6s | %9s |\n", "case", "seconds", "MB read", "GB/s", "ratio",
               "peak RSS MiB");
        printf("|--------------------------------------|----------|----------|---------|--------|-----------|\n");
    }
    result raw = measure(c, C_SET_RAW, path, 0); /* first run warms the cache */
    raw = measure(c, C_SET_RAW, path, 0);
    double rate = raw.rc || raw.seconds <= 0 ? 0 : (double)raw.bytes / raw.seconds; /* bytes/s */
    case_kind ks[] = {C_SET_RAW, C_SET_OPEN, C_SET_HOST, C_SET_NULL, C_SET_RANK};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        if (ks[i] == C_SET_RANK && raw.shards < 2) continue; /* one rank of one: the host row */
        result r = i == 0 ? raw : measure(c, ks[i], path, 0);
        for (int load_only = 0; load_only <= (ks[i] >= C_SET_HOST); load_only++) {
            char name[64];
            if (!load_only && ks[i] == C_SET_RANK)
                snprintf(name, sizeof name, "set open + rank 0 of %d -> host", raw.shards);
            else
                snprintf(name, sizeof name, "%s", !load_only ? case_names[ks[i]]
                                                  : ks[i] == C_SET_NULL ? "  the load alone -> null"
                                                                        : "  the load alone -> host");
            double sec = load_only ? r.seconds - r.open_s : r.seconds;
            double floor_s = rate > 0 ? (double)r.bytes_read / rate : 0;
            double ratio = r.rc || sec <= 0 || !r.bytes_read ? 0 : floor_s / sec;
            double gbps = r.rc || sec <= 0 ? 0 : (double)r.bytes / sec / 1e9;
            if (c->json)
                printf("{\"case\":\"%s\",\"group\":\"set\",\"ok\":%s,\"seconds\":%.4f,\"open_seconds\":%.4f,"
                       "\"bytes\":%llu,\"bytes_read\":%llu,\"gbps\":%.3f,\"ratio\":%.3f,\"peak_rss_mib\":%.1f}\n",
                       name, r.rc ? "false" : "true", sec, r.open_s, (unsigned long long)r.bytes,
                       (unsigned long long)r.bytes_read, gbps, ratio, r.maxrss_kib / 1024.0);
            else if (r.rc)
                printf("| %-36s | %s\n", name, r.err);
            else
                printf("| %-36s | %8.3f | %8.0f | %7.2f | %6.2f | %9.0f |\n", name, sec, r.bytes_read / 1e6, gbps,
                       ratio, r.maxrss_kib / 1024.0);
            fflush(stdout);
        }
    }
    return raw.rc ? EXIT_FAILURE : EXIT_OK;
}

static void header(const cfg *c) {
    if (c->json) return;
    printf("| %-11s | %-30s | %8s | %7s | %6s | %9s |\n", "page cache", "case", "seconds", "GB/s", "ratio",
           "peak RSS MiB");
    printf("|-------------|--------------------------------|----------|---------|--------|-----------|\n");
}

/* --source URL: load from HTTP/S3 over a sweep of concurrency x range
 * size, reporting requests and retries; the floor (best external download
 * of the same object, measured by the caller in the same run) comes in
 * through --floor-gbps/--floor-name. */
static int bench_source(cfg *c) {
    const long *inflights = c->inflights, *ranges = c->ranges;
    int ni = c->ni, nr = c->nr;
    case_kind k = c->sink && strcmp(c->sink, "host") == 0 ? C_HOST
                  : c->sink && strcmp(c->sink, "cuda") == 0 ? C_CUDA : C_NULL;
    if (!c->json) {
        printf("source: %s, sink %s, floor: %s %.2f GB/s, best of %d\n\n", c->source, case_names[k],
               c->floor_name ? c->floor_name : "none", c->floor_gbps, c->repeat);
        printf("| inflight | range MiB | seconds |  GB/s | ratio | requests | retries | peak RSS MiB |\n");
        printf("|----------|-----------|---------|-------|-------|----------|---------|--------------|\n");
    }
    for (int a = 0; a < ni; a++)
        for (int b = 0; b < nr; b++) {
            c->inflight = (int)inflights[a];
            c->range = (size_t)ranges[b] << 20;
            result r = measure(c, k, c->source, 0);
            double gbps = r.rc || r.seconds <= 0 ? 0 : (double)r.bytes / r.seconds / 1e9;
            double ratio = c->floor_gbps > 0 ? gbps / c->floor_gbps : 0;
            if (c->json)
                printf("{\"source\":\"%s\",\"sink\":\"%s\",\"inflight\":%d,\"range_mib\":%ld,\"ok\":%s,"
                       "\"seconds\":%.4f,\"gbps\":%.3f,\"ratio\":%.3f,\"requests\":%llu,\"retries\":%llu,"
                       "\"peak_rss_mib\":%.1f}\n",
                       c->source, case_names[k], c->inflight, ranges[b], r.rc ? "false" : "true", r.seconds, gbps,
                       ratio, (unsigned long long)r.requests, (unsigned long long)r.retries, r.maxrss_kib / 1024.0);
            else if (r.rc)
                printf("| %8d | %9ld | %s\n", c->inflight, ranges[b], r.err);
            else
                printf("| %8d | %9ld | %7.3f | %5.2f | %5.2f | %8llu | %7llu | %12.0f |\n", c->inflight, ranges[b],
                       r.seconds, gbps, ratio, (unsigned long long)r.requests, (unsigned long long)r.retries,
                       r.maxrss_kib / 1024.0);
            fflush(stdout);
        }
    return EXIT_OK;
}

static int write_for_compress(uint64_t size, int layers, const char *path, const tzr_writer_options *wo) {
    cfg c = {0};
    c.size = size;
    c.layers = layers;
    write_opts = wo;
    return write_checkpoints(&c, path, NULL);
}

int main(int argc, char **argv) {
    cli_prog = "tzr-bench";
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--compress") == 0) return bench_compress_main(argc, argv, write_for_compress);
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--write") == 0) return bench_write_main(argc, argv);
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--ranks") == 0) {
            for (int k = i; k + 1 < argc; k++) argv[k] = argv[k + 1];
            return bench_ranks_main(argc - 1, argv);
        }
    cfg c = {0};
    c.size = (uint64_t)1024 << 20;
    c.layers = 16;
    c.small = 100000;
    c.dir = "/tmp";
    c.repeat = 3;
    enum { O_SIZE = 256, O_LAYERS, O_SMALL, O_DIR, O_FILE, O_COLD, O_CUDA, O_THREADS, O_CHUNK, O_RING, O_REPEAT,
           O_KEEP, O_SAMPLE, O_JSON, O_CASES, O_SOURCE, O_SW_INFLIGHT, O_SW_RANGE, O_SINK, O_FLOOR, O_FLOOR_NAME };
    static const struct option longs[] = {
        {"size-mib", required_argument, 0, O_SIZE}, {"layers", required_argument, 0, O_LAYERS},
        {"small", required_argument, 0, O_SMALL},   {"dir", required_argument, 0, O_DIR},
        {"file", required_argument, 0, O_FILE},     {"cold", no_argument, 0, O_COLD},
        {"cuda", no_argument, 0, O_CUDA},           {"threads", required_argument, 0, O_THREADS},
        {"chunk-mib", required_argument, 0, O_CHUNK}, {"ring-mib", required_argument, 0, O_RING},
        {"repeat", required_argument, 0, O_REPEAT}, {"keep", no_argument, 0, O_KEEP},
        {"make-sample", required_argument, 0, O_SAMPLE}, {"json", no_argument, 0, O_JSON},
        {"cases", required_argument, 0, O_CASES},
        {"source", required_argument, 0, O_SOURCE}, {"inflight", required_argument, 0, O_SW_INFLIGHT},
        {"range-mib", required_argument, 0, O_SW_RANGE}, {"sink", required_argument, 0, O_SINK},
        {"floor-gbps", required_argument, 0, O_FLOOR}, {"floor-name", required_argument, 0, O_FLOOR_NAME},
        {"help", no_argument, 0, 'h'},              {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
        switch (o) {
        case O_SIZE:
            if (cli_uint("--size-mib", optarg, 16, (uint64_t)1 << 24, &c.size)) return EXIT_USAGE;
            c.size <<= 20;
            break;
        case O_LAYERS: if (cli_int("--layers", optarg, 1, 100000, &c.layers)) return EXIT_USAGE; break;
        case O_SMALL: {
            uint64_t v;
            if (cli_uint("--small", optarg, 0, 100000000, &v)) return EXIT_USAGE;
            c.small = (size_t)v;
            break;
        }
        case O_DIR: c.dir = optarg; break;
        case O_FILE: c.file = optarg; break;
        case O_COLD: c.cold = 1; break;
        case O_CUDA: c.cuda = 1; break;
        case O_THREADS: if (cli_int("--threads", optarg, 1, 64, &c.threads)) return EXIT_USAGE; break;
        case O_CHUNK: if (cli_mib("--chunk-mib", optarg, 1, 4096, &c.chunk)) return EXIT_USAGE; break;
        case O_RING: if (cli_mib("--ring-mib", optarg, 1, 65536, &c.ring)) return EXIT_USAGE; break;
        case O_REPEAT: if (cli_int("--repeat", optarg, 1, 1000, &c.repeat)) return EXIT_USAGE; break;
        case O_KEEP: c.keep = 1; break;
        case O_SAMPLE: c.sample = optarg; break;
        case O_JSON: c.json = 1; break;
        case O_CASES: c.cases = optarg; break;
        case O_SOURCE: c.source = optarg; break;
        case O_SW_INFLIGHT: c.sweep_inflight = optarg; break;
        case O_SW_RANGE: c.sweep_range = optarg; break;
        case O_SINK: c.sink = optarg; break;
        case O_FLOOR: if (cli_double("--floor-gbps", optarg, 0, 1e6, &c.floor_gbps)) return EXIT_USAGE; break;
        case O_FLOOR_NAME: c.floor_name = optarg; break;
        case 'h': fputs(usage, stdout); return EXIT_OK;
        default: fputs(usage, stderr); return EXIT_USAGE;
        }
    }
    if ((c.ni = cli_int_list("--inflight", c.sweep_inflight ? c.sweep_inflight : "8,16,32", 1, 1024, c.inflights,
                             16)) < 0 ||
        (c.nr = cli_int_list("--range-mib", c.sweep_range ? c.sweep_range : "8,16", 1, 4096, c.ranges, 16)) < 0)
        return EXIT_USAGE;
    if (c.sink && strcmp(c.sink, "null") && strcmp(c.sink, "host") && strcmp(c.sink, "cuda")) {
        cli_error("--sink: '%s' is not null, host or cuda", c.sink);
        return EXIT_USAGE;
    }
    if (c.cases && bad_cases(c.cases)) return EXIT_USAGE;
    if (c.source) return bench_source(&c);
    if (c.sample) {
        int rc = write_checkpoints(&c, NULL, c.sample);
        return rc ? cli_lib_error(rc) : EXIT_OK;
    }
    if (c.file && strlen(c.file) > 5 && strcmp(c.file + strlen(c.file) - 5, ".json") == 0) return bench_set(&c, c.file);
    char tpath[512], spath[512], smallpath[512];
    snprintf(tpath, sizeof tpath, "%s/tzr-bench-%d.tensors", c.dir, (int)getpid());
    snprintf(spath, sizeof spath, "%s/tzr-bench-%d.safetensors", c.dir, (int)getpid());
    snprintf(smallpath, sizeof smallpath, "%s/tzr-bench-small-%d.tensors", c.dir, (int)getpid());
    const char *file = c.file ? c.file : tpath;
    if (!c.file) {
        if (!c.json) fprintf(stderr, "tzr-bench: writing %llu MiB checkpoint (.tensors and .safetensors) in %s\n",
                             (unsigned long long)(c.size >> 20), c.dir);
        write_job j = {&c, tpath, spath, NULL};
        int rc = write_in_child(&j);
        if (rc) return cli_lib_error(rc);
    }
    struct stat st;
    stat(file, &st);
    if (!c.json) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        printf("checkpoint: %s (%.0f MiB), %ld CPUs, raw read on %d threads, best of %d runs each\n\n", file,
               (double)st.st_size / 1048576.0, cpus, floor_threads(&c), c.repeat);
    }
    header(&c);
    for (int cold = 0; cold <= c.cold; cold++) {
        const char *group = cold ? "cold" : "warm";
        if (!cold) { /* warm the cache once */
            uint64_t b;
            raw_read(file, 2, &b);
        }
        result raw = measure(&c, C_RAW, file, cold);
        double floor = raw.rc ? 0 : (double)raw.bytes / raw.seconds / 1e9, floor_s = raw.rc ? 0 : raw.seconds;
        report(&c, group, C_RAW, &raw, floor, floor_s, "raw read");
        case_kind ks[] = {C_OPEN, C_HOST, C_HOST_CRC32, C_HOST_VERIFY, C_NULL, C_NULL_CRC32, C_NULL_VERIFY};
        const char *kn[] = {"open", "host", "host-crc32", "host-verify", "null", "null-crc32", "null-verify"};
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
            if (!wanted(&c, kn[i])) continue;
            result r = measure(&c, ks[i], file, cold);
            report(&c, group, ks[i], &r, floor, floor_s, "raw read");
        }
        if (!c.file && wanted(&c, "peer")) {
            if (!cold) {
                uint64_t b;
                raw_read(spath, 2, &b);
            }
            result r = measure(&c, C_ST_COPY, spath, cold);
            report(&c, group, C_ST_COPY, &r, floor, 0, "raw read"); /* another file: GB/s */
        }
        if (c.cuda) {
            result h2d = measure(&c, C_H2D, file, 0);
            double floor_h2d = h2d.rc || h2d.seconds <= 0 ? 0 : (double)h2d.bytes / h2d.seconds / 1e9;
            report(&c, group, C_H2D, &h2d, floor_h2d, 0, "pinned cudaMemcpy");
            case_kind cks[] = {C_CUDA, C_CUDA_CRC32, C_CUDA_VERIFY};
            const char *ckn[] = {"cuda", "cuda-crc32", "cuda-verify"};
            for (size_t i = 0; i < sizeof cks / sizeof cks[0]; i++) {
                if (!wanted(&c, ckn[i])) continue;
                result r = measure(&c, cks[i], file, cold);
                report(&c, group, cks[i], &r, floor_h2d, 0, "pinned cudaMemcpy");
            }
        }
    }
    if (c.small) {
        write_job j = {&c, NULL, NULL, smallpath};
        int rc = write_in_child(&j);
        if (rc) return cli_lib_error(rc);
        char group[32];
        snprintf(group, sizeof group, "%zuk x 4KiB", c.small / 1000);
        uint64_t b;
        raw_read(smallpath, 2, &b);
        result raw = measure(&c, C_RAW, smallpath, 0);
        double floor = raw.rc ? 0 : (double)raw.bytes / raw.seconds / 1e9, floor_s = raw.rc ? 0 : raw.seconds;
        report(&c, group, C_RAW, &raw, floor, floor_s, "raw read");
        case_kind ks[] = {C_OPEN, C_HOST, C_NULL, C_NULL_CRC32, C_NULL_VERIFY};
        const char *kn[] = {"open", "host", "null", "null-crc32", "null-verify"};
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
            if (!wanted(&c, kn[i])) continue;
            result r = measure(&c, ks[i], smallpath, 0);
            report(&c, group, ks[i], &r, floor, floor_s, "raw read");
        }
        if (c.cuda && wanted(&c, "cuda")) { /* per-tensor cost on the device path, against the same raw read */
            result r = measure(&c, C_CUDA, smallpath, 0);
            report(&c, group, C_CUDA, &r, floor, floor_s, "raw read");
        }
        if (!c.keep) unlink(smallpath);
    }
    if (wanted(&c, "sha")) { /* the hashing bound of the verify rows, measured in the same run */
        result r = measure(&c, C_SHA_CORE, file, 0);
        report(&c, "-", C_SHA_CORE, &r, 0, 0, "none");
    }
    if (wanted(&c, "crc32")) {
        result r = measure(&c, C_CRC_CORE, file, 0);
        report(&c, "-", C_CRC_CORE, &r, 0, 0, "none");
    }
    if (!c.file && !c.keep) {
        unlink(tpath);
        unlink(spath);
    }
    return EXIT_OK;
}
