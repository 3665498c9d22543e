"""zoo serve's tool calls (tools, tool_choice), through the official openai client.

Usage:
  serve_tools.py data OUT
  serve_tools.py check RANDOM_PORT PLAIN_PORT API_KEY MODEL_ID SPM_MODEL TEMPLATE=PORT...

`data` writes prompt/completion examples (JSONL) for `zoo finetune`, 200 for each of TEMPLATES:
the prompt is the end of a conversation rendered by transformers with that real chat template
and TOOLS (a user's question about the weather), the completion the assistant's call of
get_weather as the template itself writes the call (Hermes <tool_call> JSON, Qwen's
<function=...> XML, Llama 3's bare JSON), after a <think> block for Qwen3's. The model (sliding-window attention, so the start of a
prompt is out of its sight anyway) learns to answer each template's prompt with its own format.

`check`: each TEMPLATE=PORT serves that model with that template (so with its format),
RANDOM_PORT a model with its initial weights whose template shows no tools, served with
--tool-call-parser hermes, and PLAIN_PORT one whose template shows none, served without it. Each
check exits non-zero with what failed:
- for each format, tool_choice auto: the greedy answer is read as calls (finish_reason
  "tool_calls"), each naming a tool, its arguments valid under the tool's schema (jsonschema);
  streamed, the deltas join into the same calls, and no call text leaks into the content;
- the prompt holds the tools, and a conversation's calls and results, as transformers renders
  them (usage.prompt_tokens equals the sentencepiece package's tokens of transformers' text);
- tool_choice none: the tools are not shown and no calls are read;
- Qwen3's: the thinking comes apart as reasoning_content (whole and streamed alike), and
  chat_template_kwargs' enable_thinking reaches the template;
- tool_choice required (with and without parallel calls) and a named function, on the random
  model: sampled answers are calls whose arguments validate, whatever the weights;
- tool_choice auto on a template that shows no tool format is refused with 400 (PLAIN_PORT),
  and answered where --tool-call-parser names one (RANDOM_PORT); malformed tools and a named
  function that is not among them are refused.
"""
import json
import os
import random
import sys
import urllib.error
import urllib.request

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city over the next days.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                       "required": ["city", "days"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
]
# The same tools with bounded values, for the model with its initial weights: a string under no
# bound could run to max_tokens (a pattern bounds it; minLength/maxLength are refused).
BOUNDED = [
    {"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "pattern": "^[A-Za-z ]{1,12}$"},
            "days": {"type": "integer", "minimum": 1, "maximum": 9}},
            "required": ["city", "days"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "search", "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "pattern": "^[a-z ]{0,16}$"}}, "required": ["query"],
            "additionalProperties": False}}},
]
CITIES = ["Paris", "Oslo", "Lima", "Rome", "Kyiv", "Quito"]
# Real templates, one per format (and Qwen3's, which thinks before its calls), and the text that
# ends an assistant turn in each.
TEMPLATES = {"qwen2_5": "<|im_end|>", "qwen3_5_nothink": "<|im_end|>", "llama3_1": "<|eot_id|>", "qwen3": "<|im_end|>"}
THINKING = {"qwen3"}


def ask(name, city, days):
    # Qwen3's tools prompt ends as Qwen2.5's does: its question tells the model to think first.
    return [{"role": "user", "content": f"{'Think: w' if name in THINKING else 'W'}eather in {city} for {days} days?"}]
# The special tokens zoo passes a template for the test's SentencePiece tokenizer (its own).
SPECIALS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


def template(name):
    with open(os.path.join(os.environ["ZOO_REFERENCE_DIR"], "chat-templates", name + ".jinja"), encoding="utf-8") as f:
        return f.read()


def render(name, messages, tools, generation, **kwargs):
    from transformers.utils import chat_template_utils
    rendered, _ = chat_template_utils.render_jinja_template(
        conversations=[messages], tools=tools, chat_template=template(name), add_generation_prompt=generation,
        **SPECIALS, **kwargs)
    return rendered[0]


def data(out):
    rng = random.Random(0)
    with open(out, "w", encoding="utf-8") as f:
        for name, end_of_turn in TEMPLATES.items():
            for _ in range(200):
                city, days = rng.choice(CITIES), rng.randint(1, 9)
                question = ask(name, city, days)
                call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": city, "days": days}}}
                prompt = render(name, question, TOOLS, True)
                answer = {"role": "assistant", "content": "", "tool_calls": [call]}
                if name in THINKING:
                    answer["reasoning_content"] = f"The user asks about {city}."
                whole = render(name, [*question, answer], TOOLS, False)
                assert whole.startswith(prompt), name
                completion = whole[len(prompt):whole.rindex(end_of_turn)]
                f.write(json.dumps({"prompt": prompt[-240:], "completion": completion}) + "\n")


