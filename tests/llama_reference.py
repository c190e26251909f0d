#!/usr/bin/python3
"""The PyTorch side of tests/llama_convert.sh: a random-weight Llama or Qwen3 in Hugging Face's
layout (config.json, safetensors shards and their index), its float64 loss and logits on a
tokens file, and bad directories derived from it.

usage: llama_reference.py OUT_DIR --family llama|qwen3 [--n-layer 2] [--n-embd 32] [--n-head 4]
                          [--n-kv-head 2] [--head-dim 12] [--intermediate 48] [--ctx 16]
                          [--vocab 300] [--windows 4] [--shards 2] [--seed 0]

The model follows transformers' modeling_llama.py and modeling_qwen3.py: RMSNorm (weight times
x / sqrt(mean(x^2) + eps), in float64 here), rotary embedding with rotate_half and, for llama,
rope_scaling of type llama3 (_compute_llama3_parameters), grouped-query attention (repeat_kv:
query head h reads kv head h // (n_head / n_kv_head)) scaled by head_dim^-0.5, Qwen3's q_norm and
k_norm over head_dim before the rotation, SwiGLU down(silu(gate(x)) * up(x)), no biases; llama's
head is untied, Qwen3's tied. Weights are drawn in float64 and stored as BF16, F16 and F32 in
turn (tensor by tensor), and the forward runs in float64 on the stored values widened.

Writes into OUT_DIR:
  hf/                 config.json, model-0000i-of-0000n.safetensors, model.safetensors.index.json
  tokens.bin          uint16 ids: `windows` windows of ctx + 1 and a shorter tail
  reference.json      {"loss": mean cross-entropy in nats per token, "windows": n}
  logits.bin          the first window's logits, float32 [ctx][vocab]
  bad_*/              hf/ with one thing wrong each (llama_convert.sh names them)

usage: llama_reference.py lora-grad BEFORE.h5 AFTER.h5 WINDOW.bin LR   (tests/lora.sh)
LoRA's gradient: BEFORE is an fgpipe LoRA checkpoint (model = llama, lora_rank > 0), AFTER the
same after one step of plain SGD (momentum 0, no decay, no clipping) at learning rate LR on the
one window of WINDOW.bin (uint16 ids, ctx + 1 of them). The float64 model with every adapted
weight W + (alpha / r) B A (PEFT's LoRA) gives the gradient of the window's mean loss in each A
and B; printed: "max_rel_err E" of (BEFORE - AFTER) / LR against it, the largest difference over
the largest gradient entry, tensor by tensor; exit 1 when an adapter has no gradient.
"""
import argparse
import json
import math
import os
import shutil

import torch
import torch.nn.functional as F

from safetensors_ref import write_safetensors  # tests/, beside this file

STORED = [torch.bfloat16, torch.float16, torch.float32]


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def llama3_inv_freq(inv_freq, rs):  # transformers' _compute_llama3_parameters
    factor, low, high, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv_freq
    inv_llama = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, inv_llama)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def forward(w, cfg, idx):  # idx [B, T] -> logits [B, T, V], float64
    C, H, Hkv, d = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, B, T = cfg["rms_norm_eps"], idx.shape[0], idx.shape[1]
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    if cfg.get("rope_scaling"):
        inv_freq = llama3_inv_freq(inv_freq, cfg["rope_scaling"])
    freqs = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    x = w["model.embed_tokens.weight"][idx]
    for i in range(cfg["num_hidden_layers"]):
        p = lambda name: w[f"model.layers.{i}.{name}.weight"]
        h = rms_norm(x, p("input_layernorm"), eps)
        q = (h @ p("self_attn.q_proj").T).view(B, T, H, d)
        k = (h @ p("self_attn.k_proj").T).view(B, T, Hkv, d)
        v = (h @ p("self_attn.v_proj").T).view(B, T, Hkv, d)
        if cfg["model_type"] == "qwen3":
            q, k = rms_norm(q, p("self_attn.q_norm"), eps), rms_norm(k, p("self_attn.k_norm"), eps)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
        att = torch.softmax(q @ k.transpose(2, 3) * d ** -0.5 + mask, dim=-1) @ v
        x = x + att.transpose(1, 2).reshape(B, T, H * d) @ p("self_attn.o_proj").T
        h = rms_norm(x, p("post_attention_layernorm"), eps)
        x = x + (F.silu(h @ p("mlp.gate_proj").T) * (h @ p("mlp.up_proj").T)) @ p("mlp.down_proj").T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


