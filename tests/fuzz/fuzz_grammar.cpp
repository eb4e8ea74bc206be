// libFuzzer entry point for the grammar layer: any input must parse as GBNF (or as a JSON
// Schema converted to GBNF) or fail with an Error, never crash, hang or over-allocate; a
// grammar that parses is then walked by the matcher over the input's bytes. Built as a real
// fuzzer with -DPI_FUZZ=ON (clang), and always as `fuzz_grammar_replay`, which replays the
// checked-in corpus (tests/fuzz/corpus_grammar) in CI.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "grammar/gbnf.h"
#include "grammar/matcher.h"
#include "powerinfer/grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string gbnf(in);
  if (!in.empty() && in.front() == '{') {  // a JSON Schema
    auto g = pi::json_schema_to_grammar(in);
    if (!g.ok()) return 0;
    gbnf = *g;
  }
  auto rules = pi::grammar::parse_gbnf(gbnf);
  if (!rules.ok()) return 0;
  pi::grammar::Matcher m(std::make_shared<const pi::grammar::Rules>(std::move(*rules)));
  // Feed the input's own bytes, a few at a time, as a text to match.
  for (size_t i = 0; i + 2 <= size && i < 512; i += 2) {
    if (!m.check(in.substr(i, 2))) continue;
    (void)m.accept(in.substr(i, 2));
    (void)m.complete();
  }
  return 0;
}
