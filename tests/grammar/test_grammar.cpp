// GBNF parsing and matching, the token filter over a vocabulary, the sampler under a grammar,
// and JSON Schema -> GBNF.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "grammar/gbnf.h"
#include "grammar/matcher.h"
#include "grammar/token_filter.h"
#include "powerinfer/grammar.h"
#include "runtime/sampler.h"

namespace {

using namespace pi::grammar;

std::string read_file(const std::string& path) {
  std::ifstream f(std::string(PI_SOURCE_DIR) + "/" + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::shared_ptr<const Rules> rules(const std::string& text) {
  auto r = parse_gbnf(text);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return std::make_shared<const Rules>(std::move(*r));
}

// Whether the whole of `text` is a sentence (fed in one piece and byte by byte: the same).
bool sentence(const std::shared_ptr<const Rules>& g, const std::string& text) {
  Matcher whole(g), bytes(g);
  const bool ok = whole.accept(text) && whole.accepting();
  bool ok2 = true;
  for (char c : text) ok2 = ok2 && bytes.accept(std::string(1, c));
  ok2 = ok2 && bytes.accepting();
  EXPECT_EQ(ok, ok2) << text;
  return ok;
}

bool prefix(const std::shared_ptr<const Rules>& g, const std::string& text) {
  Matcher m(g);
  return m.accept(text);
}

TEST(Gbnf, JsonGrammarAcceptsJsonAndRejectsTheRest) {
  auto g = rules(read_file("grammars/json.gbnf"));
  for (const char* ok : {"{}", "[]", "{\"a\": [1, 2.5e-3, -0, true, null, \"x\\u00e9\\n\"]}",
                         " [ {\"k\" : {}} ] ", "\"caf\xC3\xA9\"", "123", "-1.5E+7"}) {
    EXPECT_TRUE(sentence(g, ok)) << ok;
  }
  for (const char* bad : {"{", "[1,]", "{\"a\" 1}", "01", "tru", "\"\\q\"", "[1 2]", "{'a': 1}"}) {
    EXPECT_FALSE(sentence(g, bad)) << bad;
  }
  EXPECT_TRUE(prefix(g, "{\"a\": [1, "));
  EXPECT_FALSE(prefix(g, "{\"a\": [1, ]"));
  EXPECT_FALSE(prefix(g, "}"));
}

TEST(Gbnf, ArithmeticAndListGrammars) {
  auto a = rules(read_file("grammars/arithmetic.gbnf"));
  EXPECT_TRUE(sentence(a, "1+2= 3\n"));
  EXPECT_TRUE(sentence(a, "(x_1 * 4)/y= z\n7-1= 6\n"));
  EXPECT_FALSE(sentence(a, "1+= 3\n"));
  EXPECT_FALSE(sentence(a, "1+2= 3"));
  auto l = rules(read_file("grammars/list.gbnf"));
  EXPECT_TRUE(sentence(l, "- milk\n- bread and \xE2\x82\xAC\n"));
  EXPECT_FALSE(sentence(l, "- \n"));
  EXPECT_FALSE(sentence(l, "milk\n"));
}

TEST(Gbnf, RepetitionsCountExactly) {
  auto g = rules("root ::= \"a\"{2,4} \"b\"? [0-9]{3} (\"x\" | \"y\"){,2} \"z\"{2,}\n");
  EXPECT_TRUE(sentence(g, "aa123zz"));
  EXPECT_TRUE(sentence(g, "aaaab123xyzzz"));
  EXPECT_FALSE(sentence(g, "a123zz"));
  EXPECT_FALSE(sentence(g, "aaaaa123zz"));
  EXPECT_FALSE(sentence(g, "aa12zz"));
  EXPECT_FALSE(sentence(g, "aa123xyxzz"));
  EXPECT_FALSE(sentence(g, "aa123z"));
  auto e = rules("root ::= \"\"? \"a\" \"\"{2,3} \"\"*\n");  // empty literals repeated
  EXPECT_TRUE(sentence(e, "a"));
}

TEST(Gbnf, NegatedClassesAnyCharAndUnicode) {
  auto g = rules("root ::= [^a-c] . [\\u00e0-\\u00ff\xE4\xB8\x80] \"\\x41\"\n");
  EXPECT_TRUE(sentence(g, "d\n\xC3\xA9" "A"));
  EXPECT_TRUE(sentence(g, "\xF0\x9F\x98\x80z\xE4\xB8\x80" "A"));
  EXPECT_FALSE(sentence(g, "a" "zz" "A"));
  EXPECT_FALSE(sentence(g, "dz\xC3\x9F" "B"));
  // A token may end inside a character: the bytes so far must start an allowed one.
  Matcher m(g);
  EXPECT_TRUE(m.accept("dz\xC3"));
  EXPECT_FALSE(m.accepting());
  EXPECT_FALSE(m.check("\x80"));  // U+00C0 is outside [U+00E0, U+00FF]
  EXPECT_TRUE(m.check("\xA9"));
  Matcher n(g);
  EXPECT_TRUE(n.accept("dz"));
  EXPECT_FALSE(n.check("\xC2"));  // every U+0080..U+00BF is refused
  EXPECT_FALSE(n.check("\xFF"));  // never UTF-8
  EXPECT_TRUE(n.check("\xE4\xB8"));
  EXPECT_FALSE(n.check("\xE4\xB9"));
  // Overlong forms and surrogates are not characters: "A" spelt in two bytes is refused.
  auto a = rules("root ::= [A-Z\u00e0-\uffff]\n");
  Matcher o(a);
  EXPECT_TRUE(o.check("A"));
  EXPECT_FALSE(o.check("\xC1\x81"));
  EXPECT_FALSE(o.check("\xC1"));
  EXPECT_FALSE(o.check("\xE0\x81\x81"));
  EXPECT_FALSE(o.check("\xF0\x80\x81\x81"));
  EXPECT_FALSE(o.check("\xED\xA0\x80"));  // U+D800
  EXPECT_TRUE(o.check("\xC3\xA0"));
}

TEST(Gbnf, CompleteWhenNothingCanFollow) {
  auto g = rules("root ::= \"ab\" \"c\"?\n");
  Matcher m(g);
  EXPECT_TRUE(m.accept("ab"));
  EXPECT_TRUE(m.accepting());
  EXPECT_FALSE(m.complete());
  EXPECT_TRUE(m.accept("c"));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.check("c"));
  m.reset();
  EXPECT_FALSE(m.accepting());
}

TEST(Gbnf, LongRepetitionsKeepTheStateSmall) {
  auto g = rules("root ::= (\"[\" item (\",\" item)* \"]\")\nitem ::= [a-z]+\n");
  Matcher m(g);
  ASSERT_TRUE(m.accept("["));
  for (int i = 0; i < 20000; ++i) ASSERT_TRUE(m.accept(i % 7 == 6 ? "," : "ab"));
  EXPECT_LE(m.state().tops.size(), 4u);
  EXPECT_TRUE(m.accept("]"));
  EXPECT_TRUE(m.complete());
}

TEST(Gbnf, ErrorsNameTheLineAndColumn) {
  const std::pair<const char*, const char*> cases[] = {
      {"root = \"a\"\n", "line 1, column 6: expected '::='"},
      {"root ::= foo\n", "line 1, column 10: undefined rule 'foo'"},
      {"root ::= \"a\n", "line 1, column 12: newline inside a literal"},
      {"root ::= \"abc", "unterminated literal"},
      {"root ::= \"\\q\"\n", "line 1, column 11: unknown escape"},
      {"a ::= \"x\"\n", "no 'root' rule"},
      {"root ::= (\"a\" | \"b\"\n", "expected ')'"},
      {"root ::= \"a\")\n", "line 1, column 13: expected a newline or the end after a rule"},
      {"root ::= [a-\n", "unterminated character class"},
      {"root ::= [z-a]\n", "end below its start"},
      {"root ::= \"a\"{3,1}\n", "maximum below its minimum"},
      {"root ::= \"a\"{1001}\n", "above 1000"},
      {"root ::= * \"a\"\n", "a repetition needs an element"},
      {"root ::= root \"a\" | \"b\"\n", "rule 'root' is left-recursive"},
      {"root ::= x\nx ::= y? root\ny ::= \"a\"\n", "left-recursive"},
      {"root ::= \"a\"\nroot ::= \"b\"\n", "line 2, column 1: rule 'root' defined twice"},
      {"root ::= \"a\" \"\\x4\"\n", "expected a hex digit"},
      {"root ::= \"\xFF\"\n", "invalid UTF-8"},
  };
  for (auto [text, want] : cases) {
    auto r = parse_gbnf(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.error().message.find(want), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.rfind("grammar: ", 0), 0u) << r.error().message;
  }
  EXPECT_TRUE(parse_gbnf(std::string(200, '(') + "\"a\"" + std::string(200, ')')).ok() == false);
}

// A vocabulary with multi-character tokens, multi-byte characters split across tokens, an
// end-of-generation token and a control token without bytes.
std::shared_ptr<const TokenSet> toy_vocab() {
  std::vector<std::string> pieces = {"", "", "{", "}", "\"", "\":", ", ", "[", "]", "1", "23",
                                     "-", "true", "tr", "ue", " ", "a", "ab", "abc", "\xC3",
                                     "\xA9", "\xC3\xA9", "null", "{\"", "\"}", "0", ".5", "e9",
                                     "\n", "x\"", "\\n", "\\"};
  std::vector<bool> eog(pieces.size(), false);
  eog[1] = true;
  return std::make_shared<const TokenSet>(pieces, eog);
}

TEST(TokenFilter, MaskEqualsPerTokenChecksAlongRandomTexts) {
  auto g = rules(read_file("grammars/json.gbnf"));
  auto vocab = toy_vocab();
  std::mt19937 rng(7);
  for (int run = 0; run < 40; ++run) {
    // f answers with whole masks, checks with token by token checks (each remembers its
    // answers per state, so they must be two filters to be compared).
    TokenFilter f(g, vocab), checks(g, vocab);
    std::vector<uint8_t> mask;
    for (int step = 0; step < 30; ++step) {
      f.allowed(mask);
      std::vector<int32_t> ok;
      for (int32_t id = 0; id < vocab->size(); ++id) {
        ASSERT_EQ(mask[static_cast<size_t>(id)] != 0, checks.allows(id)) << "token " << id;
        ASSERT_EQ(mask[static_cast<size_t>(id)] != 0, f.allows(id)) << "token " << id;
        if (mask[static_cast<size_t>(id)]) ok.push_back(id);
      }
      EXPECT_FALSE(mask[0]);  // the control token adds no text: never allowed
      if (ok.empty() || f.complete()) break;
      const int32_t pick = ok[rng() % ok.size()];
      if (vocab->eog(pick)) {
        EXPECT_TRUE(f.accepting());
        break;
      }
      ASSERT_TRUE(f.accept(pick));
      ASSERT_TRUE(checks.accept(pick));
    }
  }
}

pi::SamplingParams params(float temp, int top_k, const std::string& grammar) {
  pi::SamplingParams p;
  p.temperature = temp;
  p.top_k = top_k;
  p.top_p = 0.9f;
  p.min_p = 0.02f;
  p.seed = 3;
  p.grammar = grammar;
  return p;
}

// The sampler's candidate walk and its whole-vocabulary mask give the same tokens.
TEST(GrammarSampler, WalkAndMaskAgreeAndOnlyAllowedTokensComeOut) {
  auto g = rules(read_file("grammars/json.gbnf"));
  auto vocab = toy_vocab();
  for (float temp : {0.0f, 0.8f}) {
    for (int top_k : {0, 3, 40}) {
      pi::runtime::Sampler walk(params(temp, top_k, "x"), vocab->size(),
                                std::make_unique<TokenFilter>(g, vocab));
      pi::runtime::Sampler mask(params(temp, top_k, "x"), vocab->size(),
                                std::make_unique<TokenFilter>(g, vocab));
      mask.set_always_mask(true);
      TokenFilter check(g, vocab);
      std::mt19937 rng(11);
      std::normal_distribution<float> logit(0.0f, 2.0f);
      for (int step = 0; step < 200; ++step) {
        std::vector<float> l(static_cast<size_t>(vocab->size()));
        for (float& x : l) x = logit(rng);
        const int32_t a = walk.sample(l), b = mask.sample(l);
        ASSERT_EQ(a, b) << "temp " << temp << " top_k " << top_k << " step " << step;
        if (a < 0 || vocab->eog(a)) break;
        ASSERT_TRUE(check.allows(a));
        ASSERT_TRUE(check.accept(a));
        ASSERT_TRUE(walk.accept_generated(a));
        ASSERT_TRUE(mask.accept_generated(a));
        if (walk.grammar_done()) break;
      }
    }
  }
}

TEST(GrammarSampler, NothingAllowedGivesMinusOne) {
  auto g = rules("root ::= \"q\"\n");
  pi::runtime::Sampler s(params(0.0f, 0, "x"), 32, std::make_unique<TokenFilter>(g, toy_vocab()));
  EXPECT_EQ(s.sample(std::vector<float>(32, 1.0f)), -1);
}

TEST(GrammarSampler, ValidateSamplingChecksTheGrammar) {
  pi::SamplingParams p;
  p.grammar = "root ::= \"a\"\n";
  EXPECT_TRUE(pi::validate_sampling(p).ok());
  p.grammar = "root ::= (\n";
  EXPECT_FALSE(pi::validate_sampling(p).ok());
}

// Random sentences of a grammar: from each state, a random allowed byte among those tried.
std::string random_sentence(const std::shared_ptr<const Rules>& g, std::mt19937& rng) {
  Matcher m(g);
  std::string text;
  const std::string alphabet = "{}[]\",:-.0123456789eE+ abcdefghijklmnopqrstuvwxyz\\/\xC3\xA9";
  for (int step = 0; step < 400 && !m.complete(); ++step) {
    if (m.accepting() && rng() % 8 == 0) break;
    std::string opts;
    for (char c : alphabet)
      if (m.check(std::string(1, c))) opts += c;
    if (opts.empty()) break;
    // Lean towards closing brackets so that documents end.
    const char c = step > 150 && opts.find_first_of("}]\"") != std::string::npos
                       ? opts[opts.find_first_of("}]\"")]
                       : opts[rng() % opts.size()];
    EXPECT_TRUE(m.accept(std::string(1, c)));
    text += c;
  }
  return m.accepting() ? text : "";
}

TEST(JsonSchema, SentencesParseAndFollowTheSchema) {
  const char* schema = R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 8},
      "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "minItems": 1, "maxItems": 3},
      "ok": {"type": "boolean"},
      "pos": {"$ref": "#/$defs/point"}
    },
    "required": ["name", "tags"],
    "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}},
                        "required": ["x"]}}
  })";
  auto text = pi::json_schema_to_grammar(schema);
  ASSERT_TRUE(text.ok()) << text.error().message;
  auto g = rules(*text);
  std::mt19937 rng(5);
  int n = 0;
  for (int i = 0; i < 200; ++i) {
    const std::string s = random_sentence(g, rng);
    if (s.empty()) continue;
    ++n;
    nlohmann::json j = nlohmann::json::parse(s);  // throws (fails the test) when not JSON
    ASSERT_TRUE(j.is_object()) << s;
    ASSERT_TRUE(j.contains("name") && j["name"].is_string()) << s;
    EXPECT_LE(j["name"].get<std::string>().size(), 16u) << s;  // 8 characters, up to 2 bytes
    ASSERT_TRUE(j["tags"].is_array()) << s;
    EXPECT_GE(j["tags"].size(), 1u);
    EXPECT_LE(j["tags"].size(), 3u);
    for (const auto& t : j["tags"]) EXPECT_TRUE(t == "a" || t == "b" || t == 3) << s;
    if (j.contains("age")) { EXPECT_TRUE(j["age"].is_number_integer()) << s; }
    if (j.contains("pos")) { EXPECT_TRUE(j["pos"]["x"].is_number()) << s; }
    for (const auto& [k, v] : j.items()) {
      (void)v;
      EXPECT_TRUE(k == "name" || k == "age" || k == "tags" || k == "ok" || k == "pos") << s;
    }
  }
  EXPECT_GT(n, 50);
  // Examples that must be sentences, and ones that must not.
  EXPECT_TRUE(sentence(g, R"({"name": "bob", "tags": ["a", 3]})"));
  EXPECT_TRUE(sentence(g, R"({"name":"","age":-12,"tags":["b"],"ok":true,"pos":{"x":1.5e3}})"));
  EXPECT_FALSE(sentence(g, R"({"tags": ["a"]})"));                      // name is required
  EXPECT_FALSE(sentence(g, R"({"name": "bob", "tags": []})"));          // minItems
  EXPECT_FALSE(sentence(g, R"({"name": "123456789", "tags": ["a"]})"));  // maxLength
  EXPECT_FALSE(sentence(g, R"({"name": "bob", "tags": ["c"]})"));       // enum
  EXPECT_FALSE(sentence(g, R"({"name": "bob", "tags": ["a"], "zz": 1})"));
}

