// Must not build (ctest Layering.KvCannotIncludeModel): compiled with the kv layer's include
// roots, where model/ is not staged, as a kv source reaching up into model would be.
#include "model/gemma_model.h"
