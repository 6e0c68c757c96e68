/*
 * The bench's load generator: HTTP/1.1 POSTs over keep-alive connections on
 * loopback, closed loop or open loop, one epoll loop on one thread.
 *
 * Why C: the generator shares the machine's cores with the server it loads.
 * The asyncio generator it replaced cost 41-44 us of CPU a request closed loop
 * and 96-153 us open loop (a task and a timer per arrival), ~0.3 of a core at
 * 2,000/s: the open-loop rates then measured the generator as much as the
 * server (decision 017). wrk is closed loop only and
 * wrk2 is not in Debian.
 *
 * Closed loop: --concurrency connections, each sending its next request when
 * the last is answered; latency from the send; requests sent during --warmup
 * are not recorded. Open loop: arrivals at a fixed --rate for --warmup +
 * --duration seconds, whatever the answers; each takes an idle connection
 * (opening one, up to --max-conns) or waits in arrival order for one; latency
 * runs from the scheduled arrival, so waiting counts. Arrivals during --warmup
 * are not recorded. Every request has --timeout seconds; after the last
 * arrival (open) or the deadline (closed) the answers still in flight get it too.
 *
 * Input: --bodies FILE, one request body a line; request i sends line
 * i mod (lines). Output: --out FILE, one record per recorded request (double
 * latency in seconds, int32 status, 0 for a timeout or a failed connection,
 * int32 milliseconds from the start to its completion), in completion order.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define IN_CAP 65536
#define TIMER_TAG ((uint64_t)-1)

typedef struct {
    double latency;
    int32_t status;
    int32_t done_ms; /* when it completed, in ms from the start */
} record_t;

enum { DOWN, CONNECTING, SENDING, READING, IDLE };

typedef struct {
    int fd, state, measured;
    long request;
    double origin;  /* latency runs from here: the send (closed) or the schedule (open) */
    double sent;    /* the timeout runs from here */
    size_t out_off, in_len, head_len, need;
    int chunked, close_after, to_eof;
    char in[IN_CAP];
} conn_t;

static struct {
    const char *host, *path, *bodies_path, *out_path;
    int port, concurrency, max_conns;
    double rate, duration, warmup, timeout;
} opt = {"127.0.0.1", "/predict", NULL, NULL, 0, 0, 512, 0, 1, 0, 10};

static char **requests;
static size_t *request_len;
static long n_requests;
static int ep;
static conn_t *conns;
static int n_conns;
static record_t *records;
static long n_records, cap_records;
static long in_flight;
static double started_at;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what) {
    perror(what);
    exit(2);
}

static void load_bodies(void) {
    FILE *f = fopen(opt.bodies_path, "rb");
    if (!f) die(opt.bodies_path);
    char *line = NULL;
    size_t cap = 0, slots = 1024;
    ssize_t len;
    requests = malloc(slots * sizeof *requests);
    request_len = malloc(slots * sizeof *request_len);
    while ((len = getline(&line, &cap, f)) > 0) {
        if (line[len - 1] == '\n') len--;
        if (n_requests == (long)slots) {
            slots *= 2;
            requests = realloc(requests, slots * sizeof *requests);
            request_len = realloc(request_len, slots * sizeof *request_len);
        }
        size_t size = strlen(opt.path) + strlen(opt.host) + len + 160;
        char *r = malloc(size);
        int head = snprintf(r, size,
                            "POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                            "Content-Length: %zd\r\n\r\n",
                            opt.path, opt.host, opt.port, len);
        memcpy(r + head, line, len);
        requests[n_requests] = r;
        request_len[n_requests++] = head + len;
    }
    free(line);
    fclose(f);
    if (n_requests == 0) {
        fprintf(stderr, "%s: no bodies\n", opt.bodies_path);
        exit(2);
    }
}

static void put(int measured, double origin, int status, double t) {
    if (!measured) return;
    if (n_records == cap_records) {
        cap_records = cap_records ? cap_records * 2 : 65536;
        records = realloc(records, cap_records * sizeof *records);
        if (!records) die("realloc");
    }
    records[n_records++] = (record_t){t - origin, status, (int32_t)((t - started_at) * 1e3)};
}

