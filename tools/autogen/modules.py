"""The generated modules: what each reads, from which pinned source, and how to get it."""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from typing import Callable, Optional, Union

from .cparse import AutogenError
from .gen import CModule, Source

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.environ.get("BAREGRAD_AUTOGEN_CACHE", "/tmp/baregrad-autogen-src")


def dpkg_version(pkg: str) -> str:
  r = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg], capture_output=True, text=True)
  return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else "(version unknown: not installed through dpkg)"


def apt(pkgs: str, default: str) -> Source:
  names = pkgs.split()
  return Source(f"Debian package{'s' if len(names) > 1 else ''} {', '.join(names)}",
                lambda src: " ".join(f"{p}={dpkg_version(p)}" for p in names) if src == default else f"(from {src})",
                default, f"install it: apt-get update && apt-get install -y {pkgs}")


def pinned(repo: str, ref: str, how: str, check: Optional[Callable[[str], Optional[str]]] = None, kind: str = "tag") -> Source:
  """A public repository at a pinned tag or commit; `check` reads the version from the tree where it can."""
  def version(src: str) -> str:
    if check is not None:
      found = check(src)
      if found is not None and found != ref:
        raise AutogenError(f"{src} is {repo} {found}, this module is pinned to {ref}: {how}")
    return f"{ref}"
  env = "BAREGRAD_SRC_" + re.sub(r"\W", "_", repo.split("/")[-1]).upper()
  return Source(f"GitHub repository {repo} at {kind}", version, os.environ.get(env),
                f"{how}; pass its root with --src (or set {env})")


# ------------------------------------------------------------------ Linux source (amdgpu, adreno)

LINUX_TAR = "/usr/src/linux-source-6.12.tar.xz"
LINUX_PARTS = ("drivers/gpu/drm/amd/include/", "drivers/gpu/drm/amd/amdgpu/nvd.h", "drivers/gpu/drm/amd/amdgpu/soc15d.h",
               "drivers/gpu/drm/amd/amdgpu/sdma_v6_0_0_pkt_open.h", "drivers/gpu/drm/amd/amdgpu/vega10_sdma_pkt_open.h",
               "drivers/gpu/drm/msm/registers/", "Makefile")
LINUX_HOW = ("apt-get update && apt-get install -y linux-source-6.12 (the generator extracts the few files it "
             f"needs from {LINUX_TAR} into {CACHE})")


def linux_source() -> str:
  """The extracted part of Debian's linux-source-6.12 that the AMD and Adreno modules read (extracted once)."""
  root = os.path.join(CACHE, "linux-source-6.12")
  stamp = os.path.join(root, ".extracted-" + dpkg_version("linux-source-6.12").replace("/", "_"))
  if os.path.exists(stamp): return root
  if not os.path.exists(LINUX_TAR): return root  # a missing path is reported by the caller with LINUX_HOW
  os.makedirs(CACHE, exist_ok=True)
  # extracted beside the final place and renamed into it, so that parallel test workers never read half a tree
  tmp = tempfile.mkdtemp(dir=CACHE)
  with tarfile.open(LINUX_TAR) as tf:
    members = [m for m in tf if m.name.startswith("linux-source-6.12/") and
               any(m.name[len("linux-source-6.12/"):].startswith(p) for p in LINUX_PARTS)]
    tf.extractall(tmp, members=members, filter="data")
  open(os.path.join(tmp, "linux-source-6.12", os.path.basename(stamp)), "w").close()
  if os.path.exists(root) and not os.path.exists(stamp): shutil.rmtree(root, ignore_errors=True)  # an older version
  try:
    os.rename(os.path.join(tmp, "linux-source-6.12"), root)
  except OSError:
    pass  # another process got there first
  shutil.rmtree(tmp, ignore_errors=True)
  return root


def linux_version(src: str) -> str:
  try:
    mk = open(os.path.join(src, "Makefile")).read(400)
    v = ".".join(re.search(rf"^{k} = (\d+)", mk, re.M).group(1) for k in ("VERSION", "PATCHLEVEL", "SUBLEVEL"))
  except (OSError, AttributeError):
    v = "?"
  return f"linux-source-6.12={dpkg_version('linux-source-6.12')} (Linux {v})"


