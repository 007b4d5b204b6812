/* A register header in miniature: many enums, of which a binding asks for one (tools/autogen CModule.enums). */
typedef enum EVENT_KIND {
EV_NONE = 0x00000000,
EV_FLUSH = 0x00000014,
EV_LAST = 1 << 5,
} EVENT_KIND;

typedef enum OTHER_KIND {
OTHER_A = 0x00000001,
} OTHER_KIND;

enum untouched { UNTOUCHED = 7 };
