// Compares the tokenizers with sentencepiece and Hugging Face tokenizers on vocabularies the
// libraries trained (see make_oracle_data.py for the models and the case-file format).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>

#include "cli/run_command.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace pi {
namespace {

namespace fs = std::filesystem;

// Makes the oracle data when it is absent (the binary run by hand rather than by ctest,
// whose fixture TokenizerOracleData makes it first). Returns an error message or "".
const std::string& oracle_data_error() {
  static const std::string error = []() -> std::string {
    const fs::path dir = PI_TOK_ORACLE_DIR;
    if (fs::exists(dir / "summary.json")) return "";
    if (!fs::exists(PI_PYTHON)) {
      return std::string("no Python at ") + PI_PYTHON +
             ": run scripts/install-deps.sh to create .venv with sentencepiece and tokenizers";
    }
    const std::string cmd = std::string(PI_PYTHON) + " " + PI_SOURCE_DIR +
                            "/tests/tokenizer/make_oracle_data.py " + dir.string();
    testing::CommandResult r = testing::run_command(cmd);
    if (r.exit_code != 0) {
      return "make_oracle_data.py failed (exit " + std::to_string(r.exit_code) + "): " + r.output;
    }
    return "";
  }();
  return error;
}

std::string unhex(std::string_view h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) {
    out += static_cast<char>(std::stoi(std::string(h.substr(i, 2)), nullptr, 16));
  }
  return out;
}

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::istringstream in(s);
  for (int64_t v; in >> v;) ids.push_back(static_cast<int32_t>(v));
  return ids;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  size_t pos = 0;
  for (;;) {
    size_t tab = line.find('\t', pos);
    out.push_back(line.substr(pos, tab == std::string::npos ? std::string::npos : tab - pos));
    if (tab == std::string::npos) return out;
    pos = tab + 1;
  }
}

// Printable rendering of bytes for failure messages.
std::string show(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c != 0x7F) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    }
  }
  if (out.size() > 300) out = out.substr(0, 300) + "...";
  return out + "\"";
}

std::string show(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i == 40) {
      out += " ...";
      break;
    }
    if (i) out += ' ';
    out += std::to_string(ids[i]);
  }
  return out + "]";
}

bool valid_utf8(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    tok::Utf8Char c = tok::decode_utf8(s, pos);
    if (!c.valid) return false;
    pos += c.len;
  }
  return true;
}

// Length of the maximal subpart of an ill-formed sequence at s[pos] (Unicode 3.9, U+FFFD
// substitution of maximal subparts, as Rust's from_utf8_lossy and Python use).
size_t maximal_subpart(std::string_view s, size_t pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  size_t len = b0 >= 0xC2 && b0 <= 0xDF ? 2 : b0 >= 0xE0 && b0 <= 0xEF ? 3 : b0 >= 0xF0 && b0 <= 0xF4 ? 4 : 1;
  size_t k = 1;
  while (k < len && pos + k < s.size()) {
    const auto b = static_cast<uint8_t>(s[pos + k]);
    uint8_t lo = 0x80, hi = 0xBF;
    if (k == 1 && b0 == 0xE0) lo = 0xA0;
    if (k == 1 && b0 == 0xED) hi = 0x9F;
    if (k == 1 && b0 == 0xF0) lo = 0x90;
    if (k == 1 && b0 == 0xF4) hi = 0x8F;
    if (b < lo || b > hi) break;
    ++k;
  }
  return k;
}

// Replaces ill-formed UTF-8 with U+FFFD: one per byte (sentencepiece) or one per maximal
// subpart (Hugging Face tokenizers).
std::string lossy(std::string_view s, bool per_byte) {
  std::string out;
  for (size_t pos = 0; pos < s.size();) {
    tok::Utf8Char c = tok::decode_utf8(s, pos);
    if (c.valid) {
      out.append(s.substr(pos, c.len));
      pos += c.len;
    } else {
      out += "\xEF\xBF\xBD";
      pos += per_byte ? 1 : maximal_subpart(s, pos);
    }
  }
  return out;
}

struct Case {
  int line = 0;
  std::vector<std::string> f;  // tab-separated fields, f[0] is the kind
};

struct Model {
  std::string error;  // non-empty when loading failed
  std::unique_ptr<Tokenizer> tok;
  std::vector<Case> cases;
  bool byte_fallback = false;

  std::vector<const Case*> of_kind(const std::string& kind) const {
    std::vector<const Case*> out;
    for (const Case& c : cases) {
      if (c.f[0] == kind) out.push_back(&c);
    }
    return out;
  }
};

