/* cformers launch: runs a cformers subcommand as an MPI job, under mpirun or, inside a
 * Slurm allocation, srun, each rank with its share of the cores (docs/distributed.md). */
#include "cli.h"
#include "cli_parse.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cformers/error.h"
#include "cformers/threads.h"
#include "dist/hostfile.h"

extern char **environ;

enum { MAX_RANKS = 1 << 20, MAX_THREADS = 1024, MAX_HOSTS = CF_HOSTFILE_MAX_HOSTS };

/* Where scripts/netsim.sh writes its files unless CFORMERS_NETSIM_DIR says otherwise. */
static const char NETSIM_DIR[] = "/tmp/cformers-netsim";

/* Passed to every rank as they are here (mpirun -x NAME), besides every CFORMERS_*. */
static const char *const PASSED_ENV[] = {"PATH", "LD_LIBRARY_PATH", "TMPDIR", "ASAN_OPTIONS", "UBSAN_OPTIONS",
                                         "LSAN_OPTIONS"};

static void print_help(void) {
    printf("usage: cformers launch -n RANKS [--threads-per-rank T] [--hostfile FILE | --netsim]\n"
           "                       [--launcher auto|mpirun|srun] [--mpirun PATH] [--max-restarts K]\n"
           "                       [--heartbeat-timeout S] [--min-ranks M [--host-check CMD]]\n"
           "                       [--dry-run] -- COMMAND [ARGS...]\n"
           "\n"
           "Runs `cformers COMMAND ARGS...` (e.g. train --config ...) as an MPI job of RANKS ranks,\n"
           "this cformers binary on every rank, each rank with T compute threads (CFORMERS_THREADS=T).\n"
           "Prints the command it runs on one line (shell-quoted) to stderr, then runs it; exits with\n"
           "the job's status.\n"
           "\n"
           "options:\n"
           "  -n RANKS                the number of ranks (MPI processes), 1..%d\n"
           "  --threads-per-rank T    compute threads of each rank, 1..%d (default: the cores of the\n"
           "                          busiest host divided by its ranks, at least 1)\n"
           "  --hostfile FILE         Open MPI hostfile, one host a line: `NAME [slots=S]` (S ranks\n"
           "                          go there; without slots=, the host's core count)\n"
           "  --netsim                the two-node cluster of scripts/netsim.sh (files in\n"
           "                          $CFORMERS_NETSIM_DIR, default %s): mpirun runs\n"
           "                          inside its first node (mpirun.prefix) with its flags (mpirun.args)\n"
           "  --launcher L            auto (default): srun inside a Slurm allocation (SLURM_JOB_ID set)\n"
           "                          unless --hostfile or --netsim is given, else mpirun\n"
           "  --mpirun PATH           the mpirun to run (default: mpirun from PATH)\n"
           "  --max-restarts K        supervise the job: when it fails (a rank crashed or was killed,\n"
           "                          mpirun ended it), run it again, up to K times; a `train` job\n"
           "                          resumes from the newest valid checkpoint of its output_dir (or\n"
           "                          starts over when it had saved none). A status of 2 (the\n"
           "                          command was refused) is not retried; SIGINT / SIGTERM go to\n"
           "                          the job and end the supervision. Default 0: run it once.\n"
           "  --heartbeat-timeout S   with --max-restarts: every rank of a `train` job rewrites a file\n"
           "                          of a directory the launcher makes (CFORMERS_HEARTBEAT_DIR) after\n"
           "                          each step; one unchanged for S seconds (or none written S\n"
           "                          seconds after the start) is a hung rank: the job is killed and\n"
           "                          restarted. Ranks on other hosts need the directory shared\n"
           "                          (set CFORMERS_HEARTBEAT_DIR to a shared path). Default 600;\n"
           "                          0: no heartbeats.\n"
           "  --min-ranks M           with --hostfile: before each start (the first and every\n"
           "                          restart) check that every host answers; leave out those that\n"
           "                          do not and run on fewer ranks (RANKS x the answering hosts'\n"
           "                          share of the slots), as long as that is at least M. A `train`\n"
           "                          job keeps its global batch (RANKS x batch_size x\n"
           "                          gradient_accumulation_steps sequences a step) by accumulating\n"
           "                          more micro-batches; ZeRO-1 shards follow the new world size.\n"
           "  --host-check CMD        the check: `CMD HOST` (a shell command) exits 0 within 20 s\n"
           "                          when HOST can take ranks (default: this machine's names pass,\n"
           "                          others must answer `ssh -o BatchMode=yes HOST true`, as\n"
           "                          mpirun reaches them)\n"
           "  --dry-run               print the command to stdout instead of running it\n"
           "\n"
           "mpirun gets: -n RANKS; --allow-run-as-root when run as root; when the ranks fit (no more\n"
           "ranks than slots, and each host's ranks x T no more than the cores of this machine, taken\n"
           "as every host's) `--map-by slot:PE=T --bind-to core`, so each rank owns T cores; else\n"
           "`--bind-to none --oversubscribe` (with --netsim always, its nodes sharing these cores);\n"
           "-x CFORMERS_THREADS=T, and -x NAME for every CFORMERS_* variable and PATH,\n"
           "LD_LIBRARY_PATH, TMPDIR, ASAN_OPTIONS, UBSAN_OPTIONS, LSAN_OPTIONS where set.\n"
           "srun gets: --ntasks RANKS --cpus-per-task T --export=ALL,CFORMERS_THREADS=T (T default:\n"
           "SLURM_CPUS_PER_TASK, else this node's cores divided by the ranks per node).\n"
           "\n"
           "`mpirun -n 2 cformers train ...` works as well; the ranks' thread pools then share the\n"
           "cores of a node among its unbound ranks by themselves.\n"
           "\n"
           "examples (run from the repository root after those of tokenizer, preprocess and train):\n"
           "  cformers launch -n 2 --dry-run -- train --config tiny_shakespeare\n"
           "  cformers launch -n 2 -- train --config tiny_shakespeare --train_dataset.data_dir=out/shards \\\n"
           "      --train_dataset.tokenizer=out/tok.json --output_dir=out/dp --steps 2\n",
           MAX_RANKS, MAX_THREADS, NETSIM_DIR);
}

