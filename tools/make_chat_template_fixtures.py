#!/usr/bin/env python3
"""Writes tests/fixtures/chat_templates/ (and the seeds of tests/fuzz/corpus/jinja/): real Hugging Face chat templates (copied from
llama.cpp's models/templates/), small feature templates, and cases.json, each case a
template, the variables it is rendered with and what Python's jinja2 renders, in the
environment transformers' apply_chat_template builds (trim_blocks, lstrip_blocks,
loopcontrols, raise_exception, strftime_now, and its own tojson). test_jinja renders every
case with cformers' Jinja and compares byte for byte.

    python3 -m venv /work/venv-jinja && /work/venv-jinja/bin/pip install jinja2
    /work/venv-jinja/bin/python tools/make_chat_template_fixtures.py \
        --templates .../vendor/llama.cpp/models/templates

strftime_now formats a fixed instant (NOW, noon UTC, the same day in every time zone the
tests run in) so that the fixtures do not change with the date; test_jinja passes the same.
"""
import argparse
import datetime
import json
import os
import shutil

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = 1768478400  # 2026-01-15 12:00 UTC

# name in the fixtures -> file in llama.cpp's models/templates/
TEMPLATES = {
    "llama3.1": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "llama3.2": "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "qwen2.5": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "qwen3": "Qwen-Qwen3-0.6B.jinja",
    "mistral-nemo": "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "gemma2": "google-gemma-2-2b-it.jinja",
    "phi3.5": "microsoft-Phi-3.5-mini-instruct.jinja",
    "hermes2-pro": "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
}

SPECIALS = {
    "llama3.1": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3.2": ("<|begin_of_text|>", "<|eot_id|>"),
    "qwen2.5": ("", "<|im_end|>"),
    "qwen3": ("", "<|im_end|>"),
    "mistral-nemo": ("<s>", "</s>"),
    "gemma2": ("<bos>", "<eos>"),
    "phi3.5": ("<s>", "<|endoftext|>"),
    "hermes2-pro": ("<|begin_of_text|>", "<|im_end|>"),
}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city — in °C",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "e.g. \"Paris\""},
                           "days": {"type": "integer", "minimum": 1}},
            "required": ["city"],
        },
    },
}

TOOL_CALL = {"id": "call12345", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}}}

CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello!"}],
    "system_user": [{"role": "system", "content": "  You are terse.\n"},
                    {"role": "user", "content": "What is 2+2?"}],
    "multi_turn": [{"role": "system", "content": "You are a helpful assistant."},
                   {"role": "user", "content": "Hi"},
                   {"role": "assistant", "content": "Hello! How can I help?"},
                   {"role": "user", "content": "Tell me a joke about \"quotes\" and\nnewlines."}],
    "no_system_multi": [{"role": "user", "content": "first"},
                        {"role": "assistant", "content": "second"},
                        {"role": "user", "content": "third — ünïcode ✓"}],
    "tools": [{"role": "system", "content": "Use tools when needed."},
              {"role": "user", "content": "Weather in Zürich?"},
              {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
              {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
               "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
              {"role": "assistant", "content": "It is 21.5 °C and clear."},
              {"role": "user", "content": "Thanks"}],
    "think": [{"role": "user", "content": "2+2?"},
              {"role": "assistant", "content": "<think>\nsimple\n</think>\n\n4"},
              {"role": "user", "content": "3+3?"}],
}

# Feature templates: each construct cformers' Jinja implements, checked against jinja2.
FEATURES = {
    "whitespace": "a\n  {% if true %}\n  b\n  {% endif %}\nc {{- ' d ' -}} e\n{# c #}\nf  {%- if 1 %} g {% endif -%}  h\n"
                  "  {%+ if 1 %}i{% endif +%}\nj\n",
    "loop": "{% for x in items %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.length }}"
            "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %}"
            "{{ loop.revindex }}{{ loop.previtem|default('-') }}{{ x }};{% else %}empty{% endfor %}"
            "{% for x in [] %}no{% else %}empty{% endfor %}"
            "{% for k, v in {'a': 1, 'b': [2, 3]}.items() %}{{ k }}={{ v }},{% endfor %}"
            "{% for x in range(10) if x % 3 == 0 %}{{ x }}{{ '!' if loop.last }}{% endfor %}"
            "{% for x in range(6) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"
            "{% for c in 'héllo' %}[{{ c }}]{% endfor %}",
    "scoping": "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"
               "{% set ns = namespace(total=0, names=[]) %}{% for i in range(4) %}{% set ns.total = ns.total + i %}{% endfor %}"
               "{{ ns.total }}{% set block %}in {{ x }} block{% endset %}[{{ block }}]",
    "expressions": "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }}"
                   " {{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }} {{ 3.0 }} {{ 'a' ~ 1 ~ none ~ true }}"
                   " {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'b' in 'abc' }} {{ 2 not in [1, 3] }} {{ 'k' in {'k': 1} }}"
                   " {{ not true or false and true }} {{ none }} {{ [1, 'a', none, true, 1.0] }} {{ {'a': 'b', 'c': [1]} }}"
                   " {{ ('x', 1) }} {{ 'y' if false else 'n' }} {{ 'q' if false }}|{{ \"it's\" }} {{ ['it\\'s', \"q\\\"\"] }}"
                   " {{ 'a\\tb\\u00e9\\x41' }} {{ 'adj' 'acent' }} {{ 10 - 3 - 2 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }}",
    "subscripts": "{% set m = [{'role': 'user', 'content': 'hi'}, {'role': 'assistant'}] %}"
                  "{{ m[0].role }} {{ m[0]['content'] }} {{ m[-1].role }} {{ m[1].content is defined }} {{ m[5] is defined }}"
                  " {{ m[1:] | length }} {{ 'abcdef'[1:4] }} {{ 'abcdef'[::-1] }} {{ 'abcdef'[::2] }} {{ [1, 2, 3, 4][-2:] }}"
                  " {{ [1, 2, 3][::-1] }} {{ 'héllo'[1] }} {{ 'abc'[-1] }} {{ m.0.role }} {{ [1,2,3][5:] }} {{ 'abc'[1:-1] }}",
    "filters": "{{ '  x  ' | trim }}|{{ 'AbC' | upper }}{{ 'AbC' | lower }} {{ [3, 1, 2] | join('-') }} {{ [1, 2] | first }}"
               "{{ [1, 2] | last }} {{ 'héllo' | length }} {{ {'a': 1} | length }} {{ undefined_var | default('dflt') }}"
               " {{ '' | default('empty', true) }} {{ {'b': 1, 'a': [1, 2.5, none, 'é\\n\"']} | tojson }}"
               " {{ {'b': 1, 'a': {'c': []}} | tojson(indent=2) }} {{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}"
               " {{ [{'n': 'a', 'k': 1}, {'n': 'b'}, {'n': 'c', 'k': 0}] | selectattr('k') | map(attribute='n') | join }}"
               " {{ [{'n': 'a', 'r': 'user'}, {'n': 'b', 'r': 'x'}] | selectattr('r', 'equalto', 'user') | list | length }}"
               " {{ [{'n': 'a', 'r': 'user'}, {'n': 'b', 'r': 'x'}] | rejectattr('r', 'equalto', 'user') | map(attribute='n') | list }}"
               " {{ ['a', 'B'] | map('upper') | join(',') }} {{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, none, 2] | reject('none') | list }}"
               " {{ {'x': 1, 'y': 2} | items | list }} {{ 'abc' | reverse }} {{ [1, 2] | reverse | list }} {{ 'a-b' | replace('-', '+') }}"
               " {{ '42' | int + 1 }} {{ '2.5' | float }} {{ -3 | abs }} {{ 'hello world' | title }} {{ 'hELLO' | capitalize }}"
               " {{ 'a\\nb\\n\\nc' | indent(2) }} {{ 'a\\nb' | indent(2, true) }} {{ 5 | string ~ 'x' }} {{ [1, 2] | string }}"
               " {{ 'x' | list }} {{ none | trim }}",
    "methods": "{{ '  ab  '.strip() }}|{{ 'xxabxx'.strip('x') }}|{{ '\\n\\nab\\n'.lstrip('\\n') }}|{{ 'ab  '.rstrip() }}|"
               "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'abc'.startswith('ab') }}"
               " {{ 'abc'.endswith(('x', 'c')) }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'Ab'.upper() }}{{ 'Ab'.lower() }}"
               " {{ '-'.join(['a', 'b']) }} {{ {'a': 1}.get('a') }} {{ {'a': 1}.get('z', 'none') }} {{ {'a': 1}.keys() | list }}"
               " {{ {'a': 1, 'b': 2}.values() | list }} {{ 'think</think>answer'.split('</think>')[-1] }} {{ 'abcb'.find('b') }} {{ 'abcb'.count('b') }}",
    "tests": "{{ 1 is number }}{{ 'a' is string }}{{ none is none }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}"
             "{{ 1 is iterable }}{{ x is defined }}{{ x is undefined }}{{ true is boolean }}{{ 1.5 is float }}{{ 2 is integer }}"
             "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby(3) }}{{ 1 is equalto(1) }}{{ 'a' is eq 'a' }}{{ false is sameas false }}"
             "{{ 1 is not string }}{{ 2 is in [1, 2] }}{{ 'ab' is lower }}{{ 5 is gt 3 }}{{ [] is sequence }}{{ true is true }}"
             "{{ namespace is callable }}",
    "macros": "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bo', punct='?') }}"
              "{% macro render_list(xs) %}{% for x in xs %}<{{ x }}>{% endfor %}{% endmacro %}{{ render_list([1, 2]) }}",
    "raise": "{% if messages | length == 0 %}{{ raise_exception('no messages given') }}{% endif %}ok",
    "strftime": "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d') }}",
    "undefined_ops": "{{ missing }}|{{ missing | length }}|{% for x in missing %}no{% endfor %}|{{ missing is none }}|"
                     "{{ not missing }}|{{ missing == none }}|{{ {'a': 1}.b is defined }}",
}

FEATURE_VARS = {"items": ["a", "b", "c"], "messages": []}


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(NOW).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, text, variables):
    try:
        return {"expected": env.from_string(text).render(**variables)}
    except Exception as e:  # TemplateError, or the TypeError of iterating none
        return {"error": str(e)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--templates", required=True, help="llama.cpp's models/templates directory")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "chat_templates"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    env = make_env()
    cases = []
    for name, file in TEMPLATES.items():
        shutil.copyfile(os.path.join(a.templates, file), os.path.join(a.out, name + ".jinja"))
        text = open(os.path.join(a.out, name + ".jinja"), encoding="utf-8").read()
        bos, eos = SPECIALS[name]
        for conv, messages in CONVERSATIONS.items():
            with_tools = [False, True] if conv == "tools" or name == "hermes2-pro" else [False]
            for tools in with_tools:
                for agp in (False, True):
                    v = {"messages": messages, "tools": [WEATHER] if tools else None, "documents": None,
                         "add_generation_prompt": agp, "bos_token": bos, "eos_token": eos}
                    case = {"name": f"{name}/{conv}{'+tools' if tools else ''}/{'gen' if agp else 'nogen'}",
                            "template": name + ".jinja", "vars": v}
                    case.update(render(env, text, v))
                    cases.append(case)
    for name, text in FEATURES.items():
        with open(os.path.join(a.out, "feature_" + name + ".jinja"), "w", encoding="utf-8") as f:
            f.write(text)
        case = {"name": "feature/" + name, "template": "feature_" + name + ".jinja", "vars": FEATURE_VARS}
        case.update(render(env, text, FEATURE_VARS))
        cases.append(case)
    with open(os.path.join(a.out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"now": NOW, "jinja2": jinja2.__version__, "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    # fuzz seeds (tests/fuzz/fuzz_jinja.c): each template, the separator, a case's variables
    corpus = os.path.join(os.path.dirname(__file__), "..", "tests", "fuzz", "corpus", "jinja")
    os.makedirs(corpus, exist_ok=True)
    seen = set()
    for c in cases:
        if c["template"] in seen:
            continue
        seen.add(c["template"])
        text = open(os.path.join(a.out, c["template"]), encoding="utf-8").read()
        with open(os.path.join(corpus, c["template"].replace(".jinja", "")), "w", encoding="utf-8") as f:
            f.write(text + "\n--cf-fuzz-file--\n" + json.dumps(c["vars"], ensure_ascii=False))
    print(f"{len(cases)} cases, {sum('error' in c for c in cases)} of them errors, in {a.out}")


if __name__ == "__main__":
    main()
