// Prints 42 if goro, installed and found with find_package, runs goroutines.
#include <cstdio>

#include "goro/goro.h"

int main() {
  int result = 0;
  goro::Run([&] {
    goro::Chan<int> c;
    goro::Go([c]() mutable { c.Send(41); });
    result = *c.Recv() + 1;
  });
  std::printf("%d\n", result);
  return result == 42 ? 0 : 1;
}
