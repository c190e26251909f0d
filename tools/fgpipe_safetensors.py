"""safetensors files for tools/fgpipe-convert: read F32, BF16 and F16 tensors widened to
float32 exactly (BF16 is the top half of a float32; every F16 value is a float32), from one file
or from a Hugging Face directory's shards and index; write F32 or BF16 (rounded to nearest
even), keys sorted, the data 8-byte aligned.

Streaming (docs/results/convert.md): open_file and open_dir parse the headers only and give
Tensor objects; Tensor.rows(r0, r1) memory-maps the byte range of those rows alone, widens it
and drops the mapping, so that a converter holds one block of rows at a time; write_stream
writes the header first (from the shapes), then each tensor block by block."""
import json
import os
import struct

import numpy as np

from fgpipe_stream import BadInput, count, row_blocks

SIZES = {"F32": 4, "BF16": 2, "F16": 2}
RAW = {"F32": "<f4", "BF16": "<u2", "F16": "<f2"}


def widen(raw, dtype):  # little-endian bytes of `dtype` -> float32, exactly
    if dtype == "F32":
        return np.frombuffer(raw, dtype="<f4")
    if dtype == "F16":
        return np.frombuffer(raw, dtype="<f2").astype(np.float32)
    bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16  # BF16
    return bits.view(np.float32)


def widen_copy(a, dtype):  # an array (a memory map) of `dtype`'s raw values -> a new float32 array
    if dtype == "BF16":
        bits = np.array(a, dtype=np.uint32)
        bits <<= 16
        return bits.view(np.float32)
    return np.array(a, dtype=np.float32)  # F32: a copy; F16: exact


class Tensor:
    """One tensor of a safetensors file, not read: its rows are memory-mapped on demand."""

    def __init__(self, path, offset, dtype, shape):
        self.path, self.offset, self.dtype, self.shape = path, offset, dtype, tuple(shape)

    @property
    def ndim(self):
        return len(self.shape)

    def rows(self, r0, r1):
        """float32 rows r0..r1 (elements of a vector; (0, 1) of a scalar), a new array."""
        inner = count(self.shape[1:]) if self.shape else 1
        n = (r1 - r0) * inner
        out_shape = ((r1 - r0),) + self.shape[1:] if self.shape else ()
        if n == 0:
            return np.zeros(out_shape, dtype=np.float32)
        mm = np.memmap(self.path, dtype=RAW[self.dtype], mode="r",
                       offset=self.offset + r0 * inner * SIZES[self.dtype], shape=(n,))
        out = widen_copy(mm, self.dtype)
        del mm  # unmapped: the file's pages leave this process
        return out.reshape(out_shape)

    def cols(self, c0, c1):
        """float32 columns c0..c1 of a matrix, [rows, c1 - c0], read in blocks of rows."""
        out = np.empty((self.shape[0], c1 - c0), dtype=np.float32)
        for r0, r1 in row_blocks(self.shape):
            out[r0:r1] = self.rows(r0, r1)[:, c0:c1]
        return out

    def all(self):
        return self.rows(0, self.shape[0] if self.shape else 1)

    def equals(self, other):
        """np.array_equal of the two tensors' values, block by block."""
        if not isinstance(other, Tensor) or other.shape != self.shape:
            return False
        return all(np.array_equal(self.rows(r0, r1), other.rows(r0, r1)) for r0, r1 in row_blocks(self.shape))


