#include "check.h"

#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int check_failed_cases, check_passed_cases, check_skipped_cases;
int check_case_failed;
int check_case_checks;
const char *check_case_name;
static int case_skipped;
static char skip_reason[256];

void check_skip(const char *why) {
    case_skipped = 1;
    snprintf(skip_reason, sizeof skip_reason, "%s", why);
}

void check_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("  ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    check_case_checks++;
    check_case_failed = 1;
}

/* A CHECK or check_fail outside any case (setup code in main, a helper
 * called between cases) fails the program instead of being forgotten. */
static void outside_cases(const char *where) {
    if (!check_case_failed) return;
    printf("FAIL setup: a check failed %s (see stderr)\n", where);
    check_failed_cases++;
    check_case_failed = 0;
}

void check_run(const char *name, void (*fn)(void)) {
    char where[300];
    snprintf(where, sizeof where, "before case %s", name);
    outside_cases(where);
    check_case_failed = 0;
    check_case_checks = 0;
    case_skipped = 0;
    check_case_name = name;
    fn();
    if (check_case_failed) {
        printf("FAIL %s\n", name);
        check_failed_cases++;
    } else if (!case_skipped && check_case_checks == 0) {
        printf("FAIL %s: no checks (the case returned before checking anything)\n", name);
        check_failed_cases++;
    } else if (case_skipped) {
        printf("SKIP %s: %s\n", name, skip_reason);
        check_skipped_cases++;
    } else {
        printf("PASS %s\n", name);
        check_passed_cases++;
    }
    check_case_failed = 0;
    check_case_name = NULL;
    fflush(stdout);
}

int check_done(void) {
    outside_cases("after the last case");
    if (check_failed_cases) return 1;
    if (check_passed_cases == 0 && check_skipped_cases > 0) return 77;
    return 0;
}

const char *check_golden_dir(void) {
    const char *d = getenv("TZR_GOLDEN");
    return d ? d : "tests/golden";
}

unsigned char *check_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) *len = (size_t)n;
    return buf;
}

int check_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, len, f) == len;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

static char tmpdir[256];
static void rm_tmpdir(void) {
    if (tmpdir[0] && !getenv("TZR_KEEP_TMP")) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0) { /* nothing more to do */ }
    }
}
const char *check_tmpdir(void) {
    if (!tmpdir[0]) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/tzr-test-XXXXXX");
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            exit(2);
        }
        atexit(rm_tmpdir);
    }
    return tmpdir;
}

unsigned char *check_unhex(const char *hex, size_t *len) {
    size_t n = strlen(hex) / 2;
    unsigned char *out = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (unsigned char)v;
    }
    *len = n;
    return out;
}

int check_same_file(const char *a, const char *b) {
    size_t la, lb;
    unsigned char *x = check_read_file(a, &la), *y = check_read_file(b, &lb);
    int same = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return same;
}