static void record(conn_t *c, int status, double t) {
    in_flight--;
    put(c->measured, c->origin, status, t);
}

static void drop(conn_t *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->state = DOWN;
}

/* A request that got no answer (a failed connection or a timeout). */
static void fail(conn_t *c, double t) {
    if (c->state == CONNECTING || c->state == SENDING || c->state == READING) record(c, 0, t);
    drop(c);
}

static void try_send(conn_t *c, double t);

static void start(conn_t *c, long request, double origin, int measured, double t) {
    c->request = request;
    c->origin = origin;
    c->measured = measured;
    c->sent = t;
    c->out_off = c->in_len = c->head_len = c->need = 0;
    c->chunked = c->close_after = c->to_eof = 0;
    in_flight++;
    if (c->fd < 0) {
        struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(opt.port)};
        inet_pton(AF_INET, opt.host, &addr.sin_addr);
        c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c->fd < 0) die("socket");
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
                                 .data.u64 = (uint64_t)(c - conns)};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) die("epoll_ctl");
        if (connect(c->fd, (struct sockaddr *)&addr, sizeof addr) < 0 && errno != EINPROGRESS) {
            c->state = CONNECTING;
            fail(c, t);
            return;
        }
        c->state = CONNECTING;
        return; /* EPOLLOUT says when it is up */
    }
    c->state = SENDING;
    try_send(c, t);
}

static void try_send(conn_t *c, double t) {
    long i = c->request % n_requests;
    while (c->out_off < request_len[i]) {
        ssize_t n = send(c->fd, requests[i] + c->out_off, request_len[i] - c->out_off,
                         MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN) return;
            fail(c, t);
            return;
        }
        c->out_off += n;
    }
    c->state = READING;
}

/* Parse the head once it is in; set need (bytes of head + body), or chunked / to_eof. */
static int parse_head(conn_t *c) {
    char *end = memmem(c->in, c->in_len, "\r\n\r\n", 4);
    if (!end) return 0;
    c->head_len = end - c->in + 4;
    long length = -1;
    for (char *line = memchr(c->in, '\n', c->head_len); line && line < end;
         line = memchr(line + 1, '\n', end - line)) {
        char *name = line + 1;
        if (!strncasecmp(name, "content-length:", 15))
            length = strtol(name + 15, NULL, 10);
        else if (!strncasecmp(name, "transfer-encoding:", 18) &&
                 memmem(name, (char *)memchr(name, '\n', end + 2 - name) - name, "chunked", 7))
            c->chunked = 1;
        else if (!strncasecmp(name, "connection:", 11) && !strncasecmp(name + 11, " close", 6))
            c->close_after = 1;
    }
    if (length >= 0)
        c->need = c->head_len + length;
    else if (!c->chunked)
        c->to_eof = 1;
    return 1;
}

static int complete(conn_t *c) {
    if (!c->head_len && !parse_head(c)) return 0;
    if (!c->chunked) return !c->to_eof && c->in_len >= c->need;
    /* The last chunk, "0\r\n\r\n", first or after a chunk's CRLF: JSON holds no raw CRLF. */
    size_t body = c->in_len - c->head_len;
    const char *tail = c->in + c->in_len;
    return body >= 5 && !memcmp(tail - 5, "0\r\n\r\n", 5) &&
           (body == 5 || (body >= 7 && !memcmp(tail - 7, "\r\n", 2)));
}

static void finish(conn_t *c, double t);

static void try_read(conn_t *c, double t) {
    for (;;) {
        if (c->in_len == IN_CAP) {
            fprintf(stderr, "loadgen: an answer larger than %d bytes\n", IN_CAP);
            fail(c, t);
            return;
        }
        ssize_t n = read(c->fd, c->in + c->in_len, IN_CAP - c->in_len);
        if (n < 0) {
            if (errno == EAGAIN) return;
            fail(c, t);
            return;
        }
        if (n == 0) { /* closed: an answer read to its end, or none */
            if (c->head_len && c->to_eof) {
                c->close_after = 1;
                finish(c, t);
            } else {
                fail(c, t);
            }
            return;
        }
        c->in_len += n;
        if (complete(c)) {
            finish(c, t);
            return;
        }
    }
}

