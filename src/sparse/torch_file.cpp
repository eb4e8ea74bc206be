#include "sparse/torch_file.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "tensor/quant.h"

namespace pi::sparse {
namespace {

uint64_t le(const std::string& b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<size_t>(i)]);
  return v;
}

// The stored entries of a zip archive: name -> [offset, offset + size) in the file's bytes.
struct Entry {
  size_t offset = 0, size = 0;
};

Result<std::map<std::string, Entry>> zip_entries(const std::string& b, const std::string& path) {
  // The end-of-central-directory record: its signature within the last 64 KiB + 22 bytes.
  if (b.size() < 22) return err("%s: not a torch file (too short for a zip archive)", path.c_str());
  size_t eocd = std::string::npos;
  const size_t lowest = b.size() > 65557 ? b.size() - 65557 : 0;
  for (size_t at = b.size() - 22;; --at) {
    if (le(b, at, 4) == 0x06054b50) {
      eocd = at;
      break;
    }
    if (at == lowest) break;
  }
  if (eocd == std::string::npos) return err("%s: not a torch file (no zip directory; legacy torch files need torch)", path.c_str());
  const uint64_t n = le(b, eocd + 10, 2), dir_size = le(b, eocd + 12, 4), dir_at = le(b, eocd + 16, 4);
  if (dir_at == 0xffffffffu || dir_at + dir_size > b.size())
    return err("%s: zip directory out of bounds (a zip64 archive?)", path.c_str());
  std::map<std::string, Entry> out;
  size_t at = dir_at;
  for (uint64_t i = 0; i < n; ++i) {
    if (at + 46 > b.size() || le(b, at, 4) != 0x02014b50) return err("%s: zip directory entry %llu is damaged", path.c_str(), static_cast<unsigned long long>(i));
    const uint64_t method = le(b, at + 10, 2), csize = le(b, at + 20, 4), usize = le(b, at + 24, 4);
    const uint64_t name_len = le(b, at + 28, 2), extra_len = le(b, at + 30, 2), comment_len = le(b, at + 32, 2);
    const uint64_t local = le(b, at + 42, 4);
    if (at + 46 + name_len > b.size()) return err("%s: zip directory entry %llu is damaged", path.c_str(), static_cast<unsigned long long>(i));
    std::string name = b.substr(at + 46, name_len);
    if (local + 30 > b.size() || le(b, local, 4) != 0x04034b50) return err("%s: zip entry %s is damaged", path.c_str(), name.c_str());
    const size_t data = local + 30 + le(b, local + 26, 2) + le(b, local + 28, 2);
    if (method != 0 || csize != usize) return err("%s: zip entry %s is compressed (torch stores them plain)", path.c_str(), name.c_str());
    if (data + usize > b.size()) return err("%s: zip entry %s runs past the end of the file", path.c_str(), name.c_str());
    out[std::move(name)] = Entry{data, static_cast<size_t>(usize)};
    at += 46 + name_len + extra_len + comment_len;
  }
  return out;
}

// A pickle value, as far as a saved tensor needs.
struct Value;
using ValuePtr = std::shared_ptr<Value>;
struct Value {
  enum Kind { None, Bool, Int, Str, Tuple, Global, Storage, Tensor, Dict, List, Mark, Other } kind = None;
  int64_t i = 0;
  std::string s;                // Str; Global "module name"; Storage: its type's global
  std::vector<ValuePtr> items;  // Tuple, List; Storage: (key); Tensor: (storage, offset, size, stride)
};

ValuePtr make(Value::Kind k, int64_t i = 0, std::string s = {}) {
  auto v = std::make_shared<Value>();
  v->kind = k;
  v->i = i;
  v->s = std::move(s);
  return v;
}

