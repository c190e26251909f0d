// The messages of a stage's step: received in the order of the step's message plan
// (exec_plan.h), each posted while the one before is in use, into inbox slots used round-robin.
// The ops send theirs as they finish (pipeline_ops.c).
#include "engine_ops.h"

size_t messages_forward_floats(const Pipeline *p, int layer, int rows) {
    size_t n = (size_t)rows * p->model->layers[layer].in;
    return stage_act_floats(&p->stage, layer, n) + (p->run.sends_tangents ? n * p->K : 0);
}

static int post_receive(Pipeline *p, long step, FgError *err) {
    const MessagePlan *mp = p->msg.recv_plan;
    if (p->msg.recv_posted >= mp->n_recv) return FG_OK;
    const PlannedMessage *m = &mp->recv[p->msg.recv_posted];
    int B = p->cfg->training.micro_batch;
    size_t n = m->kind == MSG_FORWARD ? messages_forward_floats(p, p->stage.first, B)
                                      : (size_t)B * p->model->layers[p->stage.last - 1].out;
    float *slot = p->msg.inbox + (size_t)(p->msg.recv_posted % p->msg.n_inbox) * p->msg.stride;
    int tag = message_tag(m->kind, step - m->lag, m->microbatch);
    int rc = p->tr->post_recv(p->tr, m->peer, tag, slot, n, &p->msg.recv_handle, err);
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

int messages_take(Pipeline *p, long step, const float **msg, FgError *err) {
    if (p->msg.recv_taken >= p->msg.recv_posted)
        return fg_fail(err, FG_ERR_INTERNAL, "stage %d: an op needs a message its plan does not list",
                       p->tr->stage);
    int rc = p->tr->wait_recv(p->tr, p->msg.recv_handle, err);
    if (rc) return rc;
    *msg = p->msg.inbox + (size_t)(p->msg.recv_taken++ % p->msg.n_inbox) * p->msg.stride;
    return post_receive(p, step, err);
}
