#include <fno/torch_file.h>

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <unordered_map>

namespace fno {

namespace {

// Marker objects on the pickle stack. A Python global is kept as its
// "module.name" string wrapped in a tuple tagged kGlobalTag, so REDUCE can
// dispatch on it; everything else is plain IValue data.
constexpr const char* kGlobalTag = "\x01global";

c10::IValue make_tagged(const char* tag, const std::string& payload) {
  return c10::ivalue::Tuple::create({c10::IValue(std::string(tag)), c10::IValue(payload)});
}

bool is_tagged(const c10::IValue& v, const char* tag) {
  if (!v.isTuple()) return false;
  const auto& e = v.toTupleRef().elements();
  return e.size() == 2 && e[0].isString() && e[0].toStringRef() == tag;
}

std::string tagged_payload(const c10::IValue& v) {
  return v.toTupleRef().elements()[1].toStringRef();
}

c10::ScalarType storage_dtype(const std::string& name) {
  static const std::unordered_map<std::string, c10::ScalarType> kTypes = {
      {"torch.FloatStorage", c10::kFloat},
      {"torch.DoubleStorage", c10::kDouble},
      {"torch.HalfStorage", c10::kHalf},
      {"torch.BFloat16Storage", c10::kBFloat16},
      {"torch.LongStorage", c10::kLong},
      {"torch.IntStorage", c10::kInt},
      {"torch.ShortStorage", c10::kShort},
      {"torch.CharStorage", c10::kChar},
      {"torch.ByteStorage", c10::kByte},
      {"torch.BoolStorage", c10::kBool},
      {"torch.ComplexFloatStorage", c10::kComplexFloat},
      {"torch.ComplexDoubleStorage", c10::kComplexDouble},
  };
  auto it = kTypes.find(name);
  if (it == kTypes.end()) throw std::runtime_error("unsupported storage type " + name);
  return it->second;
}

class PickleMachine {
 public:
  PickleMachine(const char* data, size_t size, caffe2::serialize::PyTorchStreamReader& reader,
                std::string archive)
      : p_(data), end_(data + size), reader_(reader), archive_(std::move(archive)) {}

  c10::IValue run() {
    while (true) {
      const uint8_t op = read_u8();
      if (op == '.') {  // STOP
        if (stack_.empty()) fail("STOP with an empty stack");
        return stack_.back();
      }
      step(op);
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw std::runtime_error(what); }

  void need(size_t n) const {
    if (static_cast<size_t>(end_ - p_) < n) fail("truncated pickle");
  }
  uint8_t read_u8() {
    need(1);
    return static_cast<uint8_t>(*p_++);
  }
  template <typename T>
  T read_le() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  std::string read_bytes(uint64_t n) {
    if (n > static_cast<uint64_t>(end_ - p_)) fail("truncated pickle string");
    std::string s(p_, p_ + n);
    p_ += n;
    return s;
  }
  std::string read_line() {
    const char* nl = static_cast<const char*>(std::memchr(p_, '\n', end_ - p_));
    if (nl == nullptr) fail("truncated pickle line");
    std::string s(p_, nl);
    p_ = nl + 1;
    return s;
  }

  c10::IValue pop() {
    if (stack_.empty()) fail("pickle stack underflow");
    auto v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  c10::IValue& top() {
    if (stack_.empty()) fail("pickle stack underflow");
    return stack_.back();
  }
  // Items above the topmost mark, which is removed.
  std::vector<c10::IValue> pop_mark() {
    if (marks_.empty()) fail("pickle MARK missing");
    const size_t m = marks_.back();
    marks_.pop_back();
    if (m > stack_.size()) fail("corrupt pickle MARK");
    std::vector<c10::IValue> items(std::make_move_iterator(stack_.begin() + m),
                                   std::make_move_iterator(stack_.end()));
    stack_.resize(m);
    return items;
  }

  void memo_put(uint64_t key) { memo_[key] = top(); }
  void memo_get(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) fail("pickle memo key " + std::to_string(key) + " missing");
    stack_.push_back(it->second);
  }

  static c10::impl::GenericList new_list() {
    return c10::impl::GenericList(c10::AnyType::get());
  }
  static c10::impl::GenericDict new_dict() {
    return c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get());
  }

  void set_items(c10::IValue& target, std::vector<c10::IValue>& kv) {
    if (kv.size() % 2 != 0) fail("odd number of dict items");
    if (!target.isGenericDict()) return;  // items of an opaque object: ignored
    auto dict = target.toGenericDict();
    for (size_t i = 0; i < kv.size(); i += 2) {
      const auto& k = kv[i];
      if (!(k.isString() || k.isInt() || k.isDouble() || k.isBool() || k.isNone())) {
        continue;  // unhashable for IValue dicts; never a tensor name
      }
      dict.insert_or_assign(k, kv[i + 1]);
    }
  }

