// The turn formats used when a model ships no chat template, written as templates for our own
// renderer. On plain conversations (system, user and assistant turns of text and images) they
// give what Gemma's published templates give; they skip those templates' checks (alternating
// roles) and tool calling.
#include "chat/template_impl.h"

namespace tessera::chat {
namespace {

// Gemma 3: <start_of_turn>{user|model}\n...<end_of_turn>\n, the system text folded into the first
// turn followed by a blank line, <start_of_image> for each image.
constexpr const char kGemma3[] = R"JINJA({{- bos_token -}}
{%- set turns = messages -%}
{%- set ns = namespace(prefix='') -%}
{%- if messages and messages[0].role == 'system' -%}
  {%- set system = messages[0].content -%}
  {%- if system is not string -%}
    {%- set system = system | selectattr('type', 'eq', 'text') | map(attribute='text') | join('') -%}
  {%- endif -%}
  {%- set ns.prefix = system ~ '\n\n' -%}
  {%- set turns = messages[1:] -%}
{%- endif -%}
{%- for m in turns -%}
  {{- '<start_of_turn>' ~ ('model' if m.role == 'assistant' else m.role) ~ '\n' -}}
  {%- if loop.first -%}{{- ns.prefix -}}{%- endif -%}
  {%- if m.content is string -%}
    {{- m.content | trim -}}
  {%- else -%}
    {%- for part in m.content -%}
      {%- if part.type == 'image' -%}{{- '<start_of_image>' -}}
      {%- elif part.type == 'text' -%}{{- part.text | trim -}}
      {%- endif -%}
    {%- endfor -%}
  {%- endif -%}
  {{- '<end_of_turn>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%})JINJA";

// Gemma 4: <|turn>{system|user|model}\n...<turn|>\n; a system turn carries the system text (and
// <|think|> when thinking is on); a model turn's earlier thinking (<|channel>...<channel|>) is
// dropped; images are <|image|> between blank lines; the generation prompt closes an empty
// thought channel unless thinking is on.
constexpr const char kGemma4[] = R"JINJA({{- bos_token -}}
{%- set thinking = enable_thinking is defined and enable_thinking -%}
{%- set turns = messages -%}
{%- set has_system = messages and messages[0].role in ['system', 'developer'] -%}
{%- if thinking or has_system -%}
  {{- '<|turn>system\n' -}}
  {%- if thinking -%}{{- '<|think|>' -}}{%- endif -%}
  {%- if has_system -%}
    {%- set system = messages[0].content -%}
    {%- if system is not string -%}
      {%- set system = system | selectattr('type', 'eq', 'text') | map(attribute='text') | join('') -%}
    {%- endif -%}
    {{- system | trim -}}
    {%- set turns = messages[1:] -%}
  {%- endif -%}
  {{- '<turn|>\n' -}}
{%- endif -%}
{%- macro visible(text, role) -%}
  {%- if role != 'model' -%}{{- text | trim -}}
  {%- else -%}
    {%- set kept = namespace(text='') -%}
    {%- for piece in text.split('<channel|>') -%}
      {%- set kept.text = kept.text ~ piece.split('<|channel>')[0] -%}
    {%- endfor -%}
    {{- kept.text | trim -}}
  {%- endif -%}
{%- endmacro -%}
{%- for m in turns -%}
  {%- set role = 'model' if m.role == 'assistant' else m.role -%}
  {{- '<|turn>' ~ role ~ '\n' -}}
  {%- if m.content is string -%}
    {{- visible(m.content, role) -}}
  {%- else -%}
    {%- for part in m.content -%}
      {%- if part.type == 'text' -%}{{- visible(part.text, role) -}}
      {%- elif part.type == 'image' -%}{{- '\n\n<|image|>\n\n' -}}
      {%- elif part.type == 'audio' -%}{{- '<|audio|>' -}}
      {%- endif -%}
    {%- endfor -%}
  {%- endif -%}
  {{- '<turn|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|turn>model\n' -}}
  {%- if not thinking -%}{{- '<|channel>thought\n<channel|>' -}}{%- endif -%}
{%- endif -%})JINJA";

}  // namespace

StatusOr<std::string> BuiltinTemplateSource(const std::string& model_type) {
  if (model_type == "gemma3" || model_type == "gemma3_text") return std::string(kGemma3);
  if (model_type == "gemma4" || model_type == "gemma4_text" || model_type == "gemma4_unified" ||
      model_type == "gemma4_unified_text")
    return std::string(kGemma4);
  return InvalidArgument("no built-in chat format for model type '" + model_type +
                         "' (gemma3, gemma3_text, gemma4, gemma4_text, gemma4_unified, gemma4_unified_text)");
}

}  // namespace tessera::chat
