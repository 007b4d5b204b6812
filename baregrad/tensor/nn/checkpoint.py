"""baregrad.save / baregrad.load: state dicts (nested dicts, lists and tuples of Tensors, NumPy arrays, Python numbers,
strings, bools and None) in one safetensors file.

Format: a safetensors file (baregrad.tensor.nn.state) whose tensors are named "0", "1", ... in the order the walk
meets them, and whose "__metadata__" holds {"format": "baregrad.save/1", "structure": JSON}. The structure is the
object with each tensor replaced by {"T": index} (a NumPy array by {"A": index}); a dict is {"D": [[key, value], ...]}
(keys keep their type: an optimizer's state is keyed by int), a tuple {"U": [...]}, a float that JSON cannot hold
{"F": "nan" | "inf" | "-inf"}. Any safetensors reader can open the tensors; load() of a safetensors file without the
structure returns its {name: Tensor}. The file is written to a temporary name and renamed over the path (atomic).
Nothing is pickled: loading a file runs no code from it."""
from __future__ import annotations
import json, math, os
from typing import Any
import numpy as np
from baregrad.tensor.tensor import Tensor
from baregrad.tensor.nn.state import safe_save, safe_load, safe_header

FORMAT = "baregrad.save/1"

def _encode(obj: Any, tensors: list[Tensor], path: str) -> Any:
  if isinstance(obj, Tensor):
    tensors.append(obj.detach())
    return {"T": len(tensors) - 1}
  if isinstance(obj, np.ndarray):
    tensors.append(Tensor(np.ascontiguousarray(obj)).reshape(obj.shape))
    return {"A": len(tensors) - 1}
  if isinstance(obj, np.generic): obj = obj.item()
  if obj is None or isinstance(obj, (bool, int, str)): return obj
  if isinstance(obj, float): return obj if math.isfinite(obj) else {"F": repr(obj)}
  if isinstance(obj, dict): return {"D": [[_encode(k, tensors, path), _encode(v, tensors, f"{path}[{k!r}]")] for k, v in obj.items()]}
  if isinstance(obj, tuple): return {"U": [_encode(v, tensors, f"{path}[{i}]") for i, v in enumerate(obj)]}
  if isinstance(obj, list): return [_encode(v, tensors, f"{path}[{i}]") for i, v in enumerate(obj)]
  raise TypeError(f"baregrad.save: cannot save {type(obj).__name__} at {path or 'the top level'}: expected Tensors, NumPy arrays, numbers, "
                  f"strings, None, and dicts, lists or tuples of them (state_dict()s)")

def _decode(obj: Any, tensors: dict[str, Tensor], where: str) -> Any:
  if isinstance(obj, list): return [_decode(v, tensors, where) for v in obj]
  if not isinstance(obj, dict): return obj
  if len(obj) != 1: raise ValueError(f"{where}: malformed structure entry {obj!r}")
  (tag, v), = obj.items()
  if tag in ("T", "A"):
    if str(v) not in tensors: raise ValueError(f"{where}: structure names tensor {v} that the file does not hold")
    return tensors[str(v)] if tag == "T" else tensors[str(v)].numpy()
  if tag == "F": return float(v)
  if tag == "U": return tuple(_decode(x, tensors, where) for x in v)
  if tag == "D": return {_hashable(_decode(k, tensors, where)): _decode(x, tensors, where) for k, x in v}
  raise ValueError(f"{where}: unknown structure tag {tag!r}")

def _hashable(k: Any) -> Any: return tuple(_hashable(x) for x in k) if isinstance(k, (list, tuple)) else k

def save(obj: Any, f: str | os.PathLike) -> None:
  """Write obj (a state dict: nested dicts/lists/tuples of Tensors, NumPy arrays and Python values) to the file f."""
  tensors: list[Tensor] = []
  structure = _encode(obj, tensors, "")
  safe_save({str(i): t for i, t in enumerate(tensors)}, f, metadata={"format": FORMAT, "structure": json.dumps(structure, separators=(",", ":"))})

def load(f: str | os.PathLike, map_location: str | None = None, weights_only: bool = True) -> Any:
  """Read what save() wrote (tensors on map_location, the default device unless given); a safetensors file from
  elsewhere gives its {name: Tensor}. weights_only is accepted for PyTorch's signature: nothing is ever unpickled."""
  meta = safe_header(f)[0].get("__metadata__") or {}
  tensors = safe_load(f, device=map_location)
  if meta.get("format") != FORMAT: return dict(tensors)
  try: structure = json.loads(meta["structure"])
  except (KeyError, json.JSONDecodeError) as e: raise ValueError(f"{os.fspath(f)}: the baregrad.save structure is missing or not JSON: {e}") from None
  return _decode(structure, tensors, os.fspath(f))

__all__ = ["save", "load"]
