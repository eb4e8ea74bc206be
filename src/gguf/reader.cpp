#include "gguf/reader.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace pi::gguf {

// Reads the file front to back with a bounds-checked cursor. Every failure becomes an
// Error "<file>: offset <n>: <problem>".
class Parser {
 public:
  Parser(File& f, const ReadLimits& limits) : f_(f), limits_(limits) {}

  Status parse();

 private:
  template <typename... Args>
  Error fail(uint64_t at, const char* fmt, Args... args) const {
    Error e = err(fmt, args...);
    return err("%s: offset %llu: %s", f_.path_.c_str(), static_cast<unsigned long long>(at),
               e.message.c_str());
  }

  uint64_t remaining() const { return f_.size_ - pos_; }

  template <typename T>
  Result<T> read_pod(const char* what) {
    if (remaining() < sizeof(T)) {
      return fail(pos_, "truncated file: need %zu bytes for %s, %llu left", sizeof(T), what,
                  static_cast<unsigned long long>(remaining()));
    }
    T v;
    std::memcpy(&v, f_.base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  Result<std::string> read_string(const char* what);
  Result<Value> read_value(ValueType type, uint32_t depth, const std::string& key);
  Status parse_kv(uint64_t n_kv);
  Status parse_tensor_infos(uint64_t n_tensors);
  Status check_tensor_data();

  File& f_;
  const ReadLimits& limits_;
  uint64_t pos_ = 0;
};

namespace {
// Smallest encoding of one element of each value type, for count-vs-remaining checks.
uint64_t min_encoded_size(ValueType t) {
  switch (t) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::Bool: return 1;
    case ValueType::U16:
    case ValueType::I16: return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32: return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64:
    case ValueType::String: return 8;   // the length prefix
    case ValueType::Array: return 12;  // element type + count
  }
  return 1;
}
}  // namespace

Result<std::string> Parser::read_string(const char* what) {
  uint64_t at = pos_;
  auto len = read_pod<uint64_t>(what);
  if (!len.ok()) return len.error();
  if (*len > remaining()) {
    return fail(at, "%s length %llu runs past end of file (%llu bytes left)", what,
                static_cast<unsigned long long>(*len),
                static_cast<unsigned long long>(remaining()));
  }
  if (*len > limits_.max_string_bytes) {
    return fail(at, "%s length %llu exceeds limit", what, static_cast<unsigned long long>(*len));
  }
  std::string s(reinterpret_cast<const char*>(f_.base_ + pos_), static_cast<size_t>(*len));
  pos_ += *len;
  return s;
}

Result<Value> Parser::read_value(ValueType type, uint32_t depth, const std::string& key) {
  switch (type) {
    case ValueType::U8: { auto v = read_pod<uint8_t>("u8 value"); if (!v.ok()) return v.error(); return Value(*v); }
    case ValueType::I8: { auto v = read_pod<int8_t>("i8 value"); if (!v.ok()) return v.error(); return Value(*v); }
    case ValueType::U16: { auto v = read_pod<uint16_t>("u16 value"); if (!v.ok()) return v.error(); return Value(*v); }
    case ValueType::I16: { auto v = read_pod<int16_t>("i16 value"); if (!v.ok()) return v.error(); return Value(*v); }
    case ValueType::U32: { auto v = read_pod<uint32_t>("u32 value"); if (!v.ok()) return v.error(); return Value(*v); }
    case ValueType::I32: { auto v = read_pod<int32_t>("i32 value"); if (!v.ok()) return v.error(); return Value(*v); }
    case ValueType::F32: { auto v = read_pod<float>("f32 value"); if (!v.ok()) return v.error(); return Value(*v); }
    case ValueType::U64: { auto v = read_pod<uint64_t>("u64 value"); if (!v.ok()) return v.error(); return Value(*v); }
    case ValueType::I64: { auto v = read_pod<int64_t>("i64 value"); if (!v.ok()) return v.error(); return Value(*v); }
    case ValueType::F64: { auto v = read_pod<double>("f64 value"); if (!v.ok()) return v.error(); return Value(*v); }
    case ValueType::Bool: {
      uint64_t at = pos_;
      auto v = read_pod<uint8_t>("bool value");
      if (!v.ok()) return v.error();
      if (*v > 1) return fail(at, "key '%s': bool value %u is not 0 or 1", key.c_str(), *v);
      return Value(*v != 0);
    }
    case ValueType::String: {
      auto s = read_string("string value");
      if (!s.ok()) return s.error();
      return Value(std::move(*s));
    }
    case ValueType::Array: {
      uint64_t at = pos_;
      if (depth >= limits_.max_array_depth) {
        return fail(at, "key '%s': arrays nested deeper than %u", key.c_str(),
                    limits_.max_array_depth);
      }
      auto et = read_pod<uint32_t>("array element type");
      if (!et.ok()) return et.error();
      if (*et >= kNumValueTypes) {
        return fail(at, "key '%s': unknown array element type %u", key.c_str(), *et);
      }
      uint64_t count_at = pos_;
      auto count = read_pod<uint64_t>("array length");
      if (!count.ok()) return count.error();
      const auto elem = static_cast<ValueType>(*et);
      if (*count > remaining() / min_encoded_size(elem)) {
        return fail(count_at, "key '%s': array of %llu %s elements runs past end of file",
                    key.c_str(), static_cast<unsigned long long>(*count),
                    std::string(value_type_name(elem)).c_str());
      }
      if (*count > limits_.max_array_items) {
        return fail(count_at, "key '%s': array of %llu elements exceeds the limit of %llu",
                    key.c_str(), static_cast<unsigned long long>(*count),
                    static_cast<unsigned long long>(limits_.max_array_items));
      }
      Array arr;
      arr.elem_type = elem;
      arr.items.reserve(static_cast<size_t>(*count));
      for (uint64_t i = 0; i < *count; ++i) {
        auto v = read_value(elem, depth + 1, key);
        if (!v.ok()) return v.error();
        arr.items.push_back(std::move(*v));
      }
      return Value(std::move(arr));
    }
  }
  return fail(pos_, "key '%s': unknown value type %u", key.c_str(), static_cast<unsigned>(type));
}

Status Parser::parse_kv(uint64_t n_kv) {
  for (uint64_t i = 0; i < n_kv; ++i) {
    uint64_t at = pos_;
    auto key = read_string("metadata key");
    if (!key.ok()) return key.error();
    if (key->empty()) return fail(at, "metadata key %llu is empty", static_cast<unsigned long long>(i));
    if (f_.kv_index_.count(*key)) return fail(at, "duplicate metadata key '%s'", key->c_str());
    uint64_t type_at = pos_;
    auto type = read_pod<uint32_t>("value type");
    if (!type.ok()) return type.error();
    if (*type >= kNumValueTypes) {
      return fail(type_at, "key '%s': unknown value type %u", key->c_str(), *type);
    }
    auto value = read_value(static_cast<ValueType>(*type), 0, *key);
    if (!value.ok()) return value.error();
    f_.kv_index_.emplace(*key, f_.kvs_.size());
    f_.kvs_.push_back(KeyValue{std::move(*key), std::move(*value), at});
  }

  if (const Value* a = f_.find("general.alignment")) {
    const auto* v = std::get_if<uint32_t>(&a->data);
    if (v == nullptr) {
      return fail(f_.kvs_[f_.kv_index_.find("general.alignment")->second].offset,
                  "general.alignment must be u32, found %s",
                  std::string(value_type_name(a->type())).c_str());
    }
    if (*v == 0 || (*v & (*v - 1)) != 0) {
      return fail(f_.kvs_[f_.kv_index_.find("general.alignment")->second].offset,
                  "general.alignment %u is not a power of two", *v);
    }
    f_.alignment_ = *v;
  }
  return Status::Ok();
}

Status Parser::parse_tensor_infos(uint64_t n_tensors) {
  f_.tensors_.reserve(static_cast<size_t>(n_tensors));
  const bool gpu_index = f_.is_gpu_index();
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.info_offset = pos_;
    auto name = read_string("tensor name");
    if (!name.ok()) return name.error();
    if (name->empty()) return fail(t.info_offset, "tensor %llu has an empty name", static_cast<unsigned long long>(i));
    if (f_.tensor_index_.count(*name)) {
      return fail(t.info_offset, "duplicate tensor name '%s'", name->c_str());
    }
    t.name = std::move(*name);
    uint64_t at = pos_;
    auto n_dims = read_pod<uint32_t>("tensor rank");
    if (!n_dims.ok()) return n_dims.error();
    if (*n_dims == 0 || *n_dims > static_cast<uint32_t>(Shape::kMaxRank)) {
      return fail(at, "tensor '%s': rank %u not in 1..%d", t.name.c_str(), *n_dims, Shape::kMaxRank);
    }
    t.shape.rank = static_cast<int>(*n_dims);
    // The file lists dimensions innermost first; Shape stores outermost first.
    uint64_t numel = 1;
    for (uint32_t d = 0; d < *n_dims; ++d) {
      at = pos_;
      auto dim = read_pod<uint64_t>("tensor dimension");
      if (!dim.ok()) return dim.error();
      // Index files may hold empty tensors (a layer without hot neurons).
      if ((*dim == 0 && !gpu_index) || *dim > static_cast<uint64_t>(limits_.max_dim)) {
        return fail(at, "tensor '%s': dimension %u is %llu (must be %d..%lld)", t.name.c_str(), d,
                    static_cast<unsigned long long>(*dim), gpu_index ? 0 : 1,
                    static_cast<long long>(limits_.max_dim));
      }
      if (numel > std::numeric_limits<uint64_t>::max() / *dim ||
          numel * *dim > (uint64_t{1} << 62)) {
        return fail(at, "tensor '%s': element count overflows", t.name.c_str());
      }
      numel *= *dim;
      t.shape[static_cast<int>(*n_dims - 1 - d)] = static_cast<int64_t>(*dim);
    }
    at = pos_;
    auto type = read_pod<uint32_t>("tensor type");
    if (!type.ok()) return type.error();
    auto info = gpu_index ? dtype_info_gpu_index(*type) : dtype_info(*type);
    if (!info) return fail(at, "tensor '%s': unknown tensor type %u", t.name.c_str(), *type);
    t.type = info->type;
    if (t.shape.cols() % info->block_size != 0) {
      return fail(at, "tensor '%s': row length %lld is not a multiple of the %s block size %lld",
                  t.name.c_str(), static_cast<long long>(t.shape.cols()),
                  std::string(info->name).c_str(), static_cast<long long>(info->block_size));
    }
    t.nbytes = numel / static_cast<uint64_t>(info->block_size) * info->type_size;
    at = pos_;
    auto off = read_pod<uint64_t>("tensor data offset");
    if (!off.ok()) return off.error();
    if (*off % f_.alignment_ != 0) {
      return fail(at, "tensor '%s': data offset %llu is not a multiple of the alignment %u",
                  t.name.c_str(), static_cast<unsigned long long>(*off), f_.alignment_);
    }
    t.offset = *off;
    f_.tensor_index_.emplace(t.name, f_.tensors_.size());
    f_.tensors_.push_back(std::move(t));
  }
  return Status::Ok();
}

