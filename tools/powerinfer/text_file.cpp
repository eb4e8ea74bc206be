#include "text_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace pi::cli {

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return err("%s: cannot read the text file: %s", path.c_str(), std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace pi::cli
