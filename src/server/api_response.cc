#include "server/api_response.h"

#include <cstdio>

namespace tessera::server {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid UTF-8 sequence at s[i], or 0 when it is not one (overlong forms, surrogates
// and values past U+10FFFF included).
size_t ValidSequence(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  if (i + n > s.size() || b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if ((b(k) & 0xC0) != 0x80) return 0;
  return n;
}

std::string UsageJson(const Usage& u) {
  return "{\"prompt_tokens\":" + std::to_string(u.prompt_tokens) + ",\"completion_tokens\":" +
         std::to_string(u.completion_tokens) + ",\"total_tokens\":" + std::to_string(u.prompt_tokens + u.completion_tokens) +
         "}";
}

// {"id":...,"object":...,"created":...,"model":...,
std::string Head(const std::string& id, const char* object, int64_t created, const std::string& model) {
  std::string h = "{\"id\":";
  AppendJsonString(id, &h);
  h += ",\"object\":\"";
  h += object;
  h += "\",\"created\":" + std::to_string(created) + ",\"model\":";
  AppendJsonString(model, &h);
  h += ',';
  return h;
}

void AppendIds(std::span<const int32_t> ids, std::string* out) {
  out->push_back('[');
  char num[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out->push_back(',');
    const int n = std::snprintf(num, sizeof(num), "%d", static_cast<int>(ids[i]));
    out->append(num, static_cast<size_t>(n));
  }
  out->push_back(']');
}

// ,"logprobs":null,"finish_reason":<reason or null>
void AppendFinish(const char* finish_reason, std::string* out) {
  out->append(",\"logprobs\":null,\"finish_reason\":");
  if (!finish_reason) {
    out->append("null");
    return;
  }
  out->push_back('"');
  out->append(finish_reason);
  out->push_back('"');
}

}  // namespace

void AppendJsonString(std::string_view text, std::string* out) {
  static const char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t n = ValidSequence(text, i);
    if (n == 0) {
      out->append(kReplacement);
      ++i;
      continue;
    }
    if (n > 1) {
      out->append(text.substr(i, n));
    } else if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c < 0x20 || c == 0x7f) {
      out->append("\\u00");
      out->push_back(kHex[c >> 4]);
      out->push_back(kHex[c & 15]);
    } else {
      out->push_back(static_cast<char>(c));
    }
    i += n;
  }
  out->push_back('"');
}

std::string ErrorJson(const ApiError& e) {
  std::string s = "{\"error\":{\"message\":";
  AppendJsonString(e.message, &s);
  s += ",\"type\":";
  AppendJsonString(e.type, &s);
  s += ",\"param\":";
  if (e.param.empty()) s += "null";
  else AppendJsonString(e.param, &s);
  s += ",\"code\":";
  if (e.code.empty()) s += "null";
  else AppendJsonString(e.code, &s);
  return s + "}}";
}

std::string CompletionJson(ApiRoute route, const std::string& id, int64_t created, const std::string& model,
                           std::string_view text, const char* finish_reason, const Usage& usage, const TokenIds* ids) {
  const bool chat = route == ApiRoute::kChat;
  std::string s = Head(id, chat ? "chat.completion" : "text_completion", created, model);
  if (ids && ids->prompt) {
    s += "\"prompt_token_ids\":";
    AppendIds(*ids->prompt, &s);
    s += ',';
  }
  s += "\"choices\":[{\"index\":0,";
  s += chat ? "\"message\":{\"role\":\"assistant\",\"content\":" : "\"text\":";
  AppendJsonString(text, &s);
  if (chat) s += '}';
  AppendFinish(finish_reason, &s);
  if (ids) {
    s += ",\"token_ids\":";
    AppendIds(ids->completion, &s);
  }
  s += "}],\"usage\":" + UsageJson(usage) + "}";
  return s;
}

ChunkWriter::ChunkWriter(ApiRoute route, const std::string& id, int64_t created, const std::string& model,
                         bool include_usage)
    : route_(route),
      head_("data: " + Head(id, route == ApiRoute::kChat ? "chat.completion.chunk" : "text_completion", created, model)),
      usage_null_(include_usage ? ",\"usage\":null" : "") {}

void ChunkWriter::ReturnTokenIds(const std::vector<int32_t>* prompt) {
  token_ids_ = true;
  prompt_ids_ = prompt;
}

void ChunkWriter::Begin() {
  buf_.assign(head_);
  if (prompt_ids_) {
    buf_ += "\"prompt_token_ids\":";
    AppendIds(*prompt_ids_, &buf_);
    buf_ += ',';
    prompt_ids_ = nullptr;
  }
  buf_ += "\"choices\":[{\"index\":0,";
}

void ChunkWriter::End(const char* finish_reason, std::span<const int32_t> ids) {
  AppendFinish(finish_reason, &buf_);
  if (token_ids_) {
    buf_ += ",\"token_ids\":";
    AppendIds(ids, &buf_);
  }
  buf_ += '}';
  buf_ += ']';
  buf_ += usage_null_;
  buf_ += "}\n\n";
}

std::string_view ChunkWriter::Text(std::string_view text, std::span<const int32_t> ids) {
  Begin();
  buf_ += route_ == ApiRoute::kChat ? "\"delta\":{\"content\":" : "\"text\":";
  AppendJsonString(text, &buf_);
  if (route_ == ApiRoute::kChat) buf_ += '}';
  End(nullptr, ids);
  return buf_;
}

std::string_view ChunkWriter::Role() {
  Begin();
  buf_ += "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}";
  End(nullptr, {});
  return buf_;
}

std::string_view ChunkWriter::Finish(const char* finish_reason, std::span<const int32_t> ids) {
  Begin();
  buf_ += route_ == ApiRoute::kChat ? "\"delta\":{}" : "\"text\":\"\"";
  End(finish_reason, ids);
  return buf_;
}

std::string_view ChunkWriter::UsageChunk(const Usage& usage) {
  buf_.assign(head_);
  buf_ += "\"choices\":[],\"usage\":" + UsageJson(usage) + "}\n\n";
  return buf_;
}

std::string_view ChunkWriter::Error(const ApiError& e) {
  buf_ = "data: " + ErrorJson(e) + "\n\n";
  return buf_;
}

}  // namespace tessera::server
