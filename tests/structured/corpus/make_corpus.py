#!/usr/bin/python3
"""Writes schemas.json: the JSON Schema corpus the structured-output tests and `troupe bench
structured` run over. Schemas of the shapes applications send (records, API payloads, tool
arguments, configuration, trees), each supported keyword in several places and recursion in
several forms; variants of each base shape change which properties are required, their bounds
and formats, so that the corpus is 200+ schemas without 200 hand-written files.

usage: /usr/bin/python3 tests/structured/corpus/make_corpus.py   (rewrites schemas.json beside it)
"""
import copy
import json
import os

S = {"type": "string"}
I = {"type": "integer"}
N = {"type": "number"}
B = {"type": "boolean"}


def obj(props, required=None, extra=False, **kw):
    o = {"type": "object", "properties": props, "required": list(props) if required is None else required,
         "additionalProperties": extra}
    o.update(kw)
    return o


def s(**kw):
    return dict(S, **kw)


def i(**kw):
    return dict(I, **kw)


def n(**kw):
    return dict(N, **kw)


def arr(items, **kw):
    return dict({"type": "array", "items": items}, **kw)


BASES = [
    ("person", obj({"name": s(maxLength=24), "age": i(minimum=0, maximum=130), "email": s(format="email")}, ["name", "age"])),
    ("address", obj({"street": s(maxLength=40), "city": s(maxLength=20), "zip": s(pattern="^[0-9]{5}$"),
                     "country": {"enum": ["US", "GB", "DE", "FR", "IL"]}})),
    ("order", obj({"id": s(format="uuid"), "items": arr(obj({"sku": s(pattern="^[A-Z]{3}-[0-9]{3}$"), "qty": i(minimum=1, maximum=99)}),
                                                            minItems=1, maxItems=4),
                   "total": n(minimum=0, maximum=10000), "paid": B})),
    ("event", obj({"title": s(maxLength=30), "start": s(format="date-time"), "day": s(format="date"),
                   "at": s(format="time"), "tags": arr(s(maxLength=10), maxItems=3)}, ["title", "start"])),
    ("weather_tool", obj({"location": s(description="City and country", maxLength=30),
                          "unit": {"enum": ["celsius", "fahrenheit"]}}, ["location", "unit"], title="get_weather")),
    ("search_tool", obj({"query": s(minLength=1, maxLength=40), "limit": i(minimum=1, maximum=20),
                         "filters": obj({"after": s(format="date"), "site": s(format="hostname")}, [])}, ["query"])),
    ("classification", obj({"label": {"enum": ["positive", "negative", "neutral"]}, "confidence": n(minimum=0, maximum=1)})),
    ("extraction", obj({"entities": arr(obj({"text": s(maxLength=20), "type": {"enum": ["PERSON", "PLACE", "TIME"]}}),
                                        maxItems=5)})),
    ("config", obj({"host": s(format="ipv4"), "port": i(minimum=1, maximum=65535), "tls": B,
                    "mode": {"const": "production"}})),
    ("link", obj({"url": s(format="uri"), "rel": {"enum": ["next", "prev", "self"]}})),
    ("point", {"type": "array", "prefixItems": [n(minimum=-180, maximum=180), n(minimum=-90, maximum=90)], "items": False,
               "minItems": 2}),
    ("matrix", arr(arr(i(minimum=-9, maximum=9), minItems=2, maxItems=2), minItems=2, maxItems=2)),
    ("nullable", obj({"nickname": {"type": ["string", "null"], "maxLength": 12}, "score": {"type": ["integer", "null"]}})),
    ("union", obj({"value": {"anyOf": [s(maxLength=8), i(minimum=0, maximum=999), B]}})),
    ("shape", {"oneOf": [obj({"kind": {"const": "circle"}, "r": n(minimum=0, maximum=100)}),
                         obj({"kind": {"const": "rect"}, "w": i(minimum=0, maximum=100), "h": i(minimum=0, maximum=100)})]}),
    ("wrapped", {"allOf": [obj({"ok": B, "message": s(maxLength=20)})]}),
    ("tree", {"$defs": {"node": obj({"name": s(maxLength=8), "children": arr({"$ref": "#/$defs/node"}, maxItems=2)})},
              "$ref": "#/$defs/node"}),
    ("list", {"definitions": {"cell": obj({"value": i(), "next": {"anyOf": [{"$ref": "#/definitions/cell"}, {"type": "null"}]}})},
              "$ref": "#/definitions/cell"}),
    ("self", obj({"name": s(maxLength=6), "parts": arr({"$ref": "#"}, maxItems=2)}, ["name"])),
    ("expr", {"$defs": {"e": {"anyOf": [i(minimum=0, maximum=99),
                                        obj({"op": {"enum": ["+", "-", "*"]}, "args": arr({"$ref": "#/$defs/e"}, minItems=2, maxItems=2)})]}},
              "$ref": "#/$defs/e"}),
    ("map", {"type": "object", "additionalProperties": i(minimum=0, maximum=100)}),
    ("open", obj({"id": i()}, extra=True)),
    ("any_value", {"description": "anything", "title": "free"}),
    ("bool_schema", obj({"x": True, "y": s(maxLength=3)})),
    ("product", obj({"name": s(maxLength=20), "price": n(exclusiveMinimum=0, maximum=5000), "stock": i(minimum=0),
                     "sku": s(pattern="^[A-Z0-9]{8}$"), "tags": arr({"enum": ["new", "sale", "eco"]}, maxItems=3)},
                    ["name", "price"], examples=[{"name": "lamp", "price": 10}])),
    ("invoice", obj({"number": s(pattern="^INV-[0-9]{4}$"), "issued": s(format="date"),
                     "lines": arr(obj({"desc": s(maxLength=16), "amount": n(minimum=0, maximum=1000)}), minItems=1, maxItems=3),
                     "currency": {"enum": ["USD", "EUR", "ILS"]}})),
    ("user_profile", obj({"username": s(pattern="^[a-z][a-z0-9_]{2,11}$"), "id": s(format="uuid"), "admin": B,
                          "created": s(format="date-time"), "bio": {"type": ["string", "null"], "maxLength": 40}},
                         ["username", "id"])),
    ("log_entry", obj({"level": {"enum": ["debug", "info", "warn", "error"]}, "ts": s(format="date-time"),
                       "msg": s(maxLength=50), "code": i(minimum=100, maximum=599)})),
    ("survey", obj({"answers": arr({"anyOf": [i(minimum=1, maximum=5), {"const": "n/a"}]}, minItems=3, maxItems=5)})),
    ("pair", {"type": "array", "prefixItems": [s(maxLength=5), i()], "items": False}),
    ("triple_open", {"type": "array", "prefixItems": [B, B], "items": s(maxLength=4), "maxItems": 4}),
    ("rgb", obj({"r": i(minimum=0, maximum=255), "g": i(minimum=0, maximum=255), "b": i(minimum=0, maximum=255)})),
    ("temperature", obj({"celsius": n(minimum=-90, maximum=60), "station": s(pattern="^[A-Z]{4}$")})),
    ("flags", obj({"a": B, "b": B, "c": B, "d": B}, [])),
    ("empty_ok", obj({"note": s(maxLength=10)}, [])),
    ("negative", obj({"delta": i(minimum=-1000, maximum=-1), "ratio": n(exclusiveMinimum=-1, exclusiveMaximum=1)})),
    ("contact", obj({"phone": s(pattern="^\\+[0-9]{7,12}$"), "email": s(format="email"), "site": s(format="uri")}, ["email"])),
    ("calendar", obj({"days": arr(s(format="date"), minItems=1, maxItems=3), "tz": s(pattern="^[A-Z][a-z]+/[A-Z][a-z]+$")})),
    ("network", obj({"hosts": arr(obj({"ip": s(format="ipv4"), "name": s(format="hostname")}), maxItems=3)})),
    ("answer", obj({"reasoning": s(maxLength=60), "answer": i(minimum=0, maximum=1000)})),
]


