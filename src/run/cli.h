// The command line, independent of how ranks are launched: cli_parse reads the arguments and
// the config; the caller (mpi/main.c) then makes the backend, the transport, the storage and
// the layer stores the config asks for, and cli_train runs the training with them.
#ifndef FGPIPE_CLI_H
#define FGPIPE_CLI_H

#include "config.h"
#include "eval.h"
#include "generate.h"
#include "plan.h"
#include "train.h"

typedef enum { COMMAND_TRAIN, COMMAND_GENERATE, COMMAND_EVAL, COMMAND_PLAN } Command;

// `fgpipe train` as parsed: the resolved config and where the run reads and writes.
typedef struct {
    Command command;
    GenerateArgs gen;          // fgpipe generate
    EvalArgs eval;             // fgpipe eval
    PlanArgs plan;             // fgpipe plan (with cfg)
    Config cfg;
    TrainInputs in;
    TrainOutputs out;
    const char *summary_path;  // --summary-json
    int resume_weights;        // continue from the layer stores in weights_dir
    char checkpoint_buf[4096], resume_buf[4096];  // paths made from directories
} RunArgs;

// From now on SIGTERM and SIGUSR1 ask a training run to checkpoint and stop at its next step
// boundary instead of killing the process. main calls it first thing: a warning that arrives
// while MPI starts (Slurm's, at a job's very start) must not kill the rank.
void fgpipe_catch_stop_signals(void);

// Parses argv into a. Returns -1 when there is a run to do, else the process exit code: 0
// (help printed) or 2 (bad usage or config, reported on stderr).
int cli_parse(int argc, char **argv, RunArgs *a);

// Before the first step (cli_paths.c): every output's directory is writable, no output names
// an input (the checkpoint may replace the one it resumes from) or another output.
int cli_check_paths(const RunArgs *a, const char *config_path, FgError *err);

// Runs the training in env; replica 0's last stage prints the result line and writes the
// summary. Returns the process exit code: 0, 2 bad input, 1 anything else.
int cli_train(RunArgs *a, const TrainEnv *env);

// `fgpipe generate` and `fgpipe eval`: a checkpoint read through io on one rank, the output on
// stdout (streams: the layer stores of eval --mem-budget). Returns the process exit code.
int cli_read_checkpoint(const RunArgs *a, Storage *io, const LayerStreams *streams);

// `fgpipe plan`: every schedule's timetable for the config (plan.h), onto stdout, with the
// backend main made. Returns the process exit code.
int cli_plan(const RunArgs *a, const Backend *be);

// Reports err on stderr ("fgpipe: error: ...") and returns its exit code.
int cli_fail(const FgError *err);

#endif
