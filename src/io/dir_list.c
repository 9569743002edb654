/* A local directory's files by suffix (dir_list.h). */
#include "dir_list.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int tzr_dir_list(const char *dir, const char *suffix, const struct tzr_http_options *http, char ***out, size_t *n) {
    *out = NULL, *n = 0;
    DIR *d = opendir(dir);
    if (!d) return tzr_fail(TZR_EIO, "%s: cannot open directory", dir);
    size_t cap = 0, sl = strlen(suffix), dl = strlen(dir);
    int rc = 0;
    for (struct dirent *e; (e = readdir(d)) && !rc;) {
        size_t l = strlen(e->d_name);
        if (l <= sl || strcmp(e->d_name + l - sl, suffix) || e->d_name[0] == '.') continue;
        if (*n == cap) {
            char **g = realloc(*out, (cap = cap ? 2 * cap : 16) * sizeof *g);
            if (!g) {
                rc = tzr_fail(TZR_ENOMEM, "out of memory");
                break;
            }
            *out = g;
        }
        size_t pl = dl + l + 2;
        if (!((*out)[*n] = malloc(pl))) rc = tzr_fail(TZR_ENOMEM, "out of memory");
        else snprintf((*out)[(*n)++], pl, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (!rc) qsort(*out, *n, sizeof **out, cmp_str);
    return rc;
}