const Model& model(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Model>> cache;
  auto& slot = cache[name];
  if (slot) return *slot;
  slot = std::make_unique<Model>();
  Model& m = *slot;
  if (!oracle_data_error().empty()) {
    m.error = oracle_data_error();
    return m;
  }
  const fs::path dir = PI_TOK_ORACLE_DIR;
  auto file = gguf::File::open((dir / (name + ".gguf")).string());
  if (!file.ok()) {
    m.error = file.error().message;
    return m;
  }
  auto tok = Tokenizer::from_gguf(*file);
  if (!tok.ok()) {
    m.error = tok.error().message;
    return m;
  }
  m.tok = std::make_unique<Tokenizer>(std::move(tok.value()));
  m.byte_fallback = m.tok->find_token("<0x41>") >= 0 || m.tok->kind() == Tokenizer::Kind::Bpe;

  std::ifstream in(dir / (name + ".cases"));
  std::string line;
  size_t declared = SIZE_MAX;
  for (int n = 1; std::getline(in, line); ++n) {
    Case c{n, split_tabs(line)};
    if (c.f[0] == "END") {
      declared = std::stoul(c.f.at(1));
      break;
    }
    m.cases.push_back(std::move(c));
  }
  if (declared != m.cases.size()) m.error = name + ".cases is incomplete (no END line or wrong count)";
  return m;
}

// Collects mismatches; prints the first few in full.
class Mismatches {
 public:
  explicit Mismatches(std::string what) : what_(std::move(what)) {}
  void add(const std::string& detail) {
    if (++count_ <= 8) ADD_FAILURE() << what_ << ": " << detail;
  }
  void check(size_t total) const {
    EXPECT_EQ(count_, 0u) << what_ << ": " << count_ << " of " << total << " cases disagree";
    EXPECT_GT(total, 0u) << what_ << ": no cases";
  }

 private:
  std::string what_;
  size_t count_ = 0;
};

class Oracle : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const Model& m = model(GetParam());
    ASSERT_TRUE(m.error.empty()) << m.error;
    m_ = &m;
  }
  const Model* m_ = nullptr;
};

TEST_P(Oracle, EncodeMatchesLibrary) {
  Mismatches bad(GetParam() + " encode");
  const auto cases = m_->of_kind("E");
  for (const Case* c : cases) {
    const bool parse_special = c->f.at(1) == "1";
    const bool add_bos = c->f.at(2) == "1";
    const std::string text = unhex(c->f.at(3));
    const std::vector<int32_t> want = parse_ids(c->f.at(4));
    const std::vector<int32_t> got = m_->tok->encode(text, add_bos, parse_special);
    if (got != want) {
      bad.add("line " + std::to_string(c->line) + " parse_special=" + c->f[1] + " add_bos=" + c->f[2] +
              " text " + show(text) + "\n  want " + show(want) + "\n  got  " + show(got));
    }
  }
  bad.check(cases.size());
}

TEST_P(Oracle, DecodeMatchesLibrary) {
  Mismatches bad(GetParam() + " decode");
  const auto cases = m_->of_kind("D");
  for (const Case* c : cases) {
    const bool skip_special = c->f.at(1) == "1";
    const std::vector<int32_t> ids = parse_ids(c->f.at(2));
    const std::string want = unhex(c->f.at(3));
    const std::string got = m_->tok->decode(ids, skip_special);
    if (got != want) {
      bad.add("line " + std::to_string(c->line) + " ids " + show(ids) + "\n  want " + show(want) +
              "\n  got  " + show(got));
    }
  }
  bad.check(cases.size());
}

// Arbitrary id sequences, whose bytes may not be valid UTF-8: the libraries print U+FFFD
// where we return the raw bytes, so our output is compared after the same substitution.
TEST_P(Oracle, DecodeArbitraryIdsMatchesLibrary) {
  Mismatches bad(GetParam() + " decode (lossy)");
  const auto cases = m_->of_kind("L");
  for (const Case* c : cases) {
    const bool per_byte = c->f.at(1) == "byte";
    const bool skip_special = c->f.at(2) == "1";
    const std::vector<int32_t> ids = parse_ids(c->f.at(3));
    const std::string want = unhex(c->f.at(4));
    const std::string got = lossy(m_->tok->decode(ids, skip_special), per_byte);
    if (got != want) {
      bad.add("line " + std::to_string(c->line) + " ids " + show(ids) + "\n  want " + show(want) +
              "\n  got  " + show(got));
    }
  }
  bad.check(cases.size());
}

// The byte-level BPE models' pre-tokenizers.
using OraclePreTokenizer = Oracle;

TEST_P(OraclePreTokenizer, SplitsAsLibrary) {
  const tok::PreTokenizer kind = GetParam() == "bpe_llama3"  ? tok::PreTokenizer::Llama3
                                 : GetParam() == "bpe_qwen2" ? tok::PreTokenizer::Qwen2
                                 : GetParam() == "bpe_o200k" ? tok::PreTokenizer::O200k
                                                             : tok::PreTokenizer::Gpt2;
  Mismatches bad(GetParam() + " pre-tokenize");
  const auto cases = m_->of_kind("P");
  for (const Case* c : cases) {
    const std::string text = unhex(c->f.at(1));
    std::vector<int32_t> want = c->f.size() > 2 ? parse_ids(c->f[2]) : std::vector<int32_t>{};
    std::vector<tok::ByteSpan> spans;
    tok::pretokenize(kind, text, spans);
    std::vector<int32_t> got;
    for (const auto& s : spans) got.push_back(static_cast<int32_t>(s.end));
    if (got != want) {
      bad.add("line " + std::to_string(c->line) + " text " + show(text) + "\n  want ends " + show(want) +
              "\n  got ends  " + show(got));
    }
  }
  bad.check(cases.size());
}

