// The public request API (tessera/requests.h) over runtime::RequestRunner.
#include "tessera/requests.h"

#include "model/loaded_model.h"
#include "runtime/request_runner.h"

namespace tessera {

RequestBatch::RequestBatch(std::unique_ptr<runtime::RequestRunner> impl) : impl_(std::move(impl)) {}
RequestBatch::~RequestBatch() = default;

StatusOr<std::unique_ptr<RequestBatch>> RequestBatch::Create(const Model& model, const SessionOptions& options,
                                                             ThreadPool* pool) {
  StatusOr<std::unique_ptr<runtime::RequestRunner>> r =
      runtime::RequestRunner::Create(model.loaded_->model(), options, pool ? pool : model.pool_);
  if (!r.ok()) return r.status();
  return std::unique_ptr<RequestBatch>(new RequestBatch(std::move(r.value())));
}

StatusOr<RequestId> RequestBatch::Add(const Prompt& prompt, const GenerateOptions& options) {
  return impl_->Add(prompt, options);
}
Status RequestBatch::Step() { return impl_->Step(); }
void RequestBatch::Cancel(RequestId id) { impl_->Cancel(id); }
bool RequestBatch::finished(RequestId id) const { return impl_->finished(id); }
StatusOr<RequestResult> RequestBatch::Take(RequestId id) { return impl_->Take(id); }
int64_t RequestBatch::running() const { return impl_->running(); }
int64_t RequestBatch::slots() const { return impl_->slots(); }
StepTokens RequestBatch::last_step() const { return impl_->last_step(); }

}  // namespace tessera