LINUX_SRC = Source("Debian package", linux_version, None, LINUX_HOW)

# ------------------------------------------------------------------------------- the list

# one module per driver branch: the RM/UVM parameter structs are private to the driver and change
# between branches (see baregrad/ctypes_autogen/nv/__init__.py); each is pinned to the newest tag of
# its branch that was checked
NV_TAGS = {"570": "570.211.01", "575": "575.64.05", "580": "580.142", "590": "590.48.01", "595": "595.45.04"}


def nv_how(tag: str) -> str:
  return (f"fetch github:NVIDIA/open-gpu-kernel-modules at tag {tag} (git archive {tag} src/common/sdk/nvidia/inc "
          "kernel-open/common/inc kernel-open/nvidia-uvm src/nvidia/arch/nvalloc/unix/include version.mk)")


def nv_version(src: str) -> Optional[str]:
  try:
    m = re.search(r"^NVIDIA_VERSION\s*=\s*(\S+)", open(os.path.join(src, "version.mk")).read(), re.M)
    return m.group(1) if m else None
  except OSError:
    return None


NVDOC_COMMIT = "c8607fe576b53ff821ffcf97e7548d2de11c4eaf"
KGSL_COMMIT = "27cf0e4f402d9d569ef8f060d46cd5b0a97dc924"

LIBC_FUNCS = ["open", "close", "ioctl", "mmap", "munmap", "madvise", "mremap", "memfd_create"]
CUDA_FUNCS = ["cuInit", "cuDriverGetVersion", "cuDeviceGet", "cuDeviceGetCount", "cuDeviceGetName",
              "cuDeviceGetAttribute", "cuDeviceComputeCapability", "cuCtxCreate", "cuCtxDestroy", "cuCtxSetCurrent",
              "cuCtxSynchronize", "cuMemAlloc", "cuMemFree", "cuMemAllocHost", "cuMemFreeHost", "cuMemcpyHtoD",
              "cuMemcpyDtoH", "cuMemcpyDtoD", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuModuleLoadData",
              "cuModuleUnload", "cuModuleGetFunction", "cuFuncSetAttribute", "cuLaunchKernel", "cuStreamCreate",
              "cuStreamDestroy", "cuStreamSynchronize", "cuEventCreate", "cuEventRecord", "cuEventSynchronize",
              "cuEventElapsedTime", "cuEventDestroy", "cuGetErrorString", "cuGetErrorName", "cuEventQuery", "cuStreamQuery",
              "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease", "cuFuncGetAttribute"]
NVRTC_FUNCS = ["nvrtcVersion", "nvrtcCreateProgram", "nvrtcDestroyProgram", "nvrtcCompileProgram", "nvrtcGetPTXSize",
               "nvrtcGetPTX", "nvrtcGetCUBINSize", "nvrtcGetCUBIN", "nvrtcGetProgramLogSize", "nvrtcGetProgramLog",
               "nvrtcGetErrorString"]
CL_FUNCS = ["clGetPlatformIDs", "clGetPlatformInfo", "clGetDeviceIDs", "clGetDeviceInfo", "clCreateContext",
            "clReleaseContext", "clCreateCommandQueue", "clCreateCommandQueueWithProperties", "clReleaseCommandQueue",
            "clCreateBuffer", "clReleaseMemObject", "clEnqueueWriteBuffer", "clEnqueueReadBuffer", "clEnqueueCopyBuffer",
            "clCreateProgramWithSource", "clCreateProgramWithBinary", "clBuildProgram", "clGetProgramInfo",
            "clGetProgramBuildInfo", "clReleaseProgram", "clCreateKernel", "clSetKernelArg", "clReleaseKernel",
            "clGetKernelWorkGroupInfo", "clEnqueueNDRangeKernel", "clFinish", "clFlush", "clWaitForEvents",
            "clGetEventProfilingInfo", "clReleaseEvent", "clGetEventInfo", "clCreateSubBuffer"]


