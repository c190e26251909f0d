"""Llama and Qwen3 for tools/fgpipe-convert: a Hugging Face directory (config.json and
model.safetensors, or shards with model.safetensors.index.json) into an fgpipe checkpoint of
model = llama, and back (docs/gpt.md, "Llama and Qwen3").

import: config.json's architecture must be LlamaForCausalLM or Qwen3ForCausalLM, with silu, no
biases, no sliding window, no experts, and rope_scaling none or of type llama3; anything else is
refused naming the key. Every tensor the shape implies must be there with its shape (F32, BF16
or F16, widened to float32 exactly), and no other: a missing shard, an index naming a tensor its
shard lacks, a bias or a tensor of the wrong shape is refused by name before anything is
written. fgpipe's tensors are Hugging Face's less the "model." prefix, [out, in] as nn.Linear
stores them; the token table (and the head) get zero pad rows up to a multiple of --pad-vocab.
A tied head (tie_word_embeddings) may be absent or must equal the table. --ctx T: the windows
the model runs on (default the smaller of max_position_embeddings and 1024).
export: config.json and model.safetensors (--dtype f32, the default, or bf16 rounded to nearest
even) under Hugging Face's names, without the pad rows, lm_head.weight only when untied; a LoRA
checkpoint's adapters merged into its weights, and export-lora writes them in PEFT's layout
(fgpipe_convert_lora.py).
"""
import json
import os
from typing import NamedTuple, Optional

import h5py
import numpy as np

import fgpipe_convert_lora
import fgpipe_safetensors as safetensors
import fgpipe_stream as stream
from fgpipe_safetensors import BadInput

ARCHITECTURES = {"LlamaForCausalLM": ("llama", 0), "Qwen3ForCausalLM": ("qwen3", 1)}
MAX_VOCAB = 1 << 24  # the config's largest vocab (token files hold uint32 above 65536)
DEFAULT_CTX = 1024
REQUIRED = None  # a Key's hf_default: config.json must have the key


class Key(NamedTuple):
    fgpipe: str             # fgpipe's config key (src/input/config.c's table)
    hf: Optional[str]       # config.json's key; "rope_scaling.x": x of the rope_scaling object;
                            # None: the architecture says (ARCHITECTURES)
    kind: type              # int, float or bool
    hf_default: object      # config.json's value where it has none: REQUIRED, a value, or a
                            # function of the keys read before it (rope_scaling's keys: none
                            # where the object is)
    fgpipe_default: object  # fgpipe's (config.c's), for a checkpoint whose config lacks the key


# The model's hyperparameters, fgpipe's and Hugging Face's: import reads config.json through
# this table (read_shape) and writes fgpipe's config (config_text), export writes config.json
# back (hf_config), in this order; tools/model-spec checks it against config.c's table (the
# model_spec test).
SPEC = (
    Key("n_embd", "hidden_size", int, REQUIRED, 128),
    Key("intermediate_size", "intermediate_size", int, REQUIRED, 344),
    Key("n_layer", "num_hidden_layers", int, REQUIRED, 4),
    Key("n_head", "num_attention_heads", int, REQUIRED, 4),
    Key("n_kv_head", "num_key_value_heads", int, lambda s: s["n_head"], 4),
    Key("head_dim", "head_dim", int, lambda s: s["n_embd"] // s["n_head"], 32),
    Key("rms_norm_eps", "rms_norm_eps", float, 1e-6, 1e-6),
    Key("rope_theta", "rope_theta", float, 10000.0, 10000.0),
    Key("ctx", "max_position_embeddings", int, DEFAULT_CTX, 128),  # ctx: --ctx, at most this
    Key("vocab", "vocab_size", int, REQUIRED, 256),
    Key("tie_embeddings", "tie_word_embeddings", bool, False, True),
    Key("rope_scaling_factor", "rope_scaling.factor", float, REQUIRED, 0.0),  # 0: no scaling
    Key("rope_scaling_low_freq_factor", "rope_scaling.low_freq_factor", float, REQUIRED, 1.0),
    Key("rope_scaling_high_freq_factor", "rope_scaling.high_freq_factor", float, REQUIRED, 4.0),
    Key("rope_scaling_original_max_position_embeddings", "rope_scaling.original_max_position_embeddings",
        int, REQUIRED, 8192),
    Key("qk_norm", None, bool, None, False),  # Qwen3ForCausalLM's q and k norms
)
FORMAT = {int: str, float: repr, bool: lambda v: str(int(v))}  # fgpipe's config syntax


def config_value(cfg, key, kind, default=None):
    v = cfg.get(key, default)
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and v != int(v)):
        raise BadInput(f"config.json: {key} is {v!r}, not {'an integer' if kind is int else 'a number'}")
    return kind(v)


