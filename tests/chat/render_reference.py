#!/usr/bin/python3
"""Renders chat templates with Debian's python3-jinja2, configured as Hugging Face transformers
configures it (trim_blocks, lstrip_blocks, loop controls, raise_exception, strftime_now and a
json.dumps-based tojson). Reads [{"template": str, "context": {...}}] as JSON on stdin and
writes [{"text": str} | {"error": str}] as JSON on stdout."""
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    out = []
    for case in json.load(sys.stdin):
        try:
            out.append({"text": env.from_string(case["template"]).render(**case["context"])})
        except jinja2.exceptions.TemplateError as e:
            out.append({"error": str(e)})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