Status Parser::check_tensor_data() {
  uint64_t data = (pos_ + f_.alignment_ - 1) / f_.alignment_ * f_.alignment_;
  if (f_.tensors_.empty()) {
    f_.data_offset_ = std::min<uint64_t>(data, f_.size_);
    return Status::Ok();
  }
  if (data > f_.size_) {
    return fail(pos_, "data section at %llu starts past end of file (%llu bytes)",
                static_cast<unsigned long long>(data), static_cast<unsigned long long>(f_.size_));
  }
  f_.data_offset_ = data;
  const uint64_t avail = f_.size_ - data;
  std::vector<const TensorInfo*> order;
  order.reserve(f_.tensors_.size());
  for (const auto& t : f_.tensors_) {
    if (t.offset > avail || t.nbytes > avail - t.offset) {
      return fail(t.info_offset,
                  "tensor '%s': data [%llu, +%llu) runs past end of file (data section holds %llu bytes)",
                  t.name.c_str(), static_cast<unsigned long long>(t.offset),
                  static_cast<unsigned long long>(t.nbytes), static_cast<unsigned long long>(avail));
    }
    if (t.nbytes > 0) order.push_back(&t);  // empty tensors (index files) occupy nothing
  }
  std::sort(order.begin(), order.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const TensorInfo* prev = order[i - 1];
    if (prev->offset + prev->nbytes > order[i]->offset) {
      return fail(order[i]->info_offset, "tensor '%s' data overlaps tensor '%s'",
                  order[i]->name.c_str(), prev->name.c_str());
    }
  }
  return Status::Ok();
}