Result<ValuePtr> unpickle(const std::string& p, const std::string& path) {
  std::vector<ValuePtr> stack;
  std::map<int64_t, ValuePtr> memo;
  size_t at = 0;
  const auto need = [&](size_t n) { return at + n <= p.size(); };
  const auto damaged = [&]() { return err("%s: data.pkl ends early at offset %zu", path.c_str(), at); };
  const auto pop = [&]() -> ValuePtr {
    if (stack.empty()) return nullptr;
    ValuePtr v = stack.back();
    stack.pop_back();
    return v;
  };
  const auto pop_mark = [&]() -> Result<std::vector<ValuePtr>> {
    std::vector<ValuePtr> items;
    while (!stack.empty() && stack.back()->kind != Value::Mark) items.insert(items.begin(), pop());
    if (stack.empty()) return err("%s: data.pkl: no mark at offset %zu", path.c_str(), at);
    stack.pop_back();
    return items;
  };
  const auto line = [&]() -> std::string {
    const size_t nl = p.find('\n', at);
    if (nl == std::string::npos) {
      at = p.size();
      return {};
    }
    std::string s = p.substr(at, nl - at);
    at = nl + 1;
    return s;
  };
  while (at < p.size()) {
    const auto op = static_cast<unsigned char>(p[at++]);
    switch (op) {
      case 0x80: at += 1; break;  // PROTO
      case 0x95: at += 8; break;  // FRAME
      case 'c': {                 // GLOBAL
        std::string mod = line();
        std::string name = line();
        stack.push_back(make(Value::Global, 0, mod + " " + name));
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        ValuePtr name = pop(), mod = pop();
        if (!name || !mod) return damaged();
        stack.push_back(make(Value::Global, 0, mod->s + " " + name->s));
        break;
      }
      case 'q':
        if (!need(1) || stack.empty()) return damaged();
        memo[static_cast<unsigned char>(p[at])] = stack.back();
        at += 1;
        break;
      case 'r':
        if (!need(4) || stack.empty()) return damaged();
        memo[static_cast<int64_t>(le(p, at, 4))] = stack.back();
        at += 4;
        break;
      case 0x94:  // MEMOIZE
        if (stack.empty()) return damaged();
        memo[static_cast<int64_t>(memo.size())] = stack.back();
        break;
      case 'h':
      case 'j': {
        const int n = op == 'h' ? 1 : 4;
        if (!need(static_cast<size_t>(n))) return damaged();
        auto it = memo.find(static_cast<int64_t>(le(p, at, n)));
        if (it == memo.end()) return err("%s: data.pkl: unknown memo entry at offset %zu", path.c_str(), at);
        stack.push_back(it->second);
        at += static_cast<size_t>(n);
        break;
      }
      case '(': stack.push_back(make(Value::Mark)); break;
      case 'X':
      case 0x8c:
      case 'U':
      case 'T': {  // BINUNICODE, SHORT_BINUNICODE, SHORT_BINSTRING, BINSTRING
        const int n = op == 'X' || op == 'T' ? 4 : 1;
        if (!need(static_cast<size_t>(n))) return damaged();
        const size_t len = le(p, at, n);
        at += static_cast<size_t>(n);
        if (!need(len)) return damaged();
        stack.push_back(make(Value::Str, 0, p.substr(at, len)));
        at += len;
        break;
      }
      case 'K':
      case 'M':
      case 'J': {
        const int n = op == 'K' ? 1 : op == 'M' ? 2 : 4;
        if (!need(static_cast<size_t>(n))) return damaged();
        int64_t v = static_cast<int64_t>(le(p, at, n));
        if (op == 'J') v = static_cast<int32_t>(static_cast<uint32_t>(v));
        stack.push_back(make(Value::Int, v));
        at += static_cast<size_t>(n);
        break;
      }
      case 0x8a: {  // LONG1
        if (!need(1)) return damaged();
        const size_t n = static_cast<unsigned char>(p[at++]);
        if (n > 8 || !need(n)) return err("%s: data.pkl: an integer of %zu bytes at offset %zu", path.c_str(), n, at);
        uint64_t v = n == 0 ? 0 : le(p, at, static_cast<int>(n));
        if (n > 0 && n < 8 && (v >> (8 * n - 1)) != 0) v |= ~uint64_t{0} << (8 * n);  // sign
        stack.push_back(make(Value::Int, static_cast<int64_t>(v)));
        at += n;
        break;
      }
      case 'N': stack.push_back(make(Value::None)); break;
      case 0x88: stack.push_back(make(Value::Bool, 1)); break;
      case 0x89: stack.push_back(make(Value::Bool, 0)); break;
      case ')': stack.push_back(make(Value::Tuple)); break;
      case ']': stack.push_back(make(Value::List)); break;
      case '}': stack.push_back(make(Value::Dict)); break;
      case 't':
      case 'l': {
        auto items = pop_mark();
        if (!items.ok()) return items.error();
        ValuePtr v = make(op == 't' ? Value::Tuple : Value::List);
        v->items = std::move(*items);
        stack.push_back(v);
        break;
      }
      case 0x85:
      case 0x86:
      case 0x87: {
        const size_t n = op - 0x84u;
        if (stack.size() < n) return damaged();
        ValuePtr v = make(Value::Tuple);
        v->items.assign(stack.end() - static_cast<std::ptrdiff_t>(n), stack.end());
        stack.resize(stack.size() - n);
        stack.push_back(v);
        break;
      }
      case 'a':
      case 's':
      case 'b':
        // APPEND (list), SETITEM (dict: key and value), BUILD (state): nothing a tensor needs.
        if (stack.size() < (op == 's' ? 3u : 2u)) return damaged();
        stack.resize(stack.size() - (op == 's' ? 2u : 1u));
        break;
      case 'e':
      case 'u': {  // APPENDS, SETITEMS
        auto items = pop_mark();
        if (!items.ok()) return items.error();
        break;
      }
      case 'Q': {  // BINPERSID: ('storage', type, key, location, numel)
        ValuePtr pid = pop();
        if (!pid || pid->kind != Value::Tuple || pid->items.size() < 5 || pid->items[0]->s != "storage" ||
            pid->items[1]->kind != Value::Global || pid->items[2]->kind != Value::Str)
          return err("%s: data.pkl: a persistent id that is not a torch storage at offset %zu", path.c_str(), at);
        ValuePtr st = make(Value::Storage, pid->items[4]->i, pid->items[1]->s);
        st->items.push_back(pid->items[2]);
        stack.push_back(st);
        break;
      }
      case 'R': {  // REDUCE
        ValuePtr args = pop(), fn = pop();
        if (!args || !fn) return damaged();
        if (fn->kind == Value::Global && (fn->s == "torch._utils _rebuild_tensor_v2" || fn->s == "torch._utils _rebuild_tensor")) {
          if (args->items.size() < 4 || args->items[0]->kind != Value::Storage)
            return err("%s: data.pkl: _rebuild_tensor without a storage", path.c_str());
          ValuePtr t = make(Value::Tensor);
          t->items.assign(args->items.begin(), args->items.begin() + 4);
          stack.push_back(t);
        } else if (fn->kind == Value::Global && fn->s == "collections OrderedDict") {
          stack.push_back(make(Value::Dict));
        } else {
          stack.push_back(make(Value::Other, 0, fn->s));
        }
        break;
      }
      case '.': {
        ValuePtr v = pop();
        if (!v) return damaged();
        return v;
      }
      default:
        return err("%s: data.pkl: unsupported pickle opcode 0x%02x at offset %zu", path.c_str(), op, at - 1);
    }
  }
  return err("%s: data.pkl has no STOP", path.c_str());
}

}  // namespace

