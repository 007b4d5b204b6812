/* Two declarations that would get the same Python name. */
typedef int struct_a;
struct a { struct_a x; };
