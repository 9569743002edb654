#include "cli_output.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "tzr_http.h"

volatile sig_atomic_t cli_stop_signal;

static char target_text[4200], extra_path[4200];
/* What the handler says was kept: [0] from cli_output_guard, [1] from
 * cli_output_note, switched by one store so the handler never sees a
 * half-written text. */
static char kept_texts[2][8600];
static volatile sig_atomic_t kept_which;
#define kept_text kept_texts[kept_which]

static const char *kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

int cli_output_check(const char *path, int force) {
    struct stat st;
    /* Only the schemes the library opens are URLs: "x://keep.tensors" is
     * a local path (directory "x:") and is checked as one. */
    if (cli_is_s3(path)) {
        int rc = tzr_s3_exists(path, cli_http());
        if (rc < 0) {
            cli_error("%s: cannot tell whether it exists: %s", path, tzr_last_error());
            return -1;
        }
        if (rc == 0 || force) return 0;
        cli_error("%s exists; give --force to replace it", path);
        return -1;
    }
    if (cli_is_url(path)) return 0; /* http(s): refused when opened for writing */
    if (lstat(path, &st) != 0) {
        /* Missing: its directory must exist (the library says the same at
         * open; here it is said before any input is read). */
        char dir[4200];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (!slash) return 0;
        slash[slash == dir] = 0;
        if (stat(dir, &st) == 0) return 0;
        cli_error("%s: directory '%s' %s", path, dir, errno == ENOENT ? "does not exist" : strerror(errno));
        return -1;
    }
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        cli_error("%s is %s; refusing to replace it with a file", path, kind_of(st.st_mode));
        return -1;
    }
    if (force) return 0;
    cli_error("%s exists; give --force to replace it", path);
    return -1;
}

static const char *sig_name(int sig) {
    switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
    }
}

static void put(const char *s) {
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(2, s, n);
        if (w <= 0 && errno != EINTR) return;
        if (w > 0) s += w, n -= (size_t)w;
    }
}

/* Only async-signal-safe calls from here on. */
static void on_stop(int sig) {
    int again = cli_stop_signal != 0, removed = tzr_output_remove_temporaries();
    if (extra_path[0] && unlink(extra_path) == 0) removed++;
    cli_stop_signal = sig;
    if (!removed && !again) return; /* the tool reports at its next check */
    put(cli_prog);
    put(": interrupted by ");
    put(sig_name(sig));
    put(": ");
    put(kept_text);
    put("\n");
    _exit(128 + sig);
}

void cli_output_guard(const char *target, const char *extra) {
    struct stat st;
    int existed = !cli_is_url(target) && lstat(target, &st) == 0;
    snprintf(target_text, sizeof target_text, "%s", target);
    snprintf(extra_path, sizeof extra_path, "%s", extra ? extra : "");
    kept_which = 0;
    if (cli_is_url(target)) snprintf(kept_texts[0], sizeof kept_texts[0], "nothing written to %s", target);
    else if (existed) snprintf(kept_texts[0], sizeof kept_texts[0], "nothing written, existing %s left untouched", target);
    else snprintf(kept_texts[0], sizeof kept_texts[0], "nothing written, %s not created", target);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop; /* no SA_RESTART: a blocked read returns EINTR */
    sigfillset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN); /* past a file size limit: EFBIG, reported, not a silent kill */
}

void cli_output_note(const char *kept) {
    snprintf(kept_texts[1], sizeof kept_texts[1], "%s", kept);
    kept_which = 1;
}

int cli_output_stopped(int committed) {
    int sig = cli_stop_signal;
    tzr_output_remove_temporaries();
    if (extra_path[0]) unlink(extra_path);
    if (committed) cli_error("interrupted by %s after %s was completely written; kept", sig_name(sig), target_text);
    else cli_error("interrupted by %s: %s", sig_name(sig), kept_text);
    return 128 + sig;
}
