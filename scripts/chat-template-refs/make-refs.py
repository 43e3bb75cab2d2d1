#!/usr/bin/env python3
"""Render chat templates with Python's jinja2, configured as Hugging Face's
`apply_chat_template` renders them, and write the results Tessera's
`tests/chat_template.rs` compares with (tessera-llm renders with minijinja).

Why: an oracle nobody here wrote. The templates are llama.cpp's copies of
real models' templates (`models/templates/*.jinja` of the llama-cpp-python
source archive, which the tests fetch anyway).

Usage: make-refs.py TEMPLATES_DIR OUT_DIR
  TEMPLATES_DIR: llama.cpp's models/templates
  OUT_DIR:       crates/tessera-llm/tests/data/chat
Needs: pip install jinja2
"""
import json
import os
import sys
from datetime import datetime, timezone

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

# Keep in step with CONVERSATIONS in crates/tessera-llm/tests/chat_template.rs.
CONVERSATIONS = [
    [("user", "Hello!")],
    [("system", "You are terse."), ("user", "What is 2+2?")],
    [
        ("user", "Name a colour."),
        ("assistant", "Blue."),
        ("user", "Another, in  two words?\nThanks ✓"),
    ],
]
# Templates (file stems) and their BOS/EOS texts.
TEMPLATES = {
    "Qwen-Qwen2.5-7B-Instruct": ("", "<|im_end|>"),
    "Qwen-Qwen3-0.6B": ("", "<|im_end|>"),
    "google-gemma-2-2b-it": ("<bos>", "<eos>"),
    "HuggingFaceTB-SmolLM3-3B": ("", "<|im_end|>"),
    "meta-llama-Llama-3.2-3B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "microsoft-Phi-3.5-mini-instruct": ("<s>", "<|endoftext|>"),
    "mistralai-Mistral-Nemo-Instruct-2407": ("<s>", "</s>"),
    "ibm-granite-granite-3.3-2B-Instruct": ("", "<|end_of_text|>"),
    "LFM2-8B-A1B": ("<|startoftext|>", "<|im_end|>"),
}
# The clock templates read (strftime_now): 2026-11-25 12:34:56 UTC.
NOW = 1795610096


def render(source, bos, eos, messages, add_generation_prompt):
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.fromtimestamp(NOW, timezone.utc).strftime(fmt)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    t = env.from_string(source)
    return t.render(
        messages=[{"role": r, "content": c} for r, c in messages],
        add_generation_prompt=add_generation_prompt,
        bos_token=bos,
        eos_token=eos,
    )


def main():
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for stem, (bos, eos) in TEMPLATES.items():
        with open(os.path.join(src, stem + ".jinja"), encoding="utf-8") as f:
            source = f.read()
        for i, conv in enumerate(CONVERSATIONS):
            for gen in (True, False):
                name = f"{stem}.{i}.{'gen' if gen else 'nogen'}.txt"
                try:
                    text = render(source, bos, eos, conv, gen)
                except jinja2.exceptions.TemplateError as e:
                    text = "ERROR: " + str(e)
                with open(os.path.join(out, name), "w", encoding="utf-8", newline="") as f:
                    f.write(text)
    print(f"wrote {len(TEMPLATES) * len(CONVERSATIONS) * 2} references to {out}")


if __name__ == "__main__":
    main()
