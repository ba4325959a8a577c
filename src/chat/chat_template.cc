#include "tessera/chat_template.h"

#include "chat/json_value.h"
#include "chat/lexer.h"
#include "chat/parser.h"
#include "chat/renderer.h"
#include "chat/status_macros.h"
#include "chat/template_impl.h"
#include "chat/text.h"

namespace tessera::chat {
namespace {

// The names a message's reasoning may come under; transformers copies the first present one to
// `reasoning_content` (what templates read) and `thinking`.
constexpr const char* kReasoningFields[] = {"reasoning_content", "thinking", "reasoning"};

// transformers' preparation of each message: keys whose value is null are dropped, and the
// reasoning fields are aliased.
StatusOr<Value> NormalizeMessage(const Value& m, size_t index) {
  if (!m.is_dict()) return InvalidArgument("messages[" + std::to_string(index) + "] is not a JSON object");
  Dict kept;
  for (const auto& [k, v] : m.dict().items())
    if (!v.is_none()) kept.Set(k, v);
  const Value* reasoning = nullptr;
  for (const char* field : kReasoningFields)
    if ((reasoning = kept.Find(field))) break;
  if (!reasoning) return Value::MakeDict(std::move(kept));
  const Value r = *reasoning;
  Dict aliased;
  aliased.Set(Value::Str("thinking"), r);
  for (const auto& [k, v] : kept.items()) aliased.Set(k, v);
  aliased.Set(Value::Str("reasoning_content"), r);
  return Value::MakeDict(std::move(aliased));
}

// The variables transformers renders with: the special tokens, the caller's extras (which
// override them), then messages, tools, documents and add_generation_prompt.
StatusOr<Dict> BuildContext(const std::string& messages_json, const RenderOptions& options) {
  Value messages;
  CHAT_ASSIGN_OR_RETURN(messages, ParseJsonValue(messages_json, "messages"));
  if (!messages.is_list()) return InvalidArgument("messages: expected a JSON array of message objects");
  if (messages.list().items.empty()) return InvalidArgument("messages: the conversation is empty");
  std::vector<Value> normalized;
  for (size_t k = 0; k < messages.list().items.size(); ++k) {
    Value m;
    CHAT_ASSIGN_OR_RETURN(m, NormalizeMessage(messages.list().items[k], k));
    normalized.push_back(std::move(m));
  }
  Dict ctx;
  ctx.Set(Value::Str("bos_token"), Value::Str(options.bos_token));
  ctx.Set(Value::Str("eos_token"), Value::Str(options.eos_token));
  Value tools = Value::None(), documents = Value::None();
  if (!options.extra_context_json.empty()) {
    Value extra;
    CHAT_ASSIGN_OR_RETURN(extra, ParseJsonValue(options.extra_context_json, "extra_context_json"));
    if (!extra.is_dict()) return InvalidArgument("extra_context_json: expected a JSON object");
    for (const auto& [k, v] : extra.dict().items()) {
      const std::string& key = k.str();
      if (key == "messages" || key == "add_generation_prompt")
        return InvalidArgument("extra_context_json: '" + key + "' is set by the renderer, not as an extra variable");
      if (key == "tools") {
        tools = v;
      } else if (key == "documents") {
        documents = v;
      } else {
        ctx.Set(k, v);
      }
    }
  }
  for (const auto& [what, v] : {std::pair<const char*, const Value*>{"tools", &tools}, {"documents", &documents}}) {
    if (v->is_none()) continue;
    if (!v->is_list()) return InvalidArgument(std::string("extra_context_json: '") + what + "' must be a list");
    for (const Value& item : v->list().items)
      if (!item.is_dict()) return InvalidArgument(std::string("extra_context_json: each of '") + what + "' must be an object");
  }
  ctx.Set(Value::Str("messages"), Value::MakeList(std::move(normalized)));
  ctx.Set(Value::Str("tools"), tools);
  ctx.Set(Value::Str("documents"), documents);
  ctx.Set(Value::Str("add_generation_prompt"), Value::Bool(options.add_generation_prompt));
  return ctx;
}

}  // namespace

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

const std::string& ChatTemplate::name() const { return impl_->name; }
const std::string& ChatTemplate::source() const { return impl_->source; }

StatusOr<ChatTemplate> ChatTemplate::FromSource(const std::string& source, const std::string& name) {
  if (source.size() > kMaxTemplateBytes)
    return InvalidArgument("chat template '" + name + "' is " + std::to_string(source.size()) +
                           " bytes, more than the " + std::to_string(kMaxTemplateBytes) + " accepted");
  if (!IsValidUtf8(source)) return InvalidArgument("chat template '" + name + "' is not valid UTF-8");
  auto impl = std::make_unique<Impl>();
  impl->name = name;
  impl->source = source;
  std::vector<Token> tokens;
  CHAT_ASSIGN_OR_RETURN(tokens, Lex(impl->source, impl->name));
  Parser parser(std::move(tokens), impl->name);
  CHAT_ASSIGN_OR_RETURN(impl->root, parser.Parse());
  return ChatTemplate(std::move(impl));
}

StatusOr<ChatTemplate> ChatTemplate::FromModelPath(const std::string& path) {
  std::pair<std::string, std::string> found;
  CHAT_ASSIGN_OR_RETURN(found, ReadModelTemplate(path));
  return FromSource(found.second, found.first);
}

StatusOr<ChatTemplate> ChatTemplate::Builtin(const std::string& model_type) {
  std::string source;
  CHAT_ASSIGN_OR_RETURN(source, BuiltinTemplateSource(model_type));
  return FromSource(source, "built-in " + model_type + " turn format");
}

StatusOr<std::string> ChatTemplate::Render(const std::string& messages_json, const RenderOptions& options) const {
  Dict ctx;
  CHAT_ASSIGN_OR_RETURN(ctx, BuildContext(messages_json, options));
  Renderer renderer(impl_->name, RenderLimits{});
  return renderer.Render(impl_->root, ctx);
}

}  // namespace tessera::chat
