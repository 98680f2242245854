"""OpenAI-compatible chat servers for tests/unit/rewards/test_vlm_judge.py, each run as a subprocess:

  python openai_servers.py vlm MODEL_DIR TOKEN_FILE PORT    a real tiny random-init VLM (FastAPI + uvicorn)
  python openai_servers.py MODE PORT                        a scripted stand-in (stdlib only)

Both answer ``GET /health``, ``GET /v1/models`` and ``POST /v1/chat/completions`` as vLLM does, and
``GET /requests``: what each chat request carried, for the test to check.

``vlm``: ``transformers serve`` needs the ``openai`` package (``transformers[serving]``), which is not in
the environment, so this is the same thing made small: a Qwen2-VL (``Qwen2VLConfig``'s defaults, those of
Qwen/Qwen2-VL-7B-Instruct, with every size shrunk, random weights) and its processor (Qwen2-VL's image
processor at 56x56 pixels, a byte-level BPE tokenizer with Qwen's special tokens, a ChatML chat template)
are built into MODEL_DIR unless there, loaded back with ``from_pretrained`` and answer by greedy
``model.generate`` on the chat message, the image decoded from its data URL. Every route but ``/health``
wants ``Authorization: Bearer <the token in TOKEN_FILE>``. A request records the decoded image's size and
the SHA-256 of its RGB pixels, its media type and the message's text.

Stand-in modes (``/requests`` records each request's ``Authorization`` header too):
- ``echo``: answers with the message's text (a template of just ``{prompt}`` makes the prompt the answer);
- ``flaky:N``: the first N chat requests answer 500, then as ``echo``;
- ``refuse``: every chat request answers 400 with an OpenAI error body;
- ``malformed``: answers 200 with a JSON object that is no chat completion;
- ``redirect:PORT``: answers 307 to the same path on 127.0.0.1:PORT.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STAND_IN_MODEL = "stand-in"
ANSWER_TOKENS = 16


def completion(model: str, answer: str, finish_reason: str) -> dict:
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer},
                         "finish_reason": finish_reason}]}


def models(model: str, root: str) -> dict:
    return {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "tests",
                                        "root": root}]}


def message_parts(body: dict) -> tuple[str, str]:
    """``(image data URL, text)`` of the request's one user message."""
    content = body["messages"][0]["content"]
    url = next(part["image_url"]["url"] for part in content if part["type"] == "image_url")
    text = "".join(part["text"] for part in content if part["type"] == "text")
    return url, text


# --- the real tiny VLM ------------------------------------------------------------------------------


def build_tiny_vlm(folder) -> None:
    """A random-init Qwen2-VL and its processor, saved with save_pretrained (no download)."""
    import torch
    from tokenizers import Tokenizer, decoders, models as tokenizer_models, pre_tokenizers
    from transformers import (PreTrainedTokenizerFast, Qwen2VLConfig, Qwen2VLForConditionalGeneration,
                              Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor)

    byte_level = Tokenizer(tokenizer_models.BPE(
        vocab={c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}, merges=[]))
    byte_level.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    byte_level.decoder = decoders.ByteLevel()
    specials = ["<|im_start|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=byte_level, eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>", additional_special_tokens=specials)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in ("<|im_end|>", "<|endoftext|>", *specials)}
    chat_template = (
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% for part in message['content'] %}"
        "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
        "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    side = 56  # 4x4 patches of 14, merged 2x2: 4 image tokens
    processor = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(min_pixels=side * side, max_pixels=side * side),
                                 tokenizer=tokenizer, video_processor=Qwen2VLVideoProcessor(),
                                 chat_template=chat_template)
    special_ids = dict(bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                       pad_token_id=ids["<|endoftext|>"])
    # initializer_range 0.5 (published: 0.02): with the published one a random model answers the same
    # newlines to every image; this one answers differently to different images.
    config = Qwen2VLConfig(
        text_config=dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         initializer_range=0.5, tie_word_embeddings=True, **special_ids,
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]}),
        vision_config=dict(depth=1, embed_dim=32, hidden_size=32, num_heads=2, mlp_ratio=2, initializer_range=0.5),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True, **special_ids)
    torch.manual_seed(0)
    Qwen2VLForConditionalGeneration(config).save_pretrained(folder)
    processor.save_pretrained(folder)


