#!/usr/bin/env python3
"""Renders chat templates with transformers itself, as the reference for zoo's renderer
(templates/chat_template.h). Nothing here is shared with zoo.

A case with "messages" goes through transformers' render_jinja_template, the function
apply_chat_template calls (messages as one conversation; tools, documents and
add_generation_prompt as apply_chat_template passes them; every other variable as a keyword,
as a tokenizer's special tokens are). Any other case is rendered by the template that
transformers compiles (its sandboxed environment with trim_blocks and lstrip_blocks, loop
controls, {% generation %}, raise_exception, strftime_now, its tojson, dict and namespace).

Usage: chat_template_reference.py CASES.json OUT.json
CASES is a JSON array of {"template": str, "variables": {...}}; OUT gets, for each case,
{"output": str}, or {"error": str} with "raised": the message when the template called
raise_exception.
"""
import json
import logging
import sys

import jinja2
from transformers.utils import chat_template_utils


def render(source, variables):
    if "messages" not in variables:
        return chat_template_utils._compile_jinja_template(source).render(**variables)
    variables = dict(variables)
    messages = variables.pop("messages")
    rendered, _ = chat_template_utils.render_jinja_template(
        conversations=[messages], tools=variables.pop("tools", None), documents=variables.pop("documents", None),
        chat_template=source, add_generation_prompt=variables.pop("add_generation_prompt", False), **variables)
    return rendered[0]


def main():
    logging.disable(logging.WARNING)
    cases_path, out_path = sys.argv[1:3]
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    results = []
    for case in cases:
        try:
            results.append({"output": render(case["template"], case["variables"])})
        except jinja2.exceptions.TemplateError as e:
            if type(e) is jinja2.exceptions.TemplateError:  # raise_exception's; not a syntax or undefined error
                results.append({"error": "raise_exception: " + str(e), "raised": str(e)})
            else:
                results.append({"error": type(e).__name__ + ": " + str(e)})
        except Exception as e:  # the reference's verdict, whatever it is
            results.append({"error": type(e).__name__ + ": " + str(e)})
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