def refuse_unsupported(cfg):
    arch = cfg.get("architectures")
    if not (isinstance(arch, list) and len(arch) == 1 and arch[0] in ARCHITECTURES):
        raise BadInput(f"config.json: architectures {arch!r}: fgpipe reads {' or '.join(ARCHITECTURES)} "
                       "directories (GPT-2: import its model.safetensors file, with --n-head)")
    if cfg.get("hidden_act", "silu") != "silu":
        raise BadInput(f"config.json: hidden_act {cfg['hidden_act']!r}: the family's MLP is SwiGLU (silu)")
    for key in ("attention_bias", "mlp_bias", "use_sliding_window"):
        if cfg.get(key):
            raise BadInput(f"config.json: {key} is true: fgpipe's {arch[0]} has none")
    for key in ("num_experts", "num_local_experts", "moe_intermediate_size", "num_experts_per_tok"):
        if cfg.get(key):
            raise BadInput(f"config.json: {key} {cfg[key]}: mixtures of experts are not supported")
    rs = cfg.get("rope_scaling")
    if rs is not None:
        kind = rs.get("rope_type", rs.get("type")) if isinstance(rs, dict) else rs
        if kind != "llama3":
            raise BadInput(f"config.json: rope_scaling of type {kind!r}: fgpipe reads none or llama3")


def read_order(k):  # the keys config.json must have, then those that may follow from them, then rope_scaling's
    return "." in k.hf, k.hf_default is not REQUIRED


def hf_value(cfg, k, s):  # key k of config.json (s: the keys read before it)
    outer, _, key = k.hf.rpartition(".")
    if outer:
        inner = cfg.get(outer) or {}
        return config_value(inner, key, k.kind) if inner else k.fgpipe_default
    if k.kind is bool:
        return bool(cfg.get(key, k.hf_default))
    return config_value(cfg, key, k.kind, k.hf_default(s) if callable(k.hf_default) else k.hf_default)


def read_shape(folder):  # {fgpipe key: value} (ctx: max_position_embeddings) and the family
    path = os.path.join(folder, "config.json")
    try:
        cfg = json.load(open(path))
        assert isinstance(cfg, dict)
    except (OSError, ValueError, AssertionError) as e:
        raise BadInput(f"{path}: not a JSON object ({e})")
    refuse_unsupported(cfg)
    s = {}
    s["family"], s["qk_norm"] = ARCHITECTURES[cfg["architectures"][0]]
    for k in sorted((k for k in SPEC if k.hf), key=read_order):
        s[k.fgpipe] = hf_value(cfg, k, s)
    if s["n_head"] % s["n_kv_head"]:
        raise BadInput(f"config.json: num_key_value_heads {s['n_kv_head']} does not divide "
                       f"num_attention_heads {s['n_head']}")
    if not 1 <= s["vocab"] <= MAX_VOCAB:
        raise BadInput(f"config.json: vocab_size {s['vocab']}: fgpipe takes at most {MAX_VOCAB}")
    return s


def expected_shapes(s):  # Hugging Face's names and shapes
    C, I, d = s["n_embd"], s["intermediate_size"], s["head_dim"]
    q, kv = s["n_head"] * d, s["n_kv_head"] * d
    shapes = {"model.embed_tokens.weight": [s["vocab"], C], "model.norm.weight": [C]}
    for i in range(s["n_layer"]):
        block = {"input_layernorm.weight": [C], "self_attn.q_proj.weight": [q, C],
                 "self_attn.k_proj.weight": [kv, C], "self_attn.v_proj.weight": [kv, C],
                 "self_attn.o_proj.weight": [C, q], "post_attention_layernorm.weight": [C],
                 "mlp.gate_proj.weight": [I, C], "mlp.up_proj.weight": [I, C], "mlp.down_proj.weight": [C, I]}
        if s["qk_norm"]:
            block.update({"self_attn.q_norm.weight": [d], "self_attn.k_norm.weight": [d]})
        shapes.update({f"model.layers.{i}.{k}": v for k, v in block.items()})
    if not s["tie_embeddings"]:
        shapes["lm_head.weight"] = [s["vocab"], C]
    return shapes


