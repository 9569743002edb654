#include "cli.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
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

int cli_lib_error(int rc) {
    const char *msg = tzr_last_error();
    if (msg && *msg) cli_error("%s", msg);
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

int cli_set_ca_bundle(const char *path) {
    if (access(path, R_OK) != 0) {
        cli_error("--ca-bundle: %s: %s", path, strerror(errno));
        return -1;
    }
    return setenv("AWS_CA_BUNDLE", path, 1) == 0 ? 0 : -1;
}

int cli_set_timeout(const char *seconds) {
    char *end;
    errno = 0;
    double v = strtod(seconds, &end);
    if (errno || end == seconds || *end || !(v > 0) || v > 86400) {
        cli_error("--timeout: '%s' is not a number of seconds (0 < N <= 86400)", seconds);
        return -1;
    }
    return setenv("TZR_HTTP_TIMEOUT", seconds, 1) == 0 ? 0 : -1;
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

int cli_match(const char *pattern, const char *name) { return fnmatch(pattern, name, 0) == 0; }