Result<std::vector<float>> read_torch_1d(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return err("%s: cannot open", path.c_str());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string b = ss.str();
  auto entries = zip_entries(b, path);
  if (!entries.ok()) return entries.error();
  std::string prefix;
  const Entry* pkl = nullptr;
  for (const auto& [name, e] : *entries) {
    if (name == "data.pkl" || (name.size() > 9 && name.compare(name.size() - 9, 9, "/data.pkl") == 0)) {
      if (pkl != nullptr) return err("%s: more than one data.pkl", path.c_str());
      pkl = &e;
      prefix = name.substr(0, name.size() - 8);
    }
  }
  if (pkl == nullptr) return err("%s: a zip archive without data.pkl: not a torch file", path.c_str());
  if (auto bo = entries->find(prefix + "byteorder"); bo != entries->end() && b.substr(bo->second.offset, bo->second.size) != "little")
    return err("%s: a big-endian torch file", path.c_str());
  auto v = unpickle(b.substr(pkl->offset, pkl->size), path);
  if (!v.ok()) return v.error();
  const Value& t = **v;
  if (t.kind != Value::Tensor) return err("%s: holds no tensor (a state dict or another object)", path.c_str());
  const Value& st = *t.items[0];
  const Value &offset = *t.items[1], &size = *t.items[2], &stride = *t.items[3];
  if (offset.kind != Value::Int || size.kind != Value::Tuple || stride.kind != Value::Tuple)
    return err("%s: the tensor's offset, size or stride is not understood", path.c_str());
  if (size.items.size() != 1 || stride.items.size() != 1)
    return err("%s: a tensor of %zu dimensions, expected 1", path.c_str(), size.items.size());
  const int64_t n = size.items[0]->i, step = stride.items[0]->i;
  enum class Kind { F32, F64, F16, BF16, I64, I32 };
  struct Type {
    const char* name;
    Kind kind;
    size_t bytes;
  };
  static constexpr Type kTypes[] = {{"torch FloatStorage", Kind::F32, 4}, {"torch DoubleStorage", Kind::F64, 8},
                                    {"torch HalfStorage", Kind::F16, 2},  {"torch BFloat16Storage", Kind::BF16, 2},
                                    {"torch LongStorage", Kind::I64, 8},  {"torch IntStorage", Kind::I32, 4}};
  const Type* type = nullptr;
  for (const Type& k : kTypes)
    if (st.s == k.name) type = &k;
  if (type == nullptr) return err("%s: storage type %s is not supported", path.c_str(), st.s.c_str());
  auto data = entries->find(prefix + "data/" + st.items[0]->s);
  if (data == entries->end()) return err("%s: storage %s is missing", path.c_str(), st.items[0]->s.c_str());
  if (n < 0 || step < 0 || offset.i < 0) return err("%s: negative size, stride or offset", path.c_str());
  const uint64_t last = n == 0 ? 0 : static_cast<uint64_t>(offset.i) + static_cast<uint64_t>(n - 1) * static_cast<uint64_t>(step) + 1;
  if (last * type->bytes > data->second.size)
    return err("%s: the tensor reads %llu elements of a storage of %zu bytes", path.c_str(),
               static_cast<unsigned long long>(last), data->second.size);
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const size_t at = data->second.offset + static_cast<size_t>(offset.i + i * step) * type->bytes;
    const uint64_t raw = le(b, at, static_cast<int>(type->bytes));
    float x = 0;
    switch (type->kind) {
      case Kind::F32: x = std::bit_cast<float>(static_cast<uint32_t>(raw)); break;
      case Kind::F64: x = static_cast<float>(std::bit_cast<double>(raw)); break;
      case Kind::F16: x = f16_to_f32(static_cast<uint16_t>(raw)); break;
      case Kind::BF16: x = std::bit_cast<float>(static_cast<uint32_t>(raw << 16)); break;
      case Kind::I64: x = static_cast<float>(static_cast<int64_t>(raw)); break;
      case Kind::I32: x = static_cast<float>(static_cast<int32_t>(static_cast<uint32_t>(raw))); break;
    }
    out[static_cast<size_t>(i)] = x;
  }
  return out;
}

}  // namespace pi::sparse