def check_tensors(folder, s, t):
    """t: {name: Tensor or array}; checked before anything is written (a tied head compared
    block by block)."""
    for name in list(t):
        if name.endswith("rotary_emb.inv_freq"):  # a buffer older files carry: recomputed
            del t[name]
    shapes = expected_shapes(s)
    if s["tie_embeddings"] and "lm_head.weight" in t:
        head, table = t.pop("lm_head.weight"), t.get("model.embed_tokens.weight")
        same = head.equals(table) if isinstance(head, safetensors.Tensor) else np.array_equal(head, table)
        if not same:
            raise BadInput(f"{folder}: tie_word_embeddings, but lm_head.weight is not model.embed_tokens.weight")
    biases = sorted(k for k in t if k.endswith(".bias"))
    if biases:
        raise BadInput(f"{folder}: {biases[0]}: the family has no biases ({len(biases)} bias tensors)")
    for name, shape in shapes.items():
        if name not in t:
            raise BadInput(f"{folder}: no {name}")
        if list(t[name].shape) != shape:
            raise BadInput(f"{folder}: {name} is {list(t[name].shape)}, not {shape} (from config.json)")
    extra = sorted(set(t) - set(shapes))
    if extra:
        raise BadInput(f"{folder}: tensors not of {s['family']}'s shape ({len(extra)}): {', '.join(extra[:3])}")


def config_text(s, ctx, pad_vocab, seed):
    shape = dict(s, ctx=ctx)
    lines = ["data = text" if s["vocab"] == 256 else "data = tokens", "model = llama"]
    lines += [f"{k.fgpipe} = {FORMAT[k.kind](shape[k.fgpipe])}" for k in SPEC]
    lines += [f"pad_vocab = {pad_vocab}", f"seed = {seed}"]
    return "\n".join(lines) + "\n"