typedef struct launch_args {
    long ranks, threads; /* threads 0: the default share */
    long max_restarts;   /* 0: exec the launcher, no supervision */
    long min_ranks;      /* 0: every host of the hostfile is taken as up */
    double heartbeat;    /* seconds without a heartbeat that make a rank hung; 0: not watched */
    const char *hostfile, *mpirun, *launcher; /* mpirun NULL: the one on PATH */
    const char *host_check;                   /* NULL: local names, else ssh */
    bool dry_run, netsim;
    char **command; /* COMMAND ARGS..., NULL-terminated (argv's tail) */
} launch_args;

/* A growing NULL-terminated argument vector; every word is its own copy. */
typedef struct words {
    char **v;
    int n, cap;
} words;

static void push(words *w, const char *word) {
    if (w->n + 2 > w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->v = cf_xrealloc(w->v, (size_t)w->cap * sizeof *w->v);
    }
    w->v[w->n++] = cf_xstrdup(word);
    w->v[w->n] = NULL;
}

static void pushf(words *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pushf(words *w, const char *fmt, ...) {
    char buf[PATH_MAX + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    push(w, buf);
}

static void free_words(words *w) {
    for (int i = 0; i < w->n; i++) free(w->v[i]);
    free(w->v);
}

static bool has_arg(char *const *argv, const char *arg) {
    for (; *argv; argv++)
        if (strcmp(*argv, arg) == 0) return true;
    return false;
}

/* Pushes one word per non-empty line of `path`; false (errno set) when it cannot be read. */
static bool push_lines(words *w, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len > 0) push(w, line);
    }
    free(line);
    fclose(f);
    return true;
}

