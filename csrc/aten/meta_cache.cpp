#include "aten/meta_cache.h"

#include <c10/core/DefaultDtype.h>

#include <cstring>
#include <mutex>
#include <unordered_map>

namespace simhpu {

namespace {

// Tags that keep one kind of value from reading as another.
enum Tag : int64_t { kNone = -1, kTensor = -2, kList = -3, kInt = -4, kDouble = -5, kBool = -6, kString = -7,
                     kDevice = -8, kScalarType = -9, kEnd = -10, kComplex = -11 };

int64_t bits_of(double d) {
  int64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  return bits;
}

int64_t index_in(c10::SmallVector<const void*, 8>& seen, const void* p) {
  for (size_t i = 0; i < seen.size(); ++i) {
    if (seen[i] == p) return static_cast<int64_t>(i);
  }
  seen.push_back(p);
  return static_cast<int64_t>(seen.size() - 1);
}

struct SignatureHash {
  size_t operator()(const MetaSignature& s) const { return s.hash(); }
};

std::mutex cache_mu;
// Entries are a few hundred bytes; a model has hundreds of distinct calls. The
// bound keeps a program of ever-new shapes from growing it without end.
constexpr size_t kMaxEntries = 1 << 16;
std::unordered_map<MetaSignature, MetaOutcome, SignatureHash>& cache() {
  static auto* c = new std::unordered_map<MetaSignature, MetaOutcome, SignatureHash>();
  return *c;
}

} // namespace

void MetaSignature::add_tensor(const at::Tensor& t) {
  words_.push_back(kTensor);
  if (!t.defined()) {
    words_.push_back(kNone);
    return;
  }
  words_.push_back(static_cast<int64_t>(t.scalar_type()));
  words_.push_back(static_cast<int64_t>(t.device().type()) * 1000 + t.device().index());
  words_.push_back(t.dim());
  words_.insert(words_.end(), t.sizes().begin(), t.sizes().end());
  words_.insert(words_.end(), t.strides().begin(), t.strides().end());
  words_.push_back(t.storage_offset());
  words_.push_back((t.is_conj() ? 1 : 0) | (t.is_neg() ? 2 : 0) | (t.unsafeGetTensorImpl()->is_wrapped_number() ? 4 : 0));
  if (t.is_privateuseone()) {
    words_.push_back(index_in(storages_, t.storage().unsafeGetStorageImpl()));
    words_.push_back(static_cast<int64_t>(t.storage().nbytes()));
    words_.push_back(index_in(tensors_, t.unsafeGetTensorImpl()));
  }
  // A CPU scalar's value is left out: type promotion and shapes depend on its
  // dtype and whether it is a wrapped number, never on the value.
}

bool MetaSignature::add(const c10::IValue& v, bool float_values) {
  if (v.isNone()) {
    words_.push_back(kNone);
  } else if (v.isTensor()) {
    add_tensor(v.toTensor());
  } else if (v.isInt()) {
    words_.push_back(kInt);
    words_.push_back(v.toInt());
  } else if (v.isDouble()) {
    words_.push_back(kDouble);
    if (float_values) words_.push_back(bits_of(v.toDouble()));
  } else if (v.isBool()) {
    words_.push_back(kBool);
    words_.push_back(v.toBool());
  } else if (v.isComplexDouble()) {
    words_.push_back(kComplex);
    if (float_values) {
      words_.push_back(bits_of(v.toComplexDouble().real()));
      words_.push_back(bits_of(v.toComplexDouble().imag()));
    }
  } else if (v.isString()) {
    words_.push_back(kString);
    for (char c : v.toStringRef()) words_.push_back(c);
    words_.push_back(kEnd);
  } else if (v.isDevice()) {
    words_.push_back(kDevice);
    words_.push_back(static_cast<int64_t>(v.toDevice().type()) * 1000 + v.toDevice().index());
  } else if (v.isList()) {
    words_.push_back(kList);
    for (const c10::IValue& e : v.toListRef()) {
      if (!add(e, float_values)) return false;
    }
    words_.push_back(kEnd);
  } else if (v.isGenerator()) {
    words_.push_back(kNone);  // meta kernels never see it
  } else {
    return false;  // an argument kind no signature holds: no caching
  }
  return true;
}

bool MetaSignature::build(const ReferenceOp& ref, c10::ArrayRef<c10::IValue> args) {
  words_.clear();
  storages_.clear();
  tensors_.clear();
  words_.push_back(reinterpret_cast<int64_t>(&ref));
  // Factory functions given no dtype use the default one.
  words_.push_back(static_cast<int64_t>(c10::typeMetaToScalarType(c10::get_default_dtype())));
  for (const c10::IValue& arg : args) {
    if (!add(arg, /*float_values=*/!ref.pointwise)) return false;
  }
  return true;
}

size_t MetaSignature::hash() const {
  size_t h = words_.size();
  for (int64_t w : words_) {
    h ^= std::hash<int64_t>()(w) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  }
  return h;
}

const MetaOutcome* cached_meta(const MetaSignature& signature) {
  std::lock_guard<std::mutex> lock(cache_mu);
  auto it = cache().find(signature);
  return it == cache().end() ? nullptr : &it->second;
}

void remember_meta(MetaSignature signature, MetaOutcome outcome) {
  std::lock_guard<std::mutex> lock(cache_mu);
  if (cache().size() < kMaxEntries) {
    cache().emplace(std::move(signature), std::move(outcome));
  }
}

} // namespace simhpu
