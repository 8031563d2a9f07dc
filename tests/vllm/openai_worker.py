"""A worker unit that is a user's program: the stock ``openai`` client, configured by
nothing but the ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` that ddsup gives a worker.

``python openai_worker.py OUT``: lists the models, asks for a chat completion and a
streamed one, writes what it got to ``OUT`` (JSON) and exits 0; any failure raises.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import openai

TOKENS = 16


def main(out: Path) -> int:
    api = openai.OpenAI(max_retries=0)  # OPENAI_BASE_URL, OPENAI_API_KEY from ddsup
    models = [card.id for card in api.models.list()]
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [
        {"role": "user", "content": "Answer with one word: yes or no."}
    ]
    ignore_eos = {"ignore_eos": True}  # vLLM: generate every token asked for
    chat = api.chat.completions.create(
        model=models[0], messages=messages, max_tokens=TOKENS, extra_body=ignore_eos
    )
    chunks, finish, streamed = 0, None, None
    # vLLM holds back a token that ends inside a UTF-8 character and sends it with the
    # next, so chunks are not tokens: the usage chunk says how many were generated.
    stream = api.chat.completions.create(
        model=models[0], messages=messages, max_tokens=TOKENS, stream=True,
        stream_options={"include_usage": True}, extra_body=ignore_eos,
    )  # fmt: skip
    for chunk in stream:
        chunks += 1
        finish = next((c.finish_reason for c in chunk.choices if c.finish_reason), finish)
        streamed = chunk.usage.completion_tokens if chunk.usage else streamed
    found = {
        "models": models,
        "chat": {
            "tokens": chat.usage.completion_tokens if chat.usage else None,
            "finish_reason": chat.choices[0].finish_reason,
            "content": chat.choices[0].message.content,
        },
        "stream": {"chunks": chunks, "finish_reason": finish, "tokens": streamed},
    }
    out.write_text(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
