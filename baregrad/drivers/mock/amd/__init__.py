"""MockAMDGPU: the kernel interface of amdkfd and amdgpu as Linux 6.12 offers them (/dev/kfd ioctls and mmaps, the
render node's BO mmaps, the sysfs topology), and AMD GPUs behind it: page tables, doorbells, a command processor that
reads the AQL rings (and the PM4 indirect buffers they point at) and an SDMA engine, both decoding every packet.

A conformance model, not a friend: each check below cites the kernel function that makes it (amdkfd/ and amdgpu/ of
Linux 6.12, `linux-source-6.12`) and answers with the errno that function returns; tests/drivers/amd/test_amd_mock.py breaks each
rule once. What the hardware does with a mistake is modelled with what the kernel reports for it: a GPU access to an
unmapped address is a VM fault (the amdgpu "page fault" dmesg lines, the process's queues evicted, KFD memory events
signalled with the faulting page, kfd_debug.c: kfd_set_dbg_ev_from_interrupt); a WAIT that is never satisfied leaves
its queue stuck (a hang, which only the host's timeout ends); an opcode the CP does not know stops the queue
(CP_BAD_OPCODE, kfd_int_process_v11.c).

After a fault, what the kernel leaves usable (Linux 6.12): a VM fault evicts every queue of the process on that GPU for
good (kfd_device_queue_manager.c: evict_process_queues_cpsch counts qpd->evicted up and nothing counts it down again for a
VM fault; create_queue_cpsch creates every later queue with is_evicted = !!qpd->evicted, and QUEUE_IS_ACTIVE (kfd_priv.h)
keeps an evicted queue off the hardware): so queues created after it never run. A queue reset for a hang or a bad packet
takes that queue only (reset_queues_on_hws_hang -> set_queue_as_reset; kfd_dqm_suspend_bad_queue_mes): queues created
after it run. A kernel that never ends is not a fault to the kernel: its queue stays busy until the process destroys it,
and AMDKFD_IOC_DESTROY_QUEUE preempts its waves (destroy_queue_cpsch -> execute_queues_cpsch -> unmap_queues_cpsch, the
waves saved by CWSR and dropped with the queue).

Time slices: the engines run inside the doorbell write (and every later one) for at most `slice_s` seconds of
interpreter time; a dispatch still running then goes on at the next doorbell, so a kernel that loops forever keeps its
queue busy (read_dispatch_id stops before the next packet with the barrier bit) without holding the host.

The mock knows only what the kernel and the GPU would: ioctl arguments read from the addresses passed (copied in and
out with the kernel's own struct sizes, kfd_chardev.c: kfd_ioctl), GPU virtual addresses resolved through the page
tables MAP_MEMORY_TO_GPU built, rings and queue pointers read from GPU memory when a doorbell is written. Memory
objects are memfds (or, for userptr, the process's own pages), so the driver's CPU mappings and the mock's view share
pages as host and GPU would.

Concurrency: AQL packets without the barrier bit are not ordered against the dispatches before them (HSA PSA 1.2,
2.9.1). The mock keeps such dispatches "in flight" and runs them together at the next ordering point (a packet with the
barrier bit, an end-of-pipe RELEASE_MEM, the queue going idle or blocking), interleaved instruction step by instruction
step (each step a batch of waves at one PC), the most recently launched first, as the NV mock interleaves launches; their
memory accesses are recorded: a read or write of bytes another dispatch of the group wrote (or a write of bytes it
read) is a hazard, logged in `hazards` and the dmesg-like `log` (the H100 showed what an unordered consumer reads:
stale data, docs/hw/h100-580.159.04-findings.md finding 6b, launches in one submission overlap). Scratch is left out:
every wave has its own slot, and concurrent dispatches get disjoint shares of the queue's slots.

Scratch: a dispatch whose kernel descriptor enables the private segment gets the backing memory, slot size and slot
count the CP derives from the queue's amd_queue_t (_dispatch_scratch: sources there and in drivers/amd/scratch.py);
too little makes the CP request more through queue_inactive_signal and wait, as ROCr expects. A wave's scratch accesses
outside its slot are reported as VM faults (rdna3/machine.py _scratch_addrs: stricter than the hardware, which would
reach a neighbouring slot).

Multi-XCC (gfx942, 8 XCCs): a PM4 IB in an AQL queue runs on every XCC, in lockstep, honouring PRED_EXEC; a memory write
several XCCs make is logged in `xcc_writes` (drivers/amd/queues.py has the sources). AQL packets, barriers and
completion signals are modelled agent-wide (one CP): that the firmware synchronizes the XCCs at a barrier bit is the
unverified assumption queues.py states.

Kernels run on the RDNA3 interpreter (baregrad/drivers/mock/rdna3) for gfx1100; a gfx942 (CDNA3, wave64) dispatch is
decoded and validated, then the mock stops that queue with a plain statement that it cannot execute wave64 CDNA
code (MockAMDGPU(skip_unexecutable=True) lets it complete without running the kernel, to test the queue plumbing).

MOCKGPU_AMD_ARCH=gfx1100|gfx942 picks the GPU (default gfx1100); MOCKGPU_COUNT=n makes n GPUs behind the one amdkfd
(the driver's devices of one process share it, as they share the kernel's kfd_process). Peer access: with `p2p` (default)
and a large BAR the GPUs reach each other's VRAM (amdgpu_device_is_peer_accessible), the topology lists p2p links and
MAP_MEMORY_TO_GPU maps another GPU's VRAM; otherwise that map is -EINVAL (kfd_mem_attach).
Modules: device (MockAMDGPU: the files and the ioctl entry with its table); amdkfd's model: kfd (process and device
ioctls, mmaps), kfd_memory (BOs and GPU mappings), kfd_queues (queue creation and destruction), kfd_events (events and
interrupts), topology (sysfs); the GPU engines: vm (page tables, GPU memory access, VM faults), cp (the command
processor: AQL and PM4), sdma (the SDMA engine); state (what both sides share). Memfd memory and the fault type are in
drivers/mock/common.py, shared with the NV mock.
"""
from baregrad.drivers.mock.amd.device import MockAMDGPU
from baregrad.drivers.mock.amd.state import DOORBELL_SLICE, KFD_MMAP_GPU_ID_SHIFT, KFD_MMAP_TYPE_DOORBELL

__all__ = ["MockAMDGPU", "DOORBELL_SLICE", "KFD_MMAP_GPU_ID_SHIFT", "KFD_MMAP_TYPE_DOORBELL"]
