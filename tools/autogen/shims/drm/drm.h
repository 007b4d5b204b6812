/* baregrad shim: Debian's linux-libc-dev leaves out the drm/ uapi headers (libdrm-dev ships
 * them elsewhere). linux/kfd_ioctl.h includes <drm/drm.h> only for the __u32/__u64 types and
 * the _IOWR family, which these two headers provide. */
#include <linux/types.h>
#include <linux/ioctl.h>