/* Open loop: arrivals waiting for a connection, in order (at most every arrival). */
static long *waiting;
static double *waiting_at;
static long wait_head, wait_tail;
static long skipped; /* arrivals before this index are the warm-up */
static double deadline, measure_from;

static void next_on(conn_t *c, double t);

static void finish(conn_t *c, double t) {
    record(c, (int)strtol(c->in + 9, NULL, 10), t);
    if (c->close_after)
        drop(c);
    else
        c->state = IDLE;
    next_on(c, t);
}

static void next_on(conn_t *c, double t) {
    if (opt.rate > 0) {
        if (wait_head < wait_tail) {
            long i = waiting[wait_head];
            double at = waiting_at[wait_head++];
            start(c, i, at, i >= skipped, t);
        }
    } else if (t < deadline) {
        static long counter;
        start(c, counter++, t, t >= measure_from, t);
    }
}

static int busy(const conn_t *c) {
    return c->state == CONNECTING || c->state == SENDING || c->state == READING;
}

static void handle(conn_t *c, uint32_t events, double t) {
    int was_busy = busy(c);
    if (c->state == CONNECTING) {
        int err = 0;
        socklen_t len = sizeof err;
        if (events & (EPOLLERR | EPOLLHUP) ||
            getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err)
            fail(c, t);
        else if (events & EPOLLOUT)
            c->state = SENDING;
    }
    if (c->state == SENDING) try_send(c, t);
    if (c->state == READING && (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
        try_read(c, t);
    else if (c->state == IDLE && (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
        drop(c); /* the server closed an idle connection: reopen it when needed */
    if (was_busy && c->state == DOWN) next_on(c, t); /* failed: the next request takes it */
}

static void expire(double t) {
    for (int k = 0; k < n_conns; k++) {
        conn_t *c = &conns[k];
        if (busy(c) && t - c->sent > opt.timeout) {
            fail(c, t);
            next_on(c, t);
        }
    }
}

static conn_t *idle_conn(void) {
    for (int k = 0; k < n_conns; k++)
        if (conns[k].state == IDLE) return &conns[k];
    for (int k = 0; k < n_conns; k++)
        if (conns[k].state == DOWN) return &conns[k];
    if (n_conns < opt.max_conns) {
        conn_t *c = &conns[n_conns++];
        c->fd = -1;
        c->state = DOWN;
        return c;
    }
    return NULL;
}

static void arrive(long i, double at, double t) {
    conn_t *c = idle_conn();
    if (c) {
        start(c, i, at, i >= skipped, t);
        return;
    }
    waiting[wait_tail] = i;
    waiting_at[wait_tail++] = at;
}

static void arm(int timer, double at) {
    struct itimerspec spec = {.it_value = {(time_t)at, (long)((at - (time_t)at) * 1e9)}};
    if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) spec.it_value.tv_nsec = 1;
    if (timerfd_settime(timer, TFD_TIMER_ABSTIME, &spec, NULL) < 0) die("timerfd_settime");
}

static void run(void) {
    struct epoll_event events[256];
    int timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (timer < 0) die("timerfd_create");
    struct epoll_event tev = {.events = EPOLLIN, .data.u64 = TIMER_TAG};
    epoll_ctl(ep, EPOLL_CTL_ADD, timer, &tev);
    double t0 = now() + (opt.rate > 0 ? 0.001 : 0), interval = opt.rate > 0 ? 1.0 / opt.rate : 0;
    double last_scan = t0;
    started_at = t0;
    long total = 0, next = 0;
    double grace_end;
    if (opt.rate > 0) {
        skipped = (long)(opt.rate * opt.warmup);
        total = skipped + (long)(opt.rate * opt.duration);
        waiting = malloc((total + 1) * sizeof *waiting);
        waiting_at = malloc((total + 1) * sizeof *waiting_at);
        if (!waiting || !waiting_at) die("malloc");
        arm(timer, t0);
        grace_end = t0 + (total - 1) * interval + opt.timeout;
    } else {
        measure_from = t0 + opt.warmup;
        deadline = measure_from + opt.duration;
        grace_end = deadline + opt.timeout;
        for (int k = 0; k < opt.concurrency; k++) {
            conn_t *c = idle_conn();
            next_on(c, now());
        }
    }
    for (;;) {
        int n = epoll_wait(ep, events, 256, 20);
        if (n < 0 && errno != EINTR) die("epoll_wait");
        double t = now();
        for (int k = 0; k < n; k++) {
            if (events[k].data.u64 == TIMER_TAG) {
                uint64_t fired;
                if (read(timer, &fired, sizeof fired) < 0 && errno != EAGAIN) die("timerfd read");
                continue;
            }
            handle(&conns[events[k].data.u64], events[k].events, t);
        }
        if (opt.rate > 0) {
            t = now();
            for (; next < total && t0 + next * interval <= t; next++) arrive(next, t0 + next * interval, t);
            if (next < total) arm(timer, t0 + next * interval);
        }
        if (t - last_scan > 0.02) {
            expire(t);
            last_scan = t;
        }
        int done = opt.rate > 0 ? next == total && in_flight == 0 && wait_head == wait_tail
                                : t >= deadline && in_flight == 0;
        if (done || t > grace_end) break;
    }
    /* Past the grace period: what is still in flight, waiting or unsent timed out. */
    double t = now();
    for (int k = 0; k < n_conns; k++)
        if (busy(&conns[k])) fail(&conns[k], t);
    for (; wait_head < wait_tail; wait_head++)
        put(waiting[wait_head] >= skipped, waiting_at[wait_head], 0, t);
    for (; next < total; next++) put(next >= skipped, t0 + next * interval, 0, t);
}

static void usage(void) {
    fprintf(stderr,
            "usage: loadgen --port P --bodies FILE --out FILE [--host H] [--path P]\n"
            "               (--concurrency N | --rate R [--max-conns M])\n"
            "               [--duration S] [--warmup S] [--timeout S]\n");
    exit(2);
}

int main(int argc, char **argv) {
    for (int k = 1; k < argc; k++) {
        const char *a = argv[k], *v = k + 1 < argc ? argv[k + 1] : NULL;
        if (!v) usage();
        if (!strcmp(a, "--host")) opt.host = v;
        else if (!strcmp(a, "--port")) opt.port = atoi(v);
        else if (!strcmp(a, "--path")) opt.path = v;
        else if (!strcmp(a, "--bodies")) opt.bodies_path = v;
        else if (!strcmp(a, "--out")) opt.out_path = v;
        else if (!strcmp(a, "--concurrency")) opt.concurrency = atoi(v);
        else if (!strcmp(a, "--rate")) opt.rate = atof(v);
        else if (!strcmp(a, "--max-conns")) opt.max_conns = atoi(v);
        else if (!strcmp(a, "--duration")) opt.duration = atof(v);
        else if (!strcmp(a, "--warmup")) opt.warmup = atof(v);
        else if (!strcmp(a, "--timeout")) opt.timeout = atof(v);
        else usage();
        k++;
    }
    if (!opt.port || !opt.bodies_path || !opt.out_path || (opt.rate > 0) == (opt.concurrency > 0))
        usage();
    if (opt.concurrency > opt.max_conns) opt.max_conns = opt.concurrency;
    load_bodies();
    conns = calloc(opt.max_conns, sizeof *conns);
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1");
    run();
    FILE *out = fopen(opt.out_path, "wb");
    if (!out || fwrite(records, sizeof *records, n_records, out) != (size_t)n_records) die(opt.out_path);
    fclose(out);
    return 0;
}
