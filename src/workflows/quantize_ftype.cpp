#include "workflows/quantize_ftype.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace pi::workflows {
namespace {

struct Ftype {
  int id;
  const char* name;     // our name, lower case
  bool supported_here;  // false: llama.cpp's type with no counterpart here
};

// llama.cpp's llama_ftype values (ids 4, 5 and 6 were retired there).
constexpr Ftype kFtypes[] = {
    {0, "f32", true},       {1, "f16", true},      {2, "q4_0", true},     {3, "q4_1", true},
    {7, "q8_0", true},      {8, "q5_0", true},     {9, "q5_1", true},     {10, "q2_k", true},
    {11, "q3_k_s", true},   {12, "q3_k_m", true},  {13, "q3_k_l", true},  {14, "q4_k_s", true},
    {15, "q4_k_m", true},   {16, "q5_k_s", true},  {17, "q5_k_m", true},  {18, "q6_k", true},
    {19, "iq2_xxs", false}, {20, "iq2_xs", false}, {21, "q2_k_s", true},  {22, "iq3_xs", false},
    {23, "iq3_xxs", false}, {24, "iq1_s", false},  {25, "iq4_nl", false}, {26, "iq3_s", false},
    {27, "iq3_m", false},   {28, "iq2_s", false},  {29, "iq2_m", false},  {30, "iq4_xs", false},
    {31, "iq1_m", false},   {32, "bf16", true},    {36, "tq1_0", false},  {37, "tq2_0", false},
    {38, "mxfp4_moe", true},
};

}  // namespace

Result<std::string> quantize_type_name(const std::string& arg) {
  const bool numeric =
      !arg.empty() && arg.size() <= 3 &&
      std::all_of(arg.begin(), arg.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  if (!numeric) {
    std::string lower = arg;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return lower;
  }
  const int id = std::atoi(arg.c_str());
  for (const Ftype& f : kFtypes) {
    if (f.id != id) continue;
    if (!f.supported_here)
      return err("quantize: type id %d is llama.cpp's %s, a format this engine does not have", id,
                 f.name);
    return std::string(f.name);
  }
  return err("quantize: %s is not one of llama.cpp's file-type ids (e.g. 2 = q4_0, 7 = q8_0, "
             "15 = q4_k_m)", arg.c_str());
}

}  // namespace pi::workflows
