"""Model state: finding tensors in plain objects, PyTorch-style state dicts, and the safetensors file format.

get_state_dict walks attributes (in definition order), lists/tuples (keys "0", "1", ...) and dicts; names that
start with "_" are skipped. Keys join with ".", as PyTorch's do ("layers.0.weight").

safetensors: 8-byte little-endian header length N, then N bytes of JSON {name: {"dtype", "shape",
"data_offsets": [begin, end]}, "__metadata__": {str: str}} (padded with spaces to a multiple of 8), then the
raw little-endian data; offsets count from the end of the header."""
from __future__ import annotations
import json, math, os, struct
from collections import OrderedDict
from typing import Any
import numpy as np
from baregrad.ir.dtype import DType, dtypes
from baregrad.tensor.tensor import Tensor

def is_leaf(o: Any) -> bool:
  """A value the state walk does not look into (None, strings, numbers, classes)."""
  return o is None or isinstance(o, (str, bytes, int, float, bool, type))

def children(o: Any) -> list[tuple[Any, Any]]:
  """(key, value) of what the state walk descends into from o: list and tuple items by index, dict items with public
  string keys, public attributes; a list, so the caller may replace them while it goes."""
  if isinstance(o, (list, tuple)): return list(enumerate(o))
  if isinstance(o, dict): return [(k, v) for k, v in o.items() if isinstance(k, str) and not k.startswith("_")]
  if hasattr(o, "__dict__"): return [(k, v) for k, v in vars(o).items() if not k.startswith("_")]
  return []

