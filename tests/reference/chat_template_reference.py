#!/usr/bin/env python3
"""Renders chat templates with jinja2 the way transformers' apply_chat_template does, as the
reference for zoo's renderer (text/chat_template.h). Nothing here is shared with zoo.

transformers compiles a chat template in an ImmutableSandboxedEnvironment with trim_blocks and
lstrip_blocks, the loopcontrols extension and its own {% generation %} block, and adds the
globals raise_exception and strftime_now and a tojson filter that is json.dumps with
ensure_ascii=False (so non-ASCII text stays as it is and '<' is not HTML-escaped).

Usage: chat_template_reference.py CASES.json OUT.json
CASES is a JSON array of {"template": str, "variables": {...}}; OUT gets, for each case,
{"output": str}, or {"error": str} with "raised": the message when the template called
raise_exception.
"""
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Raised(Exception):
    pass


class GenerationBlock(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: transformers marks the assistant's text with it;
    the body renders as it is."""

    tags = {"generation"}

    def parse(self, parser):
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def raise_exception(message):
    raise Raised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(date_format):
    return datetime.now().strftime(date_format)


def environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    cases_path, out_path = sys.argv[1:3]
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    env = environment()
    compiled = {}
    results = []
    for case in cases:
        try:
            source = case["template"]
            if source not in compiled:
                compiled[source] = env.from_string(source)
            results.append({"output": compiled[source].render(**case["variables"])})
        except Raised as e:
            results.append({"error": "raise_exception: " + str(e), "raised": str(e)})
        except Exception as e:  # the reference's verdict, whatever it is
            results.append({"error": type(e).__name__ + ": " + str(e)})
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