// decode(encode(x)) == x for valid UTF-8, on the models with byte fallback (without it,
// unknown characters become <unk>). For SPM not for text containing U+2581 (sentencepiece
// reads it as a space), and only without parse_special (each stretch after a control
// token gets its own dummy-prefix space, which decode keeps).
using OracleLossless = Oracle;

TEST_P(OracleLossless, DecodeInvertsEncode) {
  ASSERT_TRUE(m_->byte_fallback);
  const bool spm = m_->tok->kind() == Tokenizer::Kind::Spm;
  Mismatches bad(GetParam() + " round trip");
  size_t total = 0;
  for (const Case* c : m_->of_kind("E")) {
    const bool parse_special = c->f.at(1) == "1";
    const std::string text = unhex(c->f.at(3));
    if (c->f.at(2) == "1" || !valid_utf8(text)) continue;
    if (spm && (parse_special || text.find("\xE2\x96\x81") != std::string::npos)) continue;
    ++total;
    const std::vector<int32_t> ids = m_->tok->encode(text, false, parse_special);
    const std::string back = m_->tok->decode(ids, /*skip_special=*/!parse_special);
    if (back != text) bad.add("text " + show(text) + " -> " + show(ids) + " -> " + show(back));
  }
  bad.check(total);
}

// Arbitrary bytes: every id is in range, byte-level BPE gives the bytes back exactly, and
// SPM gives them back with each ill-formed byte as U+FFFD (its normalisation).
TEST_P(OracleLossless, RandomBytesRoundTrip) {
  const bool spm = m_->tok->kind() == Tokenizer::Kind::Spm;
  Mismatches bad(GetParam() + " random bytes");
  std::mt19937 rng(1234);
  const std::string alphabet = std::string("ab \n\t<|>/_\xE2\x96\x81\xC3\xA9\xF0\x9F\x98\x80") + '\0';
  size_t total = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text;
    const int n = static_cast<int>(rng() % 24);
    for (int k = 0; k < n; ++k) {
      text += rng() % 2 ? static_cast<char>(rng() % 256) : alphabet[rng() % alphabet.size()];
    }
    if (spm && text.find("\xE2\x96\x81") != std::string::npos) continue;
    ++total;
    const std::vector<int32_t> ids = m_->tok->encode(text, false, false);
    for (int32_t id : ids) {
      if (!m_->tok->valid(id)) bad.add("text " + show(text) + " gave id " + std::to_string(id));
    }
    const std::string want = spm ? lossy(text, /*per_byte=*/true) : text;
    const std::string back = m_->tok->decode(ids, true);
    if (back != want) bad.add("text " + show(text) + " -> " + show(ids) + " -> " + show(back));
  }
  bad.check(total);
}

// Streaming in one id at a time gives the same bytes as decode(), and never cuts a
// character in two when the whole is valid UTF-8.
TEST_P(Oracle, StreamDecoderMatchesDecode) {
  Mismatches bad(GetParam() + " stream decoder");
  size_t total = 0;
  for (const Case* c : m_->of_kind("E")) {
    const std::vector<int32_t> ids = parse_ids(c->f.at(4));
    for (bool skip : {true, false}) {
      ++total;
      const std::string whole = m_->tok->decode(ids, skip);
      Tokenizer::StreamDecoder sd(*m_->tok, skip);
      std::string streamed;
      bool split_char = false;
      for (int32_t id : ids) {
        const std::string chunk = sd.push(id);
        if (valid_utf8(whole) && !valid_utf8(chunk)) split_char = true;
        streamed += chunk;
      }
      streamed += sd.flush();
      if (streamed != whole || split_char) {
        bad.add("ids " + show(ids) + "\n  decode " + show(whole) + "\n  stream " + show(streamed) +
                (split_char ? " (a chunk split a character)" : ""));
      }
    }
  }
  bad.check(total);
}

auto param_name = [](const auto& info) { return info.param; };
INSTANTIATE_TEST_SUITE_P(Models, Oracle,
                         ::testing::Values("spm_llama", "spm_special", "spm_plain", "spm_unused", "bpe_gpt2",
                                           "bpe_llama3", "bpe_qwen2", "bpe_o200k"),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Models, OracleLossless,
                         ::testing::Values("spm_llama", "spm_special", "spm_unused", "bpe_gpt2", "bpe_llama3",
                                           "bpe_qwen2", "bpe_o200k"),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Models, OraclePreTokenizer,
                         ::testing::Values("bpe_gpt2", "bpe_llama3", "bpe_qwen2", "bpe_o200k"), param_name);

}  // namespace
}  // namespace pi