static int parse_args(int argc, char **argv, launch_args *a) {
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        const char *o = argv[i], *v = NULL;
        bool takes_value = strcmp(o, "-n") == 0 || strcmp(o, "--threads-per-rank") == 0 ||
                           strcmp(o, "--max-restarts") == 0 || strcmp(o, "--heartbeat-timeout") == 0 ||
                           strcmp(o, "--hostfile") == 0 || strcmp(o, "--launcher") == 0 || strcmp(o, "--mpirun") == 0 ||
                           strcmp(o, "--min-ranks") == 0 || strcmp(o, "--host-check") == 0;
        if (takes_value && cli_flag_value("launch", argc, argv, &i, &v) != 0) return 2;
        if (strcmp(o, "-n") == 0) {
            if (cli_parse_long("launch", o, v, 1, MAX_RANKS, &a->ranks) != 0) return 2;
        } else if (strcmp(o, "--threads-per-rank") == 0) {
            if (cli_parse_long("launch", o, v, 1, MAX_THREADS, &a->threads) != 0) return 2;
        } else if (strcmp(o, "--max-restarts") == 0) {
            if (cli_parse_long("launch", o, v, 0, 1000, &a->max_restarts) != 0) return 2;
        } else if (strcmp(o, "--heartbeat-timeout") == 0) {
            long s;
            if (cli_parse_long("launch", o, v, 0, 1000000, &s) != 0) return 2;
            a->heartbeat = (double)s;
        } else if (strcmp(o, "--min-ranks") == 0) {
            if (cli_parse_long("launch", o, v, 1, MAX_RANKS, &a->min_ranks) != 0) return 2;
        } else if (strcmp(o, "--host-check") == 0) {
            a->host_check = v;
        } else if (strcmp(o, "--hostfile") == 0) {
            a->hostfile = v;
        } else if (strcmp(o, "--launcher") == 0) {
            if (strcmp(v, "auto") != 0 && strcmp(v, "mpirun") != 0 && strcmp(v, "srun") != 0)
                return cli_usage_error("launch", "--launcher: '%s' is not auto, mpirun or srun", v);
            a->launcher = v;
        } else if (strcmp(o, "--mpirun") == 0) {
            a->mpirun = v;
        } else if (strcmp(o, "--netsim") == 0) {
            a->netsim = true;
        } else if (strcmp(o, "--dry-run") == 0) {
            a->dry_run = true;
        } else if (o[0] != '-') {
            return cli_usage_error("launch", "'%s': the command to run goes after --", o);
        } else {
            return cli_usage_error("launch", "unknown option '%s'", o);
        }
    }
    if (a->ranks == 0) return cli_usage_error("launch", "-n RANKS is required");
    if (i + 1 >= argc)
        return cli_usage_error("launch", "the command to run goes after --, e.g. -- train --config FILE");
    a->command = argv + i + 1;
    if (strcmp(a->command[0], "launch") == 0) return cli_usage_error("launch", "cannot launch launch");
    if (a->hostfile && a->netsim) return cli_usage_error("launch", "--hostfile and --netsim do not go together");
    if (a->min_ranks > a->ranks) return cli_usage_error("launch", "--min-ranks %ld is more than -n %ld", a->min_ranks, a->ranks);
    if (a->min_ranks && !a->hostfile) return cli_usage_error("launch", "--min-ranks needs --hostfile (the hosts it checks)");
    if (a->host_check && !a->min_ranks) return cli_usage_error("launch", "--host-check goes with --min-ranks");
    const char *slurm = getenv("SLURM_JOB_ID");
    if (strcmp(a->launcher, "auto") == 0)
        a->launcher = slurm && *slurm && !a->hostfile && !a->netsim ? "srun" : "mpirun";
    if (strcmp(a->launcher, "srun") == 0 && (a->hostfile || a->netsim || a->mpirun))
        return cli_usage_error("launch", "--hostfile, --netsim and --mpirun go with mpirun, not srun");
    return 0;
}