Status Parser::parse() {
  auto magic = read_pod<uint32_t>("magic");
  if (!magic.ok()) return magic.error();
  if (*magic == static_cast<uint32_t>(Magic::GGUF)) {
    f_.magic_ = Magic::GGUF;
  } else if (*magic == static_cast<uint32_t>(Magic::PWRI)) {
    f_.magic_ = Magic::PWRI;
  } else {
    char m[5] = {};
    std::memcpy(m, &*magic, 4);
    for (char& c : m) if (c != 0 && (c < 0x20 || c > 0x7e)) c = '?';
    return fail(0, "bad magic '%s' (0x%08x): not a GGUF or PowerInfer file", m, *magic);
  }
  auto version = read_pod<uint32_t>("version");
  if (!version.ok()) return version.error();
  if (*version != 2 && *version != 3) {
    return fail(4, "unsupported GGUF version %u (supported: 2, 3)", *version);
  }
  f_.version_ = *version;
  auto n_tensors = read_pod<uint64_t>("tensor count");
  if (!n_tensors.ok()) return n_tensors.error();
  auto n_kv = read_pod<uint64_t>("metadata count");
  if (!n_kv.ok()) return n_kv.error();
  // Each KV takes at least 8 (key length) + 4 (type) + 1 bytes; each tensor info at least
  // 8 + 4 + 8 + 4 + 8 bytes. Counts that cannot fit are rejected before any allocation.
  if (*n_kv > remaining() / 13) {
    return fail(16, "metadata count %llu cannot fit in the file", static_cast<unsigned long long>(*n_kv));
  }
  if (*n_tensors > remaining() / 32) {
    return fail(8, "tensor count %llu cannot fit in the file", static_cast<unsigned long long>(*n_tensors));
  }
  PI_TRY(parse_kv(*n_kv));
  PI_TRY(parse_tensor_infos(*n_tensors));
  PI_TRY(check_tensor_data());
  return Status::Ok();
}

