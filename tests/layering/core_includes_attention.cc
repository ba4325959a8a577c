// Must not build (ctest Layering.CoreCannotIncludeAttentionApi): the public headers are staged per
// layer too, so the core layer does not see the attention API above it.
#include "tessera/attention.h"
