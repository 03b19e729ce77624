#!/usr/bin/python3
"""Renders chat templates with Debian's python3-jinja2, configured as Hugging Face transformers
configures it (trim_blocks, lstrip_blocks, loop controls, raise_exception, strftime_now and a
json.dumps-based tojson). Reads [{"template": str, "context": {...}}] as JSON on stdin and
writes [{"text": str} | {"error": str} | {"failed": str}] as JSON on stdout: "error" for the
template's raise_exception, "failed" where jinja2 itself fails on the template or its context."""
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Raised(jinja2.exceptions.TemplateError):
    """The template's own raise_exception(): told apart from jinja2 failing on it."""


def raise_exception(message):
    raise Raised(message)


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
    compiled = {}  # a template's cases share its compilation
    for case in json.load(sys.stdin):
        try:
            if case["template"] not in compiled:
                compiled[case["template"]] = env.from_string(case["template"])
            out.append({"text": compiled[case["template"]].render(**case["context"])})
        except Raised as e:
            out.append({"error": str(e)})
        except Exception as e:  # jinja2 cannot render it either (an undefined name, a type error)
            out.append({"failed": f"{type(e).__name__}: {e}"})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
