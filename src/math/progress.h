// Progress on stderr: a live bar on a terminal, plain lines every print_every steps otherwise.
#ifndef FGPIPE_PROGRESS_H
#define FGPIPE_PROGRESS_H

#include <stdio.h>

typedef struct {
    FILE *out;
    int is_tty;
    int print_every;
    long first_step, total_steps;  // steps first_step..total_steps-1 run here
    double start, last_draw;
    int eta_said;  // the early ETA line (progress.c) is decided
} Progress;

double wall_seconds(void);
void progress_init(Progress *p, FILE *out, long first_step, long total_steps, int print_every);
// samples: those of this run's steps so far (the rate's).
void progress_step(Progress *p, long step, double loss, double lr, long samples);
void progress_finish(Progress *p);

#endif
