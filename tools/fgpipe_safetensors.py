"""safetensors files for tools/fgpipe-convert: read F32, BF16 and F16 tensors widened to
float32 exactly (BF16 is the top half of a float32; every F16 value is a float32), from one file
or from a Hugging Face directory's shards and index; write F32 or BF16 (rounded to nearest
even), keys sorted, the data 8-byte aligned."""
import json
import os
import struct

import numpy as np

SIZES = {"F32": 4, "BF16": 2, "F16": 2}


class BadInput(Exception):
    pass


def widen(raw, dtype):  # little-endian bytes of `dtype` -> float32, exactly
    if dtype == "F32":
        return np.frombuffer(raw, dtype="<f4")
    if dtype == "F16":
        return np.frombuffer(raw, dtype="<f2").astype(np.float32)
    bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16  # BF16
    return bits.view(np.float32)


def read(path, skip=lambda name: False, names=None):
    """{name: float32 array} of the file's tensors (those of `names` only, when given), less
    the __metadata__ entry and the names `skip` accepts (skipped whatever their dtype)."""
    try:
        with open(path, "rb") as f:
            blob = memoryview(f.read())  # slices of a memoryview share it: no copy of the data
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror}")
    if len(blob) < 8:
        raise BadInput(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", blob[:8])
    try:
        header = json.loads(bytes(blob[8:8 + n]))
    except ValueError as e:
        raise BadInput(f"{path}: the header is not JSON ({e})")
    if not isinstance(header, dict):
        raise BadInput(f"{path}: the header is not a JSON object")
    data = blob[8 + n:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__" or skip(name) or (names is not None and name not in names):
            continue
        try:
            dtype, shape = info["dtype"], [int(d) for d in info["shape"]]
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise BadInput(f"{path}: {name}'s header entry has no dtype, data_offsets [begin, end] and shape")
        if dtype not in SIZES:
            raise BadInput(f"{path}: {name} is {dtype}; fgpipe reads F32, BF16 and F16")
        count = int(np.prod(shape, dtype=np.int64))
        if not 0 <= begin <= end <= len(data) or end - begin != SIZES[dtype] * count:
            raise BadInput(f"{path}: {name} has offsets {begin}..{end}, not {shape} {dtype} values in the file")
        tensors[name] = widen(data[begin:end], dtype).reshape(shape)
    return tensors


def read_dir(folder):
    """A Hugging Face directory's tensors: model.safetensors.index.json's shards (every shard
    it names must exist, every tensor it maps must be in its shard), else model.safetensors."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if not os.path.exists(index):
        single = os.path.join(folder, "model.safetensors")
        if not os.path.exists(single):
            raise BadInput(f"{folder}: neither model.safetensors.index.json nor model.safetensors")
        return read(single)
    try:
        weight_map = json.load(open(index))["weight_map"]
        assert isinstance(weight_map, dict)
    except (OSError, ValueError, KeyError, AssertionError):
        raise BadInput(f"{index}: not a shard index (a JSON object with a weight_map)")
    shards = sorted(set(weight_map.values()))
    missing = [s for s in shards if not os.path.exists(os.path.join(folder, s))]
    if missing:
        raise BadInput(f"{index} names shards that are missing: {', '.join(missing[:3])}")
    tensors = {}
    for shard in shards:
        want = {k for k, v in weight_map.items() if v == shard}
        got = read(os.path.join(folder, shard), names=want)
        absent = sorted(want - set(got))
        if absent:
            raise BadInput(f"{index} maps {absent[0]} to {shard}, which has no such tensor")
        tensors.update(got)
    return tensors


def to_bf16(a):  # float32 -> BF16 bits, rounded to nearest even (NaN kept a NaN)
    bits = np.ascontiguousarray(a, dtype="<f4").view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    rounded = np.where(np.isnan(a.reshape(bits.shape)), (bits >> 16) | 0x40, rounded)
    return rounded.astype("<u2")


def write(path, tensors, dtype="F32"):
    header, offset = {}, 0
    size = SIZES[dtype]
    for name in sorted(tensors):
        t = tensors[name]
        n = t.size * size
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    try:
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            for name in sorted(tensors):
                t = tensors[name]
                f.write((to_bf16(t) if dtype == "BF16" else np.ascontiguousarray(t, dtype="<f4")).tobytes())
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror}")
