/* Issue 36's outside attack pass: a hostile IPAM program tries, from inside the confinement,
 * the system calls and arguments an allow-list is most likely to have forgotten, by raw
 * system call numbers (x86_64), and says for each "NAME ok" or "NAME refused ERRNO". Built and
 * run by src/confine/tests.rs (`a_hostile_ipam_program_finds_no_call_the_allow_list_forgot`).
 * Its stdin is one line: ABSTRACT PATHSOCK READFILE
 * ABSTRACT: the name (without its leading NUL) of an abstract unix socket the host listens on;
 * PATHSOCK: a pathname unix socket of root's the host listens on; READFILE: a file of root's
 * the ruleset lets it read (to take a lease and a lock on). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static void say(const char *name, long r) {
    if (r < 0)
        printf("%s refused %d\n", name, errno);
    else
        printf("%s ok\n", name);
    fflush(stdout);
}

/* A raw clone(2) with `flags`: the child exits at once. */
static long raw_clone(unsigned long flags) {
    long r = syscall(SYS_clone, flags | SIGCHLD, 0, 0, 0, 0);
    if (r == 0)
        syscall(SYS_exit, 0);
    if (r > 0)
        waitpid((pid_t)r, 0, 0);
    return r;
}

int main(void) {
    char abstract[108], pathsock[4096], readfile[4096];
    if (scanf("%100s %4095s %4095s", abstract, pathsock, readfile) != 3) {
        printf("bad input\n");
        return 2;
    }
    /* Namespaces through clone's flags: a user namespace (all capabilities inside), and the
     * same flag in the upper half of the 64-bit argument (the filter reads the low 32). */
    say("clone-newuser", raw_clone(0x10000000));
    say("clone-newuser-newns", raw_clone(0x10000000 | 0x00020000));
    say("clone-newnet", raw_clone(0x40000000));
    say("clone-plain", raw_clone(0));
    say("clone-upper-half-newuser", raw_clone(0x10000000UL << 32));
    /* clone3 with CLONE_NEWUSER behind its pointer. */
    struct {
        uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
    } c3 = {.flags = 0x10000000, .exit_signal = SIGCHLD};
    long r3 = syscall(435, &c3, sizeof c3);
    if (r3 == 0)
        syscall(SYS_exit, 0);
    say("clone3-newuser", r3);
    say("unshare-user", syscall(SYS_unshare, 0x10000000));
    say("setns", syscall(SYS_setns, 0, 0));
    say("personality", syscall(SYS_personality, 0x0040000 /* ADDR_NO_RANDOMIZE */));
    say("ptrace-traceme", syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0));
    say("ptrace-attach-reaper", syscall(SYS_ptrace, 16 /* PTRACE_ATTACH */, 1, 0, 0));
    char b[64];
    struct iovec local = {b, sizeof b}, remote = {(void *)0x400000, sizeof b};
    say("process_vm_readv-reaper", syscall(SYS_process_vm_readv, 1, &local, 1, &remote, 1, 0));
    say("kcmp", syscall(SYS_kcmp, getpid(), 1, 0 /* KCMP_FILE */, 0, 0));
    long pfd = syscall(434 /* pidfd_open */, 1, 0);
    say("pidfd_open-reaper", pfd);
    say("pidfd_getfd", syscall(438, pfd < 0 ? 1 : pfd, 0, 0));
    say("pidfd_send_signal", syscall(424, pfd < 0 ? 1 : pfd, SIGKILL, 0, 0));
    char attr[128] = {0};
    say("bpf-prog-load", syscall(SYS_bpf, 5 /* BPF_PROG_LOAD */, attr, sizeof attr));
    struct {
        uint32_t type, size;
        uint64_t config;
        char rest[112];
    } pe = {.type = 1 /* PERF_TYPE_SOFTWARE */, .size = 128};
    say("perf_event_open", syscall(SYS_perf_event_open, &pe, 0, -1, -1, 0));
    say("userfaultfd", syscall(SYS_userfaultfd, 0));
    say("mount-tmpfs", syscall(SYS_mount, "none", "/tmp", "tmpfs", 0, 0));
    say("umount2", syscall(SYS_umount2, "/proc", 2));
    say("open_tree", syscall(428, -100, "/", 0));
    say("fsopen", syscall(430, "tmpfs", 0));
    struct {
        unsigned int bytes;
        int type;
        unsigned char f[128];
    } fh = {.bytes = 128};
    int mnt;
    say("name_to_handle_at", syscall(SYS_name_to_handle_at, -100, "/etc/shadow", &fh, &mnt, 0));
    say("open_by_handle_at", syscall(SYS_open_by_handle_at, -100, &fh, 0));
    /* Socket families through socket and socketpair, and kinds within the allowed ones. */
    say("socket-packet", syscall(SYS_socket, 17 /* AF_PACKET */, SOCK_RAW, 0));
    say("socket-netlink-route", syscall(SYS_socket, 16, SOCK_RAW, 0));
    say("socket-vsock", syscall(SYS_socket, 40, SOCK_STREAM, 0));
    say("socket-alg", syscall(SYS_socket, 38, SOCK_SEQPACKET, 0));
    say("socket-family-upper-half", syscall(SYS_socket, (16UL << 32) | 16, SOCK_RAW, 0));
    int sv[2];
    say("socketpair-netlink", syscall(SYS_socketpair, 16, SOCK_RAW, 0, sv));
    say("socketpair-inet", syscall(SYS_socketpair, 2, SOCK_STREAM, 0, sv));
    say("socket-inet-raw", syscall(SYS_socket, 2, SOCK_RAW, 1));
    say("socket-inet6-raw", syscall(SYS_socket, 10, SOCK_RAW, 58));
    /* TCP and UDP listening (UDP by bind: bind is not allowed). */
    int t = socket(AF_INET, SOCK_STREAM, 0);
    say("listen-tcp", t < 0 ? t : syscall(SYS_listen, t, 1));
    struct sockaddr_in any = {.sin_family = AF_INET};
    int u = socket(AF_INET, SOCK_DGRAM, 0);
    say("bind-udp", u < 0 ? u : syscall(SYS_bind, u, &any, sizeof any));
    /* Unix sockets of the host's: abstract (Landlock ABI 6 scopes them), pathname (a known
     * residual: trust.md). */
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path + 1, abstract, strlen(abstract));
    int a = socket(AF_UNIX, SOCK_STREAM, 0);
    say("connect-abstract",
        syscall(SYS_connect, a, &sa, offsetof(struct sockaddr_un, sun_path) + 1 + strlen(abstract)));
    struct sockaddr_un sp = {.sun_family = AF_UNIX};
    strncpy(sp.sun_path, pathsock, sizeof sp.sun_path - 1);
    int p = socket(AF_UNIX, SOCK_STREAM, 0);
    say("connect-pathname", syscall(SYS_connect, p, &sp, sizeof sp));
    /* Terminal and device ioctls; the same allowed number with bits above 32. */
    char c = 'x';
    say("ioctl-tiocsti", syscall(SYS_ioctl, 0, 0x5412, &c));
    say("ioctl-tioclinux", syscall(SYS_ioctl, 0, 0x541c, &c));
    say("ioctl-siocsifflags", syscall(SYS_ioctl, t, 0x8914, b));
    /* prctl options left out of the list. */
    say("prctl-set-dumpable", syscall(SYS_prctl, 4, 1, 0, 0, 0));
    say("prctl-set-mm", syscall(SYS_prctl, 35, 8, 0, 0, 0));
    say("prctl-set-ptracer-any", syscall(SYS_prctl, 0x59616d61, -1UL, 0, 0, 0));
    say("prctl-child-subreaper", syscall(SYS_prctl, 36, 1, 0, 0, 0));
    say("prctl-capbset-drop", syscall(SYS_prctl, 24, 0, 0, 0, 0));
    /* What the allowed calls reach: the reaper's limits, a lease and a lock on root's file. */
    struct rlimit lim = {1, 1};
    say("prlimit-reaper-nofile", syscall(SYS_prlimit64, 1, RLIMIT_NOFILE, &lim, 0));
    struct rlimit big = {RLIM_INFINITY, RLIM_INFINITY};
    say("prlimit-self-raise-memlock", syscall(SYS_prlimit64, 0, RLIMIT_MEMLOCK, &big, 0));
    int rf = open(readfile, O_RDONLY);
    say("open-readfile", rf);
    say("fcntl-setlease-read", syscall(SYS_fcntl, rf, 1024 /* F_SETLEASE */, 0 /* F_RDLCK */));
    say("flock-readfile-exclusive", syscall(SYS_flock, rf, LOCK_EX | LOCK_NB));
    say("fcntl-setown-reaper", syscall(SYS_fcntl, rf, F_SETOWN, 1));
    say("fcntl-setsig", syscall(SYS_fcntl, rf, 10 /* F_SETSIG */, SIGKILL));
    int dfd = open(".", O_RDONLY | O_DIRECTORY);
    say("fcntl-notify", syscall(SYS_fcntl, dfd < 0 ? rf : dfd, 1026 /* F_NOTIFY */, 0x80000003));
    say("fcntl-getfl", syscall(SYS_fcntl, rf, F_GETFL));
    say("kill-reaper", syscall(SYS_kill, 1, SIGKILL));
    say("kill-minus-one-zero", syscall(SYS_kill, -1, 0));
    /* Calls of other conventions and numbers past the table. */
    say("syscall-500", syscall(500, 0, 0, 0));
    say("x32-read", syscall(0x40000000 | 0, 0, b, 0));
    say("io_uring_register", syscall(427, 0, 0, 0, 0));
    say("memfd_create", syscall(SYS_memfd_create, "x", 0));
    say("execveat", syscall(SYS_execveat, -1, "", 0, 0, 0x1000));
    printf("done\n");
    return 0;
}