def decode_data_url(url: str):
    """``(PIL image, media type)`` of a ``data:image/...;base64,...`` URL; ValueError otherwise."""
    from PIL import Image

    header, _, data = url.partition(",")
    if not (header.startswith("data:image/") and header.endswith(";base64")):
        raise ValueError(f"expected a data:image/...;base64 URL, got {url[:40]!r}")
    return Image.open(io.BytesIO(base64.b64decode(data, validate=True))).convert("RGB"), header[5:-7]


def serve_vlm(folder: str, token_file: str, port: int) -> None:
    from pathlib import Path

    import numpy as np
    import torch
    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from rewardloop.rewards.remote.token import authorized

    torch.set_num_threads(1)
    if not (Path(folder) / "config.json").is_file():
        build_tiny_vlm(folder)
    processor = AutoProcessor.from_pretrained(folder)
    model = AutoModelForImageTextToText.from_pretrained(folder).eval()
    token = Path(token_file).read_text().strip()
    name, records, lock = Path(folder).name, [], threading.Lock()
    app = FastAPI()

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": "invalid_request_error"}}, status_code=status)

    @app.middleware("http")
    async def check_token(request: Request, call_next):
        if request.url.path != "/health" and not authorized(request.headers.get("authorization"), token):
            return error(401, "missing or wrong API key")
        return await call_next(request)

    @app.get("/health")
    def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    def served_models():
        return models(name, folder)

    @app.get("/requests")
    def requests_seen():
        return records

    @app.post("/v1/chat/completions")
    def chat(body: dict):
        if body.get("model") != name:
            return error(404, f"The model {body.get('model')!r} does not exist.")
        try:
            image, media = decode_data_url(message_parts(body)[0])
        except (KeyError, IndexError, StopIteration, ValueError, OSError) as exc:
            return error(400, f"bad message: {exc}")
        text = message_parts(body)[1]
        messages = [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": text}]}]
        inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                               return_dict=True, return_tensors="pt")
        with lock, torch.no_grad():
            output = model.generate(**inputs, max_new_tokens=min(body.get("max_tokens", 16), ANSWER_TOKENS),
                                    do_sample=False)
        new = output[0, inputs["input_ids"].shape[1]:]
        records.append({"image_size": list(image.size), "media_type": media, "text": text,
                        "image_sha256": hashlib.sha256(np.asarray(image).tobytes()).hexdigest()})
        finish = "stop" if new[-1].item() == processor.tokenizer.eos_token_id else "length"
        return completion(name, processor.decode(new, skip_special_tokens=True), finish)

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


# --- scripted stand-ins -----------------------------------------------------------------------------


def stand_in(mode: str, port: int) -> None:
    failures = int(mode.split(":")[1]) if mode.startswith("flaky:") else 0
    records, lock = [], threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def reply(self, status: int, body: dict, headers: dict | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            for key, value in {"Content-Type": "application/json", **(headers or {})}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                return self.reply(200, {"status": "ok"})
            if self.path == "/requests":
                return self.reply(200, records)
            with lock:
                records.append({"path": self.path, "authorization": self.headers.get("Authorization")})
            if self.path == "/v1/models":
                return self.reply(200, models(STAND_IN_MODEL, "stand-in"))
            self.reply(404, {"error": {"message": "not found"}})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                records.append({"path": self.path, "authorization": self.headers.get("Authorization")})
                posts = len(records)
            if mode.startswith("redirect:"):
                target = f"http://127.0.0.1:{mode.split(':')[1]}{self.path}"
                return self.reply(307, {}, {"Location": target})
            if mode == "refuse":
                return self.reply(400, {"error": {"message": "refused on purpose", "type": "invalid_request_error"}})
            if mode == "malformed":
                return self.reply(200, {"id": "chatcmpl-test", "object": "chat.completion"})
            if posts <= failures:
                return self.reply(500, {"error": {"message": f"warming up ({posts})"}})
            self.reply(200, completion(body["model"], message_parts(body)[1], "stop"))

        def log_message(self, *args):  # quiet
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    if sys.argv[1] == "vlm":
        serve_vlm(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        stand_in(sys.argv[1], int(sys.argv[2]))
