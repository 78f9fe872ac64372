#ifndef LLMRETRY_TESTS_COUNTING_NEW_HPP
#define LLMRETRY_TESTS_COUNTING_NEW_HPP

// Replaces the global operator new with one that counts: include it in one translation unit of a test
// program, which then counts every allocation it makes.

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<long> allocations{0};
}  // namespace

// Every replaceable form that a plain delete may meet, so that each allocation is freed by its own
// allocator (AddressSanitizer checks the pairs). GCC, inlining these replacements into a delete of memory
// from new, sees free() meet operator new and warns; they are one pair by construction.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t size) {
  ++allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  ++allocations;
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size) { return operator new(size); }
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept { return operator new(size, tag); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace {
/// Returns how many allocations `work()` made.
template <class Work>
long allocations_during(Work&& work) {
  const long before = allocations.load();
  work();
  return allocations.load() - before;
}
}  // namespace

#endif  // LLMRETRY_TESTS_COUNTING_NEW_HPP
