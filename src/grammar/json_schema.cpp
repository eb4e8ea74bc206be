// JSON Schema -> GBNF (include/powerinfer/grammar.h says which subset). Values carry no
// whitespace of their own: containers put `space` between their parts, so a document ends
// exactly at its last character and the grammar is complete there.
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "grammar/gbnf.h"
#include "powerinfer/grammar.h"

namespace pi {
namespace {

// ordered_json: properties are generated in the order the schema lists them.
using json = nlohmann::ordered_json;

constexpr int kMaxSchemaDepth = 64;
constexpr size_t kMaxSchemaRules = 4096;
constexpr size_t kMaxGrammarText = 1 << 20;

// The primitives, added to a grammar when a rule names them.
const std::map<std::string, std::string>& primitives() {
  static const std::map<std::string, std::string> p = {
      {"space", R"(" "?)"},
      {"boolean", R"("true" | "false")"},
      {"null", R"("null")"},
      {"integer", R"("-"? ( [0-9] | [1-9] [0-9]{0,15} ))"},
      {"number", R"("-"? ( [0-9] | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?)"},
      {"char", R"([^"\\\x00-\x1F\x7F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ))"},
      {"string", R"("\"" char* "\"")"},
      {"value", R"(object | array | string | number | boolean | null)"},
      {"object", R"("{" space ( string space ":" space value space ( "," space string space ":" space value space )* )? "}")"},
      {"array", R"("[" space ( value space ( "," space value space )* )? "]")"},
  };
  return p;
}
// What each primitive refers to, so that adding one adds its dependencies.
const std::map<std::string, std::vector<std::string>>& primitive_deps() {
  static const std::map<std::string, std::vector<std::string>> d = {
      {"string", {"char"}},
      {"value", {"object", "array", "string", "number", "boolean", "null"}},
      {"object", {"space", "string", "value"}},
      {"array", {"space", "value"}},
  };
  return d;
}

// A GBNF literal of the bytes `s`.
std::string literal(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

class Converter {
 public:
  explicit Converter(const json& root) : root_(root) {}

  Result<std::string> run() {
    auto body = visit(root_, "root", "", 0);
    if (!body.ok()) return body.error();
    if (*body != "root") rules_["root"] = *body;
    std::string out = "root ::= " + rules_["root"] + "\n";
    for (const auto& [name, text] : rules_)
      if (name != "root") out += name + " ::= " + text + "\n";
    if (out.size() > kMaxGrammarText) return err("json schema: the grammar it needs is too large");
    return out;
  }

 private:
  Error fail(const std::string& path, const std::string& what) const {
    return err("json schema: %s: %s", path.empty() ? "/" : path.c_str(), what.c_str());
  }

  void use(const std::string& prim) {
    if (rules_.count(prim)) return;
    rules_[prim] = primitives().at(prim);
    auto d = primitive_deps().find(prim);
    if (d != primitive_deps().end())
      for (const std::string& dep : d->second) use(dep);
  }

  Result<std::string> add_rule(const std::string& hint, std::string body) {
    if (rules_.size() >= kMaxSchemaRules) return err("json schema: too many rules (more than %zu)", kMaxSchemaRules);
    std::string base;
    for (char c : hint) base += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '-';
    if (base.empty()) base = "r";
    std::string name = base;
    int& k = suffix_[base];  // the next suffix to try: linear in the rules, not quadratic
    while (rules_.count(name) || primitives().count(name)) name = base + "-" + std::to_string(++k);
    rules_[name] = std::move(body);
    return name;
  }

  // The GBNF expression of `s` (a rule name or a parenthesised expression).
  Result<std::string> visit(const json& s, const std::string& hint, const std::string& path, int depth) {
    if (depth > kMaxSchemaDepth) return fail(path, "nested more than 64 levels");
    if (s.is_boolean()) {
      if (s.get<bool>()) return any_value();
      return fail(path, "the schema 'false' accepts nothing");
    }
    if (!s.is_object()) return fail(path, "a schema must be an object or a boolean");
    static const std::set<std::string> ignored = {
        "title", "description", "default", "examples", "$schema", "$id", "$comment",
        "format", "$defs", "definitions", "readOnly", "writeOnly", "deprecated"};
    static const std::set<std::string> known = {
        "type", "properties", "required", "additionalProperties", "items", "minItems",
        "maxItems", "minLength", "maxLength", "enum", "const", "anyOf", "oneOf", "$ref"};
    for (const auto& [k, v] : s.items()) {
      (void)v;
      if (!ignored.count(k) && !known.count(k))
        return fail(path, "unsupported keyword '" + k + "'");
    }
    if (s.contains("$ref")) return ref(s["$ref"], path, depth);
    if (s.contains("const")) return literal(s["const"].dump());
    if (s.contains("enum")) {
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) return fail(path + "/enum", "must be a non-empty array");
      std::string alts;
      for (const json& v : e) alts += (alts.empty() ? "" : " | ") + literal(v.dump());
      return add_rule(hint, alts);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& list = s[key];
      if (!list.is_array() || list.empty()) return fail(path + "/" + key, "must be a non-empty array");
      std::string alts;
      for (size_t i = 0; i < list.size(); ++i) {
        auto a = visit(list[i], hint + "-" + std::to_string(i), path + "/" + key + "/" + std::to_string(i), depth + 1);
        if (!a.ok()) return a.error();
        alts += (alts.empty() ? "" : " | ") + *a;
      }
      return add_rule(hint, alts);
    }
    if (!s.contains("type")) {
      if (s.contains("properties")) return object(s, hint, path, depth);
      if (s.contains("items")) return array(s, hint, path, depth);
      return any_value();
    }
    const json& t = s["type"];
    if (t.is_array()) {
      if (t.empty()) return fail(path + "/type", "must not be empty");
      std::string alts;
      for (const json& one : t) {
        if (!one.is_string()) return fail(path + "/type", "must hold type names");
        json sub = s;
        sub["type"] = one;
        auto a = visit(sub, hint + "-" + one.get<std::string>(), path, depth + 1);
        if (!a.ok()) return a.error();
        alts += (alts.empty() ? "" : " | ") + *a;
      }
      return add_rule(hint, alts);
    }
    if (!t.is_string()) return fail(path + "/type", "must be a string or an array of strings");
    const std::string type = t.get<std::string>();
    if (type == "object") return object(s, hint, path, depth);
    if (type == "array") return array(s, hint, path, depth);
    if (type == "string") return string(s, hint, path);
    if (type == "number" || type == "integer" || type == "boolean" || type == "null") {
      use(type);
      return type;
    }
    return fail(path + "/type", "unknown type '" + type + "'");
  }

  std::string any_value() {
    use("value");
    return std::string("value");
  }

  Result<std::string> ref(const json& r, const std::string& path, int depth) {
    if (!r.is_string()) return fail(path + "/$ref", "must be a string");
    const std::string target = r.get<std::string>();
    auto done = refs_.find(target);
    if (done != refs_.end()) return done->second;
    std::string name;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (target.compare(0, p.size(), p) == 0) name = target.substr(p.size());
    }
    const std::string section = target.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions";
    if (name.empty() || !root_.contains(section) || !root_[section].contains(name))
      return fail(path + "/$ref", "cannot resolve '" + target + "' (only #/$defs/NAME and #/definitions/NAME)");
    // Name the rule before visiting, so that a recursive reference finds it.
    auto rule = add_rule("def-" + name, "\"\"");
    if (!rule.ok()) return rule.error();
    refs_[target] = *rule;
    auto body = visit(root_[section][name], *rule, "/" + section + "/" + name, depth + 1);
    if (!body.ok()) return body.error();
    rules_[*rule] = *body;
    return *rule;
  }

