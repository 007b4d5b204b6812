"""PTXKernel: one .entry of a module, parsed and compiled to per-instruction closures. The instruction families live in
mixins, one module each (parser, operands, control, alu, convert, memops, matrix, launch); this class holds the state
they share and the dispatch from an opcode to its compiler (`_c_<op>`)."""
from __future__ import annotations
from typing import TYPE_CHECKING
import numpy as np
from baregrad.drivers.mock.ptx.dtypes import _DT, _TYPES
from baregrad.drivers.mock.ptx.errors import PTXError
from baregrad.drivers.mock.ptx.parser import BodyParser, _Ins, _Var
from baregrad.drivers.mock.ptx.operands import Operands
from baregrad.drivers.mock.ptx.control import ControlOps
from baregrad.drivers.mock.ptx.alu import ArithOps
from baregrad.drivers.mock.ptx.convert import ConvertOps
from baregrad.drivers.mock.ptx.memops import MemoryOps
from baregrad.drivers.mock.ptx.launch import Launcher
from baregrad.drivers.mock.ptx.matrix import MatrixOps
from baregrad.drivers.mock.ptx.wgmma import WgmmaOps
from baregrad.drivers.mock.ptx.mbarrier import MbarrierOps
from baregrad.drivers.mock.ptx.tma import TmaOps
if TYPE_CHECKING: from baregrad.drivers.mock.ptx.module import PTXModule

class PTXKernel(BodyParser, Operands, ControlOps, ArithOps, ConvertOps, MemoryOps, MatrixOps, WgmmaOps, MbarrierOps, TmaOps, Launcher):
  """One `.entry` of a module: parsed and compiled to per-instruction closures by the instruction-family mixins."""

  strict_barriers = False  # True: a barrier that some threads exited before reaching raises
  max_batch_lanes = 8192  # blocks are run together in batches of up to this many threads
  max_steps = 20_000_000  # instructions issued per batch of blocks before we call it a hang
  livelock_steps = 4096  # divergent steps without reconvergence before leading threads get turns
  trace = None  # a callable(line, text, active_threads, threads): called per issued instruction
  # a callable(line, text, wavefronts, ideal): called per issued ldmatrix / cp.async with the shared-memory wavefronts
  # its warps need under the 32-bank model and the fewest they could need (matrix.py, shared_wavefronts)
  bank_conflicts = None

  def __init__(self, module: PTXModule, name: str, params: list[_Var], body: str, body_off: int, line: int) -> None:
    self.module, self.name = module, name
    self._pvars = params
    self.params: list[tuple[str, str]] = [(p.name, p.tname if p.size == _DT[p.tname].itemsize
                                           else f"{p.tname}[{p.size // _DT[p.tname].itemsize}]")
                                          for p in params]
    off = 0
    self.param_offsets = {}
    for p in params:
      off = (off + p.align - 1) // p.align * p.align
      p.offset = off
      self.param_offsets[p.name] = off
      off += p.size
    self.param_size = off
    self.reg_types: dict[str, np.dtype] = {}
    self.reg_tnames: dict[str, str] = {}
    self.shared_vars: dict[str, _Var] = {}
    self.local_vars: dict[str, _Var] = {}
    self.code: list[_Ins] = []
    self.labels: dict[str, int] = {}
    self.call_params: set[str] = set()
    self._ncalls = 0
    self._parse_body(body, body_off)
    self._layout()
    for ins in self.code:
      self._compile(ins)
    self._wgmma_hooks()

  # -- operands
  def _err(self, ins: _Ins, msg: str) -> PTXError:
    return PTXError(msg, ins.line, ins.text)

  # -- compile instructions
  def _types(self, ins: _Ins) -> list[str]:
    return [m for m in ins.mods if m in _TYPES]

  def _compile(self, ins: _Ins) -> None:
    op = ins.op
    try:
      h = getattr(self, "_c_" + op, None)
      if h is None:
        raise self._err(ins, f"unsupported instruction `{op}`")
      h(ins)
    except PTXError as e:
      raise e.locate(ins.line, ins.text)
    except (KeyError, IndexError, ValueError) as e:
      raise self._err(ins, f"malformed instruction ({type(e).__name__}: {e})") from e
    if ins.pred is not None:
      if ins.pred not in self.reg_types or self.reg_types[ins.pred] != np.bool_:
        raise self._err(ins, f"guard {ins.pred} is not a declared .pred register")

  def _need(self, ins: _Ins, n: int) -> None:
    if len(ins.ops) != n:
      raise self._err(ins, f"expected {n} operands, got {len(ins.ops)}")

  def _one_type(self, ins: _Ins) -> str:
    ts = self._types(ins)
    if len(ts) != 1:
      raise self._err(ins, f"expected exactly one type modifier, got {ts or 'none'}")
    return ts[0]