def cuda_include() -> str:
  for p in ["/usr/local/cuda/include"] + sorted(glob.glob("/usr/local/cuda-*/include"), reverse=True):
    if os.path.exists(os.path.join(p, "cuda.h")): return p
  return "/usr/local/cuda/include"


def nvrtc_include() -> str:
  if os.path.exists(os.path.join(cuda_include(), "nvrtc.h")): return cuda_include()
  import site
  for sp in site.getsitepackages() + [site.getusersitepackages()]:
    for p in sorted(glob.glob(os.path.join(sp, "nvidia", "cu*", "include")) + glob.glob(os.path.join(sp, "nvidia", "cuda_nvrtc", "include"))):
      if os.path.exists(os.path.join(p, "nvrtc.h")): return p
  return os.environ.get("BAREGRAD_SRC_NVRTC", "/usr/local/cuda/include")


def cuda_version(src: str) -> str:
  try:
    v = int(re.search(r"#define CUDA_VERSION (\d+)", open(os.path.join(src, "cuda.h")).read()).group(1))
    return f"(cuda.h CUDA_VERSION {v}: CUDA {v // 1000}.{v % 1000 // 10}, at {src})"
  except (OSError, AttributeError):
    return f"(at {src})"


def nvrtc_version(src: str) -> str:
  infos = glob.glob(os.path.join(src, "..", "..", "..", "nvidia_cuda_nvrtc*.dist-info"))
  if infos: return "(pip wheel " + os.path.basename(infos[0]).replace(".dist-info", "") + ")"
  return cuda_version(src) if os.path.exists(os.path.join(src, "cuda.h")) else f"(at {src})"


AMD_REGS = (r"^(reg)?(COMPUTE_(PGM|USER_DATA|NUM_THREAD|DISPATCH|RESOURCE_LIMITS|TMPRING|START|RESTART|STATIC|MISC|PIPELINESTAT|PERFCOUNT_ENABLE|"
            r"THREAD_TRACE|DESTINATION|DIM|VMID|SHADER_CHKSUM|REQ_CTRL|WAVE_RESTORE|RELAUNCH)\w*|SH_MEM_\w+|CP_HQD_\w+|CP_MQD_\w+)")

MODULES: dict[str, Union[CModule, "XmlModule"]] = {}


def add(m: Union[CModule, "XmlModule"]) -> None:
  MODULES[m.name] = m


add(CModule("libc", apt("libc6-dev linux-libc-dev", "/usr/include"),
            headers=["<sys/mman.h>", "<fcntl.h>", "<errno.h>", "<unistd.h>", "<sys/ioctl.h>"],
            prelude="#define _GNU_SOURCE 1\n", emit_files=["/usr/include/*"], types="",
            macros=r"^(MAP_|PROT_|O_|MREMAP_|MADV_|MFD_|E[A-Z0-9]+$|F_[A-Z]|AT_FDCWD$|SEEK_)",
            funcs=LIBC_FUNCS, lib=("libc", (None, "libc.so.6"), "the C library must be loadable"), use_errno=True,
            doc="open/close/ioctl/mmap/munmap/madvise/mremap/memfd_create, their flags, and errno names."))
add(CModule("kfd", apt("linux-libc-dev", "/usr/include"), headers=["linux/kfd_ioctl.h"],
            includes=[os.path.join(HERE, "shims")],
            doc="AMD KFD (/dev/kfd) ioctls and argument structs, from the kernel's uapi header."))
add(CModule("opencl", apt("opencl-c-headers", "/usr/include"), headers=["CL/cl.h"],
            defines=["CL_TARGET_OPENCL_VERSION=300"], prelude="#undef __SSE__\n#undef __SSE2__\n#undef __AVX__\n#undef __MMX__\n",
            macros=r"^CL_", types=r"^(cl_|_cl)", funcs=CL_FUNCS,
            lib=("libOpenCL", ("libOpenCL.so.1", "libOpenCL.so"), "install an OpenCL ICD loader (apt-get install ocl-icd-libopencl1) and a driver"),
            doc="OpenCL fallback: platform/device/context/queue/buffer/program/kernel calls and CL_* constants."))
