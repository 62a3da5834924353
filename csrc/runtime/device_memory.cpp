#include "runtime/device_memory.h"

#include "runtime/device.h"
#include "runtime/env_flags.h"

#include <c10/util/Exception.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

namespace simhpu {

// Free ranges by offset, coalesced on release: first fit, like a device heap.
struct DeviceMemory::FreeRanges {
  std::map<size_t, size_t> by_offset;  // offset -> length
};

namespace {

size_t read_limit() {
  const char* env = std::getenv("SIMHPU_MEMORY_LIMIT");
  constexpr size_t kDefault = size_t(8) << 30;
  if (env == nullptr || *env == '\0') {
    return kDefault;
  }
  char* unit = nullptr;
  const double value = std::strtod(env, &unit);
  std::string suffix(unit);
  for (auto& c : suffix) c = static_cast<char>(std::toupper(c));
  const std::map<std::string, double> units = {
      {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
      {"KIB", 0x1p10}, {"MIB", 0x1p20}, {"GIB", 0x1p30}, {"TIB", 0x1p40}};
  auto it = units.find(suffix);
  TORCH_CHECK(unit != env && it != units.end() && std::isfinite(value) && value > 0,
              "SIMHPU_MEMORY_LIMIT must be a size such as 512MB, 2GB, 1GiB or 1TiB, got '", env, "'");
  // Each device's memory is reserved address space, mapped twice (the host's view
  // and the kernels' view): every device's two mappings must fit in a 47-bit user
  // address space, so the most a device can have shrinks with the device count.
  constexpr double kMinBytes = 4096;
  const uint64_t max_bytes = (uint64_t(1) << 46) / (2 * uint64_t(device_count()));
  const double bytes_wanted = value * it->second;
  TORCH_CHECK(bytes_wanted >= kMinBytes && bytes_wanted <= double(max_bytes),
              "SIMHPU_MEMORY_LIMIT must be from 4KiB to ", max_bytes >> 30, "GiB with ",
              static_cast<int>(device_count()), " device(s), got '", env, "'");
  const size_t bytes = static_cast<size_t>(bytes_wanted);
  return (bytes + DeviceMemory::kGranularity - 1) / DeviceMemory::kGranularity * DeviceMemory::kGranularity;
}

void* map_region(int fd, size_t size, int protection) {
  void* p = mmap(nullptr, size, protection, MAP_SHARED | MAP_NORESERVE, fd, 0);
  TORCH_CHECK(p != MAP_FAILED, "simhpu: could not map ", size, " bytes of device memory: ", std::strerror(errno));
  return p;
}

// Strict mode: explain a fault on a device address before the process dies.
struct sigaction previous_segv_action;

void write_hex(char* out, uintptr_t value) {
  const char* digits = "0123456789abcdef";
  for (int i = 15; i >= 0; --i) {
    out[15 - i] = digits[(value >> (i * 4)) & 0xf];
  }
}

void on_segv(int sig, siginfo_t* info, void* context) {
  const void* address = info->si_addr;
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
    if (device_memory(d).contains(address)) {
      char message[] =
          "simhpu strict mode: host code dereferenced device memory at 0x0000000000000000 "
          "(a simhpu tensor's data_ptr). Copy it to the host first, e.g. tensor.cpu().\n";
      write_hex(std::strstr(message, "0x") + 2, reinterpret_cast<uintptr_t>(address));
      ssize_t ignored = write(STDERR_FILENO, message, sizeof(message) - 1);
      (void)ignored;
      break;
    }
  }
  // Hand the fault on (to Python's faulthandler, or the default action).
  sigaction(SIGSEGV, &previous_segv_action, nullptr);
  (void)sig;
  (void)context;
}

void install_fault_reporter() {
  struct sigaction action {};
  action.sa_sigaction = &on_segv;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &previous_segv_action);
}

// Outside strict mode the region is plain anonymous memory, aligned for huge
// pages: kernels then see the same page size as CPU tensors do (shared memory,
// which strict mode needs for its second view, gets no transparent huge pages
// on most systems, and matrix kernels ran about a third slower on it).
constexpr size_t kHugePage = size_t(2) << 20;

void* map_anonymous(size_t size) {
  void* p = mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  TORCH_CHECK(p != MAP_FAILED, "simhpu: could not map ", size, " bytes of device memory: ", std::strerror(errno));
  // No MADV_HUGEPAGE: where THP's defrag setting is "madvise", advised regions
  // stall in direct compaction on every fault (measured: a 512x128x384 mm went
  // from 0.3 to 2.6 ms). Unadvised, the region is treated as the CPU heap is.
  const uintptr_t aligned = (reinterpret_cast<uintptr_t>(p) + kHugePage - 1) & ~(kHugePage - 1);
  return reinterpret_cast<void*>(aligned);
}

} // namespace

bool strict_mode() {
  static const bool strict = env_flag("SIMHPU_STRICT");
  return strict;
}