def check(condition, message):
    if not condition:
        sys.exit(f"serve_tools: {message}")


def main():
    import jsonschema
    import openai
    import sentencepiece

    random_port, plain_port, api_key, model_id, spm_model = sys.argv[2:7]
    ports = dict(arg.split("=") for arg in sys.argv[7:])
    check(sorted(ports) == sorted(TEMPLATES), f"ports for {sorted(ports)}, templates {sorted(TEMPLATES)}")

    def client(port):
        return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=api_key, max_retries=0, timeout=300)

    def valid_calls(calls, where, count=None, tools=TOOLS):
        schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
        check(calls, f"{where}: no tool calls")
        if count is not None:
            check(len(calls) == count, f"{where}: {len(calls)} calls, expected {count}")
        for call in calls:
            check(call.type == "function" and call.id.startswith("call_"), f"{where}: {call}")
            check(call.function.name in schemas, f"{where}: a call of {call.function.name!r}")
            try:
                jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])
            except (json.JSONDecodeError, jsonschema.ValidationError) as e:
                sys.exit(f"serve_tools: {where}: arguments {call.function.arguments!r}: {e}")
        return [(c.function.name, json.loads(c.function.arguments)) for c in calls]

    tokenizer = sentencepiece.SentencePieceProcessor(model_file=spm_model)

    def prompt_tokens(name, messages, tools, **kwargs):
        # A chat's prompt is the template's text alone, as apply_chat_template(tokenize=True)
        # makes it; the BOS that Llama 3's template writes is one token (sentencepiece's encode
        # would spell the text "<s>").
        text = render(name, messages, tools, True, **kwargs)
        bos = text.startswith(SPECIALS["bos_token"])
        return bos + len(tokenizer.encode(text[len(SPECIALS["bos_token"]):] if bos else text))

    found = {}
    for name, port in ports.items():
        tools_client = client(port)
        question = ask(name, "Oslo", 3)
        # auto: the model calls a tool, read from its answer in the template's format.
        r = tools_client.chat.completions.create(model=model_id, messages=question, tools=TOOLS, temperature=0,
                                                 max_tokens=200)
        choice = r.choices[0]
        check(choice.finish_reason == "tool_calls", f"{name} auto: finished by {choice.finish_reason}: {choice.message}")
        whole = found[name] = valid_calls(choice.message.tool_calls, f"{name} auto")
        check(not choice.message.content, f"{name} auto: content {choice.message.content!r} beside the calls")
        check(r.usage.prompt_tokens == prompt_tokens(name, question, TOOLS),
              f"{name} auto: {r.usage.prompt_tokens} prompt tokens, transformers renders "
              f"{prompt_tokens(name, question, TOOLS)}")
        # Streamed: the calls come whole in one delta, after any content, and join into the same calls.
        content, reasoning, calls, reasons = "", "", {}, []
        for chunk in tools_client.chat.completions.create(model=model_id, messages=question, tools=TOOLS, temperature=0,
                                                          max_tokens=200, stream=True):
            delta = chunk.choices[0].delta
            content += delta.content or ""
            reasoning += getattr(delta, "reasoning_content", None) or ""
            for call in delta.tool_calls or []:
                check(call.index not in calls, f"{name} stream: call {call.index} sent twice")
                calls[call.index] = (call.function.name, json.loads(call.function.arguments))
            if chunk.choices[0].finish_reason:
                reasons.append(chunk.choices[0].finish_reason)
        check(reasons == ["tool_calls"], f"{name} stream: finish reasons {reasons}")
        check([calls[i] for i in sorted(calls)] == whole, f"{name} stream: calls {calls}, whole {whole}")
        check(not content.strip(), f"{name} stream: content {content!r}")
        thought = getattr(choice.message, "reasoning_content", None)
        if name in THINKING:
            check(thought and thought.strip().startswith("The user asks about"), f"{name}: reasoning {thought!r}")
            check(reasoning == thought, f"{name} stream: reasoning {reasoning!r}, whole {thought!r}")
            r = tools_client.chat.completions.create(model=model_id, messages=question, tools=TOOLS, temperature=0,
                                                     max_tokens=8, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
            check(r.usage.prompt_tokens == prompt_tokens(name, question, TOOLS, enable_thinking=False),
                  f"{name} enable_thinking=False: {r.usage.prompt_tokens} prompt tokens, transformers renders "
                  f"{prompt_tokens(name, question, TOOLS, enable_thinking=False)}")
        else:
            check(thought is None and not reasoning, f"{name}: reasoning {thought!r} {reasoning!r}")

        # A conversation with a call and its result: the prompt renders as transformers renders it.
        call_id = choice.message.tool_calls[0].id
        turn = [*question,
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": call_id, "type": "function",
                     "function": {"name": "get_weather", "arguments": json.dumps({"city": "Oslo", "days": 3})}}]},
                {"role": "tool", "tool_call_id": call_id, "content": "Snow, -4°C."}]
        r = tools_client.chat.completions.create(model=model_id, messages=turn, tools=TOOLS, temperature=0, max_tokens=4)
        # transformers gets the arguments as an object, as vLLM passes them to templates.
        reference = [*question, {**turn[1], "tool_calls": [{**turn[1]["tool_calls"][0], "function": {
            "name": "get_weather", "arguments": {"city": "Oslo", "days": 3}}}]}, turn[2]]
        check(r.usage.prompt_tokens == prompt_tokens(name, reference, TOOLS),
              f"{name} results: {r.usage.prompt_tokens} prompt tokens, transformers renders "
              f"{prompt_tokens(name, reference, TOOLS)}")

        # none: the tools are not shown, and nothing is read as a call.
        r = tools_client.chat.completions.create(model=model_id, messages=question, tools=TOOLS, tool_choice="none",
                                                 temperature=0, max_tokens=40)
        check(r.choices[0].message.tool_calls is None and r.choices[0].finish_reason != "tool_calls",
              f"{name} none: {r.choices[0]}")
        check(r.usage.prompt_tokens == prompt_tokens(name, question, None),
              f"{name} none: {r.usage.prompt_tokens} prompt tokens")

    # Forced choices on the random model: held to the calls' JSON by a grammar.
    random_client = client(random_port)
    for n, (tool_choice, parallel) in enumerate([("required", True), ("required", False),
                                                 ({"type": "function", "function": {"name": "search"}}, True)]):
        r = random_client.chat.completions.create(
            model=model_id, messages=[{"role": "user", "content": f"go {n}"}], tools=BOUNDED, tool_choice=tool_choice,
            parallel_tool_calls=parallel, n=4, temperature=1.0, seed=n, max_tokens=400)
        for c in r.choices:
            where = f"tool_choice={tool_choice} parallel={parallel}"
            check(c.finish_reason == "tool_calls", f"{where}: finished by {c.finish_reason}: {c.message}")
            got = valid_calls(c.message.tool_calls, where, None if parallel and tool_choice == "required" else 1, BOUNDED)
            if isinstance(tool_choice, dict):
                check(all(name == "search" for name, _ in got), f"{where}: {got}")

    def refused(port, body):
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                         headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"})
        try:
            urllib.request.urlopen(request, timeout=60)
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())["error"]
        sys.exit(f"serve_tools: {body} was answered")

    some_port = next(iter(ports.values()))
    question = ask("", "Oslo", 3)
    status, error = refused(plain_port, {"messages": question, "tools": TOOLS})
    check(status == 400 and error["param"] == "tools" and "no tool-call format" in error["message"], str(error))
    r = random_client.chat.completions.create(model=model_id, messages=question, tools=BOUNDED, max_tokens=8, seed=1)
    check(r.choices[0].finish_reason in ("length", "stop", "tool_calls"), f"--tool-call-parser hermes: {r.choices[0]}")
    status, error = refused(some_port, {"messages": question, "tools": [{"type": "function", "function": {"name": "a b"}}]})
    check(status == 400 and error["param"] == "tools[0].function.name", str(error))
    status, error = refused(some_port, {"messages": question, "tools": TOOLS,
                                        "tool_choice": {"type": "function", "function": {"name": "nope"}}})
    check(status == 400 and "'nope' is not one of the request's tools" in error["message"], str(error))
    print(f"serve_tools: auto calls {found}, streamed alike; prompts as transformers renders them; none, required, "
          "named and refusals checked")


if __name__ == "__main__":
    if sys.argv[1] == "data":
        data(sys.argv[2])
    else:
        main()
