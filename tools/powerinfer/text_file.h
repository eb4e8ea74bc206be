// Reads a whole text file (-f FILE of perplexity and profile) into memory.
#pragma once

#include <string>

#include "core/error.h"

namespace pi::cli {

// The file's bytes; the error names the file and the reason.
Result<std::string> read_text_file(const std::string& path);

}  // namespace pi::cli
