/* Minimal test harness: each test program runs named cases and prints one
 * line per case ("PASS name" / "FAIL name: why" / "SKIP name: why");
 * tests/run.sh counts those lines. Exit status: 0 all passed, 1 some failed,
 * 77 everything skipped. A case that evaluated no CHECK* at all (and did
 * not skip) FAILs with "no checks": a case must not pass by checking
 * nothing, e.g. when a helper gave up early. Helpers that fail mark the
 * case failed (check_fail) instead of only printing. */
#ifndef TZR_CHECK_H
#define TZR_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tzr.h"

extern int check_failed_cases, check_passed_cases, check_skipped_cases;
extern int check_case_failed;
extern int check_case_checks; /* CHECK* evaluations in the running case */
extern const char *check_case_name;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        check_case_checks++;                                                          \
        if (!(cond)) {                                                                \
            fprintf(stderr, "  %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            check_case_failed = 1;                                                    \
        }                                                                             \
    } while (0)

/* Check a libtzr call returns the given code; prints the library message. */
#define CHECK_RC(call, want)                                                               \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        check_case_checks++;                                                               \
        if (rc_ != (want)) {                                                               \
            fprintf(stderr, "  %s:%d: %s returned %d (%s), want %d; message: %s\n", __FILE__, \
                    __LINE__, #call, rc_, tzr_strerror(rc_), (int)(want), tzr_last_error()); \
            check_case_failed = 1;                                                         \
        }                                                                                  \
    } while (0)

#define CHECK_OK(call) CHECK_RC(call, 0)

/* A check with its own failure message (printf-style); counts like CHECK. */
#define CHECKF(cond, ...)                                       \
    do {                                                        \
        check_case_checks++;                                    \
        if (!(cond)) {                                          \
            fprintf(stderr, "  %s:%d: ", __FILE__, __LINE__);   \
            fprintf(stderr, __VA_ARGS__);                       \
            fputc('\n', stderr);                                \
            check_case_failed = 1;                              \
        }                                                       \
    } while (0)
/* Mark the running case failed from a helper, with a printf-style why. */
void check_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Run one case: a function void f(void). */
#define RUN(fn) check_run(#fn, fn)
void check_run(const char *name, void (*fn)(void));
/* Mark the running case skipped (call and return from the case). */
void check_skip(const char *why);
/* Print the totals; returns the exit status for main. */
int check_done(void);

/* Test data helpers. */
/* Directory holding the golden files (tests/golden, or $TZR_GOLDEN). */
const char *check_golden_dir(void);
/* Read a whole file; returns malloc'd bytes or NULL. */
unsigned char *check_read_file(const char *path, size_t *len);
/* 1 when both files can be read and hold the same bytes. */
int check_same_file(const char *a, const char *b);
int check_write_file(const char *path, const void *data, size_t len);
/* A fresh temporary directory for this process (removed at exit). */
const char *check_tmpdir(void);
/* Decode hex into a malloc'd buffer. */
unsigned char *check_unhex(const char *hex, size_t *len);

#endif
