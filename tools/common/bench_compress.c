/* tzr-bench --compress (see bench_compress.h). */
#include "bench_compress.h"

#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "cli.h"
#include "tzr_load.h"

/* ---- rate-limited source: sleeps so all threads together stay at rate -- */
typedef struct slow_source {
    tzr_source base;
    tzr_source *inner;
    double rate;              /* bytes per second */
    pthread_mutex_t lock;
    double next_free;         /* when the link is free again (cli_now time) */
} slow_source;

static int slow_read(tzr_source *s, void *buf, size_t len, uint64_t off) {
    slow_source *w = (slow_source *)s;
    /* Reserve the link for len bytes, then wait for the end of that
     * transfer: a shared token bucket with no burst. */
    pthread_mutex_lock(&w->lock);
    double now = cli_now();
    double start = w->next_free > now ? w->next_free : now;
    w->next_free = start + (double)len / w->rate;
    double until = w->next_free;
    pthread_mutex_unlock(&w->lock);
    int rc = w->inner->read_at(w->inner, buf, len, off);
    double left = until - cli_now();
    if (left > 0) {
        struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        nanosleep(&ts, NULL);
    }
    return rc;
}

static void slow_destroy(tzr_source *s) {
    slow_source *w = (slow_source *)s;
    tzr_source_free(w->inner);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

static int open_slow(tzr_source **out, const char *path, double rate) {
    slow_source *w = calloc(1, sizeof *w);
    if (!w) return tzr_set_error(TZR_ENOMEM, "out of memory");
    int rc = tzr_source_open_file(&w->inner, path, 0);
    if (rc) {
        free(w);
        return rc;
    }
    w->base = *w->inner;
    w->base.read_at = slow_read;
    w->base.destroy = slow_destroy;
    w->base.is_cached = NULL; /* the inner source's methods expect its own struct */
    w->base.set_direct = NULL;
    w->base.readv_at = NULL; /* would bypass the rate limit */
    w->base.direct_align = 0;
    w->base.preferred_inflight = 8; /* a remote link: several requests in flight, */
    w->base.pack_reads = 1;         /* each one costly, as over HTTP */
    w->base.ctx = w;
    w->rate = rate;
    pthread_mutex_init(&w->lock, NULL);
    *out = &w->base;
    return 0;
}

/* Load every tensor into host memory; best of `repeat`. */
static int load(const char *path, double rate, int threads, int repeat, double *secs, uint64_t *bytes) {
    *secs = 0;
    for (int k = 0; k < repeat; k++) {
        double t0 = cli_now();
        tzr_source *src;
        int rc = rate > 0 ? open_slow(&src, path, rate) : tzr_source_open_file(&src, path, 0);
        tzr_reader *r = NULL;
        if (!rc) rc = tzr_reader_open_source(&r, src, NULL);
        tzr_sink *sink = NULL;
        if (!rc) rc = tzr_sink_host_new(&sink, NULL, NULL);
        tzr_load_options lo = TZR_LOAD_OPTIONS_INIT;
        lo.threads = threads;
        tzr_load_stats st;
        if (!rc) rc = tzr_load(r, sink, &lo, &st);
        tzr_sink_free(sink);
        tzr_reader_free(r);
        if (rc) return rc;
        double t = cli_now() - t0;
        if (k == 0 || t < *secs) *secs = t;
        *bytes = st.bytes;
    }
    return 0;
}

static uint64_t file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

int bench_compress_main(int argc, char **argv, bench_write_fn write_fn) {
    uint64_t size = (uint64_t)512 << 20;
    int layers = 16, level = 1, threads = 0, repeat = 3, keep = 0;
    double rate_mbps = 200;
    const char *dir = "/tmp";
    static const struct option opts[] = {{"size-mib", 1, 0, 's'}, {"layers", 1, 0, 'l'}, {"dir", 1, 0, 'd'},
                                         {"level", 1, 0, 'z'},    {"rate-mbps", 1, 0, 'r'}, {"threads", 1, 0, 't'},
                                         {"repeat", 1, 0, 'n'},   {"keep", 0, 0, 'k'},      {"compress", 0, 0, 'c'},
                                         {0, 0, 0, 0}};
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 's':
            if (cli_uint("--size-mib", optarg, 1, (uint64_t)1 << 24, &size)) return EXIT_USAGE;
            size <<= 20;
            break;
        case 'l': if (cli_int("--layers", optarg, 1, 100000, &layers)) return EXIT_USAGE; break;
        case 'd': dir = optarg; break;
        case 'z': if (cli_int("--level", optarg, 1, ZSTD_maxCLevel(), &level)) return EXIT_USAGE; break;
        case 'r': if (cli_double("--rate-mbps", optarg, 0.001, 1e6, &rate_mbps)) return EXIT_USAGE; break;
        case 't': if (cli_int("--threads", optarg, 1, 64, &threads)) return EXIT_USAGE; break;
        case 'n': if (cli_int("--repeat", optarg, 1, 1000, &repeat)) return EXIT_USAGE; break;
        case 'k': keep = 1; break;
        case 'c': break;
        default: return 2;
        }
    }
    char plain[4096], comp[4096];
    snprintf(plain, sizeof plain, "%s/tzr-bench-z-%d.tensors", dir, (int)getpid());
    snprintf(comp, sizeof comp, "%s/tzr-bench-z-%d.zst.tensors", dir, (int)getpid());
    tzr_writer_options wo = TZR_WRITER_OPTIONS_INIT;
    double t0 = cli_now();
    int rc = write_fn(size, layers, plain, &wo);
    double t_plain = cli_now() - t0;
    wo.compression = TZR_COMPRESSION_ZSTD;
    wo.compression_level = level;
    t0 = cli_now();
    if (!rc) rc = write_fn(size, layers, comp, &wo);
    double t_comp = cli_now() - t0;
    if (rc) return cli_lib_error(rc);
    uint64_t ps = file_size(plain), cs = file_size(comp);
    double rate = rate_mbps * 1e6;
    double s[4] = {0};
    uint64_t b[4] = {0};
    const char *paths[2] = {plain, comp};
    for (int k = 0; k < 4 && !rc; k++)
        rc = load(paths[k % 2], k < 2 ? 0 : rate, threads, k < 2 ? repeat : 1, &s[k], &b[k]);
    if (!keep) {
        unlink(plain);
        unlink(comp);
    }
    if (rc) return cli_lib_error(rc);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    printf("zstd level %d, 4 MiB frames, byte planes; %ld CPUs; tensor bytes %.1f MiB\n\n", level, cpus,
           (double)b[0] / 1048576.0);
    printf("| %-38s | %10s | %8s | %9s |\n", "case", "file MiB", "seconds", "GB/s");
    printf("|----------------------------------------|------------|----------|-----------|\n");
    printf("| %-38s | %10.1f | %8.3f | %9.3f |\n", "write uncompressed", ps / 1048576.0, t_plain, b[0] / t_plain / 1e9);
    printf("| %-38s | %10.1f | %8.3f | %9.3f |\n", "write compressed (compression speed)", cs / 1048576.0, t_comp,
           b[0] / t_comp / 1e9);
    printf("| %-38s | %10.1f | %8.3f | %9.3f |\n", "load local, uncompressed", ps / 1048576.0, s[0], b[0] / s[0] / 1e9);
    printf("| %-38s | %10.1f | %8.3f | %9.3f |\n", "load local, compressed", cs / 1048576.0, s[1], b[1] / s[1] / 1e9);
    char what[64];
    snprintf(what, sizeof what, "load at %.0f MB/s, uncompressed", rate_mbps);
    printf("| %-38s | %10.1f | %8.3f | %9.3f |\n", what, ps / 1048576.0, s[2], b[2] / s[2] / 1e9);
    snprintf(what, sizeof what, "load at %.0f MB/s, compressed", rate_mbps);
    printf("| %-38s | %10.1f | %8.3f | %9.3f |\n", what, cs / 1048576.0, s[3], b[3] / s[3] / 1e9);
    double ratio = (double)cs / (double)ps;
    printf("\nsize ratio %.3f; rate-limited time ratio %.3f (target <= size ratio: %s); local time ratio %.2f "
           "(target <= 2: %s)\n",
           ratio, s[3] / s[2], s[3] / s[2] <= ratio ? "met" : "missed", s[1] / s[0], s[1] / s[0] <= 2 ? "met" : "missed");
    return 0;
}
