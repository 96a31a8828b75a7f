#!/usr/bin/env python3
"""Writes tests/fixtures/chat_templates/serve_tools.json: OpenAI chat requests with tools
(an assistant tool call whose arguments are a JSON string, as OpenAI sends them, and the
tool's result) and the prompt Python's jinja2 renders for them with the model's own
template, as vLLM does: the request's tools as `tools`, each tool call's arguments parsed
into an object, add_generation_prompt on, in the environment of
make_chat_template_fixtures.py (transformers' apply_chat_template). test_serve_tools
renders each request through cformers' serve request parser and compares byte for byte.

    python3 tools/make_serve_tools_fixtures.py      # jinja2 (pip or Debian's python3-jinja2)
"""
import copy
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jinja2  # noqa: E402
from make_chat_template_fixtures import SPECIALS, WEATHER, make_env, render  # noqa: E402

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "chat_templates")

# templates that render `tools` (gemma2 and phi3.5 do not: cformers describes them in a system message)
TEMPLATES = ["llama3.1", "qwen2.5", "mistral-nemo", "hermes2-pro"]

# the tool of make_chat_template_fixtures.py without "minimum", which serve's schema subset
# refuses (docs/serving.md)
TOOL = copy.deepcopy(WEATHER)
del TOOL["function"]["parameters"]["properties"]["days"]["minimum"]

CALL = {"id": "call12345", "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": "Zürich", "days": 2}, ensure_ascii=False)}}
CONVERSATIONS = {
    "ask": [{"role": "system", "content": "Use tools when needed."},
            {"role": "user", "content": "Weather in Zürich?"}],
    "result": [{"role": "user", "content": "Weather in Zürich?"},
               {"role": "assistant", "content": None, "tool_calls": [CALL]},
               {"role": "tool", "tool_call_id": "call12345", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"}],
}


def vllm_messages(messages):
    """What vLLM hands the template: each tool call's arguments as the object."""
    out = copy.deepcopy(messages)
    for m in out:
        for c in m.get("tool_calls") or []:
            if isinstance(c["function"].get("arguments"), str):
                c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    return out


def main():
    env = make_env()
    cases = []
    for name in TEMPLATES:
        text = open(os.path.join(HERE, name + ".jinja"), encoding="utf-8").read()
        bos, eos = SPECIALS[name]
        for conv, messages in CONVERSATIONS.items():
            request = {"messages": messages, "tools": [TOOL]}
            v = {"messages": vllm_messages(messages), "tools": [TOOL], "documents": None,
                 "add_generation_prompt": True, "bos_token": bos, "eos_token": eos}
            case = {"name": f"{name}/{conv}", "template": name + ".jinja", "bos_token": bos, "eos_token": eos,
                    "request": request}
            case.update(render(env, text, v))
            cases.append(case)
    with open(os.path.join(HERE, "serve_tools.json"), "w", encoding="utf-8") as f:
        json.dump({"jinja2": jinja2.__version__, "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases, {sum('error' in c for c in cases)} of them errors")


if __name__ == "__main__":
    main()
