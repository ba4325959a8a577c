// libFuzzer target: chat templates (tessera::chat::ChatTemplate). The input is a template source,
// then a NUL and the messages JSON, then optionally a NUL and the extra-variables JSON; without a
// NUL the whole input is the template and a fixed conversation is rendered. The messages are also
// rendered with the built-in Gemma formats. Invariants: errors say what is wrong and name the
// template; successful output is valid UTF-8 within the renderer's size limit; the same input
// renders the same text twice (no state leaks between renders).
#include <cstdint>
#include <string>
#include <string_view>

#include "chat/text.h"
#include "fuzz_check.h"
#include "tessera/chat_template.h"

namespace {

using tessera::chat::ChatTemplate;
using tessera::chat::RenderOptions;

constexpr const char* kDefaultMessages =
    R"([{"role":"system","content":"S"},{"role":"user","content":[{"type":"image"},{"type":"text","text":" q "}]},)"
    R"({"role":"assistant","content":"a","tool_calls":[{"function":{"name":"f","arguments":{"x":[1,2.5,null]}}}]}])";

void RenderAndCheck(const ChatTemplate& t, const std::string& messages, const RenderOptions& o) {
  tessera::StatusOr<std::string> out = t.Render(messages, o);
  if (!out.ok()) {
    FUZZ_CHECK(!out.status().message().empty(), "an error must say what is wrong");
    return;
  }
  FUZZ_CHECK(tessera::chat::IsValidUtf8(out.value()), "rendered text is not valid UTF-8");
  FUZZ_CHECK(out.value().size() <= (16u << 20), "rendered text past the size limit");
  if (t.source().find("strftime_now") != std::string::npos) return;  // the clock may tick between renders
  tessera::StatusOr<std::string> again = t.Render(messages, o);
  FUZZ_CHECK(again.ok() && again.value() == out.value(), "a second render differs");
}

void Check(std::string_view input) {
  const size_t nul = input.find('\0');
  const std::string source(input.substr(0, nul));
  std::string messages = kDefaultMessages;
  RenderOptions o;
  if (nul != std::string_view::npos) {
    const std::string_view rest = input.substr(nul + 1);
    const size_t nul2 = rest.find('\0');
    messages = std::string(rest.substr(0, nul2));
    if (nul2 != std::string_view::npos) o.extra_context_json = std::string(rest.substr(nul2 + 1));
    o.add_generation_prompt = (messages.size() & 1) == 0;
  }
  tessera::StatusOr<ChatTemplate> t = ChatTemplate::FromSource(source, "fuzz");
  if (!t.ok()) {
    FUZZ_CHECK(t.status().message().find("chat template 'fuzz'") != std::string::npos, "error must name the template");
  } else {
    RenderAndCheck(t.value(), messages, o);
  }
  for (const char* type : {"gemma3", "gemma4"}) {
    tessera::StatusOr<ChatTemplate> b = ChatTemplate::Builtin(type);
    FUZZ_CHECK(b.ok(), "a built-in format does not parse");
    RenderAndCheck(b.value(), messages, o);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  tessera::fuzz::NoEscape("ChatTemplate", [&] { Check(input); });
  return 0;
}
