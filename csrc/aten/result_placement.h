#pragma once
// Functional operators on the reference path: their CPU kernel makes a fresh
// result, which the worker used to allocate in CPU memory and then copy into
// the device output the host had shaped for it. While such a kernel runs, the
// worker offers it the outputs' device memory instead: the CPU allocator hands
// an allocation of exactly an output's size that memory (once per output), so
// a kernel that allocates its result that way writes it in place and nothing
// is copied. A kernel that allocates otherwise gets ordinary memory and its
// result is copied as before; a scratch buffer that happened to take an
// output's memory is harmless (the output is written after it), and a result
// that sits in an output's memory but not as that output is moved out first.
#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <cstddef>

namespace simhpu {

struct ResultOffer {
  void* data;     // host address of the output's first element
  size_t nbytes;  // its size: an allocation of exactly this many bytes takes it
  bool taken = false;
};

// Offers `offers` to the CPU allocations made on this thread while it lives.
class ResultPlacement {
 public:
  explicit ResultPlacement(c10::SmallVector<ResultOffer, 2> offers);
  ~ResultPlacement() noexcept(false);
  ResultPlacement(const ResultPlacement&) = delete;
  ResultPlacement& operator=(const ResultPlacement&) = delete;

  // Whether `t` uses memory that was offered.
  bool overlaps_offer(const at::Tensor& t) const;
  // Offers are withdrawn from here on (allocations get ordinary memory).
  void withdraw();

  // How many allocations that took an offer are still alive: held by a result,
  // or kept by a kernel beyond its call (a failure: the memory is the output's).
  struct Live {
    std::atomic<int> count{0};
  };

 private:
  c10::SmallVector<ResultOffer, 2> offers_;
  Live* live_;
  ResultPlacement* previous_;
};

// False when SIMHPU_RESULT_PLACEMENT=0, or when another CPU allocator took
// precedence over the offering one. (Offers are host-view addresses, as the
// copies were: strict mode's inaccessible device view is never touched.)
bool result_placement_available();

// How many results have been written in place so far (for tests and benchmarks).
uint64_t results_placed();

} // namespace simhpu