def variants(name, schema):
    """The base, and versions with every property optional, with descriptions, and with the
    object wrapped as a property of an envelope (a common API shape)."""
    out = [(name, schema)]
    if schema.get("type") == "object" and schema.get("properties"):
        loose = copy.deepcopy(schema)
        loose["required"] = []
        out.append((name + "/optional", loose))
        described = copy.deepcopy(schema)
        for k, v in described["properties"].items():
            if isinstance(v, dict):
                v["description"] = "the " + k
        described["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        out.append((name + "/described", described))
    env = obj({"ok": B, "data": copy.deepcopy(schema) if "$defs" not in schema and "definitions" not in schema
               and "$ref" not in json.dumps(schema) else S})
    out.append((name + "/envelope", env))
    listed = arr(copy.deepcopy(schema), maxItems=2) if "$ref" not in json.dumps(schema) else arr(S, maxItems=2)
    out.append((name + "/list", listed))
    props = schema.get("properties", {})
    if schema.get("type") == "object" and props and "id" not in props and "kind" not in props:  # a tagged record
        tagged = copy.deepcopy(schema)
        tagged["properties"] = dict([("id", i(minimum=1, maximum=10**6)), ("kind", {"const": name})], **tagged["properties"])
        tagged["required"] = ["id", "kind"] + tagged["required"]
        out.append((name + "/tagged", tagged))
    return out


def main():
    corpus = []
    for name, schema in BASES:
        for vname, v in variants(name, schema):
            corpus.append({"name": vname, "schema": v})
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas.json")
    with open(path, "w") as f:
        json.dump(corpus, f, indent=1)
        f.write("\n")
    print(f"{len(corpus)} schemas -> {path}")


if __name__ == "__main__":
    main()