TEST(JsonSchema, JsonObjectGrammarTakesAnyObject) {
  auto g = rules(pi::json_object_grammar());
  EXPECT_TRUE(sentence(g, R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_TRUE(sentence(g, "{}"));
  EXPECT_FALSE(sentence(g, "[1]"));
  Matcher m(g);
  EXPECT_TRUE(m.accept("{\"a\": 1}"));
  EXPECT_TRUE(m.complete());
}

TEST(JsonSchema, RecursiveRefsAndTypeLists) {
  auto text = pi::json_schema_to_grammar(R"({"$ref": "#/definitions/node", "definitions": {
      "node": {"type": "object", "properties": {"v": {"type": ["integer", "null"]},
               "kids": {"type": "array", "items": {"$ref": "#/definitions/node"}}},
               "required": ["v"]}}})");
  ASSERT_TRUE(text.ok()) << text.error().message;
  auto g = rules(*text);
  EXPECT_TRUE(sentence(g, R"({"v": 1, "kids": [{"v": null}, {"v": 2, "kids": []}]})"));
  EXPECT_FALSE(sentence(g, R"({"v": "x"})"));
}

TEST(JsonSchema, UnsupportedOrBadSchemasNameThePlace) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}})",
       "json schema: /properties/age: unsupported keyword 'minimum'"},
      {R"({"type": "string", "pattern": "a+"})", "/: unsupported keyword 'pattern'"},
      {R"({"type": "strin"})", "/type: unknown type 'strin'"},
      {R"({"$ref": "http://x/y"})", "/$ref: cannot resolve"},
      {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})", "'b', which is not in properties"},
      {R"({"enum": []})", "/enum: must be a non-empty array"},
      {R"({"type": "array", "minItems": 3, "maxItems": 1})", "maxItems below minItems"},
      {R"({"type": "string", "maxLength": 5000})", "above 1000"},
      {"{\"type\": ", "not valid JSON at byte"},
      {"false", "accepts nothing"},
  };
  for (auto [schema, want] : cases) {
    auto r = pi::json_schema_to_grammar(schema);
    ASSERT_FALSE(r.ok()) << schema;
    EXPECT_NE(r.error().message.find(want), std::string::npos) << r.error().message;
  }
  // Nested too deep, and too many rules, are refused instead of exhausting anything.
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += R"({"type": "array", "items": )";
  deep += R"({"type": "null"})" + std::string(100, '}');
  auto r = pi::json_schema_to_grammar(deep);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("nested more than 64"), std::string::npos);
  std::string wide = R"({"type": "object", "properties": {)";
  for (int i = 0; i < 3000; ++i) {
    if (i > 0) wide += ",";
    wide += "\"p" + std::to_string(i) + "\": {\"type\": \"integer\"}";
  }
  wide += "}}";
  r = pi::json_schema_to_grammar(wide);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("too many rules"), std::string::npos);
}

}  // namespace
