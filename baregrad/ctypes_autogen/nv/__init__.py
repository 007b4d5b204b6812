"""NVIDIA bindings, one module per driver branch whose interface structs differ.

The RM and UVM parameter structs are private to the driver and change between branches
(fields are added, arrays grow), so a binding made from one branch's headers must not be
used with another branch's kernel module. `pick_nv_module` maps the version the kernel
reports (/proc/driver/nvidia/version, or /sys/module/nvidia/version) to the module
generated from that branch's open-gpu-kernel-modules tag, and refuses any other version
by name instead of guessing.

`qmd` (compute queue meta data, from open-gpu-doc) describes hardware, not the driver,
and is shared by every branch.
"""
from __future__ import annotations

import ctypes
import importlib
import re
from types import ModuleType

from baregrad.ctypes_autogen import _support

# driver branch -> (module, the tag its headers came from). A branch is added by generating
# its module (python tools/autogen.py nv.nv_BRANCH --src ...) and listing it here.
# Examples of what differs (compared from the generated _LAYOUT records): NV_VASPACE_ALLOCATION_PARAMETERS
# grows from 48 to 56 bytes between 575 and 580; NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS changes between 570
# and 575; UVM_FREE_PARAMS and other UVM parameters change between 580 and 590;
# NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS between 590 and 595.
BRANCHES: dict[str, tuple[str, str]] = {
  "570": ("nv_570", "570.211.01"),
  "575": ("nv_575", "575.64.05"),
  "580": ("nv_580", "580.142"),
  "590": ("nv_590", "590.48.01"),
  "595": ("nv_595", "595.45.04"),
}


class UnsupportedDriverVersion(RuntimeError):
  """The running NVIDIA kernel module is from a branch with no generated bindings."""


def pick_nv_module(driver_version: str) -> ModuleType:
  """The bindings for NVIDIA driver `driver_version` (e.g. '580.95.05'); raises for unknown branches."""
  m = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.(\d+))?\s*", driver_version)
  if m is None:
    raise UnsupportedDriverVersion(f"not an NVIDIA driver version: {driver_version!r}")
  branch = m.group(1)
  if branch not in BRANCHES:
    raise UnsupportedDriverVersion(
      f"NVIDIA driver {driver_version.strip()} (branch {branch}) has no generated bindings; supported branches: "
      f"{', '.join(f'{b}.x (from {t})' for b, (_, t) in BRANCHES.items())}. Generate one with "
      f"python tools/autogen.py nv.nv_{branch} --src <open-gpu-kernel-modules at that tag>.")
  return importlib.import_module(f"{__name__}.{BRANCHES[branch][0]}")


def kernel_driver_version(path: str = "/sys/module/nvidia/version") -> str:
  """The version of the loaded nvidia.ko, as the kernel reports it."""
  try:
    with open(path) as f: return f.read().strip()
  except FileNotFoundError:
    with open("/proc/driver/nvidia/version") as f: text = f.read()
    m = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?(\d+\.\d+(?:\.\d+)?)", text)
    if m is None: raise UnsupportedDriverVersion(f"cannot read the driver version from /proc/driver/nvidia/version: {text[:200]!r}")
    return m.group(1)


def rm_ioctl_number(esc: int, params: type, magic: int = 0x46) -> int:
  """The ioctl request for RM escape `esc` (NV_ESC_*) carrying `params`: _IOWR(NV_IOCTL_MAGIC, esc, sizeof).

  The headers leave this to the caller (the kernel module decodes nr and size from the request);
  NV_IOCTL_MAGIC is 'F' (0x46) in every branch above."""
  return _support.IOWR(magic, esc, ctypes.sizeof(params))