typedef cf_host_entry host_entry;

static void free_hosts(host_entry *hosts, int n) { cf_hostfile_free(hosts, n); }

/* Reads the hostfile (dist/hostfile.h) into hosts[] (MAX_HOSTS of them). Returns the host
 * count (free_hosts them), or -1 after the usage error. */
static int read_hostfile(const char *path, long cores, host_entry *hosts) {
    cf_error err = {{0}};
    int n = cf_hostfile_read(path, cores, MAX_RANKS, hosts, &err);
    if (n < 0) cli_usage_error("launch", "--hostfile: %s", err.msg);
    return n;
}

/* Ranks on the busiest host when `ranks` fill the hosts' slots in order (mpirun's
 * --map-by slot), or 0 when there are more ranks than slots. */
static long busiest_host(const host_entry *hosts, int n_hosts, long ranks) {
    long most = 0;
    for (int i = 0; i < n_hosts && ranks > 0; i++) {
        long here = ranks < hosts[i].slots ? ranks : hosts[i].slots;
        if (here > most) most = here;
        ranks -= here;
    }
    return ranks > 0 ? 0 : most;
}

static long share(long cores, long ranks) { return cores / ranks > 0 ? cores / ranks : 1; }

/* Appends what every mpirun command gets after the hosts: the binding, root permission,
 * the threads and the environment. shared_cores: the hosts are this machine's cores. */
static void push_mpirun_tail(words *w, const launch_args *a, const host_entry *hosts, int n_hosts,
                             bool shared_cores) {
    long cores = cf_usable_cores(), busiest = busiest_host(hosts, n_hosts, a->ranks);
    long per_host = shared_cores ? a->ranks : busiest ? busiest : (a->ranks + n_hosts - 1) / n_hosts;
    long threads = a->threads ? a->threads : share(cores, per_host);
    if (geteuid() == 0) push(w, "--allow-run-as-root");
    if (!shared_cores && busiest && busiest * threads <= cores) {
        push(w, "--map-by");
        pushf(w, "slot:PE=%ld", threads);
        push(w, "--bind-to");
        push(w, "core");
    } else {
        if (!shared_cores) { /* netsim's own flags say it */
            push(w, "--bind-to");
            push(w, "none");
        }
        push(w, "--oversubscribe");
    }
    push(w, "-x");
    pushf(w, "CFORMERS_THREADS=%ld", threads);
    for (char **e = environ; *e; e++) {
        size_t name_len = strcspn(*e, "=");
        if (strncmp(*e, "CFORMERS_", 9) == 0 && strncmp(*e, "CFORMERS_THREADS=", 17) != 0) {
            push(w, "-x");
            pushf(w, "%.*s", (int)name_len, *e);
        }
    }
    for (size_t i = 0; i < sizeof PASSED_ENV / sizeof PASSED_ENV[0]; i++)
        if (getenv(PASSED_ENV[i])) {
            push(w, "-x");
            push(w, PASSED_ENV[i]);
        }
}

static int netsim_missing(const char *path) {
    fprintf(stderr, "cformers launch: --netsim: cannot read %s (%s): run scripts/netsim.sh up first\n", path,
            strerror(errno));
    return 1;
}

