// The C surface of libnghttp2 that the Swift `APNsNGHTTP2` module uses.
// Everything here is nghttp2's own API; no logic lives in this target.
#ifndef CNGHTTP2_SHIM_H
#define CNGHTTP2_SHIM_H

#include <nghttp2/nghttp2.h>

#endif
