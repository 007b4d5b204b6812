"""Random numbers: Threefry-2x32 (20 rounds) over a counter, computed on the device. The key comes from a per-device
state buffer [seed, counter] that each draw advances with a kernel, so a jit replay draws new numbers."""
from __future__ import annotations
import math, threading
from typing import Any, TYPE_CHECKING
import numpy as np
from baregrad.helpers import prod
from baregrad.ir.dtype import DType, dtypes
from baregrad.ir.ops import Ops
from baregrad.hal import Device
from baregrad.tensor.recipe import param_key
from baregrad.tensor.common import ShapeLike, _shape_arg, _new_shape
if TYPE_CHECKING: from baregrad.tensor.tensor import Tensor

# threads: a draw reads the state and writes its next value under _rng_lock (two draws at once would give the same
# numbers); reentrant, as a draw builds tensors
_rng_lock = threading.RLock()
_rng_states: dict[str, tuple[Any, Tensor]] = {}  # device -> (the device instance, its RNG state [seed, counter] (uint32))

def _unit(bits: Tensor, shape: tuple[int, ...]) -> Tensor:
  """float32 in [0, 1) of the given shape from random uint32 bits: their top 24 bits over 2^24."""
  return ((bits >> 8).cast(dtypes.float32) * (1.0 / (1 << 24))).reshape(shape)

def _threefry(x0: Tensor, x1: Tensor, k0: Tensor, k1: Tensor) -> Tensor:
  """Threefry-2x32 with 20 rounds of the counter (x0, x1) under the key (k0, k1), broadcast to x0's shape: the first
  output word. One THREEFRY node (ir/alu.py threefry2x32): its ~130 operations are expanded where the kernel is built,
  so a draw costs the graph a handful of nodes, not a tensor op per operation."""
  shape = x0.shape
  return x0._alu(Ops.THREEFRY, x1._bcast(shape), k0._bcast(shape), k1._bcast(shape))

