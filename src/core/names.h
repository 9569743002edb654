#ifndef TZR_NAMES_H
#define TZR_NAMES_H
#include "internal.h"
/* 1 if the bytes are valid UTF-8. */
TZR_HIDDEN int tzr_utf8_valid(const char *s, size_t n);
/* Validate a stored name; *structured set for 0x1E JSON names. */
TZR_HIDDEN int tzr_name_check(const char *name, size_t len, int *structured);
/* A quoted JSON string (Python ensure_ascii style); malloc'd. */
TZR_HIDDEN int tzr_json_string(const char *s, size_t n, char **out, size_t *out_len);
#endif
