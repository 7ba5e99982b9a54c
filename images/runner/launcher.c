/*
 * The warm-pool launcher: runs exactly one command in its (single-use) container.
 *
 * Started as the container's main process (under tini), with the same user and
 * restrictions as the command.  It listens on a Unix socket inside the run's own
 * workspace mount, accepts exactly one connection, then removes the socket so nothing
 * else can reach it.  Written in C so that a warm container is ready, and a command
 * starts, in about a millisecond.
 *
 * Request (host -> launcher): u32 count, then count fields of u32 length + bytes, all
 * big-endian: command, cwd, stdin path ("" for none), then "NAME=value" environment
 * entries (merged over the launcher's own environment, as Docker merges a container's
 * environment over the image's).
 *
 * Frames (launcher -> host): 1 byte kind + u32 big-endian length + payload:
 *   'O' stdout bytes, 'E' stderr bytes, 'X' {"exit_code": N} (last).
 *
 * When the command's main process exits, whatever it left behind is killed, so the
 * workspace is final when the exit frame arrives -- as in a container per run, which
 * ends with its main process.  With --container (the runtime passes it; the launcher
 * is then the main process of a container's own PID namespace) that is
 * kill(-1, SIGKILL): every process of the container but PID 1 and this one.  Without
 * it only the command's process group is killed: kill(-1) anywhere else would kill
 * every process its user may signal.  The host still kills and removes the container.
 *
 * The command cannot reach the launcher: the launcher makes itself non-dumpable
 * (PR_SET_DUMPABLE 0: no ptrace attach, no /proc/<pid>/mem or fd access by the same
 * uid; gVisor honours it for ptrace and mem, and its /proc cannot reopen the socket to
 * the host either), and the command runs under a seccomp filter, stacked on the engine's profile,
 * that refuses ptrace, process_vm_readv/writev, io_uring, system calls of any other ABI,
 * and AF_VSOCK sockets (a network namespace does not cover vsock; --allow-vsock lifts
 * that).  io_uring is refused because its IORING_OP_SOCKET makes sockets without the
 * socket() call the filter inspects.  A command that signals the launcher (same uid)
 * only ends its own run: the host then reports no exit status and kills the container.
 *
 * `launcher [--allow-vsock] --exec -- PROGRAM ARGS...` applies the same filter and
 * execs PROGRAM: the per-run (cold) container starts its command that way, so one
 * piece of code guards both paths.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_FIELDS 4096
#define MAX_FIELD (1u << 20)
#define CHUNK 65536

extern char **environ;

#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#define X32_BIT 0x40000000u
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#define X32_BIT 0u
#else
#error "the launcher's seccomp filter knows x86_64 and aarch64"
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

#define DENY BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA))
#define ALLOW BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

/* Refuse what would let the command reach the launcher or leave the network namespace. */
static int restrict_command(int allow_vsock) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0),
        DENY, /* another ABI (i386, arm32): none of it is needed, all of it refused */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, X32_BIT ? X32_BIT : 0xffffffffu, 0, 1),
        DENY, /* the x32 ABI */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ptrace, 0, 1),
        DENY,
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 0, 1),
        DENY,
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 0, 1),
        DENY,
        /* io_uring (the engine's profile allows it before Docker 25) makes sockets
         * (IORING_OP_SOCKET) without the socket system call this filter checks. */
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, __NR_io_uring_setup, 0, 2),
        BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, __NR_io_uring_register, 1, 0),
        DENY,
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socketpair, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, allow_vsock ? 0xffffffffu : AF_VSOCK, 0, 1),
        DENY,
        ALLOW,
    };
    struct sock_fprog program = {.len = sizeof filter / sizeof filter[0], .filter = filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program);
}

static void die(const char *what) {
    perror(what);
    _exit(111);
}