  void append_items(c10::IValue& target, std::vector<c10::IValue>& items) {
    if (!target.isList()) return;
    auto list = target.toList();
    for (auto& v : items) list.push_back(std::move(v));
  }

  c10::IValue load_storage(const c10::IValue& pid) {
    // ('storage', <global torch.XStorage>, key, location, numel)
    if (!pid.isTuple()) fail("unsupported persistent id");
    // A copy, so that indexing never reads past a short tuple's inline storage.
    const std::vector<c10::IValue> e = pid.toTupleRef().elements().vec();
    if (e.size() != 5 || !e[0].isString() || e[0].toStringRef() != "storage" ||
        !is_tagged(e[1], kGlobalTag) || !e[2].isString() || !e[4].isInt()) {
      fail("unsupported persistent id");
    }
    const auto dtype = storage_dtype(tagged_payload(e[1]));
    const std::string key = e[2].toStringRef();
    auto it = storages_.find(key);
    if (it != storages_.end()) return it->second;
    const int64_t numel = e[4].toInt();
    if (numel < 0) fail("negative storage size");
    const std::string record = archive_ + "data/" + key;
    if (!reader_.hasRecord(record)) fail("missing tensor record " + record);
    auto [data_ptr, nbytes] = reader_.getRecord(record);
    const size_t itemsize = c10::elementSize(dtype);
    if (nbytes != static_cast<size_t>(numel) * itemsize) {
      fail("tensor record " + record + " holds " + std::to_string(nbytes) + " bytes, expected " +
           std::to_string(numel * static_cast<int64_t>(itemsize)));
    }
    auto t = torch::empty({numel}, torch::TensorOptions().dtype(dtype));
    if (nbytes > 0) std::memcpy(t.data_ptr(), data_ptr.get(), nbytes);
    c10::IValue v(t);
    storages_.emplace(key, v);
    return v;
  }

  static std::vector<int64_t> int_tuple(const c10::IValue& v, const char* what) {
    if (!v.isTuple()) throw std::runtime_error(std::string("tensor ") + what + " is not a tuple");
    std::vector<int64_t> out;
    for (const auto& x : v.toTupleRef().elements()) {
      if (!x.isInt()) throw std::runtime_error(std::string("tensor ") + what + " is not integral");
      out.push_back(x.toInt());
    }
    return out;
  }

  c10::IValue rebuild_tensor(const c10::IValue& args) {
    // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
    if (!args.isTuple()) fail("bad _rebuild_tensor_v2 arguments");
    const auto& e = args.toTupleRef().elements();
    if (e.size() < 4 || !e[0].isTensor() || !e[1].isInt()) fail("bad _rebuild_tensor_v2 arguments");
    const auto storage = e[0].toTensor();
    const int64_t offset = e[1].toInt();
    const auto size = int_tuple(e[2], "size");
    const auto stride = int_tuple(e[3], "stride");
    if (size.size() != stride.size()) fail("tensor size and stride ranks differ");
    // Every element the view can address must lie inside the storage.
    int64_t last = offset;
    bool empty = false;
    for (size_t i = 0; i < size.size(); ++i) {
      if (size[i] < 0 || stride[i] < 0) fail("negative tensor size or stride");
      if (size[i] == 0) empty = true;
      else if (stride[i] > 0 && size[i] - 1 > (INT64_MAX - last) / stride[i]) fail("tensor too large");
      else last += (size[i] - 1) * stride[i];
    }
    if (offset < 0 || (!empty && last >= storage.numel())) {
      fail("tensor view exceeds its storage");
    }
    if (empty) return c10::IValue(torch::empty(size, storage.options()));
    return c10::IValue(storage.as_strided(size, stride, offset));
  }

  c10::IValue reduce(const c10::IValue& callable, const c10::IValue& args) {
    if (!is_tagged(callable, kGlobalTag)) return c10::IValue();
    const std::string name = tagged_payload(callable);
    if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor") {
      return rebuild_tensor(args);
    }
    if (name == "torch._utils._rebuild_parameter" ||
        name == "torch._utils._rebuild_parameter_with_state") {
      if (args.isTuple() && !args.toTupleRef().elements().empty() &&
          args.toTupleRef().elements()[0].isTensor()) {
        return args.toTupleRef().elements()[0];
      }
      fail("bad _rebuild_parameter arguments");
    }
    if (name.rfind("torch.jit._pickle.", 0) == 0) {
      // LibTorch's own pickler: restore_type_tag(obj, type) and build_*list(list).
      if (args.isTuple() && !args.toTupleRef().elements().empty()) {
        return args.toTupleRef().elements()[0];
      }
      fail("bad " + name + " arguments");
    }
    if (name == "collections.OrderedDict" || name == "builtins.dict") return new_dict();
    if (name == "builtins.list") return new_list();
    if (name == "builtins.set" || name == "builtins.frozenset") return new_list();
    return c10::IValue();  // any other Python object: opaque
  }

