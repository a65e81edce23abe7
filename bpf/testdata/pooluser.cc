// pooluser.cc drives pool.cc for the probe test: it allocates and frees through the pool N times.
#include <cstdio>
#include <cstdlib>

namespace mindspore { namespace device { namespace ascend {
class AscendMemoryPool {
 public:
  void *AllocTensorMem(std::size_t size, bool from_persistent);
  void FreeTensorMem(void *addr);
};
}}}  // namespace mindspore::device::ascend

int main(int argc, char **argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 1;
  mindspore::device::ascend::AscendMemoryPool pool;
  for (int i = 0; i < n; i++) pool.FreeTensorMem(pool.AllocTensorMem(64, false));
  std::printf("allocs %d\n", n);
  return 0;
}
