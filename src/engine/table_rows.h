// The token table's row blocks chosen by the budget (docs/out-of-core.md, "Row blocks of the
// token table"): a streamed stage whose token table (embedding, fused head) does not fit
// mem_budget whole takes it in row blocks, sized once before the stores are made
// (model_set_row_blocks), not tested inside the step. table_block_rows set by hand wins.
#ifndef FGPIPE_TABLE_ROWS_H
#define FGPIPE_TABLE_ROWS_H

#include <stdio.h>

#include "backend.h"
#include "config.h"
#include "model.h"
#include "transport.h"

// Stage `stage` of `layout` (stages and replicas as c->layout has them) with `runtime` bytes
// of the process's own (mem_account.h; spill: the tied copies' gradients go to flash): *rows
// is 0 where the stage fits in memory, holds no table, fits mem_budget with the table whole,
// or where table_block_rows sets the blocks; else the most rows (a multiple of
// config_table_block_unit, as few blocks as fit) whose two slots fit the budget, or failing
// that whose floor does. A budget too small either way is refused (FG_ERR_INPUT) with the
// streamed floor's message for the table whole and the smallest budget that works with row
// blocks, or the option that forbids them. Leaves m's tables whole.
int table_rows_plan(const Backend *be, const Config *c, Model *m, const int *layout, int stage,
                    double runtime, int spill, int *rows, FgError *err);

// Every stage's choice (table_rows_plan) agreed over t's grid, the fewest rows any stage
// chose, set on m (every stage computes the tied copies' blocks alike) and said once (stage
// 0, replica 0).
int table_rows_choose(const Backend *be, const Config *c, Model *m, const int *layout, Transport *t,
                      double runtime, int spill, FgError *err);

// "fgpipe: the token table streams in row blocks of R rows (B blocks) to fit the 256M budget;
// table_block_rows overrides" for m's tables in blocks of `rows`.
void table_rows_say(const Config *c, const Model *m, int rows, FILE *out);

#endif