static int read_exact(int fd, void *buf, size_t size) {
    char *p = buf;
    while (size) {
        ssize_t n = read(fd, p, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        size -= (size_t)n;
    }
    return 0;
}

static int write_all(int fd, const void *buf, size_t size) {
    const char *p = buf;
    while (size) {
        ssize_t n = send(fd, p, size, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        p += n;
        size -= (size_t)n;
    }
    return 0;
}

static uint32_t be32(const unsigned char *b) {
    return ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | b[3];
}

static int frame(int conn, char kind, const void *data, uint32_t size) {
    unsigned char head[5] = {(unsigned char)kind, size >> 24, size >> 16, size >> 8, size};
    if (write_all(conn, head, 5)) return -1;
    return size ? write_all(conn, data, size) : 0;
}

/* Read one field of the request into a fresh NUL-terminated buffer. */
static char *read_field(int conn) {
    unsigned char len[4];
    if (read_exact(conn, len, 4)) return NULL;
    uint32_t size = be32(len);
    if (size > MAX_FIELD) return NULL;
    char *field = malloc(size + 1);
    if (!field || read_exact(conn, field, size)) return NULL;
    field[size] = '\0';
    return field;
}

static size_t name_length(const char *entry) {
    const char *eq = strchr(entry, '=');
    return eq ? (size_t)(eq - entry) : strlen(entry);
}

/* The request's entries, then the launcher's own ones the request does not set. */
static char **merge_environment(char **given, size_t count) {
    size_t own = 0;
    while (environ[own]) own++;
    char **env = calloc(count + own + 1, sizeof(char *));
    if (!env) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < count; i++) env[n++] = given[i];
    for (size_t i = 0; i < own; i++) {
        size_t len = name_length(environ[i]);
        int overridden = 0;
        for (size_t j = 0; j < count && !overridden; j++)
            overridden = name_length(given[j]) == len && strncmp(given[j], environ[i], len) == 0;
        if (!overridden) env[n++] = environ[i];
    }
    env[n] = NULL;
    return env;
}

/* Forward what one pipe has now; returns 0 at end of file or error, 1 otherwise. */
static int forward(int conn, int fd, char kind) {
    char buf[CHUNK];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return 1;
    if (n <= 0) return 0;
    if (frame(conn, kind, buf, (uint32_t)n)) _exit(0); /* the host went away */
    return 1;
}

static int usage(void) {
    fprintf(stderr, "usage: launcher [--allow-vsock] [--container] SOCKET\n"
                    "       launcher [--allow-vsock] --exec -- PROGRAM ARGS...\n");
    return 2;
}

/* launcher [--allow-vsock] --exec -- PROGRAM ARGS...: the filter, then PROGRAM in place. */
static int exec_mode(char **program, int allow_vsock) {
    if (restrict_command(allow_vsock)) die("seccomp");
    execvp(program[0], program);
    fprintf(stderr, "launcher: cannot run %s: %s\n", program[0], strerror(errno));
    return 127;
}

int main(int argc, char **argv) {
    int allow_vsock = 0, in_container = 0, exec = 0, arg = 1;
    for (; arg < argc; arg++) { /* the options, in any order */
        if (strcmp(argv[arg], "--allow-vsock") == 0) allow_vsock = 1;
        else if (strcmp(argv[arg], "--container") == 0) in_container = 1;
        else if (strcmp(argv[arg], "--exec") == 0) exec = 1;
        else break;
    }
    if (exec) {
        if (in_container || arg + 1 >= argc || strcmp(argv[arg], "--") != 0) return usage();
        return exec_mode(argv + arg + 1, allow_vsock);
    }
    if (arg != argc - 1) return usage();
    /* Not ptrace-able, its memory and descriptors not readable, by the command (same uid). */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) die("prctl");
    const char *path = argv[arg];
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    char tmp[sizeof addr.sun_path];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) die("socket path");
    memcpy(addr.sun_path, tmp, strlen(tmp) + 1);

    int server = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (server < 0) die("socket");
    if (bind(server, (struct sockaddr *)&addr, sizeof addr)) die("bind");
    if (listen(server, 1)) die("listen");
    /* The socket appears under its name only once it accepts.  gVisor can neither rename
       nor unlink a socket it made on the host: there a link publishes it, and the host
       removes both once connected. */
    if (rename(tmp, path)) {
        if (errno != EPERM) die("rename");
        const char *base = strrchr(tmp, '/');
        if (symlink(base ? base + 1 : tmp, path)) die("symlink");
    }
    int conn = accept4(server, NULL, NULL, SOCK_CLOEXEC);
    if (conn < 0) die("accept");
    close(server);
    unlink(path);

    unsigned char countb[4];
    if (read_exact(conn, countb, 4)) return 0;
    uint32_t count = be32(countb);
    if (count < 3 || count > MAX_FIELDS) return 1;
    char **fields = calloc(count, sizeof(char *));
    if (!fields) die("calloc");
    for (uint32_t i = 0; i < count; i++)
        if (!(fields[i] = read_field(conn))) return 1;
    char **env = merge_environment(fields + 3, count - 3);
    if (!env) die("environment");

    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) die("pipe");
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        setsid();
        signal(SIGPIPE, SIG_DFL);
        int in = open(fields[2][0] ? fields[2] : "/dev/null", O_RDONLY);
        if (in < 0 || dup2(in, 0) < 0 || dup2(out[1], 1) < 0 || dup2(err[1], 2) < 0) _exit(126);
        if (chdir(fields[1])) {
            dprintf(2, "launcher: cannot enter %s: %s\n", fields[1], strerror(errno));
            _exit(126);
        }
        if (restrict_command(allow_vsock)) {
            dprintf(2, "launcher: cannot restrict the command: %s\n", strerror(errno));
            _exit(126);
        }
        char *args[] = {"bash", "-c", fields[0], NULL};
        execve("/bin/bash", args, env);
        dprintf(2, "launcher: cannot run bash: %s\n", strerror(errno));
        _exit(127);
    }
    close(out[1]);
    close(err[1]);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);

    /* The main process's exit wakes poll too (a pidfd), even while leftovers keep the pipes open. */
    int pidfd = (int)syscall(SYS_pidfd_open, child, 0);
    struct pollfd fds[3] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {pidfd, POLLIN, 0}};
    int open_pipes = 2, exited = 0, status = 0;
    while (open_pipes) {
        int ready = poll(fds, 3, exited ? 0 : (pidfd >= 0 ? -1 : 5));
        if (ready < 0 && errno == EINTR) continue;
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd >= 0 && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
                if (!forward(conn, fds[i].fd, i == 0 ? 'O' : 'E')) {
                    close(fds[i].fd);
                    fds[i].fd = -1;
                    open_pipes--;
                }
            }
        }
        if (fds[2].fd >= 0 && (fds[2].revents & POLLIN)) fds[2].fd = -1;
        if (!exited && waitpid(child, &status, WNOHANG) == child) {
            exited = 1;
            continue; /* one more pass to drain what is already in the pipes */
        }
        if (exited && ready <= 0) break; /* leftovers holding the pipes die below */
    }
    if (!exited) waitpid(child, &status, 0);
    if (in_container)
        kill(-1, SIGKILL);
    else
        kill(-child, SIGKILL); /* the command's session and process group */

    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    char body[64];
    int size = snprintf(body, sizeof body, "{\"exit_code\": %d}", code);
    frame(conn, 'X', body, (uint32_t)size);
    close(conn);
    return 0;
}
