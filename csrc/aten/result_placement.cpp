#include "aten/result_placement.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

namespace simhpu {
namespace {

std::atomic<uint64_t> placed{0};
thread_local ResultPlacement* current = nullptr;
thread_local c10::SmallVector<ResultOffer, 2>* current_offers = nullptr;
thread_local ResultPlacement::Live* current_live = nullptr;

// Offered memory handed out and not yet given back, by address. A placed
// allocation's context is its data pointer, as raw_allocate requires (oneDNN
// takes its buffers that way), so both ways of freeing it end up here.
std::mutex handed_out_mu;
std::unordered_map<void*, ResultPlacement::Live*> handed_out;
c10::DeleterFnPtr base_raw_deleter = nullptr;

void give_back(void* ptr) {
  ResultPlacement::Live* live = nullptr;
  {
    std::lock_guard<std::mutex> lock(handed_out_mu);
    auto it = handed_out.find(ptr);
    if (it != handed_out.end()) {
      live = it->second;
      handed_out.erase(it);
    }
  }
  if (live != nullptr) {
    live->count.fetch_sub(1, std::memory_order_acq_rel);  // the memory is the device output's: nothing to free
  } else {
    base_raw_deleter(ptr);  // raw_allocate'd by the CPU allocator beneath
  }
}

// The CPU allocator, with offers in front of it on threads that have some.
class OfferingAllocator final : public c10::Allocator {
 public:
  explicit OfferingAllocator(c10::Allocator* base) : base_(base) { base_raw_deleter = base->raw_deleter(); }

  c10::DataPtr allocate(size_t nbytes) override {
    if (current_offers != nullptr && nbytes > 0) {
      for (ResultOffer& offer : *current_offers) {
        if (!offer.taken && offer.nbytes == nbytes) {
          offer.taken = true;
          placed.fetch_add(1, std::memory_order_relaxed);
          current_live->count.fetch_add(1, std::memory_order_relaxed);
          {
            std::lock_guard<std::mutex> lock(handed_out_mu);
            handed_out[offer.data] = current_live;
          }
          return c10::DataPtr(offer.data, offer.data, &give_back, c10::Device(c10::DeviceType::CPU));
        }
      }
    }
    return base_->allocate(nbytes);
  }

  c10::DeleterFnPtr raw_deleter() const override { return base_raw_deleter != nullptr ? &give_back : nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  c10::Allocator* base_;
};

OfferingAllocator* install() {
  const char* off = std::getenv("SIMHPU_RESULT_PLACEMENT");  // "0": copy every result (to measure the difference)
  if (off != nullptr && std::string(off) == "0") return nullptr;
  // Never destroyed: CPU tensors may outlive everything else.
  auto* offering = new OfferingAllocator(c10::GetCPUAllocator());
  c10::SetCPUAllocator(offering, /*priority=*/1);
  return offering;
}

OfferingAllocator* const offering_allocator = install();

} // namespace

uint64_t results_placed() {
  return placed.load(std::memory_order_relaxed);
}

bool result_placement_available() {
  return offering_allocator != nullptr && c10::GetCPUAllocator() == offering_allocator;
}

ResultPlacement::ResultPlacement(c10::SmallVector<ResultOffer, 2> offers)
    : offers_(std::move(offers)), live_(new Live()), previous_(current) {
  current = this;
  current_offers = &offers_;
  current_live = live_;
}

bool ResultPlacement::overlaps_offer(const at::Tensor& t) const {
  if (!t.defined() || !t.has_storage() || t.storage().data() == nullptr) return false;
  const char* begin = static_cast<const char*>(t.storage().data());
  const char* end = begin + t.storage().nbytes();
  for (const ResultOffer& offer : offers_) {
    const char* o = static_cast<const char*>(offer.data);
    if (offer.taken && begin < o + offer.nbytes && o < end) return true;
  }
  return false;
}

void ResultPlacement::withdraw() {
  if (current == this) {
    current_offers = nullptr;
  }
}

ResultPlacement::~ResultPlacement() noexcept(false) {
  current = previous_;
  current_offers = previous_ != nullptr ? &previous_->offers_ : nullptr;
  current_live = previous_ != nullptr ? previous_->live_ : nullptr;
  if (live_->count.load(std::memory_order_acquire) == 0) {
    delete live_;
    return;
  }
  // A kernel kept memory it was given beyond its call: the device output's.
  // The count stays allocated for the deleter that will come one day.
  if (std::uncaught_exceptions() == 0) {
    TORCH_CHECK(false, "simhpu: a CPU kernel kept a buffer beyond its call that had been placed in its device "
                       "output; report this operator (placement of results is then to be turned off for it)");
  }
}

} // namespace simhpu
