"""zoo serve's structured output (response_format), checked by the jsonschema package.

Usage: serve_structured.py RANDOM_PORT TRAINED_PORT API_KEY MODEL_ID

RANDOM_PORT serves a model with (practically) its initial, random weights, TRAINED_PORT one
trained on lines of JSON objects, both behind API_KEY as MODEL_ID. Checks, each exiting non-zero with what failed:
- 50 schemas (8 written here, 42 generated from a seed: objects of strings, integers, numbers,
  booleans, nulls, enums, consts, arrays, unions and nested objects, with $defs/$ref): four answers
  sampled for each under json_schema (temperature 1, through the official openai client) all end
  ("stop"), parse, and validate against their schema;
- json_object: sampled answers from the random model, and the trained model's greedy answer,
  parse as JSON objects; a streamed answer's deltas join into one that parses;
- completions take response_format too;
- schemas the grammar cannot hold are refused with 400 naming the keyword, and a schema xgrammar
  cannot compile with 400 and its reason.
"""
import concurrent.futures
import json
import random
import sys
import urllib.error
import urllib.request

import jsonschema
import openai

random_port, trained_port, api_key, model_id = sys.argv[1:5]
random_client = openai.OpenAI(base_url=f"http://127.0.0.1:{random_port}/v1", api_key=api_key, max_retries=0,
                              timeout=300)
trained_client = openai.OpenAI(base_url=f"http://127.0.0.1:{trained_port}/v1", api_key=api_key, max_retries=0,
                               timeout=300)


def check(condition, message):
    if not condition:
        sys.exit(f"serve_structured: {message}")


def strict(properties):
    """An object schema as OpenAI's strict mode writes one: every property required, no others."""
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def short_string(longest=8):
    """A string of at most `longest` characters (by a pattern: minLength/maxLength are refused)."""
    return {"type": "string", "pattern": f"^[a-z A-Z0-9_-]{{0,{longest}}}$"}


HAND_WRITTEN = [
    strict({"name": short_string(), "age": {"type": "integer", "minimum": 0, "maximum": 120}}),
    strict({"tags": {"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]}, "maxItems": 4},
            "grid": {"type": "array", "maxItems": 3,
                     "items": {"type": "array", "items": {"enum": ["x", "o", None]}, "maxItems": 3}}}),
    {"$defs": {"point": strict({"x": {"type": "number", "minimum": -10, "maximum": 10},
                                "y": {"type": "number", "minimum": -10, "maximum": 10}})},
     **strict({"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"}})},
    strict({"value": {"anyOf": [{"type": "integer", "minimum": -5, "maximum": 5}, short_string(), {"type": "null"}]}}),
    strict({"maybe": {"type": ["string", "null"], "pattern": "^[0-9]{2,6}$"}, "flag": {"type": "boolean"}}),
    strict({"items": {"type": "array", "minItems": 1, "maxItems": 3,
                      "items": strict({"id": {"type": "integer", "minimum": 1, "maximum": 999},
                                       "kind": {"const": "part"}})}}),
    {"$defs": {"node": strict({"label": {"type": "string", "enum": ["a", "b"]},
                               "children": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}}})},
     "$ref": "#/$defs/node"},
    {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 2, "maxItems": 5},
]


def generated(rng, depth=0):
    """A random schema whose every answer is bounded: strings (by patterns) and arrays have maximum lengths."""
    kinds = ["string", "integer", "number", "boolean", "null", "enum", "const"]
    if depth < 2:
        kinds += ["array", "object", "object", "anyOf"]
    kind = rng.choice(kinds)
    if kind == "string":
        return short_string(rng.randint(1, 10))
    if kind == "integer":
        low = rng.randint(-100, 50)
        return {"type": "integer", "minimum": low, "maximum": low + rng.randint(0, 500)}
    if kind == "number":
        return {"type": "number", "minimum": -1000, "maximum": 1000}
    if kind in ("boolean", "null"):
        return {"type": kind}
    if kind == "enum":
        return {"enum": rng.sample(["alpha", "beta", "gamma", 1, 2.5, True, None], rng.randint(1, 4))}
    if kind == "const":
        return {"const": rng.choice(["fixed", 42, False])}
    if kind == "array":
        return {"type": "array", "items": generated(rng, depth + 1), "minItems": rng.randint(0, 1),
                "maxItems": rng.randint(1, 3)}
    if kind == "anyOf":
        return {"anyOf": [generated(rng, depth + 1), generated(rng, depth + 1)]}
    names = rng.sample(["id", "name", "count", "items", "meta", "ok", "score", "note", "level"], rng.randint(1, 4))
    return strict({name: generated(rng, depth + 1) for name in names})