/* The mpirun command before the program; returns 0, or 1/2 after saying why not. */
static int push_mpirun(words *w, const launch_args *a) {
    static host_entry hosts[MAX_HOSTS];
    long local = cf_usable_cores();
    int n_hosts = 1;
    hosts[0] = (host_entry){.slots = local};
    const char *dir = getenv("CFORMERS_NETSIM_DIR"), *hostfile = a->hostfile;
    if (!dir || !*dir) dir = NETSIM_DIR;
    char prefix[PATH_MAX], args[PATH_MAX], netsim_hosts[PATH_MAX];
    snprintf(prefix, sizeof prefix, "%s/mpirun.prefix", dir);
    snprintf(args, sizeof args, "%s/mpirun.args", dir);
    snprintf(netsim_hosts, sizeof netsim_hosts, "%s/hostfile", dir);
    if (a->netsim && !push_lines(w, prefix)) return netsim_missing(prefix);
    push(w, a->mpirun ? a->mpirun : "mpirun");
    push(w, "-n");
    pushf(w, "%ld", a->ranks);
    if (a->netsim) {
        if (!push_lines(w, args)) return netsim_missing(args);
        hostfile = netsim_hosts; /* mpirun.args names it */
    } else if (hostfile) {
        push(w, "--hostfile");
        push(w, hostfile);
    }
    if (hostfile && (n_hosts = read_hostfile(hostfile, local, hosts)) < 0) return 2;
    push_mpirun_tail(w, a, hosts, n_hosts, a->netsim);
    if (hostfile) free_hosts(hosts, n_hosts);
    return 0;
}

/* A positive count in environment variable `name`, or 0. */
static long env_count(const char *name) {
    const char *v = getenv(name);
    char *end;
    long n = v ? strtol(v, &end, 10) : 0;
    return v && *v && !*end && n > 0 ? n : 0;
}

/* The srun command before the program: srun places and binds the ranks itself. */
static void push_srun(words *w, const launch_args *a) {
    long nodes = env_count("SLURM_JOB_NUM_NODES"), per_task = env_count("SLURM_CPUS_PER_TASK");
    long per_node = (a->ranks + (nodes ? nodes : 1) - 1) / (nodes ? nodes : 1);
    long threads = a->threads                                  ? a->threads
                   : per_task > 0 && per_task <= MAX_THREADS ? per_task
                                                             : share(cf_usable_cores(), per_node);
    push(w, "srun");
    push(w, "--ntasks");
    pushf(w, "%ld", a->ranks);
    push(w, "--cpus-per-task");
    pushf(w, "%ld", threads);
    pushf(w, "--export=ALL,CFORMERS_THREADS=%ld", threads);
}

static const char SHELL_PLAIN[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789@%+=:,./_-";

/* Writes the command as one shell line: words with characters a shell treats specially
 * in single quotes. */
static void print_command(FILE *out, char *const *argv) {
    for (int i = 0; argv[i]; i++) {
        const char *s = argv[i];
        bool plain = *s && s[strspn(s, SHELL_PLAIN)] == '\0';
        fputs(i ? " " : "", out);
        if (plain) {
            fputs(s, out);
            continue;
        }
        fputc('\'', out);
        for (; *s; s++) {
            if (*s == '\'') fputs("'\\''", out); /* close, an escaped quote, reopen */
            else fputc(*s, out);
        }
        fputc('\'', out);
    }
    fputc('\n', out);
}

/* ---- hosts that are down (--min-ranks) ---- */

static bool is_local(const char *host) {
    char me[256] = "";
    gethostname(me, sizeof me - 1);
    return strcmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0 ||
           strcmp(host, me) == 0;
}

/* Whether `host` can take ranks: `check HOST` (a shell command) exits 0 within 20 s;
 * without a check, this machine's names pass and others must answer ssh in batch mode. */
static bool host_up(const char *host, const char *check) {
    if (!check && is_local(host)) return true;
    char command[PATH_MAX + 16];
    if (check) snprintf(command, sizeof command, "%s \"$1\"", check);
    pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
        }
        if (check) execl("/bin/sh", "sh", "-c", command, "sh", host, (char *)NULL);
        else execlp("ssh", "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", host, "true", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    for (int waited = 0;; waited++) {
        pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid) return WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if ((got < 0 && errno != EINTR) || waited == 400) break;
        nanosleep(&(struct timespec){.tv_nsec = 50000000}, NULL);
    }
    kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return false;
}

