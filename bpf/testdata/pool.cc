// pool.cc is the C++ library the symbol and probe tests build with g++: namespaced methods, an
// overload, a C function and a hidden function, so lookup by mangled, demangled and glob names is
// proven on what g++ really emits.
#include <cstddef>
#include <cstdlib>

namespace mindspore { namespace device { namespace ascend {
class AscendMemoryPool {
 public:
  void *AllocTensorMem(std::size_t size, bool from_persistent);
  void FreeTensorMem(void *addr);
};
void *AscendMemoryPool::AllocTensorMem(std::size_t size, bool) { return std::malloc(size); }
void AscendMemoryPool::FreeTensorMem(void *addr) { std::free(addr); }
}}}  // namespace mindspore::device::ascend

int scale(int x) { return 2 * x; }
double scale(double x) { return 2 * x; }
extern "C" int plain_c(int x) { return x + 1; }
__attribute__((visibility("hidden"))) int hidden_helper(int x) { return x - 1; }
extern "C" int use_hidden(int x) { return hidden_helper(x); }
