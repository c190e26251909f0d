// Progress on stderr: a live bar on a terminal, plain lines every print_every steps otherwise.
#ifndef FGPIPE_PROGRESS_H
#define FGPIPE_PROGRESS_H

#include <stdio.h>

typedef struct {
    FILE *out;
    int is_tty;
    int print_every;
    long total_steps;
    double start, last_draw;
} Progress;

double wall_seconds(void);
void progress_init(Progress *p, FILE *out, long total_steps, int print_every);
void progress_step(Progress *p, long step, double loss, double lr, long samples);
void progress_finish(Progress *p);

#endif
