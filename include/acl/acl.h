/* acl.h: the AscendCL umbrella header. */
#ifndef ACL_ACL_H_
#define ACL_ACL_H_
#include "acl_base.h"
#include "acl_rt.h"
#endif