/* With --min-ranks: writes the lines of a->hostfile's hosts that are up (host_up) to
 * `path` and returns the ranks they take: a->ranks times their share of the slots (all of
 * them when every host is up), or 0 after saying why the job cannot start (fewer than
 * a->min_ranks, or `path` not written). */
static long choose_hosts(const launch_args *a, const char *path) {
    static host_entry hosts[MAX_HOSTS];
    int n = read_hostfile(a->hostfile, cf_usable_cores(), hosts);
    if (n < 0) return 0;
    FILE *f = fopen(path, "w");
    long all = 0, up = 0;
    for (int i = 0; i < n && f; i++) {
        all += hosts[i].slots;
        if (!host_up(hosts[i].name, a->host_check)) {
            fprintf(stderr, "cformers launch: host %s does not answer (%s); leaving its %ld slot%s out\n",
                    hosts[i].name, a->host_check ? a->host_check : "ssh", hosts[i].slots, hosts[i].slots == 1 ? "" : "s");
            continue;
        }
        up += hosts[i].slots;
        fprintf(f, "%s\n", hosts[i].line);
    }
    free_hosts(hosts, n);
    if (!f || fclose(f) != 0) {
        fprintf(stderr, "cformers launch: cannot write the hostfile %s: %s\n", path, strerror(errno));
        return 0;
    }
    long ranks = up == all ? a->ranks : (long)((double)a->ranks * (double)up / (double)all);
    if (ranks < a->min_ranks) {
        fprintf(stderr, "cformers launch: the hosts that answer take %ld of the %ld ranks, fewer than --min-ranks %ld; "
                        "not starting the job\n", ranks, a->ranks, a->min_ranks);
        return 0;
    }
    if (ranks < a->ranks)
        fprintf(stderr, "cformers launch: running %ld of the %ld ranks (--min-ranks %ld)\n", ranks, a->ranks,
                a->min_ranks);
    return ranks;
}

/* The job's words: the launcher's (for a->ranks on a->hostfile), this program `exe`, the
 * command, and --resume where `resume` (a restarted train job) and not there yet. Returns
 * the index of the command in w, or -1/-2 after saying why not (status 1/2). */
static int job_words(words *w, const launch_args *a, const char *exe, bool resume) {
    int rc = 0;
    if (strcmp(a->launcher, "srun") == 0) push_srun(w, a);
    else rc = push_mpirun(w, a);
    if (rc != 0) return -rc;
    push(w, exe);
    int command_at = w->n;
    for (char *const *c = a->command; *c; c++) push(w, *c);
    if (resume && !has_arg(a->command, "--resume")) push(w, "--resume");
    return command_at;
}

/* ---- supervision (--max-restarts) ---- */

static volatile sig_atomic_t stop_signal; /* SIGINT or SIGTERM received: forwarded, no restart */
static volatile pid_t job_pid;

static void forward_signal(int sig) {
    stop_signal = sig;
    if (job_pid > 0) kill(job_pid, sig);
}

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double realtime_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Removes the heartbeat files (rank<R>, see src/train/heartbeat.h) of `dir`. */
static void clear_beats(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    char path[4096];
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strncmp(e->d_name, "rank", 4) == 0) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    closedir(d);
}

/* Whether a heartbeat file of `dir` is older than `timeout` seconds (`who` says which, the
 * oldest), or none was written `timeout` seconds after `started` (CLOCK_REALTIME). */
