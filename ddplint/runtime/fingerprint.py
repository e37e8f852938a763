"""Per-sample fingerprints of a batch, so ranks can be compared by content.

Index-level checks see only map-style datasets with samplers; an IterableDataset or a custom
loader that streams the same records on every rank is caught only by comparing what the ranks
actually received. A batch is split back into samples along its leading dimension (tensors and
arrays) or its length (lists of strings or bytes), recursively through tuples, lists and dicts,
and each sample is reduced to a 64-bit digest of its bytes, dtypes and shapes.
"""

from __future__ import annotations

import hashlib
from typing import Any

_DIGEST = 8


def _tensor_rows(t) -> list[bytes]:
    """Digest every row of a tensor along dim 0; bfloat16 and friends via a uint8 view."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous().reshape(t.shape[0], -1)
    head = f"{t.dtype}{tuple(t.shape[1:])}".encode()
    try:
        arr = t.numpy()
    except (TypeError, RuntimeError):
        arr = t.view(_uint8()).numpy()
    return [hashlib.blake2b(head + row.tobytes(), digest_size=_DIGEST).digest() for row in arr]


def _array_rows(a) -> list[bytes]:
    import numpy as np

    a = np.ascontiguousarray(a).reshape(a.shape[0], -1)
    head = f"{a.dtype}{a.shape[1:]}".encode()
    if a.dtype == object:
        return [whole_digest(list(row)) for row in a]
    return [hashlib.blake2b(head + row.tobytes(), digest_size=_DIGEST).digest() for row in a]


def _uint8():
    import torch

    return torch.uint8


def whole_digest(obj: Any) -> bytes:
    """Digest of an object taken as one sample."""
    h = hashlib.blake2b(digest_size=_DIGEST)
    _feed(h, obj)
    return h.digest()


def _feed(h, obj: Any) -> None:
    kind = type(obj).__name__
    if _is_tensor(obj):
        t = obj.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(_uint8()).numpy().tobytes() if t.numel() else b"")
    elif _is_array(obj):
        h.update(f"A{obj.dtype}{obj.shape}".encode())
        if obj.dtype == object:
            for item in obj.reshape(-1):
                _feed(h, item)
        else:
            h.update(obj.tobytes())
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        h.update(b"B" + bytes(obj))
    elif isinstance(obj, str):
        h.update(b"S" + obj.encode("utf-8", "surrogatepass"))
    elif isinstance(obj, dict):
        h.update(b"D")
        for k in sorted(obj, key=repr):
            h.update(repr(k).encode())
            _feed(h, obj[k])
    elif isinstance(obj, (list, tuple)):
        h.update(f"L{len(obj)}".encode())
        for item in obj:
            _feed(h, item)
    else:
        h.update(f"{kind}:{obj!r}".encode())


def _is_tensor(obj) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "detach") and hasattr(obj, "shape")


def _is_array(obj) -> bool:
    return type(obj).__module__ == "numpy" and hasattr(obj, "dtype") and hasattr(obj, "shape")


def _split(obj: Any) -> list[bytes] | None:
    """Per-sample digests of one batched leaf or structure; None when it has no batch axis."""
    if _is_tensor(obj):
        return _tensor_rows(obj) if obj.dim() >= 1 else None
    if _is_array(obj):
        return _array_rows(obj) if obj.ndim >= 1 else None
    if isinstance(obj, dict):
        return _combine([v for _, v in sorted(obj.items(), key=lambda kv: repr(kv[0]))], obj)
    if isinstance(obj, (list, tuple)):
        if obj and all(isinstance(x, (str, bytes, int, float, bool)) for x in obj):
            return [whole_digest(x) for x in obj]  # a collated list of strings/numbers
        return _combine(list(obj), obj)
    return None


def _combine(items: list, whole: Any) -> list[bytes] | None:
    parts = [_split(x) for x in items]
    sizes = {len(p) for p in parts if p is not None}
    if not sizes:
        return None
    if len(sizes) > 1:
        # Parts disagree on the batch size: the structure is a list of samples.
        if isinstance(whole, (list, tuple)):
            return [whole_digest(x) for x in whole]
        return [whole_digest(whole)]
    n = sizes.pop()
    # Unbatched members (a scalar, a shared mask) belong to every sample alike.
    shared = b"".join(whole_digest(x) for x, p in zip(items, parts, strict=True) if p is None)
    out = []
    for i in range(n):
        h = hashlib.blake2b(shared, digest_size=_DIGEST)
        for p in parts:
            if p is not None:
                h.update(p[i])
        out.append(h.digest())
    return out


def batch_fingerprints(batch: Any, batched: bool) -> list[str]:
    """Hex digests, one per sample of `batch` (one in all when the loader does not batch)."""
    if not batched:
        return [whole_digest(batch).hex()]
    rows = _split(batch)
    if rows is None:
        rows = [whole_digest(batch)]
    return [r.hex() for r in rows]