Result<File> File::open(const std::string& path, const ReadLimits& limits, LoadMode mode) {
  auto map = MappedFile::open(path, mode);
  if (!map.ok()) return map.error();
  File f;
  f.map_ = std::move(*map);
  f.path_ = path;
  f.base_ = f.map_.data();
  f.size_ = f.map_.size();
  Parser p(f, limits);
  PI_TRY(p.parse());
  return f;
}

Result<File> parse_bytes(std::string name, const std::byte* data, size_t size,
                         const ReadLimits& limits) {
  File f;
  f.path_ = std::move(name);
  f.base_ = data;
  f.size_ = size;
  Parser p(f, limits);
  PI_TRY(p.parse());
  return f;
}

bool File::is_gpu_index() const {
  if (magic_ != Magic::PWRI) return false;
  const Value* arch = find("general.architecture");
  return arch != nullptr && arch->as_string() != nullptr && *arch->as_string() == kGpuIndexArch;
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

TensorView File::view(const TensorInfo& info) const {
  return TensorView{&info, base_ + data_offset_ + info.offset};
}

Result<TensorView> File::tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (t == nullptr) return err("%s: missing tensor '%.*s'", path_.c_str(), static_cast<int>(name.size()), name.data());
  return view(*t);
}

void File::prefetch(const TensorInfo& info) const {
  map_.prefetch(data_offset_ + info.offset, info.nbytes);
}

Result<std::string> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return err("%s: missing metadata key '%.*s'", path_.c_str(), static_cast<int>(key.size()), key.data());
  if (const std::string* s = v->as_string()) return *s;
  return err("%s: metadata key '%.*s' is %s, expected str", path_.c_str(), static_cast<int>(key.size()),
             key.data(), std::string(value_type_name(v->type())).c_str());
}

Result<int64_t> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return err("%s: missing metadata key '%.*s'", path_.c_str(), static_cast<int>(key.size()), key.data());
  if (auto i = v->as_int()) return *i;
  return err("%s: metadata key '%.*s' is %s, expected an integer", path_.c_str(),
             static_cast<int>(key.size()), key.data(), std::string(value_type_name(v->type())).c_str());
}

Result<double> File::get_number(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return err("%s: missing metadata key '%.*s'", path_.c_str(), static_cast<int>(key.size()), key.data());
  if (auto d = v->as_number()) return *d;
  return err("%s: metadata key '%.*s' is %s, expected a number", path_.c_str(),
             static_cast<int>(key.size()), key.data(), std::string(value_type_name(v->type())).c_str());
}

int64_t File::get_int_or(std::string_view key, int64_t def) const {
  const Value* v = find(key);
  if (v == nullptr) return def;
  return v->as_int().value_or(def);
}

double File::get_number_or(std::string_view key, double def) const {
  const Value* v = find(key);
  if (v == nullptr) return def;
  return v->as_number().value_or(def);
}

}  // namespace pi::gguf