class RandomOps:
  """Random tensors: Tensor.manual_seed, Tensor.rand/randn/uniform/normal/randint, x.rand_like()."""
  __slots__ = ()   # (Tensor has slots: a base without them would give every tensor a __dict__)
  # ---- random numbers: Threefry-2x32 (20 rounds) over a counter, computed on the device. The key comes from a
  # per-device state buffer [seed, counter] that each draw advances with a kernel, so a jit replay draws new numbers
  @staticmethod
  def manual_seed(seed: int = 0) -> None:
    """Seed baregrad's random streams (Threefry-2x32 on the device: the numbers differ from PyTorch's for the same seed)."""
    from baregrad.tensor.tensor import Tensor
    with _rng_lock:
      Tensor._seed = int(seed)
      for dev, (inst, st) in list(_rng_states.items()):
        if dev in Device.opened and Device[dev] is inst: st.assign(Tensor(np.array([Tensor._seed & 0xffffffff, 0], np.uint32), device=dev))
        else: del _rng_states[dev]
  @staticmethod
  def _rng_state(device: str | None) -> Tensor:
    dev = Device.canonicalize(device or Device.DEFAULT)
    if (e := _rng_states.get(dev)) is None or e[0] is not Device[dev]:  # (a reopened device starts a new state)
      from baregrad.tensor.tensor import Tensor
      _rng_states[dev] = e = (Device[dev], Tensor(np.array([Tensor._seed & 0xffffffff, 0], np.uint32), device=dev))
    return e[1]
  @staticmethod
  def _random(n: int, device: str | None, finish: Any, key: tuple, extra: tuple = ()) -> Tensor:
    """finish(n random uint32 bits, *extra) realized, with the RNG state advanced in the same schedule. `key` names
    what finish computes (with n, the recipes' key: both graphs are built from recipes after the first draw of a kind,
    ~30 tensor ops that cost more than the kernel)."""
    with _rng_lock: return RandomOps._random_locked(n, device, finish, key, extra)
  @staticmethod
  def _random_locked(n: int, device: str | None, finish: Any, key: tuple, extra: tuple) -> Tensor:
    from baregrad.tensor.inplace import write
    from baregrad.tensor.recipe import recorded
    from baregrad.tensor.tensor import Tensor
    st = Tensor._rng_state(device)
    def draw(s: Tensor, *ex: Tensor) -> Tensor:
      ctr = s._shrink(((1, 2),)).reshape(()) + 1
      bits = _threefry(Tensor.arange(n, device=s.device, dtype=dtypes.uint32), Tensor.full((n,), 0, dtype=dtypes.uint32, device=s.device),
                       s._shrink(((0, 1),)).reshape(()), ctr * 0x9E3779B9)
      return finish(bits, *ex)   # (bits and ctr go with this frame: not readers of the state to keep, only the result is)
    out = recorded("random", draw, [st, *extra], (n, key))
    step = recorded("rng_step", lambda s: s + Tensor.full((1,), 1, dtype=dtypes.uint32, device=s.device)._pad(((1, 0),)), [st], ())
    write([(st, step)], also=[out])
    return out
  @staticmethod
  def rand(*shape: Any, dtype: DType | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """Uniform [0, 1) float32 (or dtype) tensor of the given shape, generated on the device."""
    shape = _new_shape(_shape_arg(shape))
    n = prod(shape)
    from baregrad.tensor.tensor import Tensor
    if n == 0: return Tensor.zeros(*shape, dtype=dtype, device=device)
    return Tensor._random(n, device, lambda bits: _unit(bits, shape).cast(dtype or dtypes.default_float).contiguous(),
                          ("rand", shape, dtype))._leaf(requires_grad)
  @staticmethod
  def uniform(*shape: Any, low: float = 0.0, high: float = 1.0, dtype: DType | None = None, device: str | None = None,
      requires_grad: bool | None = None) -> Tensor:
    """Uniform [low, high) tensor of the given shape, generated on the device."""
    shape = _new_shape(_shape_arg(shape))
    from baregrad.tensor.tensor import Tensor
    if prod(shape) == 0: return Tensor.zeros(*shape, dtype=dtype or dtypes.default_float, device=device)._leaf(requires_grad)
    # the scaling is computed in the draw's kernel (the values are those of (high - low) * rand() + low)
    def finish(bits: Tensor) -> Tensor:
      return ((high - low) * _unit(bits, shape).cast(dtypes.default_float) + low).cast(dtype or dtypes.default_float).contiguous()
    return Tensor._random(prod(shape), device, finish, ("uniform", shape, param_key(low), param_key(high), dtype))._leaf(requires_grad)
  @staticmethod
  def randn(*shape: Any, dtype: DType | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """Standard normal tensor of the given shape (Box-Muller on the device)."""
    shape = _new_shape(_shape_arg(shape))
    from baregrad.tensor.tensor import Tensor
    if prod(shape) == 0: return Tensor.zeros(*shape, dtype=dtype or dtypes.default_float, device=device)._leaf(requires_grad)
    # Box-Muller over two uniform streams; the second draw's kernel computes the normals
    u1 = Tensor.rand(*shape, device=device)
    def finish(bits: Tensor, u1: Tensor) -> Tensor:
      u2 = _unit(bits, shape).cast(dtypes.default_float)
      return ((-2.0 * (1.0 - u1).log()).sqrt() * (2 * math.pi * u2).cos()).cast(dtype or dtypes.default_float).contiguous()
    return Tensor._random(prod(shape), device, finish, ("randn", shape, dtype), (u1,))._leaf(requires_grad)
  @staticmethod
  def normal(*shape: Any, mean: float = 0.0, std: float = 1.0, dtype: DType | None = None, device: str | None = None,
      requires_grad: bool | None = None) -> Tensor:
    """Normal(mean, std^2) tensor of the given shape, generated on the device."""
    from baregrad.tensor.tensor import Tensor
    return (Tensor.randn(*shape, device=device) * std + mean).cast(dtype or dtypes.default_float).contiguous().realize()._leaf(requires_grad)
  @staticmethod
  def randint(low: int, high: int | None = None, size: ShapeLike = (), dtype: DType = dtypes.int64, device: str | None = None) -> Tensor:
    """Integers uniform in [low, high) (int64 unless dtype), of shape size, generated on the device."""
    if high is None: low, high = 0, low
    shape = (size,) if isinstance(size, int) else tuple(size)
    from baregrad.tensor.tensor import Tensor
    span = high - low
    if 0 < span < 1 << 39 and prod(shape) > 0:
      # floor(u * span) for the draw's u = k / 2^24 (k: the top 24 bits, as rand()), in integers: exact, the same
      # numbers as the float64 product gives wherever that is exact, and no float64 (Adreno has none)
      def finish(bits: Tensor) -> Tensor:
        return ((((bits >> 8).cast(dtypes.int64) * span) >> 24).reshape(shape) + low).cast(dtype).contiguous()
      return Tensor._random(prod(shape), device, finish, ("randint", shape, low, high, dtype))
    r = (Tensor.rand(*shape, device=device, dtype=dtypes.float64) * (high - low)).floor().cast(dtypes.int64) + low
    return r.cast(dtype).contiguous().realize()
  def rand_like(self) -> Tensor:
    """Uniform [0, 1) values of this tensor's shape, dtype and device."""
    from baregrad.tensor.tensor import Tensor
    return Tensor.rand(*self.shape, dtype=self.dtype, device=self.device)
  def randn_like(self) -> Tensor:
    """Standard normal values of this tensor's shape, dtype and device."""
    from baregrad.tensor.tensor import Tensor
    return Tensor.randn(*self.shape, dtype=self.dtype, device=self.device)
