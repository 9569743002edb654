#include "thread.h"
#include <signal.h>

int tzr_thread_start(pthread_t *t, void *(*fn)(void *), void *arg) {
    /* A thread inherits its creator's mask: block around the create and
     * restore. Signals raised by a fault (SEGV, BUS, FPE, ILL, TRAP, SYS)
     * are left open: blocking them makes a fault undefined behaviour. */
    sigset_t all, old;
    sigfillset(&all);
    static const int synchronous[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS};
    for (size_t i = 0; i < sizeof synchronous / sizeof *synchronous; i++) sigdelset(&all, synchronous[i]);
    int blocked = pthread_sigmask(SIG_BLOCK, &all, &old) == 0;
    int rc = pthread_create(t, NULL, fn, arg);
    if (blocked) pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}
