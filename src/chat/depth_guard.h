// Counts one level of nesting while it lives: the parser and the renderer bound their recursion
// with it so that no template can exhaust the stack.
#pragma once

namespace tessera::chat {

class DepthGuard {
 public:
  explicit DepthGuard(int* depth) : depth_(depth) { ++*depth_; }
  ~DepthGuard() { --*depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;
  int depth() const { return *depth_; }

 private:
  int* depth_;
};

}  // namespace tessera::chat