add(CModule("cuda", Source("CUDA toolkit cuda.h", cuda_version, cuda_include(),
                           "install the CUDA toolkit (cuda.h; /usr/local/cuda/include) and pass its include folder with --src"),
            headers=["cuda.h"], macros=r"^CU", types=r"^(CU|cu)", funcs=CUDA_FUNCS,
            lib=("libcuda", ("libcuda.so.1", "libcuda.so"), "install the NVIDIA driver (libcuda.so.1)"),
            doc="CUDA driver API subset for the CUDA fallback (cuInit .. cuLaunchKernel, events, errors)."))
add(CModule("nvrtc", Source("nvrtc.h", nvrtc_version, nvrtc_include(),
                            "pip install nvidia-cuda-nvrtc (or the CUDA toolkit) and pass the folder holding nvrtc.h with --src"),
            headers=["nvrtc.h"], macros=r"^NVRTC", types=r"^nvrtc", funcs=NVRTC_FUNCS,
            lib=("libnvrtc", ("libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"), "pip install nvidia-cuda-nvrtc or install the CUDA toolkit"),
            doc="NVRTC: CUDA C++ to PTX/CUBIN at run time, for the CUDA fallback."))

for gfx, tag, pm4, sdma, enum in (("gfx11", "11_0_0", "amdgpu/nvd.h", "amdgpu/sdma_v6_0_0_pkt_open.h", "soc21_enum.h"),
                                  ("gfx9_4_3", "9_4_3", "amdgpu/soc15d.h", "amdgpu/vega10_sdma_pkt_open.h", "vega10_enum.h")):
  # the register enums header declares ~1450 enums; the decoders need the event types only (amdgpu's gfx_v11_0.c and
  # gfx_v9_4_3.c include these headers for the same VGT_EVENT_TYPE values they put in RELEASE_MEM/EVENT_WRITE)
  add(CModule(f"amdgpu.enum_{gfx}", LINUX_SRC, headers=[f"drivers/gpu/drm/amd/include/{enum}"], macros="", types="",
              enums=r"VGT_EVENT_TYPE",
              doc=f"VGT_EVENT_TYPE (the event a RELEASE_MEM or EVENT_WRITE packet names) from {enum}, as used with {gfx}."))
  add(CModule(f"amdgpu.{gfx}", LINUX_SRC, headers=[f"drivers/gpu/drm/amd/include/asic_reg/gc/gc_{tag}_offset.h",
                                                    f"drivers/gpu/drm/amd/include/asic_reg/gc/gc_{tag}_sh_mask.h"],
              macros=AMD_REGS, types="",
              doc=f"GC {tag.replace('_', '.')} compute registers (offsets, BASE_IDX) and their fields (__SHIFT/_MASK)."))
  add(CModule(f"amdgpu.pm4_{gfx}", LINUX_SRC, headers=[f"drivers/gpu/drm/amd/{pm4}"], types="",
              doc=f"PM4 type-3 packet opcodes and fields used with {gfx} ({pm4})."))
  add(CModule(f"amdgpu.sdma_{gfx}", LINUX_SRC, headers=[f"drivers/gpu/drm/amd/{sdma}"], types="",
              doc=f"SDMA packet opcodes and field offsets/masks/shifts used with {gfx} ({sdma})."))
add(CModule("amdgpu.hsa", Source("baregrad's own header, written from public documents:", lambda s: "tools/autogen/headers/amd_hsa.h",
                                  os.path.join(HERE, "headers"), "tools/autogen/headers is part of baregrad"),
            headers=["amd_hsa.h"], prelude="#include <stdint.h>\n",
            doc="AQL kernel dispatch packet (HSA Platform System Architecture 1.2, 2.9.6) and the AMDHSA kernel\n"
                "descriptor (LLVM AMDGPUUsage, 'Kernel Descriptor'); the header cites each offset."))

