#include "cli.h"

#include <errno.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

const char *cli_prog = "tzr";

void cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", cli_prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

const char *cli_index_option;

const char *cli_printable(const char *s, char *buf, size_t cap) {
    size_t o = 0;
    for (; *s && o + 8 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != 0x7f && c != '\\') buf[o++] = (char)c;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    if (*s) memcpy(buf + o, "...", 4);
    else buf[o] = 0;
    return buf;
}

void cli_lib_message(const char *msg) {
    if (cli_index_option && strstr(msg, "index full"))
        cli_error("%s; give a larger %s N, or none: this tool sizes the index for its tensors itself", msg,
                  cli_index_option);
    else cli_error("%s", msg);
}

int cli_lib_error(int rc) {
    const char *msg = tzr_last_error();
    if (msg && *msg) cli_lib_message(msg);
    else cli_error("%s", tzr_strerror(rc));
    return EXIT_FAIL;
}

static unsigned char *slurp(const char *path, size_t *len, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_error("%s: %s", path, strerror(errno));
        return NULL;
    }
    unsigned char *buf = malloc(cap + 1);
    size_t n = buf ? fread(buf, 1, cap + 1, f) : 0;
    fclose(f);
    if (!buf) return NULL;
    if (n > cap) {
        cli_error("%s: file too large for key material", path);
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static tzr_http_options http_opts = TZR_HTTP_OPTIONS_INIT;
static int timeout_given;

const tzr_http_options *cli_http(void) {
    if (!timeout_given) { /* the environment's default, read here, by the tool */
        const char *env = getenv("TZR_HTTP_TIMEOUT");
        double v = env && *env ? strtod(env, NULL) : 0;
        if (v > 0) http_opts.stall_timeout_s = http_opts.connect_timeout_s = v;
        timeout_given = 1;
    }
    return &http_opts;
}

int cli_set_ca_bundle(const char *path) {
    if (access(path, R_OK) != 0) {
        cli_error("--ca-bundle: %s: %s", path, strerror(errno));
        return -1;
    }
    http_opts.ca_bundle = path; /* argv: lives as long as the tool */
    return 0;
}

int cli_set_timeout(const char *seconds) {
    char *end;
    errno = 0;
    double v = strtod(seconds, &end);
    if (errno || end == seconds || *end || !(v > 0) || v > 86400) {
        cli_error("--timeout: '%s' is not a number of seconds (0 < N <= 86400)", seconds);
        return -1;
    }
    http_opts.stall_timeout_s = http_opts.connect_timeout_s = v;
    timeout_given = 1;
    return 0;
}

int cli_load_key_file(cli_crypt *c, const char *path) {
    size_t n;
    unsigned char *b = slurp(path, &n, 4096);
    if (!b) return -1;
    if (n != 32) {
        cli_error("%s: a key file holds exactly 32 raw bytes, this one has %zu", path, n);
        free(b);
        return -1;
    }
    memcpy(c->key, b, 32);
    memset(b, 0, n);
    free(b);
    c->have_key = 1;
    return 0;
}

int cli_load_password_file(cli_crypt *c, const char *path) {
    size_t n;
    unsigned char *b = slurp(path, &n, 1 << 20);
    if (!b) return -1;
    if (n > 0 && b[n - 1] == '\n') n--;
    c->password = (char *)b;
    c->password_len = n;
    return 0;
}

void cli_crypt_apply(const cli_crypt *c, tzr_crypt_params *p) {
    if (c->have_key) p->key = c->key;
    if (c->password) {
        p->password = c->password;
        p->password_len = c->password_len;
    }
}

void cli_crypt_clear(cli_crypt *c) {
    if (c->password) {
        memset(c->password, 0, c->password_len);
        free(c->password);
    }
    memset(c, 0, sizeof *c);
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *cli_size(uint64_t bytes, char *buf, size_t cap) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0) snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
    else snprintf(buf, cap, "%.2f %s", v, units[u]);
    return buf;
}

void cli_progress_begin(cli_progress *p, const char *label, uint64_t total) {
    p->enabled = isatty(2) && !getenv("TZR_NO_PROGRESS");
    p->total = total;
    p->start = p->last = cli_now();
    p->label = label;
}

void cli_progress_update(cli_progress *p, uint64_t done) {
    if (!p->enabled) return;
    double now = cli_now();
    if (now - p->last < 0.2 && done < p->total) return;
    p->last = now;
    double secs = now - p->start, rate = secs > 0 ? (double)done / secs : 0;
    double pct = p->total ? 100.0 * (double)done / (double)p->total : 100;
    double eta = rate > 0 && p->total > done ? (double)(p->total - done) / rate : 0;
    char a[32], b[32];
    int bar = (int)(pct / 5);
    fprintf(stderr, "\r%s [%.*s%*s] %5.1f%% %s / %s  %.2f GB/s  ETA %.0fs ", p->label, bar, "####################",
            20 - bar, "", pct, cli_size(done, a, sizeof a), cli_size(p->total, b, sizeof b), rate / 1e9, eta);
}

void cli_progress_end(cli_progress *p) {
    if (p->enabled) fprintf(stderr, "\r\033[K");
}

int cli_is_url(const char *path) { return tzr_path_kind(path) > TZR_PATH_FILE; }

int cli_is_s3(const char *path) { return tzr_path_kind(path) == TZR_PATH_S3; }

