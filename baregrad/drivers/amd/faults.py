"""What amdkfd tells a process when its GPU work goes wrong, in words, and the exceptions the AMD driver raises.

KFD reports two kinds of trouble to userspace through the events of AMDKFD_IOC_CREATE_EVENT (Linux 6.12, kfd_events.c):
- KFD_EVENT_TYPE_MEMORY: a GPU VM fault. kfd_signal_vm_fault_event copies a kfd_hsa_memory_exception_data into every
  memory event of the process (gpu_id, the faulting page's address, failure bits NotPresent/ReadOnly/NoExecute/imprecise,
  ErrorType for RAS errors); on SOC15 the data comes from the interrupt handler (kfd_int_process_v11.c /
  kfd_int_process_v9.c event_interrupt_wq: NotPresent from prot_valid, ReadOnly from prot_write) through
  kfd_set_dbg_ev_from_interrupt, which first evicts every queue of the process on that GPU (kfd_dqm_evict_pasid).
- KFD_EVENT_TYPE_HW_EXCEPTION: a queue or GPU reset. kfd_signal_reset_event fills a kfd_hsa_hw_exception_data (gpu_id,
  memory_lost 1, reset_cause GPU_HANG or ECC; reset_type left 0) for a whole-GPU reset (kgd2kfd_pre_reset) and for a
  queue reset (kfd_device_queue_manager.c reset_queues_on_hws_hang, only to the process whose queue was reset).
Neither names the queue or the packet: the driver names them from its own rings (what each queue was at).

What is left usable differs, and the driver cannot tell a queue reset from a whole-GPU reset by the event (reset_type
is 0 in both): after a VM fault the process's queues on that GPU stay evicted and new ones are created evicted
(kfd_device_queue_manager.c create_queue_cpsch: is_evicted = !!qpd->evicted); after a whole-GPU reset every process stays
evicted (kfd_device.c kgd2kfd_post_reset: "KFD won't be able to resume existing process for now"); after a queue reset
the other and new queues run. So the driver recreates its queues and then checks that they run (a probe signal on each
engine): a device that passes is recovered, one that does not is lost for this process."""
from __future__ import annotations
from typing import Any
from baregrad.hcq import HCQTimeout
from baregrad.ctypes_autogen import kfd

MEM_ERR = {kfd.KFD_MEM_ERR_NO_RAS: "", kfd.KFD_MEM_ERR_SRAM_ECC: "SRAM ECC error", kfd.KFD_MEM_ERR_POISON_CONSUMED: "poison consumed",
           kfd.KFD_MEM_ERR_GPU_HANG: "GPU hang"}
RESET_CAUSE = {kfd.KFD_HW_EXCEPTION_GPU_HANG: "GPU_HANG", kfd.KFD_HW_EXCEPTION_ECC: "ECC"}
RESET_TYPE = {kfd.KFD_HW_EXCEPTION_WHOLE_GPU_RESET: "WHOLE_GPU_RESET", kfd.KFD_HW_EXCEPTION_PER_ENGINE_RESET: "PER_ENGINE_RESET"}

def describe_memory_exception(m: Any) -> str:
  """A kfd_hsa_memory_exception_data in words."""
  f = m.failure
  bits = [n for n, on in (("not present", f.NotPresent), ("read-only", f.ReadOnly), ("no-execute", f.NoExecute)) if on]
  if f.imprecise: bits.append("imprecise")
  err = MEM_ERR.get(m.ErrorType, f"ErrorType {m.ErrorType}")
  return (f"GPU VM fault at address {m.va:#x} ({', '.join(bits) or 'no failure bits'}) on gpu_id {m.gpu_id:#x}"
          + (f", {err}" if err else ""))

def describe_hw_exception(h: Any) -> str:
  """A kfd_hsa_hw_exception_data in words."""
  return (f"GPU hang/reset on gpu_id {h.gpu_id:#x}: reset_cause {RESET_CAUSE.get(h.reset_cause, h.reset_cause)}, reset_type "
          f"{RESET_TYPE.get(h.reset_type, h.reset_type)}, memory_lost {h.memory_lost}")

class AMDFault(RuntimeError):
  """KFD reported a VM fault (memory event) or a queue/GPU reset (hardware-exception event). The message names it, what
  each queue was at, and what the device did about it: recovered (its queues destroyed and created again, its buffers
  kept, the work in flight lost) or lost (AMDDeviceLost is raised from then on)."""
  def __init__(self, message: str, recovered: bool = False) -> None:
    super().__init__(message)
    self.recovered = recovered

class AMDDeviceLost(AMDFault):
  """The device cannot run work for this process any more (KFD keeps its queues evicted); every later submission or
  wait raises this at once, naming the original cause."""

class AMDQueueTimeout(HCQTimeout):
  """The device's own work (its timeline) did not finish in time: the message names the queue and the packet or
  dispatch it was at; the device then recovered (or was found lost: `recovered` says which)."""
  def __init__(self, message: str, recovered: bool = False) -> None:
    super().__init__(message)
    self.recovered = recovered
