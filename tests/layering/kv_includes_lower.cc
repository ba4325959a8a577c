// Must build (ctest Layering.KvSeesLowerLayers): the control for the failing checks, showing the
// kv layer's include roots hold its own headers and those of every layer below it.
#include "attention/mask.h"
#include "ops/simd.h"
#include "platform/memory_info.h"
#include "tessera/aligned_buffer.h"
#include "tessera/attention.h"
#include "tessera/kv/kv_cache.h"
#include "tessera/linear.h"
#include "tessera/thread_pool.h"
