/* baregrad: AQL packets and the AMDHSA kernel descriptor, written for baregrad from the
 * documented layouts (no vendor header is copied):
 *  - HSA Platform System Architecture Specification 1.2, section 2.9 "Architected Queuing
 *    Language" (kernel dispatch packet 2.9.6, barrier-AND packet 2.9.7, packet header 2.9.5);
 *  - LLVM "User Guide for AMDGPU Backend" (AMDGPUUsage), "Kernel Descriptor" table and the
 *    compute_pgm_rsrc1/2/3 and kernel_code_properties tables (code object v3+).
 * The generator checks every offset below against the C compiler; the tests compare
 * ctypes with it through cffi. Bit ranges are written hi:lo and become BitField data. */
#ifndef BAREGRAD_AMD_HSA_H
#define BAREGRAD_AMD_HSA_H
#include <stdint.h>

/* packet header (16 bits) */
#define HSA_PACKET_HEADER_TYPE 7:0
#define HSA_PACKET_HEADER_BARRIER 8:8
#define HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE 10:9
#define HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE 12:11

enum hsa_packet_type {
  HSA_PACKET_TYPE_VENDOR_SPECIFIC = 0,
  HSA_PACKET_TYPE_INVALID = 1,
  HSA_PACKET_TYPE_KERNEL_DISPATCH = 2,
  HSA_PACKET_TYPE_BARRIER_AND = 3,
  HSA_PACKET_TYPE_AGENT_DISPATCH = 4,
  HSA_PACKET_TYPE_BARRIER_OR = 5,
};

enum hsa_fence_scope {
  HSA_FENCE_SCOPE_NONE = 0,
  HSA_FENCE_SCOPE_AGENT = 1,
  HSA_FENCE_SCOPE_SYSTEM = 2,
};

/* setup field of the kernel dispatch packet */
#define HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS 1:0

typedef struct hsa_signal_s { uint64_t handle; } hsa_signal_t;

/* 64 bytes, 64-byte aligned in the queue ring */
typedef struct hsa_kernel_dispatch_packet_s {
  uint16_t header;                 /* 0 */
  uint16_t setup;                  /* 2 */
  uint16_t workgroup_size_x;       /* 4 */
  uint16_t workgroup_size_y;       /* 6 */
  uint16_t workgroup_size_z;       /* 8 */
  uint16_t reserved0;              /* 10 */
  uint32_t grid_size_x;            /* 12 */
  uint32_t grid_size_y;            /* 16 */
  uint32_t grid_size_z;            /* 20 */
  uint32_t private_segment_size;   /* 24 */
  uint32_t group_segment_size;     /* 28 */
  uint64_t kernel_object;          /* 32: address of the kernel descriptor */
  uint64_t kernarg_address;        /* 40: a pointer in the spec; 64-bit on every HSA agent */
  uint64_t reserved2;              /* 48 */
  hsa_signal_t completion_signal;  /* 56 */
} hsa_kernel_dispatch_packet_t;

typedef struct hsa_barrier_and_packet_s {
  uint16_t header;                 /* 0 */
  uint16_t reserved0;              /* 2 */
  uint32_t reserved1;              /* 4 */
  hsa_signal_t dep_signal[5];      /* 8 */
  uint64_t reserved2;              /* 48 */
  hsa_signal_t completion_signal;  /* 56 */
} hsa_barrier_and_packet_t;

/* AMDHSA kernel descriptor, 64 bytes, 64-byte aligned (AMDGPUUsage "Kernel Descriptor") */
typedef struct amdhsa_kernel_descriptor_s {
  uint32_t group_segment_fixed_size;       /* 0 */
  uint32_t private_segment_fixed_size;     /* 4 */
  uint32_t kernarg_size;                   /* 8 */
  uint8_t reserved0[4];                    /* 12 */
  int64_t kernel_code_entry_byte_offset;   /* 16: from the descriptor to the entry */
  uint8_t reserved1[20];                   /* 24 */
  uint32_t compute_pgm_rsrc3;              /* 44: GFX90A, GFX942, GFX10+ */
  uint32_t compute_pgm_rsrc1;              /* 48 */
  uint32_t compute_pgm_rsrc2;              /* 52 */
  uint16_t kernel_code_properties;         /* 56 */
  uint16_t kernarg_preload;                /* 58: GFX90A, GFX942 */
  uint8_t reserved3[4];                    /* 60 */
} amdhsa_kernel_descriptor_t;

