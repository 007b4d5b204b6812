"""PTX types as NumPy dtypes, the modifier sets the parser recognises, and bit reinterpretation between types."""
from __future__ import annotations
import numpy as np

_DT = {
    "b8": np.uint8, "u8": np.uint8, "s8": np.int8,
    "b16": np.uint16, "u16": np.uint16, "s16": np.int16, "f16": np.float16, "bf16": np.uint16,
    "b32": np.uint32, "u32": np.uint32, "s32": np.int32, "f32": np.float32,
    "f16x2": np.uint32, "bf16x2": np.uint32,
    "b64": np.uint64, "u64": np.uint64, "s64": np.int64, "f64": np.float64,
    "pred": np.bool_,
}


_DT = {k: np.dtype(v) for k, v in _DT.items()}


_UINT = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}


_SINT = {1: np.dtype(np.int8), 2: np.dtype(np.int16), 4: np.dtype(np.int32), 8: np.dtype(np.int64)}


_TYPES = set(_DT)


_ROUND = {"rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi", "rna", "rs"}


_SPACES = {"global", "shared", "local", "param", "const", "generic"}


_SPECIAL = {"tid", "ntid", "ctaid", "nctaid", "laneid", "warpid", "nwarpid", "smid", "nsmid",
            "gridid", "clock", "clock64", "lanemask_eq", "lanemask_lt", "lanemask_le",
            "lanemask_gt", "lanemask_ge", "warpsize", "WARP_SZ", "globaltimer", "globaltimer_lo",
            "globaltimer_hi", "dynamic_smem_size", "total_smem_size", "is_explicit_cluster",
            "clusterid", "nclusterid", "cluster_ctaid", "cluster_nctaid", "cluster_ctarank",
            "cluster_nctarank", "envreg"}


def _is_float(dt: np.dtype):
  return dt.kind == "f"


def _kind(tname):
  """'f' float, 's' signed, 'u' unsigned/bits, 'p' pred."""
  if tname == "pred":
    return "p"
  if tname in ("f16", "f32", "f64", "bf16", "f16x2", "bf16x2"):
    return "f"
  return tname[0] if tname[0] in "su" else "u"


def _bits(arr, dt: np.dtype, signed=False):
  """Re-interpret / resize the bits of `arr` to dtype `dt` (register <-> instruction type).

  Same size: a bit view.  Narrower destination: truncation.  Wider destination: sign
  extension when `signed`, zero extension otherwise."""
  src = arr.dtype
  if src == dt:
    return arr
  if src == np.bool_:
    return arr.astype(dt)
  if dt == np.bool_:
    return arr.view(_UINT[src.itemsize]) != 0
  if src.itemsize == dt.itemsize:
    return arr.view(dt) if arr.ndim else np.asarray(arr).view(dt)[()]
  a = np.asarray(arr)
  if dt.itemsize < src.itemsize:
    r = a.view(_UINT[src.itemsize]).astype(_UINT[dt.itemsize]).view(dt)
  elif signed:
    r = a.view(_SINT[src.itemsize]).astype(_SINT[dt.itemsize]).view(dt)
  else:
    r = a.view(_UINT[src.itemsize]).astype(_UINT[dt.itemsize]).view(dt)
  return r if arr.ndim else r[()]
