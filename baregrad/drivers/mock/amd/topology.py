"""The sysfs topology amdkfd publishes (/sys/devices/virtual/kfd/kfd/topology), modelled on real cards' files: a CPU
node and one node per GPU with the properties of its target."""
from __future__ import annotations
from baregrad.drivers.amd.topology import queue_sizes, Target

def _gpu_props(t: Target, minor: int, index: int) -> dict[str, int]:
  if t.name == "gfx1100":   # Radeon RX 7900 XTX (Navi 31): 96 CUs in 6 SEs x 2 SAs x 8 CUs, dual-issue wave32
    p = dict(cpu_cores_count=0, simd_count=192, mem_banks_count=1, caches_count=206, io_links_count=1, p2p_links_count=0,
             cpu_core_id_base=0, simd_id_base=0x80001000 + 0x10 * index, max_waves_per_simd=16, lds_size_in_kb=64, gds_size_in_kb=0,
             num_gws=64, wave_front_size=32, array_count=12, simd_arrays_per_engine=2, cu_per_simd_array=8, simd_per_cu=2,
             max_slots_scratch_cu=32, gfx_target_version=110000, vendor_id=0x1002, device_id=0x744c, location_id=0x300 + 0x100 * index,
             domain=0, drm_render_minor=minor, hive_id=0, num_sdma_engines=2, num_sdma_xgmi_engines=0, num_sdma_queues_per_engine=6,
             num_cp_queues=8, max_engine_clk_fcompute=2482, local_mem_size=0, fw_version=2200, capability=0x28032280, debug_prop=0x5d7,
             sdma_fw_version=21, unique_id=0x1234abcd0000 + index, num_xcc=1, max_engine_clk_ccompute=3600)
  else:                     # Instinct MI300X (Aqua Vanjaram): 8 XCCs x 38 CUs, wave64
    p = dict(cpu_cores_count=0, simd_count=1216, mem_banks_count=1, caches_count=470, io_links_count=1, p2p_links_count=0,
             cpu_core_id_base=0, simd_id_base=0x80001000 + 0x10 * index, max_waves_per_simd=8, lds_size_in_kb=64, gds_size_in_kb=0,
             num_gws=0, wave_front_size=64, array_count=32, simd_arrays_per_engine=1, cu_per_simd_array=10, simd_per_cu=4,
             max_slots_scratch_cu=32, gfx_target_version=90402, vendor_id=0x1002, device_id=0x74a1, location_id=0x1100 + 0x100 * index,
             domain=0, drm_render_minor=minor, hive_id=0, num_sdma_engines=2, num_sdma_xgmi_engines=14, num_sdma_queues_per_engine=8,
             num_cp_queues=24, max_engine_clk_fcompute=2100, local_mem_size=0, fw_version=177, capability=0x2bb2a680, debug_prop=0x527,
             sdma_fw_version=19, unique_id=0x5678ef000000 + index, num_xcc=8, max_engine_clk_ccompute=3700)
  qs = queue_sizes(p)  # what a 6.12 kernel prints (kfd_topology.c: node_show; kfd_queue.c: kfd_queue_ctx_save_restore_size)
  p["cwsr_size"], p["ctl_stack_size"] = qs.cwsr_size, qs.ctl_stack_size
  return p

_CPU_PROPS = dict(cpu_cores_count=16, simd_count=0, mem_banks_count=1, caches_count=3, io_links_count=1, p2p_links_count=0,
                  cpu_core_id_base=0, simd_id_base=0, max_waves_per_simd=0, lds_size_in_kb=0, gds_size_in_kb=0, num_gws=0,
                  wave_front_size=0, array_count=0, simd_arrays_per_engine=0, cu_per_simd_array=0, simd_per_cu=0, max_slots_scratch_cu=0,
                  gfx_target_version=0, vendor_id=0, device_id=0, location_id=0, domain=0, drm_render_minor=0, hive_id=0,
                  num_sdma_engines=0, num_sdma_xgmi_engines=0, num_sdma_queues_per_engine=0, num_cp_queues=0, cwsr_size=0,
                  ctl_stack_size=0, max_engine_clk_ccompute=3700)

def _props_text(p: dict[str, int]) -> bytes: return "".join(f"{k} {v}\n" for k, v in p.items()).encode()
