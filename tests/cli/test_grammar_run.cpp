// `powerinfer run` with --grammar, --grammar-file, --json-schema, --json-schema-file on the
// bundled model: the output is a sentence of the grammar, generation stops when it is
// complete, and bad grammars, schemas and files are one-line errors with exit 1 before any
// model is loaded. (tests/server/test_server_grammar.py validates schema output with the
// jsonschema package, for 100 seeds, from run and the server.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "cli/run_command.h"
#include "grammar/matcher.h"
#include "powerinfer/grammar.h"

namespace {

using pi::testing::run_command;

const std::string kRun = std::string(PI_BIN_DIR) + "/powerinfer run -p 'And God said' -t 1 "
                         "--no-display-prompt ";

// stdout alone (the generated text, without the newline run ends it with); stderr is the log.
std::string text_of(const std::string& args, int* code = nullptr) {
  auto r = run_command("{ " + kRun + args + " 2>/dev/null; }");
  if (code != nullptr) *code = r.exit_code;
  if (!r.output.empty() && r.output.back() == '\n') r.output.pop_back();  // run ends the line
  return r.output;
}

bool sentence(const std::string& gbnf, const std::string& text) {
  auto rules = pi::grammar::parse_gbnf(gbnf);
  EXPECT_TRUE(rules.ok());
  pi::grammar::Matcher m(std::make_shared<const pi::grammar::Rules>(std::move(*rules)));
  return m.accept(text) && m.accepting();
}

TEST(RunGrammar, OutputFollowsTheGrammarAndStopsWhenComplete) {
  const std::string g = "root ::= \"Answer: \" (\"yes\" | \"no\") \".\"";
  for (int seed : {1, 2, 3, 4}) {
    int code = -1;
    const std::string out = text_of("-n 50 -s " + std::to_string(seed) + " --grammar '" + g + "'", &code);
    EXPECT_EQ(code, 0);
    EXPECT_TRUE(out == "Answer: yes." || out == "Answer: no.") << out;
  }
}

TEST(RunGrammar, SampleGrammarFilesAndSchemas) {
  int code = -1;
  const std::string list = text_of("-n 40 -s 5 --grammar-file grammars/list.gbnf", &code);
  EXPECT_EQ(code, 0);
  std::ifstream f(std::string(PI_SOURCE_DIR) + "/grammars/list.gbnf");
  const std::string gbnf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto rules = pi::grammar::parse_gbnf(gbnf);
  ASSERT_TRUE(rules.ok());
  pi::grammar::Matcher m(std::make_shared<const pi::grammar::Rules>(std::move(*rules)));
  EXPECT_TRUE(m.accept(list)) << list;  // a prefix at least: -n may cut it
  EXPECT_EQ(list.rfind("- ", 0), 0u) << list;

  const std::string schema = R"({"type":"object","properties":{"word":{"enum":["light","dark"]},"n":{"type":"integer"}},"required":["word","n"]})";
  const std::string out = text_of("-n 60 -s 9 --temp 0 -j '" + schema + "'", &code);
  EXPECT_EQ(code, 0);
  auto g = pi::json_schema_to_grammar(schema);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(sentence(*g, out)) << out;
  const std::string path = ::testing::TempDir() + "/schema.json";
  std::ofstream(path) << schema;
  EXPECT_EQ(text_of("-n 60 -s 9 --temp 0 --json-schema-file " + path), out);
}

TEST(RunGrammar, BadGrammarsSchemasAndFilesAreOneLineErrors) {
  const std::pair<std::string, std::string> cases[] = {
      {"--grammar 'root ::= (\"a\"'", "--grammar: grammar: line 1, column"},
      {"--grammar 'root ::= foo'", "undefined rule 'foo'"},
      {"--grammar-file /nonexistent.gbnf", "--grammar-file /nonexistent.gbnf: cannot read"},
      {"--grammar-file /tmp", "a directory, not a file"},
      {"-j '{\"type\": \"string\", \"pattern\": \"a\"}'", "--json-schema: json schema: /: unsupported keyword 'pattern'"},
      {"-j '{\"type\": '", "not valid JSON"},
      {"--json-schema-file /nonexistent.json", "cannot read"},
      {"--grammar 'root ::= \"a\"' -j '{}'", "give one of --grammar"},
      {"--grammar 'root ::= \"a\"' -cnv", "not with -cnv or -i"},
  };
  for (const auto& [args, want] : cases) {
    auto r = run_command(kRun + "-m /nonexistent-model.gguf " + args);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(want), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(r.output.find("nonexistent-model"), std::string::npos)
        << "checked after loading the model: " << r.output;
  }
}

}  // namespace