def shapes(cfg):
    C, I, d = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d
    out = {"model.embed_tokens.weight": [cfg["vocab_size"], C], "model.norm.weight": [C]}
    for i in range(cfg["num_hidden_layers"]):
        block = {"input_layernorm": [C], "self_attn.q_proj": [q, C], "self_attn.k_proj": [kv, C],
                 "self_attn.v_proj": [kv, C], "self_attn.o_proj": [C, q], "post_attention_layernorm": [C],
                 "mlp.gate_proj": [I, C], "mlp.up_proj": [I, C], "mlp.down_proj": [C, I]}
        if cfg["model_type"] == "qwen3":
            block.update({"self_attn.q_norm": [d], "self_attn.k_norm": [d]})
        out.update({f"model.layers.{i}.{k}.weight": v for k, v in block.items()})
    if not cfg["tie_word_embeddings"]:
        out["lm_head.weight"] = [cfg["vocab_size"], C]
    return out


def draw(name, shape, gen):  # float64, not initialisation-like: norms around 1, logits spread
    r = torch.randn(shape, generator=gen, dtype=torch.float64)
    if "norm" in name:
        return 1.0 + 0.2 * r
    if "embed_tokens" in name or "lm_head" in name:
        return 0.5 * r
    return r * (1.2 / math.sqrt(shape[1]))