/* compute_pgm_rsrc1 */
#define AMDHSA_RSRC1_GRANULATED_WORKITEM_VGPR_COUNT 5:0
#define AMDHSA_RSRC1_GRANULATED_WAVEFRONT_SGPR_COUNT 9:6
#define AMDHSA_RSRC1_PRIORITY 11:10
#define AMDHSA_RSRC1_FLOAT_ROUND_MODE_32 13:12
#define AMDHSA_RSRC1_FLOAT_ROUND_MODE_16_64 15:14
#define AMDHSA_RSRC1_FLOAT_DENORM_MODE_32 17:16
#define AMDHSA_RSRC1_FLOAT_DENORM_MODE_16_64 19:18
#define AMDHSA_RSRC1_PRIV 20:20
#define AMDHSA_RSRC1_ENABLE_DX10_CLAMP 21:21
#define AMDHSA_RSRC1_DEBUG_MODE 22:22
#define AMDHSA_RSRC1_ENABLE_IEEE_MODE 23:23
#define AMDHSA_RSRC1_BULKY 24:24
#define AMDHSA_RSRC1_CDBG_USER 25:25
#define AMDHSA_RSRC1_FP16_OVFL 26:26
#define AMDHSA_RSRC1_WGP_MODE 29:29
#define AMDHSA_RSRC1_MEM_ORDERED 30:30
#define AMDHSA_RSRC1_FWD_PROGRESS 31:31

/* compute_pgm_rsrc2 */
#define AMDHSA_RSRC2_ENABLE_PRIVATE_SEGMENT 0:0
#define AMDHSA_RSRC2_USER_SGPR_COUNT 5:1
#define AMDHSA_RSRC2_ENABLE_TRAP_HANDLER 6:6
#define AMDHSA_RSRC2_ENABLE_SGPR_WORKGROUP_ID_X 7:7
#define AMDHSA_RSRC2_ENABLE_SGPR_WORKGROUP_ID_Y 8:8
#define AMDHSA_RSRC2_ENABLE_SGPR_WORKGROUP_ID_Z 9:9
#define AMDHSA_RSRC2_ENABLE_SGPR_WORKGROUP_INFO 10:10
#define AMDHSA_RSRC2_ENABLE_VGPR_WORKITEM_ID 12:11
#define AMDHSA_RSRC2_ENABLE_EXCEPTION_ADDRESS_WATCH 13:13
#define AMDHSA_RSRC2_ENABLE_EXCEPTION_MEMORY 14:14
#define AMDHSA_RSRC2_GRANULATED_LDS_SIZE 23:15
#define AMDHSA_RSRC2_ENABLE_EXCEPTION_IEEE_754_FP_INVALID_OPERATION 24:24
#define AMDHSA_RSRC2_ENABLE_EXCEPTION_FP_DENORMAL_SOURCE 25:25
#define AMDHSA_RSRC2_ENABLE_EXCEPTION_IEEE_754_FP_DIVISION_BY_ZERO 26:26
#define AMDHSA_RSRC2_ENABLE_EXCEPTION_IEEE_754_FP_OVERFLOW 27:27
#define AMDHSA_RSRC2_ENABLE_EXCEPTION_IEEE_754_FP_UNDERFLOW 28:28
#define AMDHSA_RSRC2_ENABLE_EXCEPTION_IEEE_754_FP_INEXACT 29:29
#define AMDHSA_RSRC2_ENABLE_EXCEPTION_INT_DIVIDE_BY_ZERO 30:30

/* compute_pgm_rsrc3: the meaning depends on the target */
#define AMDHSA_RSRC3_GFX90A_ACCUM_OFFSET 5:0
#define AMDHSA_RSRC3_GFX90A_TG_SPLIT 16:16
#define AMDHSA_RSRC3_GFX10_SHARED_VGPR_COUNT 3:0
#define AMDHSA_RSRC3_GFX11_INST_PREF_SIZE 9:4
#define AMDHSA_RSRC3_GFX11_TRAP_ON_START 10:10
#define AMDHSA_RSRC3_GFX11_TRAP_ON_END 11:11
#define AMDHSA_RSRC3_GFX11_IMAGE_OP 31:31

/* kernel_code_properties */
#define AMDHSA_KCP_ENABLE_SGPR_PRIVATE_SEGMENT_BUFFER 0:0
#define AMDHSA_KCP_ENABLE_SGPR_DISPATCH_PTR 1:1
#define AMDHSA_KCP_ENABLE_SGPR_QUEUE_PTR 2:2
#define AMDHSA_KCP_ENABLE_SGPR_KERNARG_SEGMENT_PTR 3:3
#define AMDHSA_KCP_ENABLE_SGPR_DISPATCH_ID 4:4
#define AMDHSA_KCP_ENABLE_SGPR_FLAT_SCRATCH_INIT 5:5
#define AMDHSA_KCP_ENABLE_SGPR_PRIVATE_SEGMENT_SIZE 6:6
#define AMDHSA_KCP_ENABLE_WAVEFRONT_SIZE32 10:10
#define AMDHSA_KCP_USES_DYNAMIC_STACK 11:11

/* kernarg_preload */
#define AMDHSA_KERNARG_PRELOAD_SPEC_LENGTH 6:0
#define AMDHSA_KERNARG_PRELOAD_SPEC_OFFSET 15:7

#define AMDHSA_KERNEL_DESCRIPTOR_SIZE 64
#define AQL_PACKET_SIZE 64

#endif