rng = random.Random(7)
schemas = HAND_WRITTEN + [strict({"root": generated(rng)}) if i % 2 else generated(rng) for i in range(42)]
check(len(schemas) == 50, f"{len(schemas)} schemas")
for schema in schemas:
    jsonschema.Draft202012Validator.check_schema(schema)


def sample(index_schema):
    index, schema = index_schema
    r = random_client.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": f"answer {index}"}], n=4, temperature=1.0, seed=index,
        max_tokens=600,
        response_format={"type": "json_schema", "json_schema": {"name": f"s{index}", "schema": schema, "strict": True}})
    out = []
    for choice in r.choices:
        check(choice.finish_reason == "stop",
              f"schema {index}: an answer ended by {choice.finish_reason}: {choice.message.content!r}")
        try:
            value = json.loads(choice.message.content)
        except json.JSONDecodeError as e:
            sys.exit(f"serve_structured: schema {index}: {choice.message.content!r} is not JSON: {e}")
        try:
            jsonschema.validate(value, schema, cls=jsonschema.Draft202012Validator,
                                format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        except jsonschema.ValidationError as e:
            sys.exit(f"serve_structured: schema {index}: {value!r} does not validate: {e.message}")
        out.append(value)
    return out


with concurrent.futures.ThreadPoolExecutor(4) as pool:
    answers = list(pool.map(sample, enumerate(schemas)))
# The answers are the model's choices, not one fixed value per schema.
distinct = sum(len({json.dumps(a, sort_keys=True) for a in four}) > 1 for four in answers)
check(distinct >= 25, f"only {distinct} of 50 schemas got different answers from four samples")

# Any JSON object: sampled from the random model, and the trained model's greedy answer.
for seed in range(4):
    r = random_client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "json"}],
                                              temperature=1.0, seed=seed, max_tokens=600,
                                              response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        check(isinstance(json.loads(r.choices[0].message.content), dict), f"json_object: {r.choices[0].message.content!r}")
r = trained_client.completions.create(model=model_id, prompt="{\"name\": 3}\n", max_tokens=200, temperature=0,
                                      extra_body={"response_format": {"type": "json_object"}})
content = r.choices[0].text
check(r.choices[0].finish_reason == "stop", f"the trained model's greedy JSON did not end: {content!r}")
check(isinstance(json.loads(content), dict), f"the trained model's greedy JSON: {content!r}")
r = trained_client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "The list of"}],
                                           temperature=0, max_tokens=200, response_format={"type": "json_object"})
content = r.choices[0].message.content
check(r.choices[0].finish_reason == "stop", f"the trained model's greedy JSON did not end: {content!r}")
check(isinstance(json.loads(content), dict), f"the trained model's greedy JSON: {content!r}")
stream = trained_client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "The list of"}],
                                                temperature=0, max_tokens=200, stream=True,
                                                response_format={"type": "json_object"})
streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
check(streamed == content, f"streamed {streamed!r}, whole {content!r}")

# Completions take it too.
schema = HAND_WRITTEN[0]
r = random_client.completions.create(model=model_id, prompt="The", max_tokens=300, temperature=1.0, seed=1,
                                     extra_body={"response_format": {"type": "json_schema",
                                                                     "json_schema": {"name": "p", "schema": schema}}})
check(r.choices[0].finish_reason == "stop", f"a completion under a schema ended by {r.choices[0].finish_reason}")
jsonschema.validate(json.loads(r.choices[0].text), schema)


def refused(body):
    request = urllib.request.Request(f"http://127.0.0.1:{random_port}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {api_key}"})
    try:
        urllib.request.urlopen(request, timeout=60)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)["error"]
    sys.exit(f"serve_structured: {body} was answered")


def with_schema(schema):
    return {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4,
            "response_format": {"type": "json_schema", "json_schema": {"name": "bad", "schema": schema}}}


status, error = refused(with_schema(strict({"tags": {"type": "array", "uniqueItems": True}})))
check(status == 400 and "'uniqueItems'" in error["message"] and "properties.tags" in error["message"], str(error))
status, error = refused(with_schema({"type": "object", "patternProperties": {"^x": {"type": "string"}}}))
check(status == 400 and "'patternProperties'" in error["message"], str(error))
status, error = refused(with_schema({"type": "decimal"}))
check(status == 400 and error["param"] == "response_format" and "decimal" in error["message"], str(error))
status, error = refused({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}})
check(status == 400 and "json_schema" in error["message"], str(error))
print("serve_structured: 50 schemas x 4 answers valid; json_object, streaming, completions and refusals checked")
