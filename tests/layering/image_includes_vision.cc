// Must not build (ctest Layering.ImageCannotIncludeVision): compiled with the image layer's include
// roots, where vision/ is not staged, as a decoder or processor reaching up into the encoders would be.
#include "vision/vision_encoder.h"