def get_state_dict(obj: Any, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
  """{dotted name: Tensor} for every tensor reachable from obj (each object visited once)."""
  out: dict[str, Tensor] = OrderedDict()
  seen: set[int] = set()
  def walk(o: Any, pre: str) -> None:
    if isinstance(o, tensor_type):
      out[pre.rstrip(".")] = o
      return
    if is_leaf(o) or id(o) in seen: return
    seen.add(id(o))
    for k, v in children(o): walk(v, f"{pre}{k}.")
  walk(obj, prefix if not prefix or prefix.endswith(".") else prefix + ".")
  return out

def get_parameters(obj: Any) -> list[Tensor]:
  """The trainable tensors (requires_grad=True) reachable from obj, each once, in state-dict order."""
  seen: set[int] = set()
  out = []
  for t in get_state_dict(obj).values():
    if t.requires_grad and id(t) not in seen:
      seen.add(id(t))
      out.append(t)
  return out

class StateDictError(KeyError, RuntimeError):
  """Missing or unexpected keys: a KeyError, and a RuntimeError as PyTorch's load_state_dict raises."""
  def __str__(self) -> str: return str(self.args[0])

class StateDictShapeError(ValueError, RuntimeError):
  """A checkpoint tensor whose shape differs from the model's: a ValueError, and a RuntimeError as PyTorch's."""

def load_state_dict(obj: Any, state_dict: dict[str, Any], strict: bool = True, verbose: bool = False) -> dict[str, list[str]]:
  """Copy state_dict's values into obj's tensors in place. strict: missing or unexpected keys are an error (all
  named). A shape mismatch is always an error. Values may be Tensors or NumPy arrays. Returns
  {"missing_keys": [...], "unexpected_keys": [...]} (PyTorch's result)."""
  model = get_state_dict(obj)
  missing = [k for k in model if k not in state_dict]
  unexpected = [k for k in state_dict if k not in model]
  if strict and (missing or unexpected):
    parts = []
    if missing: parts.append(f"missing keys: {', '.join(missing)}")
    if unexpected: parts.append(f"unexpected keys: {', '.join(unexpected)}")
    raise StateDictError(f"load_state_dict of {type(obj).__name__}: " + "; ".join(parts))
  bad = []
  for k, t in model.items():
    if k not in state_dict: continue
    v = state_dict[k]
    vshape = tuple(v.shape)
    if vshape != t.shape: bad.append(f"{k}: checkpoint has shape {vshape}, model has {t.shape}")
  if bad: raise StateDictShapeError(f"load_state_dict of {type(obj).__name__}: shape mismatch for " + "; ".join(bad))
  for k, t in model.items():
    if k not in state_dict: continue
    v = state_dict[k]
    if not isinstance(v, Tensor): v = _from_np(np.asarray(v), t.device)
    if v.device != t.device: v = v.to(t.device)
    _assign_into(t, v.cast(t.dtype) if v.dtype != t.dtype else v)
    if verbose: print(f"loaded {k} {t.shape}")
  return {"missing_keys": missing, "unexpected_keys": unexpected}

def _from_np(a: np.ndarray, device: str | None) -> Tensor:
  # Tensor(ndarray) makes a 0-d array shape (1,) (np.ascontiguousarray promotes it): put the shape back
  return Tensor(a, device=device).reshape(a.shape)

def _assign_into(t: Tensor, v: Tensor) -> None:
  from baregrad.tensor.nn.optim import assign_all
  rg = t.requires_grad
  assign_all([(t, v.detach())])
  t.requires_grad = rg

# ---- safetensors ------------------------------------------------------------------------------------------------
_ST_NAMES: dict[str, DType] = {"BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "I16": dtypes.int16, "U16": dtypes.uint16,
                               "I32": dtypes.int32, "U32": dtypes.uint32, "I64": dtypes.int64, "U64": dtypes.uint64,
                               "F16": dtypes.float16, "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64}
_ST_OF = {v: k for k, v in _ST_NAMES.items()}
_NP = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16, "I32": np.int32, "U32": np.uint32,
       "I64": np.int64, "U64": np.uint64, "F16": np.float16, "BF16": np.uint16, "F32": np.float32, "F64": np.float64}
# the reference implementation's bound (huggingface/safetensors, lib.rs: MAX_HEADER_SIZE): a header is metadata, not data
MAX_HEADER = 100_000_000
MAX_DIMS = 64

class SafetensorsError(ValueError):
  """A .safetensors file that does not follow the format; the message names the file, the tensor and what was expected."""

def _raw_bytes(t: Tensor) -> bytes:
  """t's elements as little-endian bytes (bfloat16 as its raw bits)."""
  arr = t.bitcast(dtypes.uint16).numpy() if t.dtype == dtypes.bfloat16 else t.numpy()
  return np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()

def safe_save(state_dict: dict[str, Tensor], path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
  """Write tensors to a .safetensors file (tensors laid out in key order).

  The file is written under a unique temporary name in the same folder, flushed to disk and renamed over `path`: a save
  that fails (a full disk, an interrupt) leaves the old file as it was and no temporary file behind."""
  header: dict[str, Any] = {}
  if metadata:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()): raise TypeError("safetensors metadata must map str to str")
    header["__metadata__"] = dict(metadata)
  blobs, off = [], 0
  for k, t in state_dict.items():
    if not isinstance(k, str) or k == "__metadata__": raise ValueError(f"invalid tensor name {k!r}")
    if t.dtype not in _ST_OF: raise TypeError(f"safetensors has no dtype for {t.dtype} (tensor {k!r})")
    b = _raw_bytes(t) if t.numel() else b""
    header[k] = {"dtype": _ST_OF[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
  hj = json.dumps(header, separators=(",", ":")).encode()
  hj += b" " * (-len(hj) % 8)
  path = os.fspath(path)
  # unique per writer (two saves to one path never share a temporary file); 0o666 so the umask applies as to open()
  tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
  fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(struct.pack("<Q", len(hj)))
      f.write(hj)
      for b in blobs: f.write(b)
      f.flush()
      os.fsync(f.fileno())   # the data is on disk before the name points at it
    os.replace(tmp, path)
  except BaseException as e:
    try: os.unlink(tmp)
    except OSError: pass
    if isinstance(e, OSError) and e.filename is None: e.filename = path   # "[Errno 28] No space left on device: 'm.safetensors'"
    raise

def _int(v: Any) -> bool: return isinstance(v, int) and not isinstance(v, bool)

def _short(v: Any) -> str:
  """v as text (a string quoted as Python does, the rest as JSON), cut to 80 characters: a hostile header may hold
  huge values."""
  try: t = repr(v) if isinstance(v, str) else json.dumps(v)
  except (RecursionError, ValueError): return f"a deeply nested {type(v).__name__}"
  return t if len(t) <= 80 else t[:77] + "..."

def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
  d = dict(pairs)
  if len(d) != len(pairs):
    dup = next(k for i, (k, _) in enumerate(pairs) if any(k == k2 for k2, _ in pairs[:i]))
    raise SafetensorsError(f"the name {dup!r} appears twice in one JSON object")
  return d

def safe_header(path: str | os.PathLike) -> tuple[dict[str, Any], int]:
  """(parsed JSON header, offset of the data section), every field checked: the header length within the file and
  MAX_HEADER; a JSON object without repeated names; "__metadata__" a str -> str object; each tensor an object with
  "dtype" (one of _ST_NAMES), "shape" (a list of non-negative ints) and "data_offsets" ([begin, end] ints with
  end - begin = elements * itemsize); the tensors' byte ranges in order cover the data section exactly, without
  overlaps or gaps (the format's rule against polyglot files). Anything else raises SafetensorsError naming the file,
  the tensor and what was expected."""
  size = os.path.getsize(path)
  with open(path, "rb") as f:
    raw = f.read(8)
    if len(raw) < 8: raise SafetensorsError(f"{path}: too short for a safetensors file ({size} bytes; expected at least the 8-byte header length)")
    n = struct.unpack("<Q", raw)[0]
    if n > size - 8: raise SafetensorsError(f"{path}: header length {n} runs past the end of the file ({size} bytes)")
    if n > MAX_HEADER: raise SafetensorsError(f"{path}: header length {n} exceeds the format's limit of {MAX_HEADER} bytes")
    text = f.read(n)
  try: header = json.loads(text.decode("utf-8"), object_pairs_hook=_no_duplicates)
  except SafetensorsError as e: raise SafetensorsError(f"{path}: header: {e}") from None
  except (UnicodeDecodeError, ValueError, RecursionError) as e:   # ValueError: JSONDecodeError, a number of too many digits
    raise SafetensorsError(f"{path}: header is not valid UTF-8 JSON: {type(e).__name__}: {str(e)[:200]}") from None
  if not isinstance(header, dict): raise SafetensorsError(f"{path}: header is a JSON {type(header).__name__}; expected an object")
  meta = header.get("__metadata__")
  if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
    raise SafetensorsError(f"{path}: __metadata__ is {_short(meta)}; expected an object of strings")
  data_len = size - 8 - n
  spans = []
  for k, info in header.items():
    if k == "__metadata__": continue
    what = f"{path}: tensor {k!r}"
    if not isinstance(info, dict) or not all(f in info for f in ("dtype", "shape", "data_offsets")):
      raise SafetensorsError(f"{what} is {_short(info)}; expected an object with dtype, shape and data_offsets")
    dt, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dt, str) or dt not in _ST_NAMES:
      raise SafetensorsError(f"{what} has unsupported dtype {_short(dt)}; expected one of {', '.join(_ST_NAMES)}")
    if not isinstance(shape, list) or not all(_int(d) and d >= 0 for d in shape):
      raise SafetensorsError(f"{what} has shape {_short(shape)}; expected a list of non-negative integers")
    if not (isinstance(offs, list) and len(offs) == 2 and all(_int(o) for o in offs)):
      raise SafetensorsError(f"{what} has data_offsets {_short(offs)}; expected [begin, end], two integers")
    # Python ints: no overflow here; an array must also be addressable with 64-bit byte offsets (NumPy's bound, which it
    # applies to the non-zero dimensions even of an empty array) and have at most 64 dimensions (NumPy's NPY_MAXDIMS)
    if len(shape) > MAX_DIMS or math.prod(d for d in shape if d) * _ST_NAMES[dt].itemsize >= 2**63:
      raise SafetensorsError(f"{what} has shape {_short(shape)}; expected at most {MAX_DIMS} dimensions and fewer than 2**63 bytes")
    b, e = offs
    nbytes = math.prod(shape) * _ST_NAMES[dt].itemsize
    if not (0 <= b <= e <= data_len) or e - b != nbytes:
      raise SafetensorsError(f"{what} ({dt} {shape}, {nbytes} bytes) has data_offsets [{b}, {e}]; expected an end - begin of "
                             f"{nbytes} within the data section's {data_len} bytes")
    spans.append((b, e, k))
  at, prev = 0, None
  for b, e, k in sorted(spans):
    if b < at: raise SafetensorsError(f"{path}: tensors {prev!r} and {k!r} overlap (bytes [{b}, {at}) of the data section); expected disjoint data_offsets")
    if b > at: raise SafetensorsError(f"{path}: bytes [{at}, {b}) of the data section belong to no tensor (before {k!r}); expected the tensors to cover it")
    at, prev = e, k
  if at != data_len: raise SafetensorsError(f"{path}: the data section has {data_len} bytes but the tensors end at {at}; expected them to cover it")
  return header, 8 + n

def safe_load_metadata(path: str | os.PathLike) -> dict[str, str]:
  """The file's "__metadata__" (str -> str), {} if none; the header is checked as safe_header does."""
  return safe_header(path)[0].get("__metadata__", {}) or {}

def safe_load(path: str | os.PathLike, device: str | None = None) -> dict[str, Tensor]:
  """{name: Tensor} from a .safetensors file, read through a memory map; the header is checked as safe_header does, and
  a BOOL tensor's bytes must be 0 or 1."""
  header, start = safe_header(path)
  mm = np.memmap(path, dtype=np.uint8, mode="r") if os.path.getsize(path) > start else None
  out: dict[str, Tensor] = OrderedDict()
  for k, info in header.items():
    if k == "__metadata__": continue
    st, shape, (b, e) = info["dtype"], tuple(info["shape"]), info["data_offsets"]
    npd = np.dtype(_NP[st]).newbyteorder("<")
    if e == b: arr = np.zeros(shape, npd)
    else:
      if st == "BOOL" and (bad := np.flatnonzero(mm[start + b:start + e] > 1)).size:
        raise SafetensorsError(f"{path}: tensor {k!r} (BOOL) holds byte {mm[start + b + bad[0]]} at element {bad[0]}; expected 0 or 1")
      arr = np.frombuffer(mm, dtype=npd, count=(e - b) // npd.itemsize, offset=start + b).reshape(shape)
    arr = arr.astype(arr.dtype.newbyteorder("="), copy=False)
    if st == "BF16": out[k] = _from_np(arr, device).bitcast(dtypes.bfloat16).contiguous().realize()
    else: out[k] = _from_np(arr, device)
  del mm
  return out

__all__ = ["get_state_dict", "get_parameters", "load_state_dict", "safe_save", "safe_load", "safe_header", "safe_load_metadata",
           "StateDictError", "SafetensorsError"]
