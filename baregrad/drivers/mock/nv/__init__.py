"""MockNVGPU: the kernel interface of NVIDIA's driver (RM escapes on /dev/nvidiactl and /dev/nvidiaN, UVM ioctls on
/dev/nvidia-uvm, mmaps, the usermode doorbell, the kernel log on /dev/kmsg) and GPUs of one generation behind it
(GPFIFO channels, host semaphores, the DMA copy engine, the compute class up to the QMD launch). MOCKGPU_ARCH picks the
generation (sm_80, sm_86, sm_89: Ampere/Ada classes and QMD v03; sm_90: Hopper, QMD v04, the default; sm_100, sm_120:
Blackwell, QMD v05): RM reports its MC architecture, SM version and classlist, accepts only its classes
(NV_ERR_INVALID_CLASS otherwise), and the compute engine decodes the QMD version of its class. MOCKGPU_COUNT=n lists n GPUs.

A conformance model, not a friend: it refuses what the real kernel driver and GPU refuse, with the codes they give,
each check beside the source it comes from (a file and function of NVIDIA's open kernel modules 580.x, or a finding of
docs/hw/h100-580.159.04-findings.md: the findings of the first run on an H100, numbered as
there). Among them: system memory mapped only through /dev/nvidiactl (finding 1), GR channels
scheduled only once UVM_REGISTER_CHANNEL bound them (finding 2), a Hopper/Blackwell shared window that is not 4 GiB
aligned refused with Xid 69 (finding 3), instruction prefetch past a program's allocation faulting with Xid 31
(finding 4), %ntid/%nctaid and the other launch values read from constant bank 0 where the SASS reads them (finding 5),
a QMD launched again while in flight taking the channel down with Xid 109 (finding 6a), and launches that no
wait-for-idle separates running concurrently (finding 6b): they are interleaved instruction by instruction, the latest
first, and the mock reports read-after-write hazards between them (`hazards`). The GPU runs what a doorbell announces
at the next doorbell (or kick), not before the host goes on, so memory a queued launch reads that the host rewrites
is reported (`violations`) and read as rewritten, as on the GPU.

The mock knows only what the real kernel driver and GPU would: ioctl parameter blocks read from the addresses passed,
GPU virtual addresses resolved through the VA space UVM was told about, pushbuffers read from memory when a doorbell
rings. Memory objects are memfds, so the driver's CPU mapping (an mmap of the device fd, anywhere it asks, MAP_FIXED
included) and the mock's own view share the same pages, as the GPU and CPU would. It runs PTX (found before the code
in the program image; it cannot run SASS).

Channel errors are reported the way RM reports them: status 0xffff and the Xid in the error notifier (hObjectError) of
every channel of the group, and an Xid line in the kernel log (`kmsg`, served on /dev/kmsg) in RM's format:
  NVRM: Xid (PCI:0000:01:00): 69, name=python3, Class Error: channel 0x00000001, Class 0000cbc0, Offset 000002a4, Data fe000000, ErrorCode 00000004
`log` is the mock's own record of what it refused and why.

Modules: device (MockNVGPU: the device files and the ioctl entry); the kernel-driver model: rm (RM escapes, objects,
controls, mmap), uvm (UVM ioctls: a VA space per fd, peer access); the GPU engines: gpfifo (doorbell, GPFIFO channels, pushbuffer methods,
semaphores, Xids), mmu (GPU VA translation, per GPU VA space), dma (the copy engine), compute (QMD launches through the PTX interpreter,
work in flight, hazards); state (objects both sides share). Memfd memory and the MMU fault type are in
drivers/mock/common.py, shared with the AMD mock.
"""
from baregrad.drivers.mock.nv.device import MockNVGPU
from baregrad.drivers.mock.nv.rm import arch_from_env
from baregrad.drivers.mock.nv.state import GPUError, RMStatus

__all__ = ["MockNVGPU", "GPUError", "RMStatus", "arch_from_env"]
