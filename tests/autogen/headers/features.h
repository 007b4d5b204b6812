/* Small header written for the generator tests: one of each construct it must handle. */
#ifndef FEATURES_H
#define FEATURES_H
#include <stdint.h>
#include <linux/ioctl.h>

#define BASE 0x10
#define DERIVED (BASE * 4 + 1)          /* a macro referring to a macro */
#define NEG (-5)
#define BIG 0xffffffffffffffffULL
#define SHIFTED (1u << 31)
#define STRING "not a number"
#define FIELD_A 31:16                    /* hi:lo data */
#define FIELD_B MW(95:64)                /* multi-word form */
#define FIELD_ALIAS FIELD_A
#define FIELD_IDX(i) MW((63+(i)*32):(32+(i)*32))   /* indexed multi-word field */
#define ADD(a, b) ((a) + (b))            /* integer arithmetic: becomes a Python function */
#define WRAP(x) ((x) << 30)              /* int arithmetic wraps at 32 bits in C */
#define WIDE(x) ((x##ULL) << 40)         /* token pasting: not translated, listed as skipped */
#define CALLS(a) (ADD(a, BASE) * 2)      /* calls another macro */
#define USES_FUNC ADD(DERIVED, 2)
#define FEAT_IOC_MAGIC 'F'
#define FEAT_IOC_GET _IOR(FEAT_IOC_MAGIC, 1, struct bits)
#define FEAT_IOC_SET _IOWR(FEAT_IOC_MAGIC, 2, struct outer)
#define FEAT_IOC_RESET _IO(FEAT_IOC_MAGIC, 3)
#define FEAT_IOC_PUT _IOW(FEAT_IOC_MAGIC, 4, uint64_t)

enum color { RED = -2, GREEN, BLUE = GREEN + 10, ALPHA = 1 << 20 };
typedef enum { SMALL_A = 1, SMALL_B = 2 } small_t;
enum wide { WIDE_MAX = 0x100000000LL };

struct bits {
  uint32_t a : 3;
  uint32_t b : 5;
  int32_t c : 7;                 /* signed */
  uint32_t : 0;                  /* zero width: the next one starts a new unit */
  uint8_t d : 2;
  uint16_t e : 12;               /* mixed storage types share units in GCC */
  uint64_t f : 40;
};

struct __attribute__((packed)) packed_s {
  uint8_t tag;
  uint32_t value;
  uint16_t arr[3];
  uint64_t wide;
};

struct aligned_s {
  uint8_t x;
  uint32_t y __attribute__((aligned(16)));
  uint8_t z;
};

union number {
  uint64_t u;
  double d;
  uint8_t bytes[8];
  struct { uint32_t lo, hi; } parts;
};

struct outer {
  uint32_t kind;
  union {                        /* anonymous union, holding an anonymous struct */
    struct { uint16_t w, h; };
    uint64_t raw;
  };
  struct inner { uint8_t a; uint64_t b; } named;   /* nested named struct */
  struct inner many[2][3];
  union number num;
  enum color col;
  small_t small;
  char name[12];
  void *ptr;
  struct outer *next;            /* self reference */
  const char *label;
  uint32_t tail[];               /* flexible array */
};

typedef struct { struct packed_s p; uint8_t after; } wrap_t, *wrap_p;
typedef uint32_t u32_t;
typedef u32_t chain_t;           /* typedef chain */

#pragma pack(push, 2)
struct pragma_packed { uint8_t a; uint64_t b; uint32_t c; };
#pragma pack(pop)

int feat_sum(int a, const char *fmt, ...);
int feat_unlisted(void);
extern int feat_global;
static inline int feat_inline(int x) { return x + 1; }
#endif
