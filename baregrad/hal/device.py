"""Device registry and the base class every device derives from.

Drivers are loaded by name (importlib) the first time their device is asked for, so importing
baregrad never touches a GPU and the HAL never names a driver module in an import statement."""
from __future__ import annotations
import importlib, sys, threading
from baregrad import knobs
from typing import Any
from baregrad.ir.dtype import DType, ALL
from baregrad.hal.errors import DeviceUnavailable

KNOWN_DEVICES = ("CPU", "NV", "AMD", "QCOM", "CUDA", "CL", "METAL")

class Compiled:
  """A device: memory (allocator), a renderer and compiler for its kernel language, a Program class.

  Limits are plain attributes generic code reads instead of asking which device it is."""
  supported_dtypes: tuple[DType, ...] = ALL
  max_local_size: tuple[int, int, int] = (1, 1, 1)
  max_shared_mem: int = 0
  has_local: bool = False
  has_threads: bool = False
  has_image: bool = False

  def __init__(self, device: str, allocator: Any, renderer: Any, compiler: Any, runtime: type | None) -> None:
    self.device, self.allocator, self.renderer, self.compiler, self.runtime = device, allocator, renderer, compiler, runtime

  @property
  def name(self) -> str: return self.device
  def supports_dtype(self, dtype: DType) -> bool: return dtype.scalar in self.supported_dtypes
  def synchronize(self) -> None:
    """Wait until all work submitted to this device has finished."""
  def copy_from(self, dest: Any, src: Any) -> bool:
    """Queue a copy of Buffer src (on another device) into Buffer dest (on this one) that runs after the work already
    submitted to both, without the host waiting; False where this device cannot (the caller copies through the host)."""
    return False
  def close(self) -> None:
    """Release the device (queues, threads). The registry forgets it; Device[name] opens it again."""
    Device.forget(self.device, self)
  def __repr__(self) -> str: return f"<{type(self).__name__} {self.device}>"

def parse_device(name: str) -> tuple[str, int | None, str | None]:
  """'nv:1' -> ('NV', 1, None); 'cpu:c' -> ('CPU', None, 'C'); 'cpu:llvm:0' -> ('CPU', 0, 'LLVM')."""
  if not isinstance(name, str) or not name: raise ValueError(f"device name must be a non-empty string, got {name!r}")
  base, *rest = name.upper().split(":")
  idx: int | None = None
  variant: str | None = None
  for r in rest:
    if r.isdigit() and idx is None: idx = int(r)
    elif not r.isdigit() and r and variant is None: variant = r
    else: raise ValueError(f"cannot parse device name {name!r}: expected BASE[:VARIANT][:INDEX], e.g. 'NV:1' or 'CPU:C'")
  if base not in KNOWN_DEVICES: raise ValueError(f"unknown device {name!r}; known devices: {', '.join(KNOWN_DEVICES)}")
  return base, idx, variant

_canonical: dict[str, str] = {}  # device name -> canonical name

class _DeviceRegistry:
  """`Device["CPU"]` opens (once) and returns the device; `Device.DEFAULT` is the default device's name."""
  def __init__(self) -> None:
    self._open: dict[str, Compiled] = {}
    # read-only views for hot paths that look a name up without a call: canonical names met so far (a miss is not an
    # answer: canonicalize() then), and the open devices by canonical name
    self.canonical_names, self.open_devices = _canonical, self._open
    self._default: str | None = None
    self._lock = threading.RLock()  # two threads asking for the same device must get one instance

  @staticmethod
  def canonicalize(name: str) -> str:
    # asked several times per op (every Tensor, Buffer and launch names its device): names parsed once
    if type(name) is str and (c := _canonical.get(name)) is not None: return c
    base, idx, variant = parse_device(name)
    c = base + (f":{variant}" if variant else "") + (f":{idx}" if idx is not None else "")
    if len(_canonical) < 1024: _canonical[name] = c
    return c

  def variant(self, name: str) -> str | None:
    """The variant a device should use: the one in its name, else DEV's when DEV names the same base."""
    base, _, variant = parse_device(name)
    if variant is not None: return variant
    dev_env = knobs.read("DEV")
    if dev_env:
      try: eb, _, ev = parse_device(dev_env)
      except ValueError: return None
      if eb == base: return ev
    return None

  def __getitem__(self, name: str) -> Compiled:
    if (d := self._open.get(name)) is not None: return d   # (an open device by its canonical name: most lookups)
    cname = self.canonicalize(name)
    if (d := self._open.get(cname)) is not None: return d
    with self._lock:
      if (d := self._open.get(cname)) is not None: return d
      base = cname.split(":")[0]
      modname = "baregrad.drivers." + base.lower()
      try: mod = importlib.import_module(modname)
      except ModuleNotFoundError as e:
        if e.name != modname: raise
        raise DeviceUnavailable(f"{cname}: no driver module {modname} in this build") from e
      cls = getattr(mod, f"{base}Device", None)
      if cls is None: raise DeviceUnavailable(f"{cname}: driver module {modname} has no class {base}Device")
      try: d = cls(cname)
      except DeviceUnavailable as e: raise DeviceUnavailable(f"{cname} is unavailable: {e}") from e
      self._open[cname] = d
      return d

  def forget(self, name: str, instance: Compiled | None = None) -> None:
    """Drop a device from the cache (close() calls this); with `instance`, only if that is the cached one."""
    with self._lock:
      cname = self.canonicalize(name)
      if instance is None or self._open.get(cname) is instance: self._open.pop(cname, None)

  @property
  def opened(self) -> list[str]: return list(self._open)

  @property
  def DEFAULT(self) -> str:
    if self._default is None:
      want = knobs.read("DEV")
      try:
        self[want]
        self._default = self.canonicalize(want)
      except DeviceUnavailable as e:
        print(f"baregrad: DEV={want} is unavailable ({e}); falling back to CPU", file=sys.stderr)
        self._default = "CPU"
    return self._default

  @DEFAULT.setter
  def DEFAULT(self, name: str) -> None: self._default = self.canonicalize(name)

  def reset_default(self) -> None:
    """Forget the cached default so DEV is read again (tests)."""
    self._default = None

Device = _DeviceRegistry()
