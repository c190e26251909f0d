#include "store_settings.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "out_file.h"

static void settings_path(const char *dir, const char *name, char *out, size_t size) {
    snprintf(out, size, "%s/%s.conf", dir, name);
}

int store_settings_check(const Config *c, const char *dir, const char *name, FgError *err) {
    char path[4096 + 96], have[512], want[512];
    settings_path(dir, name, path, sizeof path);
    if (access(path, F_OK) && errno == ENOENT) {
        fprintf(stderr, "fgpipe: note: layer store %s/%s.h5 has no settings record %s (made by an "
                "older fgpipe): only its seed and mode are checked\n", dir, name, path);
        return FG_OK;
    }
    size_t n;
    char *text = fg_read_file("--resume-weights: the store's settings", path, NULL, &n, err);
    if (!text) return FG_ERR_INPUT;
    Config stored;
    config_defaults(&stored);
    int rc = config_load_text(&stored, text, path, err);
    fg_free(text);
    const char *key = rc ? NULL : config_store_mismatch(&stored, c, have, want, sizeof have);
    if (key)
        rc = fg_fail(err, FG_ERR_INPUT, "--resume-weights: layer store %s/%s.h5 was written with "
                     "%s = %s, the config has %s = %s (%s): resume with the store's settings, or "
                     "start a new run without --resume-weights", dir, name, key, have, key, want, path);
    return rc;
}

int store_settings_write(const Config *c, const char *dir, const char *name, FgError *err) {
    char path[4096 + 96];
    settings_path(dir, name, path, sizeof path);
    OutFile o;
    FILE *f = out_file_open(&o, "the layer store's settings", path, err);
    if (!f) return FG_ERR_INPUT;
    fprintf(f, "# the settings layer store %s.h5 was made with (fgpipe train --resume-weights "
            "checks them)\n", name);
    config_write(c, f);
    return out_file_commit(&o, err);
}