namespace {
std::atomic<size_t> limit_set{0};  // 0: SIMHPU_MEMORY_LIMIT's

std::array<DeviceMemory*, 64>& memories() {
  static std::array<DeviceMemory*, 64> all = [] {
    std::array<DeviceMemory*, 64> made{};
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      made[d] = new DeviceMemory(d, memory_limit_bytes(), strict_mode());
    }
    if (strict_mode()) {
      install_fault_reporter();
    }
    return made;
  }();
  return all;
}
} // namespace

size_t memory_limit_bytes() {
  if (const size_t set = limit_set.load()) return set;
  static const size_t limit = read_limit();
  return limit;
}

void remake_unused_device_memories(size_t bytes) {
  const uint64_t max_bytes = (uint64_t(1) << 46) / (2 * uint64_t(device_count()));
  TORCH_CHECK(bytes >= 4096 && bytes <= max_bytes, "simhpu: a device's memory must be from 4KiB to ",
              max_bytes >> 30, "GiB with ", static_cast<int>(device_count()), " device(s), got ", bytes, " bytes");
  auto& all = memories();
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
    TORCH_INTERNAL_ASSERT(all[d]->free_bytes() == all[d]->capacity(), "simhpu: remaking device memory in use");
  }
  limit_set.store(bytes);
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
    // (The old region stays mapped: a pointer into it must still fault, not land in another mapping.)
    all[d] = new DeviceMemory(d, bytes, strict_mode());
  }
}

namespace {
// The address range for `capacity` bytes: four times as large, within what each
// device's two mappings may take of a 47-bit user address space.
size_t address_span(size_t capacity) {
  const uint64_t max_bytes = (uint64_t(1) << 46) / (2 * uint64_t(device_count()));
  return std::max<size_t>(capacity, std::min<uint64_t>(uint64_t(capacity) * 4, max_bytes) / kHugePage * kHugePage);
}
} // namespace

DeviceMemory::DeviceMemory(c10::DeviceIndex device, size_t capacity, bool strict)
    : device_(device), capacity_(capacity), span_(address_span(capacity)), free_bytes_(capacity),
      free_ranges_(new FreeRanges()) {
  if (strict) {
    const std::string name = "simhpu-device-" + std::to_string(device);
    fd_ = memfd_create(name.c_str(), MFD_CLOEXEC);
    TORCH_CHECK(fd_ >= 0, "simhpu: memfd_create failed: ", std::strerror(errno));
    TORCH_CHECK(ftruncate(fd_, static_cast<off_t>(span_)) == 0,
                "simhpu: could not size device memory to ", span_, " bytes: ", std::strerror(errno));
    host_base_ = map_region(fd_, span_, PROT_READ | PROT_WRITE);
    device_base_ = static_cast<char*>(map_region(fd_, span_, PROT_NONE));
  } else {
    host_base_ = map_anonymous(span_);
    device_base_ = static_cast<char*>(host_base_);
  }
  free_ranges_->by_offset[0] = span_;
}

void* DeviceMemory::allocate(size_t nbytes) {
  if (nbytes > free_bytes_) {
    return nullptr;  // the capacity is used up, wherever the free addresses are
  }
  auto& ranges = free_ranges_->by_offset;
  for (auto it = ranges.begin(); it != ranges.end(); ++it) {
    if (it->second < nbytes) {
      continue;
    }
    const size_t offset = it->first;
    const size_t rest = it->second - nbytes;
    ranges.erase(it);
    if (rest > 0) {
      ranges[offset + nbytes] = rest;
    }
    free_bytes_ -= nbytes;
    return device_base_ + offset;
  }
  return nullptr;
}

void DeviceMemory::release(void* device_ptr, size_t nbytes) {
  auto& ranges = free_ranges_->by_offset;
  size_t offset = static_cast<char*>(device_ptr) - device_base_;
  size_t length = nbytes;
  // Give the pages back, as freeing device memory would.
  if (fd_ >= 0) {
    fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
              static_cast<off_t>(length));
  } else {
    // Only whole pages inside the range: the edges may share a page with live blocks.
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t first = (offset + page - 1) / page * page;
    const size_t last = (offset + length) / page * page;
    if (last > first) {
      madvise(static_cast<char*>(host_base_) + first, last - first, MADV_DONTNEED);
    }
  }
  auto next = ranges.lower_bound(offset);
  if (next != ranges.end() && offset + length == next->first) {
    length += next->second;
    next = ranges.erase(next);
  }
  if (next != ranges.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += length;
      free_bytes_ += nbytes;
      return;
    }
  }
  ranges[offset] = length;
  free_bytes_ += nbytes;
}

DeviceMemory& device_memory(c10::DeviceIndex index) {
  return *memories()[index];
}

c10::DeviceIndex device_owning(const void* ptr) {
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
    if (device_memory(d).contains(ptr)) {
      return d;
    }
  }
  return -1;
}

} // namespace simhpu
