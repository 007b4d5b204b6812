/* A GCC vector type: its layout cannot be described with ctypes members. */
#include <stdint.h>
typedef int32_t v4si __attribute__((vector_size(16)));
struct fine { uint32_t a; };
struct has_vector { uint8_t tag; v4si v; };
