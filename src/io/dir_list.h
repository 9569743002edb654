#ifndef TZR_DIR_LIST_H
#define TZR_DIR_LIST_H
#include "internal.h"
struct tzr_http_options;
/* The paths "DIR/NAME" of the entries of local directory dir whose names
 * end in suffix (dot files skipped), sorted by byte order; the caller
 * frees each and the array. The scheme table's listing for local paths
 * (http is unused). */
TZR_HIDDEN int tzr_dir_list(const char *dir, const char *suffix, const struct tzr_http_options *http, char ***out,
                            size_t *n);
#endif