int cli_is_directory(const char *path) {
    struct stat st;
    size_t end = strcspn(path, "?#");
    if (cli_is_url(path)) return end > 0 && path[end - 1] == '/';
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int cli_ends_with(const char *path, const char *suffix) {
    size_t n = cli_is_url(path) ? strcspn(path, "?#") : strlen(path), m = strlen(suffix);
    return n >= m && strncmp(path + n - m, suffix, m) == 0;
}

int cli_match(const char *pattern, const char *name) { return fnmatch(pattern, name, 0) == 0; }

/* ---- strict option values ------------------------------------------- */
static int bad_value(const char *opt, const char *s, const char *what) {
    cli_error("%s: '%s' is not %s", opt, s, what);
    return -1;
}

/* Digits only (no sign, no spaces), no overflow. */
static int parse_digits(const char *s, uint64_t *v) {
    if (!*s) return -1;
    uint64_t x = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        unsigned d = (unsigned)(*p - '0');
        if (x > (UINT64_MAX - d) / 10) return -1;
        x = x * 10 + d;
    }
    *v = x;
    return 0;
}

int cli_uint(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    uint64_t v;
    char what[96];
    snprintf(what, sizeof what, "a whole number from %llu to %llu", (unsigned long long)lo, (unsigned long long)hi);
    if (parse_digits(s, &v) || v < lo || v > hi) return bad_value(opt, s, what);
    *out = v;
    return 0;
}

int cli_int(const char *opt, const char *s, int lo, int hi, int *out) {
    char what[96];
    snprintf(what, sizeof what, "a whole number from %d to %d", lo, hi);
    int neg = s[0] == '-' && lo < 0;
    uint64_t v;
    if (parse_digits(s + neg, &v) || v > (uint64_t)INT32_MAX + neg) return bad_value(opt, s, what);
    long long x = neg ? -(long long)v : (long long)v;
    if (x < lo || x > hi) return bad_value(opt, s, what);
    *out = (int)x;
    return 0;
}

int cli_mib(const char *opt, const char *s, uint64_t lo, uint64_t hi, size_t *bytes) {
    uint64_t v;
    if (hi > (SIZE_MAX >> 20)) hi = SIZE_MAX >> 20;
    if (cli_uint(opt, s, lo, hi, &v)) return -1;
    *bytes = (size_t)v << 20;
    return 0;
}

/* strtod over the whole string, refusing what it skips or cannot read. */
static int parse_real(const char *s, double *v, char **end) {
    if (!*s || !strchr("0123456789.", s[0])) return -1;
    errno = 0;
    *v = strtod(s, end);
    if (*end == s || errno == ERANGE || *v != *v || *v > 1e300) return -1;
    return 0;
}

int cli_double(const char *opt, const char *s, double lo, double hi, double *out) {
    double v;
    char *end, what[96];
    snprintf(what, sizeof what, "a number from %g to %g", lo, hi);
    if (parse_real(s, &v, &end) || *end || v < lo || v > hi) return bad_value(opt, s, what);
    *out = v;
    return 0;
}

int cli_bytes(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    double v;
    char *end, what[128];
    snprintf(what, sizeof what, "a size from %llu to %llu bytes (suffix K, M or G allowed)",
             (unsigned long long)lo, (unsigned long long)hi);
    if (parse_real(s, &v, &end)) return bad_value(opt, s, what);
    switch (*end) {
    case 0: break;
    case 'k': case 'K': v *= 1024, end++; break;
    case 'm': case 'M': v *= 1048576, end++; break;
    case 'g': case 'G': v *= 1073741824, end++; break;
    default: return bad_value(opt, s, what);
    }
    if (*end || v < (double)lo || v > (double)hi) return bad_value(opt, s, what);
    *out = (uint64_t)v;
    return 0;
}

int cli_int_list(const char *opt, const char *s, int lo, int hi, long *out, int cap) {
    char item[32], what[96];
    int n = 0;
    snprintf(what, sizeof what, "a list of whole numbers from %d to %d, such as 8,16", lo, hi);
    for (const char *p = s;; n++) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        uint64_t v;
        if (n == cap || len == 0 || len >= sizeof item) return bad_value(opt, s, what);
        memcpy(item, p, len);
        item[len] = 0;
        if (lo < 0 || parse_digits(item, &v) || v < (uint64_t)lo || v > (uint64_t)hi) return bad_value(opt, s, what);
        out[n] = (long)v;
        if (!comma) return n + 1;
        p = comma + 1;
    }
}

int cli_run_child(int (*fn)(void *ctx, void *out), void *ctx, void *out, size_t out_len, int *status,
                  long *maxrss_kib) {
    int fds[2];
    if (pipe(fds)) return CLI_CHILD_NOT_STARTED;
    /* Output still buffered would be the child's too: ThreadSanitizer's
     * _exit flushes it, and a table row piped to a file came out twice. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return CLI_CHILD_NOT_STARTED;
    }
    if (pid == 0) {
        close(fds[0]);
        int rc = fn(ctx, out);
        if (write(fds[1], &rc, sizeof rc) != (ssize_t)sizeof rc || write(fds[1], out, out_len) != (ssize_t)out_len)
            _exit(3);
        _exit(0);
    }
    close(fds[1]);
    int rc = 0;
    ssize_t got = read(fds[0], &rc, sizeof rc), got_out = got == (ssize_t)sizeof rc ? read(fds[0], out, out_len) : 0;
    close(fds[0]);
    int wst;
    struct rusage ru;
    wait4(pid, &wst, 0, &ru);
    if (maxrss_kib) *maxrss_kib = ru.ru_maxrss;
    if (got != (ssize_t)sizeof rc || got_out != (ssize_t)out_len) return CLI_CHILD_DIED;
    if (status) *status = rc;
    return CLI_CHILD_OK;
}
