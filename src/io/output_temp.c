/* Temporary-file names, stale-file removal and the signal-safe registry of
 * atomic local outputs (output_temp.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "output_temp.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

int tzr_temp_prefix(char *buf, size_t cap, const char *base) {
    size_t n = strlen(base), keep = n;
    if (keep > TZR_TEMP_NAME_KEEP) {
        keep = TZR_TEMP_NAME_KEEP;
        while (keep > 0 && ((unsigned char)base[keep] & 0xC0) == 0x80) keep--; /* whole UTF-8 characters */
    }
    uint32_t h = 2166136261u; /* FNV-1a of the whole name: cut names stay apart */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)base[i]) * 16777619u;
    int len = snprintf(buf, cap, ".%.*s.%08x.", (int)keep, base, (unsigned)h);
    return len < 0 || (size_t)len >= cap ? -1 : len;
}

static int is_alnum(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

long tzr_temp_pid(const char *name, const char *prefix) {
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) != 0) return -1;
    const char *p = name + pl;
    long pid = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (++digits > 10) return -1;
        pid = pid * 10 + (*p - '0');
    }
    if (!digits || pid <= 0 || pid > 0x7fffffffL || *p++ != '.') return -1;
    for (int i = 0; i < 6; i++, p++)
        if (!is_alnum(*p)) return -1;
    return strcmp(p, ".tmp") == 0 ? pid : -1;
}

int tzr_temp_remove_stale(const char *dir, const char *prefix) {
    DIR *d = opendir(*dir ? dir : ".");
    if (!d) return 0;
    int removed = 0;
    pid_t self = getpid();
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long pid = tzr_temp_pid(e->d_name, prefix);
        if (pid <= 0 || pid == (long)self) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to judge */
        /* A writer in another pid namespace still holds its lock. */
        int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0 &&
            unlinkat(dirfd(d), e->d_name, 0) == 0)
            removed++;
        close(fd);
    }
    closedir(d);
    return removed;
}

/* ---- registry: lock-free so that a signal handler may empty it ---------- */
#define TEMP_SLOTS 64
#define TEMP_PATH_MAX 4096
enum { SLOT_FREE, SLOT_FILLING, SLOT_LIVE, SLOT_TAKEN };
static atomic_int slot_state[TEMP_SLOTS];
static char slot_path[TEMP_SLOTS][TEMP_PATH_MAX];

int tzr_temp_register(const char *path) {
    size_t n = strlen(path);
    if (n >= TEMP_PATH_MAX) return -1;
    for (int i = 0; i < TEMP_SLOTS; i++) {
        int want = SLOT_FREE;
        if (!atomic_compare_exchange_strong(&slot_state[i], &want, SLOT_FILLING)) continue;
        memcpy(slot_path[i], path, n + 1);
        atomic_store(&slot_state[i], SLOT_LIVE);
        return i;
    }
    return -1;
}

int tzr_temp_claim(int slot) {
    if (slot < 0 || slot >= TEMP_SLOTS) return 1;
    int want = SLOT_LIVE;
    /* A slot a handler took stays taken: the handler may still read it. */
    return atomic_compare_exchange_strong(&slot_state[slot], &want, SLOT_FREE);
}

int tzr_output_remove_temporaries(void) {
    int removed = 0;
    for (int i = 0; i < TEMP_SLOTS; i++) {
        int want = SLOT_LIVE;
        if (atomic_compare_exchange_strong(&slot_state[i], &want, SLOT_TAKEN) && unlink(slot_path[i]) == 0)
            removed++;
    }
    return removed;
}