def open_file(path, skip=lambda name: False, names=None):
    """{name: Tensor} of the file's tensors (those of `names` only, when given), less the
    __metadata__ entry and the names `skip` accepts (skipped whatever their dtype). Reads the
    header alone; every entry is checked against the file's size."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            size = os.fstat(f.fileno()).st_size
            if len(head) < 8:
                raise BadInput(f"{path}: too short for a safetensors header")
            (n,) = struct.unpack("<Q", head)
            text = f.read(n) if n <= size - 8 else b""
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror}")
    try:
        header = json.loads(text)
    except ValueError as e:
        raise BadInput(f"{path}: the header is not JSON ({e})")
    if not isinstance(header, dict):
        raise BadInput(f"{path}: the header is not a JSON object")
    data_len = max(0, size - 8 - n)
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
        if not 0 <= begin <= end <= data_len or end - begin != SIZES[dtype] * count(shape):
            raise BadInput(f"{path}: {name} has offsets {begin}..{end}, not {shape} {dtype} values in the file")
        tensors[name] = Tensor(path, 8 + n + begin, dtype, shape)
    return tensors


def read(path, skip=lambda name: False, names=None):
    """{name: float32 array} of the file's tensors: open_file's, each read whole."""
    return {k: t.all() for k, t in open_file(path, skip, names).items()}


def shard_paths(folder):
    """The safetensors files of a Hugging Face directory: model.safetensors.index.json's shards
    (every shard it names must exist) with the tensors the index maps to each, else
    model.safetensors alone (None: all its tensors)."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if not os.path.exists(index):
        single = os.path.join(folder, "model.safetensors")
        if not os.path.exists(single):
            raise BadInput(f"{folder}: neither model.safetensors.index.json nor model.safetensors")
        return [(single, None)]
    try:
        weight_map = json.load(open(index))["weight_map"]
        assert isinstance(weight_map, dict)
    except (OSError, ValueError, KeyError, AssertionError):
        raise BadInput(f"{index}: not a shard index (a JSON object with a weight_map)")
    shards = sorted(set(weight_map.values()))
    missing = [s for s in shards if not os.path.exists(os.path.join(folder, s))]
    if missing:
        raise BadInput(f"{index} names shards that are missing: {', '.join(missing[:3])}")
    return [(os.path.join(folder, s), {k for k, v in weight_map.items() if v == s}) for s in shards]


def open_dir(folder):
    """A Hugging Face directory's tensors as {name: Tensor}: every tensor the index maps must be
    in its shard. Headers only."""
    tensors = {}
    index = os.path.join(folder, "model.safetensors.index.json")
    for path, want in shard_paths(folder):
        got = open_file(path, names=want)
        if want is not None:
            absent = sorted(want - set(got))
            if absent:
                raise BadInput(f"{index} maps {absent[0]} to {os.path.basename(path)}, which has no such tensor")
        tensors.update(got)
    return tensors


def read_dir(folder):
    """A Hugging Face directory's tensors as {name: float32 array}: open_dir's, each read whole."""
    return {k: t.all() for k, t in open_dir(folder).items()}


def to_bf16(a):  # float32 -> BF16 bits, rounded to nearest even (NaN kept a NaN)
    bits = np.ascontiguousarray(a, dtype="<f4").view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    rounded = np.where(np.isnan(a.reshape(bits.shape)), (bits >> 16) | 0x40, rounded)
    return rounded.astype("<u2")


def write_stream(path, entries, dtype="F32"):
    """entries: [(name, shape, get)], get(r0, r1) giving float32 rows of the tensor (fgpipe_stream):
    the header from the shapes, keys sorted, then each tensor's bytes block by block."""
    entries = sorted(entries, key=lambda e: e[0])
    header, offset = {}, 0
    size = SIZES[dtype]
    for name, shape, _ in entries:
        n = count(shape) * size
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    try:
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            for name, shape, get in entries:
                if count(shape) == 0:
                    continue
                for r0, r1 in row_blocks(shape):
                    t = get(r0, r1)
                    f.write((to_bf16(t) if dtype == "BF16" else np.ascontiguousarray(t, dtype="<f4")).tobytes())
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror}")


def file_bytes(shapes, names, dtype="F32"):  # write_stream's file size, near enough (header ~)
    return 8 + sum(count(s) * SIZES[dtype] for s in shapes) + sum(len(n) + 96 for n in names)


def write(path, tensors, dtype="F32"):
    """{name: array} (small tensors: LoRA's adapters) as write_stream writes them."""
    write_stream(path, [(k, tuple(np.shape(v)), (lambda v: lambda r0, r1: np.asarray(v)[r0:r1] if np.ndim(v) else np.asarray(v))(v))
                        for k, v in tensors.items()], dtype)