static bool hung_rank(const char *dir, double timeout, double started, char *who, size_t size) {
    DIR *d = opendir(dir);
    if (!d) return false;
    bool any = false, hung = false;
    double oldest = timeout, t_now = realtime_now();
    char path[4096];
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strncmp(e->d_name, "rank", 4) != 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0) continue;
        any = true;
        double age = t_now - ((double)st.st_mtim.tv_sec + 1e-9 * (double)st.st_mtim.tv_nsec);
        if (age > oldest) {
            oldest = age;
            char step[32] = "?";
            FILE *f = fopen(path, "r");
            if (f) {
                if (!fgets(step, sizeof step, f)) snprintf(step, sizeof step, "?");
                step[strcspn(step, "\n")] = 0;
                fclose(f);
            }
            snprintf(who, size, "%.32s has sent no heartbeat for %.0f s (its last after step %.20s)", e->d_name, age, step);
            hung = true;
        }
    }
    closedir(d);
    if (!hung && !any && t_now - started > timeout) {
        snprintf(who, size, "no rank has sent a heartbeat %.0f s after the start", t_now - started);
        hung = true;
    }
    return hung;
}

/* Runs argv to its end; returns its exit status as a shell reports it (128 + signal).
 * With a heartbeat directory, a hung rank there has the job (its process group) killed. */
