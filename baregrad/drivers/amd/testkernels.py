"""LLVM IR kernels (amdgcn) that need a launch's scratch set up right: the AMD counterparts of nv/testkernels.py's local
memory kernels. Used by tests/drivers/amd/test_amd_scratch.py (on the mock, or a GPU with DEV=AMD); LLVM compiles them for gfx1100
and gfx942, the mock runs the gfx1100 code.

  local_array(out, k)   a 1 KiB private array per work-item (256 x i32), filled with i * gid, read back at (k + lid) % 256
                        directly (SCRATCH_LOAD) and through a generic pointer (FLAT in the private aperture):
                        out[gid] = 2 * ((k + lid) % 256) * gid
  scratchy(out, i)      a 16-word private array: 68 bytes of private segment; out[0] = 7 (stored at index i, read back)
  spill(out, inp)       40 values loaded with volatile loads and combined in reverse order under "amdgpu-num-vgpr"="16":
                        more live values than VGPRs, so LLVM spills them to scratch:
                        h = 0; for i in 39..0: h = h * 31 ^ (inp[gid + i] + gid); out[gid] = h
Both take their work-group size from the dispatch (64 work-items: workgroup id * 64 + work-item id)."""
from __future__ import annotations

_HEAD = """declare i32 @llvm.amdgcn.workgroup.id.x()
declare i32 @llvm.amdgcn.workitem.id.x()
"""

LOCAL_ARRAY = _HEAD + """
define amdgpu_kernel void @local_array(ptr addrspace(1) %out, i32 %k) #0 {
entry:
  %arr = alloca [256 x i32], align 4, addrspace(5)
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %lid = call i32 @llvm.amdgcn.workitem.id.x()
  %base = shl i32 %wg, 6
  %gid = add i32 %base, %lid
  br label %fill
fill:
  %i = phi i32 [ 0, %entry ], [ %i1, %fill ]
  %p = getelementptr [256 x i32], ptr addrspace(5) %arr, i32 0, i32 %i
  %v = mul i32 %i, %gid
  store volatile i32 %v, ptr addrspace(5) %p, align 4
  %i1 = add i32 %i, 1
  %more = icmp ult i32 %i1, 256
  br i1 %more, label %fill, label %done
done:
  %j0 = add i32 %k, %lid
  %j = and i32 %j0, 255
  %q = getelementptr [256 x i32], ptr addrspace(5) %arr, i32 0, i32 %j
  %x = load volatile i32, ptr addrspace(5) %q, align 4
  %g = addrspacecast ptr addrspace(5) %q to ptr
  %y = load volatile i32, ptr %g, align 4
  %s = add i32 %x, %y
  %o = getelementptr i32, ptr addrspace(1) %out, i32 %gid
  store i32 %s, ptr addrspace(1) %o, align 4
  ret void
}
attributes #0 = { nounwind "amdgpu-flat-work-group-size"="64,64" }
"""

SCRATCHY = """
define amdgpu_kernel void @scratchy(ptr addrspace(1) %out, i32 %i) #0 {
  %a = alloca [16 x i32], align 4, addrspace(5)
  %p = getelementptr [16 x i32], ptr addrspace(5) %a, i32 0, i32 %i
  store volatile i32 7, ptr addrspace(5) %p
  %v = load volatile i32, ptr addrspace(5) %p
  store i32 %v, ptr addrspace(1) %out
  ret void
}
attributes #0 = { nounwind "amdgpu-flat-work-group-size"="32,32" }
"""

def spill_ll(n: int = 40, vgprs: int = 16) -> str:
  """`spill`: n values live at once under a VGPR limit of `vgprs`: LLVM spills to scratch."""
  body = []
  for i in range(n):
    body += [f"  %a{i} = getelementptr i32, ptr addrspace(1) %src, i32 {i}", f"  %l{i} = load volatile i32, ptr addrspace(1) %a{i}, align 4",
             f"  %v{i} = add i32 %l{i}, %gid"]
  h = "0"
  for i in reversed(range(n)):
    body += [f"  %m{i} = mul i32 {h}, 31", f"  %h{i} = xor i32 %m{i}, %v{i}"]
    h = f"%h{i}"
  return (_HEAD + "\ndefine amdgpu_kernel void @spill(ptr addrspace(1) %out, ptr addrspace(1) %inp) #0 {\n"
          "  %wg = call i32 @llvm.amdgcn.workgroup.id.x()\n  %lid = call i32 @llvm.amdgcn.workitem.id.x()\n"
          "  %base = shl i32 %wg, 6\n  %gid = add i32 %base, %lid\n  %src = getelementptr i32, ptr addrspace(1) %inp, i32 %gid\n"
          + "\n".join(body) + f"\n  %o = getelementptr i32, ptr addrspace(1) %out, i32 %gid\n  store i32 {h}, ptr addrspace(1) %o, align 4\n"
          "  ret void\n}\n"
          f'attributes #0 = {{ nounwind "amdgpu-flat-work-group-size"="64,64" "amdgpu-num-vgpr"="{vgprs}" }}\n')

KERNELS = LOCAL_ARRAY

def local_array_expected(k: int, n: int) -> list[int]:
  """What local_array writes for n work-items (64 per workgroup), as uint32."""
  return [(2 * ((k + g % 64) % 256) * g) & 0xFFFFFFFF for g in range(n)]

def spill_expected(inp: list[int], n: int, count: int = 40) -> list[int]:
  out = []
  for g in range(n):
    h = 0
    for i in reversed(range(count)): h = ((h * 31) ^ ((inp[g + i] + g) & 0xFFFFFFFF)) & 0xFFFFFFFF
    out.append(h)
  return out
