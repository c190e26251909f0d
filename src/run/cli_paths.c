// The paths of `fgpipe train`, checked before the first step: an output that cannot be written
// would otherwise fail only when the run ends (its work lost), and an output that names an
// input (--log onto the checkpoint being resumed) would destroy it.
#include <errno.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

typedef struct {
    const char *flag, *path;
} NamedPath;

// Files that exist: the same inode; else the same path, trailing slashes aside.
static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (!stat(a, &sa) && !stat(b, &sb)) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    size_t na = strlen(a), nb = strlen(b);
    while (na > 1 && a[na - 1] == '/') na--;
    while (nb > 1 && b[nb - 1] == '/') nb--;
    return na == nb && strncmp(a, b, na) == 0;
}

// The directory a file goes into must be writable; under --out (made at start, one level)
// the directory --out goes into.
static int check_writable(const NamedPath *o, const char *out_dir, FgError *err) {
    struct stat sb;
    if (!stat(o->path, &sb) && S_ISDIR(sb.st_mode))
        return fg_fail(err, FG_ERR_INPUT, "%s %s is a directory; it names a file", o->flag, o->path);
    char *copy = strdup(o->path), *dir = dirname(copy), *out_copy = NULL;
    if (out_dir && stat(dir, &sb) && errno == ENOENT && same_file(dir, out_dir))
        out_copy = strdup(out_dir), dir = dirname(out_copy);
    int rc = FG_OK;
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
        rc = fg_fail(err, FG_ERR_INPUT, "%s %s: %s is not a directory", o->flag, o->path, dir);
    else if (access(dir, W_OK | X_OK))
        rc = fg_fail(err, FG_ERR_INPUT, "%s %s: cannot write in %s: %s", o->flag, o->path, dir,
                     strerror(errno));
    free(copy);
    free(out_copy);
    return rc;
}

// weights_dir: a directory (made, one level, when missing); --resume-weights: an existing one.
static int check_weights_dir(const RunArgs *a, FgError *err) {
    const char *dir = a->cfg.layout.weights_dir;
    struct stat sb;
    if (a->cfg.layout.mem_budget <= 0 || !dir[0]) return FG_OK;
    if (!stat(dir, &sb) && !S_ISDIR(sb.st_mode))
        return fg_fail(err, FG_ERR_INPUT, "--weights-dir %s is %s, not a directory: name a "
                       "directory on local flash (made if missing)", dir,
                       S_ISREG(sb.st_mode) ? "a file" : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode)
                       ? "a device" : "not a directory");
    if (stat(dir, &sb) && a->resume_weights)
        return fg_fail(err, FG_ERR_INPUT, "--resume-weights: --weights-dir %s: %s (no layer "
                       "stores to continue from)", dir, strerror(errno));
    if (!stat(dir, &sb)) return access(dir, W_OK | X_OK) ? fg_fail(err, FG_ERR_INPUT, "--weights-dir "
                                     "%s: cannot write in it: %s", dir, strerror(errno)) : FG_OK;
    NamedPath made = {"--weights-dir", dir};  // made at start: its parent must take it
    return check_writable(&made, NULL, err);
}

int cli_check_paths(const RunArgs *a, const char *config_path, FgError *err) {
    const TrainOutputs *o = &a->out;
    // --out's files: config.txt and loss.csv (config_path: checked against them below).
    char config_txt[4096 + 16], loss_csv[4096 + 16];
    snprintf(config_txt, sizeof config_txt, "%s/config.txt", o->out_dir ? o->out_dir : ".");
    snprintf(loss_csv, sizeof loss_csv, "%s/loss.csv", o->out_dir ? o->out_dir : ".");
    const NamedPath outputs[] = {{"--checkpoint", o->checkpoint_path}, {"--log", o->log_path},
                                 {"--summary-json", a->summary_path}, {"--trace", o->trace_path},
                                 {"--save-params", o->params_path},
                                 {"--out", o->out_dir ? config_txt : NULL},
                                 {"--out", o->out_dir ? loss_csv : NULL}};
    const NamedPath inputs[] = {{"--config", config_path}, {"--resume", a->in.resume_path},
                                {"--init-from", a->in.init_from},
                                {"text_file", a->cfg.input.data == DATA_TEXT ? a->cfg.input.text_file : NULL},
                                {"train_tokens", a->cfg.input.data == DATA_TOKENS ? a->cfg.input.train_tokens : NULL},
                                {"val_tokens", a->cfg.input.data == DATA_TOKENS ? a->cfg.input.val_tokens : NULL}};
    size_t n_out = sizeof outputs / sizeof *outputs, n_in = sizeof inputs / sizeof *inputs;
    int rc = FG_OK;
    for (size_t i = 0; i < n_out && !rc; i++) {
        const NamedPath *out = &outputs[i];
        if (!out->path) continue;
        if (strlen(out->path) >= 4096)
            return fg_fail(err, FG_ERR_INPUT, "%s: a path of %zu bytes is too long", out->flag,
                           strlen(out->path));
        for (size_t j = 0; j < n_in && !rc; j++) {
            // A checkpoint replaces the one it resumed from: atomically, by design.
            int replaces = i == 0 && j == 1;
            if (inputs[j].path && !replaces && same_file(out->path, inputs[j].path))
                rc = fg_fail(err, FG_ERR_INPUT, "%s %s is the file given to %s: an output never "
                             "overwrites an input", out->flag, out->path, inputs[j].flag);
        }
        for (size_t j = 0; j < i && !rc; j++)
            if (outputs[j].path && same_file(out->path, outputs[j].path))
                rc = fg_fail(err, FG_ERR_INPUT, "%s and %s name the same file %s", outputs[j].flag,
                             out->flag, out->path);
        if (!rc) rc = check_writable(out, o->out_dir, err);
    }
    return rc ? rc : check_weights_dir(a, err);
}