  void step(uint8_t op) {
    switch (op) {
      case 0x80: read_u8(); break;              // PROTO
      case 0x95: read_le<uint64_t>(); break;    // FRAME
      case '(': marks_.push_back(stack_.size()); break;  // MARK
      case '0': pop(); break;                   // POP
      case '1': pop_mark(); break;              // POP_MARK
      case '2': stack_.push_back(top()); break; // DUP
      case 'N': stack_.emplace_back(); break;   // NONE
      case 0x88: stack_.emplace_back(true); break;   // NEWTRUE
      case 0x89: stack_.emplace_back(false); break;  // NEWFALSE
      case 'J': stack_.emplace_back(static_cast<int64_t>(read_le<int32_t>())); break;  // BININT
      case 'K': stack_.emplace_back(static_cast<int64_t>(read_u8())); break;           // BININT1
      case 'M': stack_.emplace_back(static_cast<int64_t>(read_le<uint16_t>())); break; // BININT2
      case 0x8a:    // LONG1
      case 0x8b: {  // LONG4
        const uint64_t n = op == 0x8a ? read_u8() : read_le<uint32_t>();
        const std::string b = read_bytes(n);
        if (n > 8) fail("integer too large");
        int64_t v = 0;
        for (size_t i = 0; i < n; ++i) v |= static_cast<int64_t>(static_cast<uint8_t>(b[i])) << (8 * i);
        if (n > 0 && n < 8 && (static_cast<uint8_t>(b[n - 1]) & 0x80)) v -= int64_t(1) << (8 * n);
        stack_.emplace_back(v);
        break;
      }
      case 'G': {  // BINFLOAT, big-endian
        need(8);
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<uint8_t>(*p_++);
        double d;
        std::memcpy(&d, &bits, 8);
        stack_.emplace_back(d);
        break;
      }
      case 'I': {  // INT (text)
        const std::string s = read_line();
        if (s == "00") stack_.emplace_back(false);
        else if (s == "01") stack_.emplace_back(true);
        else {
          try {
            stack_.emplace_back(static_cast<int64_t>(std::stoll(s)));
          } catch (const std::exception&) {
            fail("bad INT");
          }
        }
        break;
      }
      case 'X': stack_.emplace_back(read_bytes(read_le<uint32_t>())); break;  // BINUNICODE
      case 0x8c: stack_.emplace_back(read_bytes(read_u8())); break;            // SHORT_BINUNICODE
      case 0x8d: stack_.emplace_back(read_bytes(read_le<uint64_t>())); break;  // BINUNICODE8
      case 'T': stack_.emplace_back(read_bytes(read_le<uint32_t>())); break;   // BINSTRING
      case 'U': stack_.emplace_back(read_bytes(read_u8())); break;             // SHORT_BINSTRING
      case 'B': stack_.emplace_back(read_bytes(read_le<uint32_t>())); break;   // BINBYTES
      case 'C': stack_.emplace_back(read_bytes(read_u8())); break;             // SHORT_BINBYTES
      case 0x8e: stack_.emplace_back(read_bytes(read_le<uint64_t>())); break;  // BINBYTES8
      case ')': stack_.emplace_back(c10::ivalue::Tuple::create({})); break;    // EMPTY_TUPLE
      case 0x85: {  // TUPLE1
        auto a = pop();
        stack_.emplace_back(c10::ivalue::Tuple::create({std::move(a)}));
        break;
      }
      case 0x86: {  // TUPLE2
        auto b = pop();
        auto a = pop();
        stack_.emplace_back(c10::ivalue::Tuple::create({std::move(a), std::move(b)}));
        break;
      }
      case 0x87: {  // TUPLE3
        auto c = pop();
        auto b = pop();
        auto a = pop();
        stack_.emplace_back(c10::ivalue::Tuple::create({std::move(a), std::move(b), std::move(c)}));
        break;
      }
      case 't': stack_.emplace_back(c10::ivalue::Tuple::create(pop_mark())); break;  // TUPLE
      case ']': stack_.emplace_back(new_list()); break;  // EMPTY_LIST
      case 'l': {  // LIST
        auto items = pop_mark();
        c10::IValue list(new_list());
        append_items(list, items);
        stack_.push_back(std::move(list));
        break;
      }
      case 'a': {  // APPEND
        std::vector<c10::IValue> items{pop()};
        append_items(top(), items);
        break;
      }
      case 'e': {  // APPENDS
        auto items = pop_mark();
        append_items(top(), items);
        break;
      }
      case '}': stack_.emplace_back(new_dict()); break;  // EMPTY_DICT
      case 'd': {  // DICT
        auto items = pop_mark();
        c10::IValue dict(new_dict());
        set_items(dict, items);
        stack_.push_back(std::move(dict));
        break;
      }
      case 's': {  // SETITEM
        auto v = pop();
        auto k = pop();
        std::vector<c10::IValue> kv{std::move(k), std::move(v)};
        set_items(top(), kv);
        break;
      }
      case 'u': {  // SETITEMS
        auto kv = pop_mark();
        set_items(top(), kv);
        break;
      }
      case 0x8f: stack_.emplace_back(new_list()); break;  // EMPTY_SET
      case 0x90: {  // ADDITEMS
        auto items = pop_mark();
        append_items(top(), items);
        break;
      }
      case 0x91: {  // FROZENSET
        auto items = pop_mark();
        c10::IValue list(new_list());
        append_items(list, items);
        stack_.push_back(std::move(list));
        break;
      }
      case 'c': {  // GLOBAL "module\nname\n"
        std::string module = read_line();
        std::string name = read_line();
        stack_.push_back(make_tagged(kGlobalTag, module + "." + name));
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        auto name = pop();
        auto module = pop();
        if (!name.isString() || !module.isString()) fail("bad STACK_GLOBAL");
        stack_.push_back(make_tagged(kGlobalTag, module.toStringRef() + "." + name.toStringRef()));
        break;
      }
      case 'R': {  // REDUCE
        auto args = pop();
        auto callable = pop();
        stack_.push_back(reduce(callable, args));
        break;
      }
      case 0x81: {  // NEWOBJ
        auto args = pop();
        auto cls = pop();
        stack_.push_back(reduce(cls, args));
        break;
      }
      case 0x92: {  // NEWOBJ_EX
        pop();  // kwargs
        auto args = pop();
        auto cls = pop();
        stack_.push_back(reduce(cls, args));
        break;
      }
      case 'b': pop(); break;  // BUILD: object state (e.g. OrderedDict._metadata) is ignored
      case 'Q': {              // BINPERSID
        auto pid = pop();
        stack_.push_back(load_storage(pid));
        break;
      }
      case 'q': memo_put(read_u8()); break;              // BINPUT
      case 'r': memo_put(read_le<uint32_t>()); break;    // LONG_BINPUT
      case 0x94: memo_put(memo_.size()); break;          // MEMOIZE
      case 'h': memo_get(read_u8()); break;              // BINGET
      case 'j': memo_get(read_le<uint32_t>()); break;    // LONG_BINGET
      case 'p':  // PUT (text)
      case 'g': {  // GET (text)
        uint64_t key = 0;
        try {
          key = std::stoull(read_line());
        } catch (const std::exception&) {
          fail("bad memo key");
        }
        if (op == 'p') memo_put(key);
        else memo_get(key);
        break;
      }
      default: {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "0x%02x", op);
        fail(std::string("unsupported pickle opcode ") + buf);
      }
    }
    if (stack_.size() > kMaxStack) fail("pickle stack too deep");
  }

  static constexpr size_t kMaxStack = 1 << 20;
  const char* p_;
  const char* end_;
  caffe2::serialize::PyTorchStreamReader& reader_;
  std::string archive_;
  std::vector<c10::IValue> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, c10::IValue> memo_;
  std::unordered_map<std::string, c10::IValue> storages_;
};

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

c10::IValue read_torch_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw std::runtime_error(path + ": no such file");
  if (!std::filesystem::is_regular_file(path, ec)) throw std::runtime_error(path + ": not a regular file");
  if (std::filesystem::file_size(path, ec) == 0) throw std::runtime_error(path + ": empty file");
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    // PyTorchStreamReader strips the archive's top folder; records are "data.pkl", "data/0".
    if (!reader.hasRecord("data.pkl")) {
      throw std::runtime_error("no data.pkl record (not a torch.save file)");
    }
    auto [pkl, size] = reader.getRecord("data.pkl");
    PickleMachine machine(static_cast<const char*>(pkl.get()), size, reader, "");
    return machine.run();
  } catch (const c10::Error& e) {
    throw std::runtime_error(path + ": not a readable torch.save file: " +
                             first_line(e.what_without_backtrace()));
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

}  // namespace fno
