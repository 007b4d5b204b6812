"""KFD topology: the node properties sysfs publishes, the GPU target a node is, and the queue buffer sizes
the kernel derives from them (amdkfd/kfd_queue.c: kfd_queue_ctx_save_restore_size, Linux 6.12)."""
from __future__ import annotations
import errno, os
from dataclasses import dataclass
from typing import Any
from baregrad.drivers.vmem import PAGE, round_up
# the targets this driver knows (one record each in hw.py), named here too: a node's gfx_target_version picks one
from baregrad.drivers.amd.hw import TARGETS as TARGETS, Target as Target

TOPOLOGY = "/sys/devices/virtual/kfd/kfd/topology"

def target_name(version: int) -> str:
  """gfx_target_version (major*10000 + minor*100 + stepping) in LLVM's spelling: 110000 -> gfx1100, 90010 -> gfx90a."""
  major, minor, step = version // 10000, version // 100 % 100, version % 100
  return f"gfx{major}{minor:x}{step:x}"

def parse_properties(text: str) -> dict[str, int]:
  """A sysfs `properties` file ("name value" lines) as a dict."""
  out: dict[str, int] = {}
  for line in text.splitlines():
    parts = line.split()
    if len(parts) == 2 and parts[1].lstrip("-").isdigit(): out[parts[0]] = int(parts[1])
  return out

@dataclass
class Node:
  """One topology node (the CPU or a GPU): its index under nodes/, its gpu_id (0 for a CPU) and properties."""
  index: int
  gpu_id: int
  props: dict[str, int]
  name: str = ""
  @property
  def is_gpu(self) -> bool: return self.gpu_id != 0 and self.props.get("simd_count", 0) > 0
  @property
  def target(self) -> str: return target_name(self.props.get("gfx_target_version", 0))

def _read(port: Any, path: str) -> str:
  fd = port.open(path, os.O_RDONLY)
  try:
    data = b""
    while chunk := port.read(fd, 4096): data += chunk
    return data.decode(errors="replace")
  finally: port.close(fd)

def read_topology(port: Any, root: str = TOPOLOGY) -> list[Node]:
  """Every node, read through the port: nodes/<n>/{gpu_id,name,properties} for n = 0, 1, ... until one is missing
  (sysfs numbers them densely from 0, kfd_topology.c: kfd_build_sysfs_node_tree)."""
  nodes: list[Node] = []
  for i in range(256):
    base = f"{root}/nodes/{i}"
    try: props = parse_properties(_read(port, f"{base}/properties"))
    except OSError as e:
      if e.errno == errno.ENOENT: break
      raise
    gpu_id = int(_read(port, f"{base}/gpu_id").strip() or 0)
    try: name = _read(port, f"{base}/name").strip()
    except OSError: name = ""
    nodes.append(Node(i, gpu_id, props, name))
  return nodes

@dataclass(frozen=True)
class QueueSizes:
  """What CREATE_QUEUE must be given for a compute queue on this node (kfd_queue.c: kfd_queue_acquire_buffers)."""
  ctl_stack_size: int      # must equal the node's
  cwsr_size: int           # ctx_save_restore_size must be at least this
  debug_memory_size: int   # appended to the save area, per XCC
  eop_buffer_size: int     # at least this
  num_xcc: int
  @property
  def cwsr_total(self) -> int:
    """Bytes of the context-save allocation: (save area + debugger memory) for each XCC, page aligned."""
    return round_up((self.cwsr_size + self.debug_memory_size) * self.num_xcc, PAGE)

def queue_sizes(props: dict[str, int]) -> QueueSizes:
  """The kernel's computation (kfd_queue.c: kfd_queue_ctx_save_restore_size) from the sysfs properties. sysfs prints
  array_count multiplied by the XCC count (kfd_topology.c: node_show), so it is divided back here."""
  gfxv = props["gfx_target_version"]
  num_xcc = max(props.get("num_xcc", 1), 1)
  simd_per_cu, simd_count = props["simd_per_cu"], props["simd_count"]
  array_count = props["array_count"] // num_xcc
  cu_num = simd_count // simd_per_cu // num_xcc
  wave_num = min(cu_num * 40, array_count // props["simd_arrays_per_engine"] * 512) if gfxv < 100100 else cu_num * 32
  vgpr = 0x40000
  if gfxv // 100 * 100 == 90400 or gfxv in (90010, 90008): vgpr = 0x80000
  elif gfxv in (110000, 110001, 110501, 120000, 120001): vgpr = 0x60000
  wg_data = round_up(cu_num * (vgpr + 0x4000 + 0x10000 + 0x1000), PAGE)   # VGPRs + SGPR 0x4000 + LDS 0x10000 + HWREG 0x1000
  ctl = round_up(40 + wave_num * (12 if gfxv >= 100100 else 8) + 8, PAGE)  # 40: the save-area header
  if gfxv // 10000 * 10000 == 100000: ctl = min(ctl, 0x7000)
  eop = 0x8000 if gfxv == 80002 else 4096
  sizes = QueueSizes(ctl, ctl + wg_data, round_up(wave_num * 32, 64), eop, num_xcc)
  # kernels since 6.12 publish the first two; theirs win (a newer kernel may size differently)
  if props.get("ctl_stack_size") and props.get("cwsr_size"):
    sizes = QueueSizes(props["ctl_stack_size"], props["cwsr_size"], sizes.debug_memory_size, eop, num_xcc)
  return sizes