  // A count range from the keywords min_key and max_key: lo (default 0) and hi (-1: none).
  Status bounds(const json& s, const std::string& min_key, const std::string& max_key,
                const char* what, const std::string& path, int64_t& lo, int64_t& hi) const {
    for (const auto& [key, out] : {std::pair{&min_key, &lo}, {&max_key, &hi}}) {
      if (!s.contains(*key)) continue;
      if (!s[*key].is_number_unsigned()) return fail(path + "/" + *key, "must be an integer >= 0");
      *out = s[*key].get<int64_t>();
    }
    if (lo > grammar::kMaxRepeat || hi > static_cast<int64_t>(grammar::kMaxRepeat))
      return fail(path, std::string(what) + " above 1000 are not supported");
    if (hi >= 0 && hi < lo) return fail(path, max_key + " below " + min_key);
    return Status::Ok();
  }

  Result<std::string> string(const json& s, const std::string& hint, const std::string& path) {
    use("char");
    int64_t lo = 0, hi = -1;
    PI_TRY(bounds(s, "minLength", "maxLength", "string lengths", path, lo, hi));
    if (lo == 0 && hi < 0) {
      use("string");
      return std::string("string");
    }
    const std::string rep = hi < 0 ? "{" + std::to_string(lo) + ",}"
                                   : "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
    return add_rule(hint, "\"\\\"\" char" + rep + " \"\\\"\"");
  }