static int run_job(char *const *argv, const char *heartbeat_dir, double timeout) {
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "cformers launch: cannot start the job: %s\n", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        setpgid(0, 0); /* the job and its local ranks: one group to kill when it hangs */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        execvp(argv[0], argv);
        fprintf(stderr, "cformers launch: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    job_pid = pid;
    int status = 0;
    double started = realtime_now();
    for (;;) {
        pid_t got = waitpid(pid, &status, heartbeat_dir ? WNOHANG : 0);
        if (got == pid || (got < 0 && errno != EINTR)) break;
        if (!heartbeat_dir || got < 0) continue;
        char who[256];
        if (!stop_signal && hung_rank(heartbeat_dir, timeout, started, who, sizeof who)) {
            fprintf(stderr, "cformers launch: %s: the job is hung; killing it\n", who);
            kill(-pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            break;
        }
        nanosleep(&(struct timespec){.tv_nsec = 100000000}, NULL);
    }
    job_pid = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The words of one start of the job into w: with --min-ranks on the hosts that answer,
 * written to `hosts`. Returns the index of the command in w, or -(status) after saying why
 * it cannot start. */
static int start_words(words *w, const launch_args *a, const char *exe, const char *hosts, bool resume) {
    launch_args now = *a;
    if (a->min_ranks) {
        if ((now.ranks = choose_hosts(a, hosts)) == 0) return -1;
        now.hostfile = hosts;
    }
    return job_words(w, &now, exe, resume);
}

/* Runs the job, and again after each failure, up to a->max_restarts times. A `train`
 * job is rerun with --resume; CFORMERS_LAUNCH_RESTART (0 on the first run, set before the
 * launcher's words were made, so mpirun passes it on like every CFORMERS_* variable) tells
 * it which restart this is and lets it start over when the failed run saved no checkpoint.
 * Each start checks the hosts again (--min-ranks; `hosts` is the hostfile it writes). */
static int supervise(const launch_args *a, const char *exe, const char *hosts) {
    struct sigaction on = {.sa_handler = forward_signal};
    sigemptyset(&on.sa_mask);
    sigaction(SIGINT, &on, NULL);
    sigaction(SIGTERM, &on, NULL);
    bool train = strcmp(a->command[0], "train") == 0;
    const char *beats = train && a->heartbeat > 0 ? getenv("CFORMERS_HEARTBEAT_DIR") : NULL;
    double started = seconds_now();
    for (long restart = 0;; restart++) {
        words w = {0};
        int at = start_words(&w, a, exe, hosts, train && restart > 0);
        if (at > 0) {
            print_command(stderr, w.v);
            fflush(NULL);
        }
        if (beats) clear_beats(beats); /* the last run's beats */
        int rc = at < 0 ? -at : run_job(w.v, beats, a->heartbeat);
        free_words(&w);
        double ran = seconds_now() - started;
        if (rc == 0 || stop_signal || at < 0) return rc;
        if (rc == 2) { /* misuse: the same words would fail the same way */
            fprintf(stderr, "cformers launch: the job's command was refused (status 2); not restarting it\n");
            return rc;
        }
        if (restart == a->max_restarts) {
            if (a->max_restarts > 0)
                fprintf(stderr, "cformers launch: the job failed (status %d) after %.1f s; no restarts left (%ld made)\n",
                        rc, ran, restart);
            return rc;
        }
        fprintf(stderr, "cformers launch: the job failed (status %d) after %.1f s; restart %ld of %ld%s\n", rc, ran,
                restart + 1, a->max_restarts, train ? ", resuming from the newest valid checkpoint" : "");
        char count[32];
        snprintf(count, sizeof count, "%ld", restart + 1);
        setenv("CFORMERS_LAUNCH_RESTART", count, 1);
        started = seconds_now();
    }
}

int cmd_launch(int argc, char **argv) {
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            print_help();
            return 0;
        }
    launch_args a = {.launcher = "auto", .heartbeat = 600};
    int rc = parse_args(argc, argv, &a);
    if (rc != 0) return rc;
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        fprintf(stderr, "cformers launch: cannot find this program (/proc/self/exe): %s\n", strerror(errno));
        return 1;
    }
    exe[len] = '\0';
    if (a.max_restarts > 0 && !a.dry_run) setenv("CFORMERS_LAUNCH_RESTART", "0", 1);
    char planned[32];
    snprintf(planned, sizeof planned, "%ld", a.ranks);
    if (a.min_ranks && !a.dry_run) setenv("CFORMERS_PLANNED_RANKS", planned, 1); /* src/train/trainer.c */
    /* mpirun gives ranks a pseudo-terminal even when launch's output is a file: a progress
     * line rewritten in place (src/obs/progress.c) only when launch's own stdout is a terminal. */
    if (!a.dry_run) setenv("CFORMERS_TERMINAL", isatty(STDOUT_FILENO) ? "1" : "0", 0);
    char beats[] = "/tmp/cformers-heartbeat-XXXXXX", hosts[] = "/tmp/cformers-hosts-XXXXXX";
    bool own_beats = false; /* made here (else CFORMERS_HEARTBEAT_DIR was given, perhaps shared) */
    if (a.max_restarts > 0 && !a.dry_run && a.heartbeat > 0 && strcmp(a.command[0], "train") == 0 &&
        !getenv("CFORMERS_HEARTBEAT_DIR")) {
        if (!mkdtemp(beats)) {
            fprintf(stderr, "cformers launch: cannot make a heartbeat directory %s: %s\n", beats, strerror(errno));
            return 1;
        }
        own_beats = true;
        setenv("CFORMERS_HEARTBEAT_DIR", beats, 1);
    }
    int fd = a.min_ranks && !a.dry_run ? mkstemp(hosts) : 0;
    if (fd < 0) {
        fprintf(stderr, "cformers launch: cannot make a hostfile %s: %s\n", hosts, strerror(errno));
        rc = 1;
    } else if (a.dry_run || (a.max_restarts == 0 && !a.min_ranks)) {
        words w = {0};
        int at = job_words(&w, &a, exe, false);
        if (at < 0) rc = -at;
        else print_command(a.dry_run ? stdout : stderr, w.v);
        fflush(NULL);
        if (at > 0 && !a.dry_run) {
            execvp(w.v[0], w.v);
            fprintf(stderr, "cformers launch: cannot run %s: %s\n", w.v[0], strerror(errno));
            rc = 1;
        }
        free_words(&w);
    } else {
        rc = supervise(&a, exe, hosts);
    }
    if (fd > 0) {
        close(fd);
        unlink(hosts);
    }
    if (own_beats) {
        clear_beats(beats);
        rmdir(beats);
    }
    return rc;
}
