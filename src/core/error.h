// Error handling for library code: the Result/Status/Error types and PI_TRY live in the public
// header include/powerinfer/error.h so that the public API is self-contained; library code
// includes this header.
#pragma once

#include "powerinfer/error.h"