def write_hf(folder, cfg, stored, n_shards):
    os.makedirs(folder, exist_ok=True)
    with open(f"{folder}/config.json", "w") as f:
        json.dump(cfg, f, indent=2)
    names = sorted(stored)
    weight_map = {}
    for s in range(n_shards):
        shard = f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors"
        part = {k: stored[k] for k in names[s::n_shards]}
        write_safetensors(f"{folder}/{shard}", part)
        weight_map.update({k: shard for k in part})
    with open(f"{folder}/model.safetensors.index.json", "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=2)


def write_bad(out, cfg, stored, n_shards):
    hf = f"{out}/hf"

    def variant(name, cfg_change=None, tensors=None):
        write_hf(f"{out}/bad_{name}", dict(cfg, **(cfg_change or {})), tensors or stored, n_shards)

    variant("sliding", {"use_sliding_window": True, "sliding_window": 8})
    variant("moe", {"num_experts": 8})
    variant("arch", {"architectures": ["MistralForCausalLM"]})
    variant("rope", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    bias = dict(stored)
    bias["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(stored["model.layers.0.self_attn.q_proj.weight"].shape[0])
    variant("bias", tensors=bias)
    shape = dict(stored)
    shape["model.layers.1.mlp.up_proj.weight"] = shape["model.layers.1.mlp.up_proj.weight"][:-1]
    variant("shape", tensors=shape)
    shutil.copytree(hf, f"{out}/bad_shard")  # a shard the index names is gone
    os.remove(f"{out}/bad_shard/model-{n_shards:05d}-of-{n_shards:05d}.safetensors")
    shutil.copytree(hf, f"{out}/bad_index")  # the index maps a tensor to a shard without it
    index = json.load(open(f"{out}/bad_index/model.safetensors.index.json"))
    index["weight_map"]["model.layers.0.mlp.extra.weight"] = next(iter(index["weight_map"].values()))
    json.dump(index, open(f"{out}/bad_index/model.safetensors.index.json", "w"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--family", choices=("llama", "qwen3"), required=True)
    for opt, default in (("n-layer", 2), ("n-embd", 32), ("n-head", 4), ("n-kv-head", 2), ("head-dim", 12),
                         ("intermediate", 48), ("ctx", 16), ("vocab", 300), ("windows", 4), ("shards", 2), ("seed", 0)):
        ap.add_argument(f"--{opt}", type=int, default=default)
    a = ap.parse_args()
    torch.set_num_threads(2)
    gen = torch.Generator().manual_seed(a.seed)
    llama = a.family == "llama"
    cfg = {"architectures": ["LlamaForCausalLM" if llama else "Qwen3ForCausalLM"], "model_type": a.family,
           "hidden_act": "silu", "hidden_size": a.n_embd, "intermediate_size": a.intermediate,
           "num_hidden_layers": a.n_layer, "num_attention_heads": a.n_head, "num_key_value_heads": a.n_kv_head,
           "head_dim": a.head_dim, "rms_norm_eps": 1e-5 if llama else 1e-6,
           "rope_theta": 500000.0 if llama else 1000000.0, "max_position_embeddings": 4 * a.ctx,
           "vocab_size": a.vocab, "tie_word_embeddings": not llama, "attention_bias": False,
           "torch_dtype": "bfloat16",
           # llama3 scaling at a context of 8 tokens: every band (kept, blended, slowed) occurs
           "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8} if llama else None}
    if llama:
        cfg["mlp_bias"] = False
    else:
        cfg.update({"use_sliding_window": False, "sliding_window": None, "max_window_layers": a.n_layer})
    stored = {name: draw(name, shape, gen).to(STORED[i % 3]) for i, (name, shape) in enumerate(sorted(shapes(cfg).items()))}
    write_hf(f"{a.out_dir}/hf", cfg, stored, a.shards)
    write_bad(a.out_dir, cfg, stored, a.shards)

    n = a.windows * a.ctx + 1 + a.ctx // 2
    tokens = torch.randint(0, a.vocab, (n,), generator=gen)
    tokens[3], tokens[7] = a.vocab - 1, 0
    tokens.numpy().astype("<u2").tofile(f"{a.out_dir}/tokens.bin")
    w = {k: v.to(torch.float64) for k, v in stored.items()}
    with torch.no_grad():
        win = torch.stack([tokens[i * a.ctx:i * a.ctx + a.ctx + 1] for i in range(a.windows)])
        logits = forward(w, cfg, win[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, a.vocab), win[:, 1:].reshape(-1))
    logits[0].float().numpy().astype("<f4").tofile(f"{a.out_dir}/logits.bin")
    with open(f"{a.out_dir}/reference.json", "w") as f:
        json.dump({"loss": loss.item(), "windows": a.windows, "logits_std": logits.std().item()}, f)


def lora_grad(before, after, window, lr):
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
    import numpy as np
    import fgpipe_convert_llama as conv
    import fgpipe_convert_lora as lora
    c, V, t0 = conv.read_checkpoint(before)
    _, _, t1 = conv.read_checkpoint(after)
    rank, alpha, _ = lora.lora_settings(c)
    cfg = conv.hf_config(c, "F32")
    base, adapters = lora.split({k: torch.from_numpy(np.asarray(v, dtype=np.float64)) for k, v in t0.items()})
    params = {m: (A.clone().requires_grad_(), B.clone().requires_grad_()) for m, (A, B) in adapters.items()}
    w = {"model." + k: v for k, v in base.items()}
    w["model.embed_tokens.weight"] = w["model.embed_tokens.weight"][:V]
    if "model.lm_head.weight" in w:
        w["lm_head.weight"] = w.pop("model.lm_head.weight")[:V]
    for m, (A, B) in params.items():
        w[f"model.{m}.weight"] = w[f"model.{m}.weight"] + (alpha / rank) * (B @ A)
    ids = torch.from_numpy(np.fromfile(window, dtype="<u2").astype(np.int64))
    ctx = int(c["ctx"])
    if ids.numel() != ctx + 1:
        raise SystemExit(f"{window}: {ids.numel()} tokens, not ctx + 1 = {ctx + 1}")
    logits = forward(w, cfg, ids[None, :-1])
    F.cross_entropy(logits.reshape(-1, V), ids[1:]).backward()
    worst, silent = 0.0, []
    for m, (A, B) in params.items():
        for which, ref in (("A", A.grad), ("B", B.grad)):
            name = f"{m}.lora_{which}.weight"
            got = (torch.from_numpy(t0[name].astype(np.float64)) - torch.from_numpy(t1[name].astype(np.float64))) / lr
            if ref.abs().max() == 0:
                silent.append(name)
                continue
            worst = max(worst, ((got - ref).abs().max() / ref.abs().max()).item())
    print(f"max_rel_err {worst:.3g} over {2 * len(params)} tensors")
    if silent:
        print("no gradient in " + ", ".join(silent))
        return 1
    return 0


if __name__ == "__main__":
    import sys
    if len(sys.argv) == 6 and sys.argv[1] == "lora-grad":
        torch.set_num_threads(2)
        sys.exit(lora_grad(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])))
    main()
