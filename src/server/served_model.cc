#include "server/served_model.h"

#include <algorithm>
#include <filesystem>

#include "tessera/image.h"

namespace tessera::server {
namespace {

// Markers that end a chat turn in the Gemma families' formats; whichever the vocabulary holds as
// one special token stops a chat completion (the model writes it where its answer ends).
constexpr const char* kTurnEndMarkers[] = {"<end_of_turn>", "<turn|>"};

ApiError ServerError(std::string message) {
  return ApiError{500, "server_error", "", "", std::move(message)};
}

StatusOr<std::unique_ptr<tokenizer::Tokenizer>> LoadTokenizer(const std::string& path, const Model& model,
                                                              bool is_file) {
  if (!is_file) return tokenizer::Tokenizer::FromCheckpointDir(path);
  StatusOr<tokenizer::TokenizerVocab> vocab = model.TokenizerVocab();
  if (!vocab.ok()) return vocab.status();
  return tokenizer::Tokenizer::FromVocab(vocab.value(), path);
}

void FindStopTokens(ServedModel* m) {
  m->stop_tokens = m->model->info().eos_token_ids;
  m->chat_stop_tokens = m->stop_tokens;
  for (const char* marker : kTurnEndMarkers) {
    StatusOr<std::vector<int32_t>> ids = m->tokenizer->EncodeWithSpecialTokens(marker);
    if (!ids.ok() || ids.value().size() != 1) continue;
    const int32_t id = ids.value()[0];
    if (std::find(m->chat_stop_tokens.begin(), m->chat_stop_tokens.end(), id) == m->chat_stop_tokens.end())
      m->chat_stop_tokens.push_back(id);
  }
  StatusOr<std::vector<int32_t>> nl = m->tokenizer->Encode("\n\n", /*add_bos=*/false);
  if (nl.ok() && nl.value().size() == 1) m->double_newline_id = nl.value()[0];
}

ApiError CheckIds(const ServedModel& m, const std::vector<int32_t>& ids) {
  const int64_t vocab = m.model->info().vocab;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= vocab)
      return BadRequest("prompt[" + std::to_string(i) + "]", "token id " + std::to_string(ids[i]) +
                                                                " is outside the vocabulary (" + std::to_string(vocab) + " ids)");
  return {};
}

// The chat prompt's images: decoded (pixel limit), encoded, and laid out at the template's markers.
ApiError AddImages(const ServedModel& m, const ApiRequest& r, const PromptLimits& limits, PromptData* out) {
  std::vector<image::Image> images;
  image::DecodeOptions decode;
  decode.max_pixels = limits.max_image_pixels;
  for (size_t i = 0; i < r.images.size(); ++i) {
    const std::string& bytes = r.images[i];
    StatusOr<image::Image> img = image::DecodeImage(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                                    r.image_params[i], decode);
    if (!img.ok()) return BadRequest(r.image_params[i], img.status().message());
    images.push_back(std::move(img).value());
  }
  StatusOr<ImageFeatures> enc = m.model->EncodeImages(images, EncodeOptions{0, limits.encoder_precision});
  if (!enc.ok()) return BadRequest("messages", "the images cannot be encoded: " + enc.status().message());
  out->features = std::move(enc).value();
  StatusOr<Prompt> p = m.model->LayoutImagePrompt(out->tokens, out->features, m.double_newline_id);
  if (!p.ok()) return BadRequest("messages", p.status().message());
  out->tokens = p.value().tokens;
  out->token_types = p.value().token_types;
  return {};
}

ApiError BuildChat(const ServedModel& m, const ApiRequest& r, const PromptLimits& limits, PromptData* out) {
  if (!m.render_chat)
    return ApiError{400, "invalid_request_error", "chat_template_missing", "messages",
                    "the model has no chat template: use /v1/completions"};
  StatusOr<std::string> text = m.render_chat(r.messages_json);
  if (!text.ok()) return BadRequest("messages", text.status().message());
  StatusOr<std::vector<int32_t>> ids = m.tokenizer->EncodeWithSpecialTokens(text.value());
  if (!ids.ok()) return ServerError("the rendered chat cannot be tokenized: " + ids.status().message());
  out->tokens = std::move(ids).value();
  if (r.images.empty()) return {};
  return AddImages(m, r, limits, out);
}

}  // namespace

StatusOr<ServedModel> LoadServedModel(const std::string& path, const LoadOptions& load, const std::string& id) {
  std::error_code ec;
  const bool is_file = std::filesystem::is_regular_file(path, ec);
  ServedModel m;
  StatusOr<std::unique_ptr<Model>> model = Model::Load(path, load);
  if (!model.ok()) return model.status();
  m.model = std::move(model).value();
  StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tok = LoadTokenizer(path, *m.model, is_file);
  if (!tok.ok()) return InvalidArgument("serving needs the model's tokenizer: " + tok.status().message());
  m.tokenizer = std::move(tok).value();
  if (m.tokenizer->vocab_size() > m.model->info().vocab)
    return InvalidArgument("the tokenizer has " + std::to_string(m.tokenizer->vocab_size()) + " ids but the model " +
                           std::to_string(m.model->info().vocab));
  FindStopTokens(&m);
  m.id = id;
  if (m.id.empty()) {
    const std::filesystem::path p = std::filesystem::path(path).lexically_normal();
    m.id = (p.has_filename() ? p.filename() : p.parent_path().filename()).string();
  }
  return m;
}

ApiError BuildPrompt(const ServedModel& m, const ApiRequest& r, const PromptLimits& limits, PromptData* out) {
  *out = PromptData{};
  if (r.route == ApiRoute::kChat) return BuildChat(m, r, limits, out);
  if (r.prompt_is_ids) {
    out->tokens = r.prompt_ids;
    return CheckIds(m, out->tokens);
  }
  StatusOr<std::vector<int32_t>> ids = m.tokenizer->Encode(r.prompt_text, /*add_bos=*/true);
  if (!ids.ok()) return BadRequest("prompt", ids.status().message());
  out->tokens = std::move(ids).value();
  return {};
}

}  // namespace tessera::server