def import_hf(folder, out, seed, pad_vocab, ctx):
    """Streams: the shards' headers are read and checked, the disk's room checked, then each
    tensor is memory-mapped, widened and written block by block (fgpipe_stream)."""
    if pad_vocab < 1:
        raise BadInput(f"--pad-vocab {pad_vocab}: must be at least 1 (1: no padding)")
    s = read_shape(folder)
    ctx = ctx or min(s["ctx"], DEFAULT_CTX)
    if not 1 <= ctx <= s["ctx"]:
        raise BadInput(f"--ctx {ctx}: must be 1 to max_position_embeddings {s['ctx']}")
    t = safetensors.open_dir(folder)
    check_tensors(folder, s, t)
    V, C = s["vocab"], s["n_embd"]
    Vp = -(-V // pad_vocab) * pad_vocab
    table = t.pop("model.embed_tokens.weight")
    head = table if s["tie_embeddings"] else t.pop("lm_head.weight")
    # BF16 tensors stay BF16 (a frozen base streams half the bytes; a trained layer is widened
    # when a run loads it); F16 and F32 become float32
    plan = {k[len("model."):]: (v.shape, v.rows, v.dtype == "BF16") for k, v in t.items()}
    # the token table and the head: zero pad rows (no id reaches them) up to Vp
    plan["embed_tokens.weight"] = ((Vp, C), stream.padded(table.rows, V, (Vp, C)), table.dtype == "BF16")
    plan["lm_head.weight"] = ((Vp, C), stream.padded(head.rows, V, (Vp, C)), head.dtype == "BF16")
    entries = list(plan.values())
    stream.check_room(out, stream.h5_bytes([e[0] for e in entries], {i for i, e in enumerate(entries) if e[2]}),
                      "the checkpoint (float32, BF16 where the source is)", replaced=[out])
    try:
        f = h5py.File(out, "w")
    except OSError as e:
        raise BadInput(f"{out}: cannot create it ({e})")
    with f:
        for name, (shape, get, bf16) in sorted(plan.items()):
            group, _, tensor = name.rpartition(".")
            stream.write_dataset(f, f"params/{group}/{tensor}", shape, get, bf16)
        L = s["n_layer"]
        n_layers = 1 + (10 if s["qk_norm"] else 9) * L + 2  # embed_tokens, the blocks, norm, lm_head
        for k, v in {"format_version": 1, "step": 0, "seed": seed, "stages": 1}.items():
            f.attrs[k] = np.int64(v)
        f.attrs["layout"] = np.array([0, n_layers], dtype=np.int32)
        f.attrs["config"] = np.bytes_(config_text(s, ctx, pad_vocab, seed).encode())
        f.attrs["model_kind"] = np.bytes_(b"llama")
        f.attrs["weight_orientation"] = np.bytes_(b"linear weights are [out, in]: y = x W^T + b")
        for k, v in {"vocab": V, "padded_vocab": Vp, "ctx": ctx, "n_layer": L, "n_embd": C,
                     "n_head": s["n_head"]}.items():
            f.attrs[k] = np.float64(v)


def is_llama(path):
    try:
        with h5py.File(path, "r") as f:
            return f.attrs.get("model_kind", b"") in (b"llama", "llama")
    except OSError:
        return False


def dtype_option(argv):
    if not argv:
        return "F32"
    if len(argv) == 2 and argv[0] == "--dtype" and argv[1] in ("f32", "bf16"):
        return argv[1].upper()
    raise BadInput(f"export of a llama checkpoint takes --dtype f32|bf16, not {' '.join(argv)}")


def checkpoint_value(c, k):  # key k of a checkpoint's config (text); fgpipe's default where it lacks it
    if k.fgpipe not in c:
        return k.fgpipe_default
    return c[k.fgpipe] == "1" if k.kind is bool else k.kind(c[k.fgpipe])


def checkpoint_shape(c):  # {fgpipe key: value}
    return {k.fgpipe: checkpoint_value(c, k) for k in SPEC}


def hf_config(c, dtype):
    s = checkpoint_shape(c)
    qwen3, L = s["qk_norm"], s["n_layer"]
    cfg = {"architectures": ["Qwen3ForCausalLM" if qwen3 else "LlamaForCausalLM"],
           "model_type": "qwen3" if qwen3 else "llama", "hidden_act": "silu"}
    cfg.update({k.hf: s[k.fgpipe] for k in SPEC if k.hf and "." not in k.hf})
    cfg.update({"attention_bias": False, "attention_dropout": 0.0, "initializer_range": 0.02,
                "torch_dtype": "bfloat16" if dtype == "BF16" else "float32", "rope_scaling": None})
    rope = {k.hf.split(".")[1]: s[k.fgpipe] for k in SPEC if k.hf and k.hf.startswith("rope_scaling.")}
    if rope["factor"] > 0:
        cfg["rope_scaling"] = {"rope_type": "llama3", **rope}
    if qwen3:
        cfg.update({"use_sliding_window": False, "sliding_window": None, "max_window_layers": L})
    else:
        cfg["mlp_bias"] = False
    return cfg


def read_checkpoint(src):
    """(config {key: value}, vocab, {"layers.0.self_attn.q_proj.weight": array, ...})."""
    with h5py.File(src, "r") as f:
        c = dict(line.split(" = ", 1) for line in f.attrs["config"].decode().splitlines() if " = " in line)
        V = int(f.attrs["vocab"])
        tensors = {}

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                group, tensor = name.rsplit("/", 1)
                tensors[f"{group}.{tensor}"] = obj[...]

        f["params"].visititems(visit)
    return c, V, tensors


def checkpoint_config(f):
    return dict(line.split(" = ", 1) for line in f.attrs["config"].decode().splitlines() if " = " in line)


def checkpoint_datasets(f):  # {"layers.0.self_attn.q_proj.weight": dataset}, nothing read
    found = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            group, tensor = name.rsplit("/", 1)
            found[f"{group}.{tensor}"] = obj

    f["params"].visititems(visit)
    return found


def export_hf(src, out, dtype):
    """A LoRA checkpoint exports merged: W + (alpha / r) B A (fgpipe_convert_lora.py). Streams:
    the header from the datasets' shapes, then each tensor block by block."""
    with h5py.File(src, "r") as f:
        c, V = checkpoint_config(f), int(f.attrs["vocab"])
        params = {k: (ds.shape, stream.h5_rows(ds)) for k, ds in checkpoint_datasets(f).items()}
        if fgpipe_convert_lora.lora_settings(c)[0] > 0:
            params = fgpipe_convert_lora.merge_stream(checkpoint_datasets(f), c)
        entries = []
        for name, (shape, get) in params.items():
            if name.startswith(("embed_tokens.", "lm_head.")):
                shape = (min(V, shape[0]),) + tuple(shape[1:])  # the pad rows are fgpipe's, not the model's
            if not name.startswith("lm_head."):
                entries.append((f"model.{name}", shape, get))
            elif not checkpoint_shape(c)["tie_embeddings"]:
                entries.append(("lm_head.weight", shape, get))
        path = os.path.join(out, "model.safetensors")
        stream.check_room(path, safetensors.file_bytes([e[1] for e in entries], [e[0] for e in entries], dtype)
                          + 4096, f"model.safetensors ({dtype})", replaced=[path])
        try:
            os.makedirs(out, exist_ok=True)
            with open(os.path.join(out, "config.json"), "w") as g:
                json.dump(hf_config(c, dtype), g, indent=2)
        except OSError as e:
            raise BadInput(f"{out}: {e.strerror}")
        safetensors.write_stream(path, entries, dtype)


def export_lora(src, out):  # the adapters alone are read (small), not the base
    with h5py.File(src, "r") as f:
        c = checkpoint_config(f)
        params = {k: ds[...] for k, ds in checkpoint_datasets(f).items() if ".lora_" in k}
    fgpipe_convert_lora.export_lora(params, c, out)
