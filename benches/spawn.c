/* spawn: run one command the way a runtime runs a CNI plugin, and report its cost.
 *
 *   spawn CMD [ARGS...]     (stdin, stdout, stderr and the environment pass through)
 *
 * Writes "<wall_ns> <maxrss_kb> <exit_code> <cpu_us>\n" to fd 3, then exits 0 (cpu_us: the
 * child's user + system time, and that of the children it reaped).
 *
 * Why a C trampoline and not the harness's own posix_spawn: on exec the kernel folds the
 * high-water RSS of the *old* address space into the child's ru_maxrss, and a vfork/fork child
 * of the Python harness starts out with Python's ~17 MiB. Forked from this ~1 MiB process, the
 * plugin's ru_maxrss (from wait4) is its own peak (and that of any child it reaps, such as
 * the IPAM plugin). Wall time is fork to reap, measured here, so the trampoline's own start
 * is not in it.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: spawn CMD [ARGS...]\n");
        return 2;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 2;
    }
    if (pid == 0) {
        close(3);
        execv(argv[1], argv + 1);
        perror("exec");
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0) {
        perror("wait4");
        return 2;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long long ns = (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    long long cpu_us = (long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000LL +
                       ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
    dprintf(3, "%lld %ld %d %lld\n", ns, ru.ru_maxrss, code, cpu_us);
    return 0;
}