  Result<std::string> array(const json& s, const std::string& hint, const std::string& path, int depth) {
    use("space");
    std::string item;
    if (s.contains("items")) {
      auto it = visit(s["items"], hint + "-item", path + "/items", depth + 1);
      if (!it.ok()) return it.error();
      item = *it;
    } else {
      item = any_value();
    }
    int64_t lo = 0, hi = -1;
    PI_TRY(bounds(s, "minItems", "maxItems", "array sizes", path, lo, hi));
    const std::string one = item + " space";
    const std::string more = "( \",\" space " + one + " )";
    std::string body;
    if (hi == 0) {
      body = "\"[\" space \"]\"";
    } else {
      const int64_t rest_lo = std::max<int64_t>(lo - 1, 0);
      const std::string rep = hi < 0 ? "{" + std::to_string(rest_lo) + ",}"
                                     : "{" + std::to_string(rest_lo) + "," + std::to_string(hi - 1) + "}";
      const std::string list = one + " " + more + rep;
      body = "\"[\" space " + (lo > 0 ? list : "( " + list + " )?") + " \"]\"";
    }
    return add_rule(hint, body);
  }

  Result<std::string> object(const json& s, const std::string& hint, const std::string& path, int depth) {
    use("space");
    const json empty = json::object();
    const json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) return fail(path + "/properties", "must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return fail(path + "/required", "must be an array of names");
      for (const json& r : s["required"]) {
        if (!r.is_string()) return fail(path + "/required", "must be an array of names");
        if (!props.contains(r.get<std::string>()))
          return fail(path + "/required", "names '" + r.get<std::string>() + "', which is not in properties");
        required.insert(r.get<std::string>());
      }
    }
    std::string extra;  // the rule of additional "key": value members, if allowed
    if (s.contains("additionalProperties")) {
      const json& a = s["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) {
        auto v = visit(a, hint + "-additional", path + "/additionalProperties", depth + 1);
        if (!v.ok()) return v.error();
        use("string");
        extra = "string space \":\" space " + *v + " space";
      }
    } else if (props.empty()) {
      return any_object();
    }
    // Members in order: rest(k, first) lists properties k.. with a comma before each one
    // unless it is the first; optional properties may be skipped.
    std::vector<std::string> kv;
    std::vector<bool> req;
    for (const auto& [name, sub] : props.items()) {
      auto v = visit(sub, hint + "-" + name, path + "/properties/" + name, depth + 1);
      if (!v.ok()) return v.error();
      kv.push_back(literal(json(name).dump()) + " space \":\" space " + *v + " space");
      req.push_back(required.count(name) > 0);
    }
    const size_t n = kv.size();
    std::vector<std::string> rest_first(n + 1), rest_more(n + 1);
    // rest(n, *) is the tail: additional members when allowed, else nothing.
    if (extra.empty()) {
      rest_first[n] = rest_more[n] = "";
    } else {
      auto f = add_rule(hint + "-extra", "( " + extra + " ( \",\" space " + extra + " )* )?");
      auto m = add_rule(hint + "-extra-more", "( \",\" space " + extra + " )*");
      if (!f.ok()) return f.error();
      if (!m.ok()) return m.error();
      rest_first[n] = *f;
      rest_more[n] = *m;
    }
    for (size_t k = n; k-- > 0;) {
      for (int first = 0; first < 2; ++first) {
        const std::string lead = first ? "" : "\",\" space ";
        const std::string& tail = rest_more[k + 1];
        const std::string take = lead + kv[k] + (tail.empty() ? "" : " " + tail);
        const std::string& skip = first ? rest_first[k + 1] : rest_more[k + 1];
        std::string body = take;
        if (!req[k]) body = skip.empty() ? "( " + take + " )?" : "( " + take + " ) | " + skip;
        auto r = add_rule(hint + (first ? "-rest" : "-next"), body);
        if (!r.ok()) return r.error();
        (first ? rest_first[k] : rest_more[k]) = *r;
      }
    }
    const std::string members = rest_first[0].empty() ? "" : rest_first[0] + " ";
    return add_rule(hint, "\"{\" space " + members + "\"}\"");
  }

  std::string any_object() {
    use("object");
    return std::string("object");
  }

  const json& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
  std::map<std::string, int> suffix_;
};

}  // namespace

Status check_grammar(std::string_view gbnf) {
  auto r = grammar::parse_gbnf(gbnf);
  if (!r.ok()) return r.error();
  return Status::Ok();
}

Result<std::string> json_schema_to_grammar(std::string_view schema) {
  json s;
  try {
    s = json::parse(schema);
  } catch (const nlohmann::json::parse_error& e) {
    return err("json schema: not valid JSON at byte %zu", e.byte);
  }
  Result<std::string> g = Converter(s).run();
  if (!g.ok()) return g;
  // The converter's output must itself parse; a failure here is a bug, reported as such.
  if (auto p = grammar::parse_gbnf(*g); !p.ok())
    return err("json schema: internal error, the grammar made from it does not parse (%s)",
               p.error().message.c_str());
  return g;
}

std::string json_object_grammar() {
  std::string out = "root ::= object\n";
  for (const char* name : {"object", "value", "array", "string", "char", "number", "boolean", "null", "space"})
    out += std::string(name) + " ::= " + primitives().at(name) + "\n";
  return out;
}

}  // namespace pi
