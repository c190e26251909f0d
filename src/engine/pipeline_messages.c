// The messages of a stage's step: received in the order of the step's message plan
// (exec_plan.h), each posted while the one before is in use, into inbox slots used round-robin.
// The ops send theirs as they finish (pipeline_ops.c).
#include "engine_ops.h"

size_t messages_forward_bytes(const Pipeline *p, int layer, int rows) {
    return stage_message_bytes(&p->stage, layer, (size_t)rows * p->model->layers[layer].in,
                               p->run.sends_tangents ? p->K : 0);
}

size_t messages_plain_bytes(const Pipeline *p, int layer, int rows) {
    return stage_message_bytes(&p->stage, layer, (size_t)rows * p->model->layers[layer - 1].out, 0);
}

static int post_receive(Pipeline *p, long step, FgError *err) {
    const MessagePlan *mp = p->msg.recv_plan;
    if (p->msg.recv_posted >= mp->n_recv) return FG_OK;
    const PlannedMessage *m = &mp->recv[p->msg.recv_posted];
    int B = p->cfg->training.micro_batch;
    size_t bytes = m->kind == MSG_FORWARD ? messages_forward_bytes(p, p->stage.first, B)
                                          : messages_plain_bytes(p, p->stage.last, B);
    unsigned char *slot = p->msg.inbox + (size_t)(p->msg.recv_posted % p->msg.n_inbox) * p->msg.slot_bytes;
    int tag = message_tag(m->kind, step - m->lag, m->microbatch);
    int rc = p->tr->post_recv(p->tr, m->peer, tag, slot, bytes, &p->msg.recv_handle, err);
    if (!rc) p->msg.recv_posted++;
    return rc;
}

int messages_start(Pipeline *p, long step, FgError *err) {
    message_plan_free(&p->msg.plan);
    message_plan_build(&p->tt.sched, p->tt.plan, pipeline_step_phase(p, step), p->tr->stage,
                       step - p->first_step, &p->msg.plan);
    p->msg.recv_plan = &p->msg.plan;
    p->msg.recv_taken = p->msg.recv_posted = 0;
    return post_receive(p, step, err);
}

int messages_take(Pipeline *p, long step, const void **msg, FgError *err) {
    if (p->msg.recv_taken >= p->msg.recv_posted)
        return fg_fail(err, FG_ERR_INTERNAL, "stage %d: an op needs a message its plan does not list",
                       p->tr->stage);
    int rc = p->tr->wait_recv(p->tr, p->msg.recv_handle, err);
    if (rc) return rc;
    *msg = p->msg.inbox + (size_t)(p->msg.recv_taken++ % p->msg.n_inbox) * p->msg.slot_bytes;
    return post_receive(p, step, err);
}
