#define _POSIX_C_SOURCE 200809L
#include "progress.h"

#include <time.h>
#include <unistd.h>

double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void progress_init(Progress *p, FILE *out, long first_step, long total_steps, int print_every) {
    p->out = out;
    p->is_tty = isatty(fileno(out));
    p->print_every = print_every;
    p->first_step = first_step;
    p->total_steps = total_steps;
    p->start = wall_seconds();
    p->last_draw = 0.0;
    p->eta_said = 0;
}

static void format_duration(double s, char *buf, size_t size) {
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, size, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else snprintf(buf, size, "%ldm%02lds", t / 60, t % 60);
}

// A long run says early how long it will take: once ETA_AFTER seconds have passed, when the next
// progress line is further off and the rest takes over ETA_WORTH seconds.
enum { ETA_AFTER = 5, ETA_WORTH = 30 };
static void say_eta(Progress *p, long done, long ran, double elapsed) {
    double left = elapsed / ran * (double)(p->total_steps - done);
    if (p->eta_said || p->is_tty || elapsed < ETA_AFTER) return;
    p->eta_said = 1;
    if (left < ETA_WORTH || done % p->print_every == 0) return;
    char eta[32];
    format_duration(left, eta, sizeof eta);
    fprintf(p->out, "ETA %s for the %ld steps left (%.2f s a step over the first %ld; progress "
            "every %d steps)\n", eta, p->total_steps - done, elapsed / ran, ran, p->print_every);
    fflush(p->out);
}

void progress_step(Progress *p, long step, double loss, double lr, long samples) {
    long done = step + 1, ran = done - p->first_step;
    int last = done == p->total_steps;
    double now = wall_seconds(), elapsed = now - p->start;
    say_eta(p, done, ran, elapsed);
    if (p->is_tty ? (!last && now - p->last_draw < 0.1) : (!last && done % p->print_every))
        return;
    p->last_draw = now;
    double rate = elapsed > 0 ? samples / elapsed : 0.0;
    char eta[32];
    format_duration(elapsed / ran * (double)(p->total_steps - done), eta, sizeof eta);
    if (p->is_tty) {
        enum { WIDTH = 24 };
        int fill = (int)(WIDTH * done / p->total_steps);
        char bar[WIDTH + 1];
        for (int i = 0; i < WIDTH; i++) bar[i] = i < fill ? '#' : '.';
        bar[WIDTH] = 0;
        fprintf(p->out, "\r[%s] step %ld/%ld  loss %.4f  lr %.2e  %.0f samples/s  ETA %s ", bar,
                done, p->total_steps, loss, lr, rate, eta);
    } else {
        fprintf(p->out, "step %ld/%ld  loss %.4f  lr %.2e  %.0f samples/s  ETA %s\n", done,
                p->total_steps, loss, lr, rate, eta);
    }
    fflush(p->out);
}

void progress_finish(Progress *p) {
    if (p->is_tty) fputc('\n', p->out);
    fflush(p->out);
}
