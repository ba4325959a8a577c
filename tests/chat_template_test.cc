// The chat-template interpreter (include/tessera/chat_template.h, src/chat/): Jinja semantics case
// by case, errors, limits, loading and the built-in turn formats. The expected strings of the
// semantic cases are what jinja2 3.1 renders in transformers' environment (trim_blocks,
// lstrip_blocks); python/tests/test_chat_template.py compares whole templates with transformers.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "temp_dir.h"
#include "tessera/chat_template.h"
#include "tessera/gguf.h"

namespace tessera::chat {
namespace {

constexpr const char* kTwoTurns =
    R"([{"role":"system","content":"Sys"},{"role":"user","content":" Hi "},{"role":"assistant","content":"Yo"}])";

// The rendered text, or "ERROR: " and the message.
std::string Render(const std::string& tpl, const std::string& messages = kTwoTurns, const std::string& extra = "",
                   bool add_generation_prompt = false) {
  StatusOr<ChatTemplate> t = ChatTemplate::FromSource(tpl, "t");
  if (!t.ok()) return "ERROR: " + t.status().message();
  RenderOptions o;
  o.add_generation_prompt = add_generation_prompt;
  o.extra_context_json = extra;
  StatusOr<std::string> out = t.value().Render(messages, o);
  return out.ok() ? out.value() : "ERROR: " + out.status().message();
}

struct Case {
  const char* tpl;
  const char* want;
};

void ExpectCases(const std::vector<Case>& cases) {
  for (const Case& c : cases) EXPECT_EQ(Render(c.tpl), c.want) << "template: " << c.tpl;
}

TEST(ChatTemplate, WhitespaceControl) {
  ExpectCases({
      {R"T(a
{% if true %}
  b
{% endif %}
c
)T", R"W(a
  b
c)W"},
      {R"T(  {%- if true %} x {% endif -%}  y)T", R"W( x y)W"},
      {R"T(a {{- ' b ' -}} c)T", R"W(a b c)W"},
      {R"T(  {%+ if true %}kept{% endif %})T", R"W(  kept)W"},
      {R"T(x{# comment #}y
  {# own line #}
z)T", R"W(xy
z)W"},
      {R"T({% raw %}{{ not }}{% if %}{% endraw %})T", R"W({{ not }}{% if %})W"},
      {"a\r\nb\rc\n\n", "a\nb\nc\n"},
      {R"T({% if true %}
    {{ 'var tag keeps its indent' }}
{% endif %})T", R"W(    var tag keeps its indent
)W"},
      {R"T(x {% if true -%}
   y
{%- endif +%}
z)T", R"W(x y
z)W"},
  });
}

TEST(ChatTemplate, ExpressionsAndPrinting) {
  ExpectCases({
      {R"T({{ 1 + 2 * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }})T",
       R"W(7 64 4 3 -4 2 3.5)W"},
      {R"T({{ 'x' + 'y' | upper }} {{ 'a' ~ 1 ~ none }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ not 1 == 2 }})T",
       R"W(xY a1None True False True)W"},
      {R"T({{ 1.0 }} {{ 1e16 }} {{ 1e15 }} {{ 1e-5 }} {{ 0.0001 }} {{ 0.1 + 0.2 }} {{ -0.0 }} {{ 1/3 }})T",
       R"W(1.0 1e+16 1000000000000000.0 1e-05 0.0001 0.30000000000000004 -0.0 0.3333333333333333)W"},
      {R"T({{ [1, 'a', none, true, 1.5, (1,), (), {'k': "it's"}] }})T",
       R"W([1, 'a', None, True, 1.5, (1,), (), {'k': "it's"}])W"},
      {R"T({{ 0 or 'b' }} {{ 'a' and 'b' }} {{ [] or none }} {{ 'y' if 0 else 'n' }}[{{ 'y' if 0 }}])T",
       R"W(b b None n[])W"},
      {R"T({{ 'ell' in 'hello' }} {{ 2 not in [1, 2] }} {{ 'k' in {'k': 1} }} {{ (1, 2) == [1, 2] }} {{ 1 == 1.0 }})T",
       R"W(True False True False True)W"},
      {R"T({{ 'ab' * 2 }} {{ [1] * 2 }} {{ [1] + [2] }} {{ '%s-%03d %.1f' % ('x', 7, 2.25) }})T",
       R"W(abab [1, 1] [1, 2] x-007 2.2)W"},
      {R"T({{ 'héllo'[1] }} {{ 'héllo'[1:3] }} {{ 'abc'[::-1] }} {{ [1, 2, 3][-1] }} {{ [1, 2, 3][1:] }})T",
       R"W(é él cba 3 [2, 3])W"},
  });
}

TEST(ChatTemplate, UndefinedValues) {
  ExpectCases({
      {R"T([{{ nothing }}] [{{ messages[0].nope }}] [{{ messages[9] }}] {{ nothing is defined }} {{ nothing | length }})T",
       R"W([] [] [] False 0)W"},
      {R"T({% for x in nothing %}x{% else %}empty{% endfor %} {{ nothing | default('d') }} {{ none.attr is defined }})T",
       R"W(empty d False)W"},
  });
  EXPECT_EQ(Render("{{ nothing.attr }}"), "ERROR: chat template 't' line 1: 'nothing' is undefined");
  EXPECT_EQ(Render("\n\n{{ nothing + 1 }}"), "ERROR: chat template 't' line 3: 'nothing' is undefined");
  EXPECT_EQ(Render("{{ nothing() }}"), "ERROR: chat template 't' line 1: 'nothing' is undefined");
}

TEST(ChatTemplate, LoopsAndScopes) {
  ExpectCases({
      {R"T({% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }} {% endfor %})T",
       R"W(10TrueFalse33 21FalseFalse32 32FalseTrue31 )W"},
      {R"T({% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}{{ m.role }} {% endfor %})T",
       R"W(1/2user 2/2assistant )W"},
      {R"T({% for i in range(10) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %})T",
       R"W(023)W"},
      {R"T({% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }})T", R"W(01020)W"},
      {R"T({% for k, v in {'b': 1, 'a': 2} | dictsort %}{{ k }}{{ v }}{% endfor %} {% for c in 'ab' %}{{ loop.cycle('x', 'y') }}{{ c }}{% endfor %})T",
       R"W(a2b1 xayb)W"},
      {R"T({% if true %}{% set leaked = 'yes' %}{% endif %}{{ leaked }} {% for i in [1] %}{% set inner = 1 %}{% endfor %}[{{ inner }}])T",
       R"W(yes [])W"},
  });
}

TEST(ChatTemplate, MacrosNamespacesAndSet) {
  ExpectCases({
      {R"T({% macro m(a, b='B', c=none) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, 2) }} {{ m(1, c=3) }} [{{ m() }}])T",
       R"W(1BNone 12None 1B3 [BNone])W"},
      {R"T({% macro f(n) %}{{ n }}{% if n > 0 %},{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }})T", R"W(3,2,1,0)W"},
      {R"T({% macro m() %}{{ v }}{% endmacro %}{% set v = 'late' %}{{ m() }} {% for v in ['loop'] %}{{ m() }}{% endfor %})T",
       R"W(late late)W"},
      {R"T({% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}body{% endcall %} {% macro e(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(x) e([1, 2]) %}[{{ x }}]{% endcall %})T",
       R"W(<body> [1][2])W"},
      {R"T({% set ns = namespace(n=0, l=[]) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% set ns.l = ns.l + [i] %}{% endfor %}{{ ns.n }} {{ ns.l }})T",
       R"W(6 [1, 2, 3])W"},
      {R"T({% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t %} x {{ a }} {% endset %}[{{ t }}] {% set u | upper %}up{% endset %}{{ u }})T",
       R"W(12 [ x 1 ] UP)W"},
  });
  EXPECT_EQ(Render("{% set x = 1 %}{% set x.attr = 2 %}"),
            "ERROR: chat template 't' line 1: cannot assign attribute on non-namespace object 'x'");
  EXPECT_EQ(Render("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"),
            "ERROR: chat template 't' line 1: macro 'm' takes not more than 1 argument(s)");
  EXPECT_EQ(Render("{% set ns = namespace(_x=1) %}").rfind("ERROR: chat template 't' line 1: chat templates cannot store", 0),
            0u);
}

TEST(ChatTemplate, FiltersTestsAndMethods) {
  ExpectCases({
      {R"T({{ ' a ' | trim }}|{{ 'ab' | upper }}|{{ [3, 1, 2] | sort | join(',') }}|{{ {'b': 1} | items | list }}|{{ [1, 2] | first }}{{ [1, 2] | last }})T",
       R"W(a|AB|1,2,3|[('b', 1)]|12)W"},
      {R"T({{ messages | map(attribute='role') | join(' ') }}|{{ messages | selectattr('role', 'eq', 'user') | list | length }}|{{ ['a', 'null'] | reject('equalto', 'null') | list }})T",
       R"W(system user assistant|1|['a'])W"},
      {R"T({{ {'a': [1, 2.0, none, true, 'é"']} | tojson }} {{ {'a': 1} | tojson(indent=2) }})T",
       "{\"a\": [1, 2.0, null, true, \"\xc3\xa9\\\"\"]} {\n  \"a\": 1\n}"},
      {R"T({{ 'a,b'.split(',') }} {{ 'Hi'.startswith('H') }} {{ 'x-y'.replace('-', '+') }} {{ {'k': 1}.get('z', 0) }} {{ '  s '.strip() }})T",
       R"W(['a', 'b'] True x+y 0 s)W"},
      {R"T({{ 'x' is string }} {{ {} is mapping }} {{ 'x' is sequence }} {{ 1 is number }} {{ true is number }} {{ none is none }} {{ 4 is divisibleby 2 }})T",
       R"W(True True True True True True True)W"},
      {R"T({{ 2.5 | round }} {{ 2.675 | round(2) }} {{ '42' | int + 1 }} {{ 'x' | int }} {{ 3.9 | int }} {{ [1, 2] | sum }} {{ [4, 9] | max }})T",
       R"W(2.0 2.67 43 0 3 3 9)W"},
  });
  EXPECT_EQ(Render("{{ [1].append(2) }}"),
            "ERROR: chat template 't' line 1: access to attribute 'append' of 'list' object is unsafe");
}

TEST(ChatTemplate, ErrorsNameTemplateAndLine) {
  EXPECT_EQ(Render("ok\n{% if %}"), "ERROR: chat template 't' line 2: expected an expression, got end of statement block '%}'");
  EXPECT_EQ(Render("{% for x in y %}"), "ERROR: chat template 't' line 1: unexpected end of template, expected 'endfor'");
  EXPECT_EQ(Render("{{ x | nope }}"), "ERROR: chat template 't' line 1: no filter named 'nope'");
  EXPECT_EQ(Render("\n{{ x is nope }}"), "ERROR: chat template 't' line 2: no test named 'nope'");
  EXPECT_EQ(Render("{% include 'x' %}"), "ERROR: chat template 't' line 1: the 'include' tag is not supported in chat templates");
  EXPECT_EQ(Render("{{ 'a' + 1 }}"), "ERROR: chat template 't' line 1: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(Render("{{ 1 < 'a' }}"), "ERROR: chat template 't' line 1: '<' not supported between instances of 'int' and 'str'");
  EXPECT_EQ(Render("{% for x in 5 %}{% endfor %}"), "ERROR: chat template 't' line 1: 'int' object is not iterable");
  EXPECT_EQ(Render("{{ 1 / 0 }}"), "ERROR: chat template 't' line 1: division by zero");
  EXPECT_EQ(Render("{{ raise_exception('Roles must alternate') }}"), "ERROR: chat template 't' line 1: Roles must alternate");
  EXPECT_EQ(Render("{% break %}"), "ERROR: chat template 't' line 1: 'break' outside of a for loop");
  EXPECT_EQ(Render("{{ 'unterminated }}"), "ERROR: chat template 't' line 1: unterminated string literal");
  EXPECT_EQ(Render("{# open"), "ERROR: chat template 't' line 1: missing end of comment tag");
  EXPECT_EQ(Render("{{ (1 }}"), "ERROR: chat template 't' line 1: unexpected '}', expected ')'");
  EXPECT_EQ(Render("{{ \"\\xZZ\" }}"), "ERROR: chat template 't' line 1: truncated \\x escape in a string literal");
  const std::string not_utf8 = "\xff";
  EXPECT_EQ(ChatTemplate::FromSource(not_utf8, "bad").status().message(), "chat template 'bad' is not valid UTF-8");
}

TEST(ChatTemplate, LimitsStopRunawayTemplates) {
  auto starts = [](const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; };
  EXPECT_TRUE(starts(Render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"),
                     "ERROR: chat template 't' line 1: macro calls nest deeper than"));
  EXPECT_TRUE(starts(Render("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"),
                     "ERROR: chat template 't' line 1: template exceeds the work limit"));
  EXPECT_TRUE(starts(Render("{{ 'x' * 100000000 }}"), "ERROR: chat template 't' line 1: text grows past the limit"));
  EXPECT_EQ(Render("{{ range(100001) | length }}"),
            "ERROR: chat template 't' line 1: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  EXPECT_TRUE(starts(Render("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}"),
                     "ERROR: chat template 't' line 1: expression nested too deeply"));
  std::string long_sum = "{{ 1";
  for (int i = 0; i < 250; ++i) long_sum += " + 1";
  EXPECT_TRUE(starts(Render(long_sum + " }}"), "ERROR: chat template 't' line 1: expression nested too deeply"));
  EXPECT_TRUE(starts(Render("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}"),
                     "ERROR: chat template 't' line 1: value nests deeper than"));
  std::string deep_ifs;
  for (int i = 0; i < 200; ++i) deep_ifs += "{% if true %}";
  EXPECT_NE(Render(deep_ifs).find("nested too deeply"), std::string::npos);
}

TEST(ChatTemplate, RenderContextAsTransformersBuildsIt) {
  const std::string tpl =
      "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools }}|{{ documents }}|{{ enable_thinking }}|"
      "{% for m in messages %}{{ m | dictsort }}{% endfor %}";
  EXPECT_EQ(Render(tpl, R"([{"role":"user","content":null,"reasoning":"r"}])", R"({"enable_thinking":true})", true),
            "<bos>|<eos>|True|None|None|True|[('reasoning', 'r'), ('reasoning_content', 'r'), ('role', 'user'), "
            "('thinking', 'r')]");
  EXPECT_EQ(Render("{{ tools | length }}{{ bos_token }}", R"([{"role":"user"}])", R"({"tools":[{"a":1}],"bos_token":"B"})"),
            "1B");
  EXPECT_EQ(Render("{{ messages }}", "[]"), "ERROR: messages: the conversation is empty");
  EXPECT_EQ(Render("{{ messages }}", "{}"), "ERROR: messages: expected a JSON array of message objects");
  EXPECT_EQ(Render("{{ messages }}", "[1]"), "ERROR: messages[0] is not a JSON object");
  EXPECT_EQ(Render("{{ messages }}", "[{"), "ERROR: messages: not valid JSON");
  EXPECT_EQ(Render("x", kTwoTurns, R"({"messages":[]})"),
            "ERROR: extra_context_json: 'messages' is set by the renderer, not as an extra variable");
  EXPECT_EQ(Render("x", kTwoTurns, R"({"tools":{"a":1}})"), "ERROR: extra_context_json: 'tools' must be a list");
}

TEST(ChatTemplate, OneTemplateRendersFromManyThreads) {
  StatusOr<ChatTemplate> t = ChatTemplate::FromSource(
      "{% for m in messages %}{% set ns = namespace(n=loop.index) %}{{ ns.n }}{{ m.content | upper }}{% endfor %}", "t");
  ASSERT_TRUE(t.ok());
  std::vector<std::thread> threads;
  std::vector<std::string> outs(8);
  for (size_t k = 0; k < outs.size(); ++k)
    threads.emplace_back([&, k] { outs[k] = t.value().Render(kTwoTurns, RenderOptions{}).value(); });
  for (auto& th : threads) th.join();
  for (const std::string& o : outs) EXPECT_EQ(o, "1SYS2 HI 3YO");
}

TEST(ChatTemplate, LoadsFromCheckpointsAndGguf) {
  testing::TempDir dir;
  EXPECT_EQ(ChatTemplate::FromModelPath(dir.path()).status().code(), StatusCode::kNotFound);
  testing::WriteText(dir.File("tokenizer_config.json"), R"({"bos_token":"<bos>"})");
  EXPECT_EQ(ChatTemplate::FromModelPath(dir.path()).status().code(), StatusCode::kNotFound);
  testing::WriteText(dir.File("tokenizer_config.json"),
                     R"({"chat_template":[{"name":"tool_use","template":"T"},{"name":"default","template":"D{{ 1 }}"}]})");
  StatusOr<ChatTemplate> named = ChatTemplate::FromModelPath(dir.path());
  ASSERT_TRUE(named.ok()) << named.status().message();
  EXPECT_EQ(named.value().source(), "D{{ 1 }}");
  EXPECT_EQ(named.value().name(), dir.File("tokenizer_config.json") + ":chat_template[default]");
  testing::WriteText(dir.File("tokenizer_config.json"), R"({"chat_template":[{"name":"tool_use","template":"T"}]})");
  EXPECT_EQ(ChatTemplate::FromModelPath(dir.path()).status().code(), StatusCode::kInvalidArgument);
  testing::WriteText(dir.File("tokenizer_config.json"), R"({"chat_template":"from config"})");
  EXPECT_EQ(ChatTemplate::FromModelPath(dir.path()).value().source(), "from config");
  testing::WriteText(dir.File("chat_template.jinja"), "from jinja {{ oops");
  const Status broken = ChatTemplate::FromModelPath(dir.path()).status();  // the .jinja wins, and is broken
  EXPECT_NE(broken.message().find(dir.File("chat_template.jinja") + "' line 1:"), std::string::npos) << broken.message();

  io::GgufWriter w;
  w.SetString("general.architecture", "gemma3");
  const std::string bare = dir.File("bare.gguf");
  ASSERT_TRUE(w.Write(bare).ok());
  EXPECT_EQ(ChatTemplate::FromModelPath(bare).status().code(), StatusCode::kNotFound);
  w.SetString("tokenizer.chat_template", "{{ bos_token }}gguf");
  const std::string with = dir.File("with.gguf");
  ASSERT_TRUE(w.Write(with).ok());
  StatusOr<ChatTemplate> g = ChatTemplate::FromModelPath(with);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g.value().Render(kTwoTurns, RenderOptions{}).value(), "<bos>gguf");
  EXPECT_EQ(ChatTemplate::FromModelPath(dir.File("missing")).status().code(), StatusCode::kInvalidArgument);
}

TEST(ChatTemplate, BuiltinTurnFormats) {
  const std::string conv =
      R"([{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"image"},{"type":"text","text":" What? "}]},)"
      R"({"role":"assistant","content":"<|channel>hidden<channel|>A cat."},{"role":"user","content":"Sure?"}])";
  for (const char* type : {"gemma3", "gemma3_text"}) {
    StatusOr<ChatTemplate> t = ChatTemplate::Builtin(type);
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_EQ(t.value().Render(conv, RenderOptions{}).value(),
              "<bos><start_of_turn>user\nBe brief.\n\n<start_of_image>What?<end_of_turn>\n"
              "<start_of_turn>model\n<|channel>hidden<channel|>A cat.<end_of_turn>\n"
              "<start_of_turn>user\nSure?<end_of_turn>\n<start_of_turn>model\n");
  }
  for (const char* type : {"gemma4", "gemma4_text", "gemma4_unified", "gemma4_unified_text"}) {
    StatusOr<ChatTemplate> t = ChatTemplate::Builtin(type);
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_EQ(t.value().Render(conv, RenderOptions{}).value(),
              "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\n\n\n<|image|>\n\nWhat?<turn|>\n"
              "<|turn>model\nA cat.<turn|>\n<|turn>user\nSure?<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
    RenderOptions thinking;
    thinking.add_generation_prompt = false;
    thinking.extra_context_json = R"({"enable_thinking":true})";
    EXPECT_EQ(t.value().Render(R"([{"role":"user","content":"Q"}])", thinking).value(),
              "<bos><|turn>system\n<|think|><turn|>\n<|turn>user\nQ<turn|>\n");
  }
  EXPECT_EQ(ChatTemplate::Builtin("llama").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::chat
