"""Streaming for tools/fgpipe-convert: every tensor moves in blocks of rows of at most
BLOCK_BYTES as float32, so that the converter's memory is a few blocks whatever the model's size
(docs/results/convert.md). A tensor to write is (shape, get) where get(r0, r1) gives float32 rows
r0..r1 of it (elements, for a vector); HDF5 datasets are created whole, then filled block by
block; the disk's free space is checked against the output's bytes before anything is written."""
import os
import shutil

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


def h5_bytes(shapes):  # an HDF5 checkpoint's size: float32 data and its structures
    return sum(4 * count(s) + H5_PER_DATASET for s in shapes) + H5_OVERHEAD


def write_dataset(f, key, shape, get):
    """Dataset key of float32 values filled block by block from get(r0, r1)."""
    ds = f.create_dataset(key, shape=tuple(shape), dtype="<f4")
    if count(shape) == 0:
        return
    if len(shape) == 0:
        ds[()] = get(0, 1)
        return
    for r0, r1 in row_blocks(shape):
        ds[r0:r1] = np.ascontiguousarray(get(r0, r1), dtype="<f4")


def h5_rows(ds):  # get(r0, r1) of an HDF5 dataset, read as float32
    if ds.ndim == 0:
        return lambda r0, r1: np.asarray(ds[()], dtype="<f4")
    return lambda r0, r1: np.asarray(ds[r0:r1], dtype="<f4")


def h5_cols(ds):  # get(r0, r1) of a matrix dataset's transpose: its columns r0..r1, as rows
    return lambda r0, r1: np.ascontiguousarray(np.asarray(ds[:, r0:r1], dtype="<f4").T)


def padded(get, rows, shape):
    """get of a tensor of shape whose rows past `rows` are zero (the token table's pad rows)."""
    def rows_of(r0, r1):
        out = np.zeros((r1 - r0,) + tuple(shape[1:]), dtype="<f4")
        if r0 < rows:
            out[:min(r1, rows) - r0] = get(r0, min(r1, rows))
        return out
    return rows_of
