/* The golden manifest (tests/golden/manifest.json) as C structs: the
 * oracle for compatibility, written by tensorizer 2.11.1 itself. */
#ifndef TZR_TEST_GOLDEN_H
#define TZR_TEST_GOLDEN_H
#include <stddef.h>
#include <stdint.h>

typedef struct golden_tensor {
    char *name;          /* raw name bytes as tensorizer stores them */
    size_t name_len;
    int structured;
    int type, module_idx;
    char *dtype;         /* raw, may contain NUL */
    size_t dtype_len;
    uint32_t ndim;
    uint64_t shape[8];
    unsigned char *data; /* NULL when only data_sha256 is given or meta */
    size_t data_len;
    char data_sha256[65];
    int meta;
} golden_tensor;

typedef struct golden_file {
    char *file;
    uint64_t size;
    char sha256[65];
    size_t n;
    golden_tensor *t;
    unsigned char key[32];
    int has_key;
    char *password;
} golden_file;

/* Loads every file's entry; returns the count or -1. */
int golden_load(golden_file **files);
void golden_path(const golden_file *g, char *buf, size_t cap);
/* SHA-256 of n bytes as 64 lower-case hex digits. */
void golden_sha256_hex(const void *p, size_t n, char out[65]);
/* 1 when the len bytes at d are tensor e's contents as the manifest gives
 * them: its data, data of its SHA-256, or zeros for a meta tensor. */
int golden_data_ok(const golden_tensor *e, const void *d, uint64_t len);
#endif
