"""Bundled datasets: MNIST (LeCun, Cortes and Burges, CC BY-SA 3.0), read from IDX gzip.

The package ships MNIST's 10,000-image test split. :func:`load_mnist` uses the full
60,000-image training set when a user cache folder holds it (``$IPUKIT_DATA`` or
``~/.cache/ipukit/mnist``, with Yann LeCun's file names ``train-images-idx3-ubyte.gz`` and
``train-labels-idx1-ubyte.gz``); otherwise it splits the bundled images deterministically
into 8,000 for training and 2,000 held out. Nothing is ever downloaded.

>>> from ipukit.data import load_mnist
>>> d = load_mnist()
>>> d.train_images.shape, d.test_images.shape, d.train_images.dtype, d.source
((8000, 28, 28), (2000, 28, 28), dtype('float32'), 'bundled')
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

HERE = Path(__file__).parent
FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
#: IDX element type codes (the third byte of the magic number).
_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4",
              0x0E: ">f8"}


class MnistData(NamedTuple):
    """Images as float32 in [0, 1], shape (n, 28, 28); labels int64; and where they came from."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    source: str  # "bundled" (split of the test set) or "cache" (full training set)


def read_idx(path) -> np.ndarray:
    """Read an IDX file (gzip-compressed when the name ends in ``.gz``)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise ValueError(f"{path} is not an IDX file (bad magic number {raw[:4]!r})")
    ndim = raw[3]
    dims = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    data = np.frombuffer(raw, dtype=_IDX_TYPES[raw[2]], offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path} holds {data.size} values but its header says {dims}")
    return data.reshape(dims)


def cache_dir() -> Path:
    """Where a user may put the full MNIST training set."""
    env = os.environ.get("IPUKIT_DATA")
    return Path(env) if env else Path.home() / ".cache" / "ipukit" / "mnist"


def load_raw(split: str = "test") -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (n, 28, 28), labels uint8 (n,)) of MNIST's ``"test"`` or ``"train"`` split.

    The test split is bundled; the training split must be in :func:`cache_dir`.
    """
    if split not in FILES:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    folder = HERE if split == "test" else cache_dir()
    paths = [folder / name for name in FILES[split]]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise FileNotFoundError(
            f"MNIST {split} files not found: {', '.join(missing)}. Copy them there "
            "(ipukit never downloads data)."
        )
    return read_idx(paths[0]), read_idx(paths[1])


def load_mnist(num_train: int = 8000, seed: int = 0) -> MnistData:
    """MNIST for training and held-out evaluation.

    With the full training set in :func:`cache_dir`: its 60,000 images and the 10,000
    test images. Otherwise the bundled 10,000 test images, shuffled by a fixed
    permutation (``seed``) and split into ``num_train`` and the rest.
    """
    test_x, test_y = load_raw("test")
    if all((cache_dir() / name).exists() for name in FILES["train"]):
        train_x, train_y = load_raw("train")
        source = "cache"
    else:
        if not 0 < num_train < len(test_x):
            raise ValueError(f"num_train must be in 1..{len(test_x) - 1}, got {num_train}")
        order = np.random.default_rng(seed).permutation(len(test_x))
        train_x, train_y = test_x[order[:num_train]], test_y[order[:num_train]]
        test_x, test_y = test_x[order[num_train:]], test_y[order[num_train:]]
        source = "bundled"

    def images(a):
        return a.astype(np.float32) / 255.0

    return MnistData(images(train_x), train_y.astype(np.int64), images(test_x),
                     test_y.astype(np.int64), source)
