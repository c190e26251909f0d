"""Streaming for tools/fgpipe-convert: every tensor moves in blocks of rows of at most
BLOCK_BYTES as float32, so that the converter's memory is a few blocks whatever the model's size
(docs/results/convert.md). A tensor to write is (shape, get) where get(r0, r1) gives float32 rows
r0..r1 of it (elements, for a vector); HDF5 datasets are created whole, then filled block by
block; the disk's free space is checked against the output's bytes before anything is written."""
import os
import shutil

import h5py
import numpy as np


BLOCK_BYTES = 32 << 20
H5_OVERHEAD = 1 << 20  # an HDF5 file's own structures beyond the data (a few KB a dataset)
H5_PER_DATASET = 4096


class BadInput(Exception):  # exit 2, the problem named (fgpipe_safetensors.BadInput is this)
    pass


def count(shape):
    return int(np.prod(shape, dtype=np.int64))


def row_blocks(shape, block_bytes=BLOCK_BYTES):
    """(r0, r1) over the first axis of shape, each block at most block_bytes of float32 (one
    row at least); a scalar is one block (0, 1)."""
    if len(shape) == 0:
        yield 0, 1
        return
    row = 4 * count(shape[1:])
    step = max(1, block_bytes // max(row, 1))
    for r0 in range(0, shape[0], step):
        yield r0, min(shape[0], r0 + step)


def existing_dir(path):  # the nearest folder that exists at or above path's folder
    d = os.path.dirname(os.path.abspath(path))
    while not os.path.isdir(d) and d != os.path.dirname(d):
        d = os.path.dirname(d)
    return d


def check_room(out, need, what, replaced=()):
    """Refuses (BadInput) when the file system of out has fewer than `need` bytes free, counting
    the files of `replaced` that the output overwrites; nothing is written either way."""
    d = existing_dir(out)
    try:
        free = shutil.disk_usage(d).free
    except OSError:
        return  # the write reports an unusable folder by name
    back = sum(os.path.getsize(p) for p in replaced if os.path.isfile(p))
    if need > free + back:
        also = f" (and {back} bytes of the files it replaces)" if back else ""
        raise BadInput(f"{out}: {what} needs {need} bytes ({need / 1e9:.3g} GB) and {d} has {free} bytes "
                       f"({free / 1e9:.3g} GB) free{also}: nothing was written; free space or write elsewhere")


def h5_bytes(shapes, bf16=()):  # an HDF5 checkpoint's size: its data and its structures
    return sum((2 if i in bf16 else 4) * count(s) + H5_PER_DATASET for i, s in enumerate(shapes)) + H5_OVERHEAD


def bf16_type():
    """BF16 as an HDF5 float type, as fgpipe's checkpoints hold a frozen base imported in BF16
    (hdf5io/checkpoint_hdf5.c): h5dump prints its values; h5py would read it as float16, so
    read it with h5_rows (its bits, widened exactly)."""
    t = h5py.h5t.IEEE_F32LE.copy()
    t.set_fields(15, 7, 8, 0, 7)
    t.set_precision(16)
    t.set_size(2)
    t.set_ebias(127)
    return t


def is_bf16(ds):
    t = ds.id.get_type()
    return isinstance(t, h5py.h5t.TypeFloatID) and t.get_size() == 2 and t.get_fields()[2:] == (8, 0, 7) \
        and t.get_ebias() == 127


def bf16_bits(a):  # float32 values that are BF16's (a BF16 source widened) -> their bits, exactly
    return (np.ascontiguousarray(a, dtype="<f4").view(np.uint32) >> 16).astype(np.uint16)


def select_rows(ds, r0, r1):  # (memory space, file space) of rows r0..r1 of ds
    shape = (r1 - r0,) + ds.shape[1:]
    fspace = ds.id.get_space()
    fspace.select_hyperslab((r0,) + (0,) * (ds.ndim - 1), shape)
    return h5py.h5s.create_simple(shape), fspace, shape


def write_dataset(f, key, shape, get, bf16=False):
    """Dataset key of float32 (or BF16: get's values must be BF16's) values filled block by
    block from get(r0, r1)."""
    if bf16:
        ds = f.create_dataset(key, shape=tuple(shape), dtype=h5py.Datatype(bf16_type()))
    else:
        ds = f.create_dataset(key, shape=tuple(shape), dtype="<f4")
    if count(shape) == 0:
        return
    if len(shape) == 0:
        ds[()] = get(0, 1)
        return
    for r0, r1 in row_blocks(shape):
        if not bf16:
            ds[r0:r1] = np.ascontiguousarray(get(r0, r1), dtype="<f4")
            continue
        mspace, fspace, _ = select_rows(ds, r0, r1)
        ds.id.write(mspace, fspace, bf16_bits(get(r0, r1)), mtype=ds.id.get_type())


def read_bf16(ds, r0, r1):  # rows r0..r1 of a BF16 dataset as float32, exactly
    mspace, fspace, shape = select_rows(ds, r0, r1)
    bits = np.empty(shape, dtype=np.uint16)
    ds.id.read(mspace, fspace, bits, mtype=ds.id.get_type())
    return (bits.astype(np.uint32) << 16).view(np.float32)


def h5_rows(ds):  # get(r0, r1) of an HDF5 dataset, read as float32
    if ds.ndim == 0:
        return lambda r0, r1: np.asarray(ds[()], dtype="<f4")
    if is_bf16(ds):
        return lambda r0, r1: read_bf16(ds, r0, r1)
    return lambda r0, r1: np.asarray(ds[r0:r1], dtype="<f4")


def h5_cols(ds):  # get(r0, r1) of a matrix dataset's transpose: its columns r0..r1, as rows
    if is_bf16(ds):
        return lambda r0, r1: np.ascontiguousarray(read_bf16(ds, 0, ds.shape[0])[:, r0:r1].T)
    return lambda r0, r1: np.ascontiguousarray(np.asarray(ds[:, r0:r1], dtype="<f4").T)


def padded(get, rows, shape):
    """get of a tensor of shape whose rows past `rows` are zero (the token table's pad rows)."""
    def rows_of(r0, r1):
        out = np.zeros((r1 - r0,) + tuple(shape[1:]), dtype="<f4")
        if r0 < rows:
            out[:min(r1, rows) - r0] = get(r0, min(r1, rows))
        return out
    return rows_of