def nv_module(branch: str, tag: str) -> CModule:
  return CModule(f"nv.nv_{branch}", pinned("NVIDIA/open-gpu-kernel-modules", tag, nv_how(tag), nv_version),
            headers=[f"src/common/sdk/nvidia/inc/{h}" for h in (
              "nvos.h", "nvstatus.h", "class/cl0000.h", "class/cl0080.h", "class/cl2080.h", "class/cl003e.h",
              "class/cl0040.h", "class/cl0070.h", "class/cl90f1.h", "class/cla06c.h", "alloc/alloc_channel.h",
              "class/clc56f.h", "class/clc86f.h", "class/clc96f.h", "class/clca6f.h", "class/clc6c0.h",
              "class/clc7c0.h", "class/clc9c0.h", "class/clcbc0.h", "class/clcdc0.h", "class/clcec0.h",
              "class/clc6b5.h", "class/clc7b5.h", "class/clc8b5.h", "class/clc9b5.h", "class/clcab5.h",
              "ctrl/ctrl0000/ctrl0000client.h", "ctrl/ctrl0080/ctrl0080gpu.h", "ctrl/ctrl0080/ctrl0080fifo.h",
              "ctrl/ctrl2080/ctrl2080gpu.h", "ctrl/ctrl2080/ctrl2080gr.h", "ctrl/ctrl2080/ctrl2080mc.h",
              "ctrl/ctrl2080/ctrl2080fb.h", "ctrl/ctrla06c.h", "ctrl/ctrlc36f.h")] +
            ["src/nvidia/arch/nvalloc/unix/include/nv-ioctl-numbers.h", "src/nvidia/arch/nvalloc/unix/include/nv_escape.h",
             "src/nvidia/arch/nvalloc/unix/include/nv-ioctl.h", "kernel-open/nvidia-uvm/uvm_ioctl.h",
             "kernel-open/nvidia-uvm/uvm_linux_ioctl.h"],
            includes=["src/common/sdk/nvidia/inc", "src/nvidia/arch/nvalloc/unix/include", "kernel-open/common/inc",
                      "kernel-open/nvidia-uvm"],
            doc="NVIDIA RM (NV_ESC_* escapes, NVOS* parameters, alloc parameters, controls), UVM ioctls, GPFIFO and\n"
                f"class method fields, for driver {branch}.x. pick_nv_module() in nv/__init__.py picks it by driver version.")


for _branch, _tag in NV_TAGS.items(): add(nv_module(_branch, _tag))
add(CModule("nv.qmd", pinned("NVIDIA/open-gpu-doc", NVDOC_COMMIT, f"fetch github:NVIDIA/open-gpu-doc at commit {NVDOC_COMMIT}",
                   kind="commit"),
            headers=[f"classes/compute/cl{c}qmd.h" for c in ("c6c0", "c7c0", "c9c0", "cbc0", "cdc0", "cec0")],
            types="", doc="Compute QMD layouts as MW(hi:lo) fields: v03 (Ampere/Ada), v04 (Hopper), v05 (Blackwell)."))
add(CModule("kgsl", pinned("qualcomm-linux/kgsl", KGSL_COMMIT, f"fetch github:qualcomm-linux/kgsl at commit {KGSL_COMMIT}",
                   kind="commit"),
            headers=["include/uapi/linux/msm_kgsl.h"], includes=["/usr/include"],
            defines=["__user="],  # the kernel-tree header is not run through headers_install, which drops __user
            doc="Qualcomm KGSL (/dev/kgsl-3d0) ioctls and argument structs."))

from .rnn import XmlModule  # noqa: E402

add(XmlModule("adreno", LINUX_SRC, files=["drivers/gpu/drm/msm/registers/adreno/a6xx.xml"], gens=["A6XX", "A7XX"],
              domains=["A6XX"], packet_enum="adreno_pm4_type3_packets", descriptors=["A6XX_TEX_CONST", "A6XX_TEX_SAMP"],
              doc="Adreno A6xx/A7xx registers (offsets, arrays, bitfields), CP packet opcodes and payload fields, texture\n"
                  "descriptor and sampler fields, from\n"
                  "the freedreno register database (Mesa's src/freedreno/registers, as carried by Linux in\n"
                  "drivers/gpu/drm/msm/registers)."))
