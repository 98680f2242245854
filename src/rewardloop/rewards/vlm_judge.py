"""``vlm_judge``: a vision-language model behind an OpenAI-compatible chat endpoint judges each image.

    rewards:
      vlm_judge:
        weight: 1
        url: http://127.0.0.1:8000/v1      # the server's OpenAI base URL (vllm serve / sglang / transformers serve)
        model: UnifiedReward-qwen-7b       # the served model's name (vllm serve ... --served-model-name)
        template: unified_reward           # or rating_1_10: the prompt text and the answer's format
        template_file: null                # a text file holding {prompt}: replaces the template's text
        token_env: VLM_API_KEY             # or token_file: the server's API key, never the key itself
        max_tokens: 512
        temperature: 0                     # greedy: the same image gets the same answer
        timeout: 120                       # seconds per request
        retries: 3                         # further attempts after a transient failure (5xx, connection reset)
        backoff: 1.0                       # seconds before the first retry, doubled each time
        concurrency: 8                     # requests in flight (one per image)
        image_format: png                  # or jpeg (quality 95, smaller)
        on_unparseable: error              # or nan

Each image is one ``POST {url}/chat/completions`` holding one user message: the image as an
``image_url`` part (``data:image/png;base64,...``), then the template's text with ``{prompt}``
replaced by the image's prompt. The score is the number parsed from the answer by the template's
rule (``parse_score``), on the template's own scale (1-5, 1-10), not normalised. Each image's details
hold the raw answer, the parsed score (null when unparseable), ``unparseable`` and the server's
``finish_reason``. An unparseable answer is never a 0: by default the batch fails naming how many and
quoting one; with ``on_unparseable: nan`` its score is NaN and its details say so (a workflow's scores
table refuses non-finite scores, so ``nan`` is for measuring a judge outside a run).

HTTP is the remote rewards' (``remote.transport``: timeouts, retries with backoff for transient
failures only, errors naming the URL, the request and the cause; redirects not followed, so the key
goes only to the configured URL) and so is the key's handling (``remote.token``). The identity for
reruns (``served_identity``, through ``remote.client.SERVER_IDENTITIES``) is the URL, the model as
the server's ``GET /models`` describes it and the template's text: asking it at startup also stops a
run whose server is down or does not serve the model.
"""

from __future__ import annotations

import hashlib
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from numbers import Real
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import requests

from rewardloop.rewards.base import register
from rewardloop.rewards.remote.client import SERVER_IDENTITIES
from rewardloop.rewards.remote.spec import check_connection, check_url
from rewardloop.rewards.remote.token import read_token
from rewardloop.rewards.remote.transport import Endpoint, PermanentError
from rewardloop.rewards.remote.wire import encode_image

WHERE = "'rewards.vlm_judge"
QUOTED = 200  # characters of an answer quoted in an error


@dataclass(frozen=True)
class Template:
    """A prompt text (``{prompt}`` marks the image's prompt) and the format of its answer: a number in
    ``[low, high]`` after ``label``; ``reasoning``: free text may come before the one label (which is
    then required), else the answer is the number alone, the label optional."""

    text: str
    low: int
    high: int
    label: str
    reasoning: bool


TEMPLATES = {
    # UnifiedReward's pointwise image-generation prompt, verbatim: CodeGoat24/UnifiedReward,
    # inference_qwen/image_generation/qwen_point_score_image_generation.py (the UnifiedReward-qwen-7b
    # example; the image part comes before the text, as there). It asks for a score from 1 to 5 after
    # 'Final Score:'; the repository's own parse (DiffusionDPO/sift_dpo_data.py) takes the first integer
    # after the last 'Final Score:' and 0 when there is none, which is what this module refuses to do.
    "unified_reward": Template(
        "You are given a text caption and a generated image based on that caption. Your task is to evaluate this "
        "image based on two key criteria:\n1. Alignment with the Caption: Assess how well this image aligns with "
        "the provided caption. Consider the accuracy of depicted objects, their relationships, and attributes as "
        "described in the caption.\n2. Overall Image Quality: Examine the visual quality of this image, including "
        "clarity, detail preservation, color accuracy, and overall aesthetic appeal.\nExtract key elements from "
        "the provided text caption, evaluate their presence in the generated image using the format: 'element "
        "(type): value' (where value=0 means not generated, and value=1 means generated), and assign a score from "
        "1 to 5 after 'Final Score:'.\nYour task is provided as follows:\nText Caption: [{prompt}]",
        low=1, high=5, label=r"final\s+score\s*:", reasoning=True),
    # Ours: a plain rating, the number only.
    "rating_1_10": Template(
        "Rate this image from 1 to 10 for how well it matches the text caption and for its visual quality "
        "(1: unrelated or broken, 10: a faithful, high-quality image of the caption).\n"
        "Text caption: {prompt}\nAnswer with the number only.",
        low=1, high=10, label=r"(?:final\s+)?score\s*:", reasoning=False),
}
IMAGE_FORMATS = {"png": "PNG", "jpeg": "JPEG"}
POLICIES = ("error", "nan")
# The fields of a GET /models entry that describe the weights; others change by themselves (vLLM's
# created time and permission ids, transformers serve's loaded status).
STABLE_MODEL_FIELDS = ("id", "root", "parent", "owned_by", "max_model_len")


def parse_score(answer: str, template: Template) -> float | None:
    """The score an answer gives under ``template``'s format, or None when it gives none.

    ``*`` (markdown emphasis) is ignored. The number is digits with an optional decimal part
    (``4``, ``4.5``; no sign, exponent or words), optionally followed by ``/<high>`` and a full stop, and
    nothing else; it must lie in ``[low, high]``. unified_reward: exactly one ``Final Score:`` label
    (any case), anything before it, only the number after it. rating_1_10: the whole answer is the
    number, optionally labelled ``Score:`` or ``Final Score:``.
    """
    number = rf"\s*([0-9]+(?:\.[0-9]+)?)\s*(?:/\s*{template.high}\s*)?\.?\s*"
    text = answer.replace("*", "").strip()
    if template.reasoning:
        parts = re.split(template.label, text, flags=re.IGNORECASE)
        match = re.fullmatch(number, parts[1]) if len(parts) == 2 else None
    else:
        match = re.fullmatch(rf"(?:{template.label})?{number}", text, flags=re.IGNORECASE)
    value = float(match[1]) if match else None
    return value if value is not None and template.low <= value <= template.high else None


class UnparseableAnswers(RuntimeError):
    """Answers the template's rule gives no score for (``on_unparseable: error``)."""


@register("vlm_judge")
class VLMJudge:
    """A VLM served behind an OpenAI-compatible chat endpoint scores each image against its prompt."""

    name = "vlm_judge"
    PATH_OPTIONS = {"template_file": ("file", False)}

    def __init__(self, url: str | None = None, model: str | None = None, template: str = "unified_reward",
                 template_file: str | None = None, token_env: str | None = None, token_file: str | None = None,
                 max_tokens: int = 512, temperature: float = 0.0, timeout: float = 120.0, retries: int = 3,
                 backoff: float = 1.0, concurrency: int = 8, image_format: str = "png",
                 on_unparseable: str = "error"):
        missing = [name for name, value in (("url", url), ("model", model)) if not value]
        if missing or not isinstance(model, str):
            raise ValueError(f"{WHERE}': url (the server's OpenAI base URL, e.g. http://127.0.0.1:8000/v1) and model "
                             f"(the served model's name, a string) are required; {' and '.join(missing) or 'model'} "
                             "is not given as such")
        check_url(url, f"{WHERE}.url'")
        check_connection(WHERE, timeout, retries, backoff, token_env, token_file)
        choices = {"template": (template, TEMPLATES), "image_format": (image_format, IMAGE_FORMATS),
                   "on_unparseable": (on_unparseable, POLICIES)}
        for option, (value, allowed) in choices.items():
            if not isinstance(value, str) or value not in allowed:
                raise ValueError(f"{WHERE}.{option}': expected one of {', '.join(allowed)}, got {value!r}")
        for option, value in (("max_tokens", max_tokens), ("concurrency", concurrency)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{WHERE}.{option}': expected an integer >= 1, got {value!r}")
        if isinstance(temperature, bool) or not isinstance(temperature, Real) or not temperature >= 0:
            raise ValueError(f"{WHERE}.temperature': expected a number >= 0, got {temperature!r}")
        self.url, self.model, self.template_name = url.rstrip("/"), model, template
        self.template = TEMPLATES[template]
        if template_file is not None:
            text = Path(template_file).read_text(encoding="utf-8")
            if "{prompt}" not in text:
                raise ValueError(f"{WHERE}.template_file': {template_file} has no {{prompt}} (where the image's "
                                 "prompt goes)")
            self.template = replace(self.template, text=text)
        self.max_tokens, self.temperature, self.concurrency = max_tokens, float(temperature), concurrency
        self.image_format, self.on_unparseable = IMAGE_FORMATS[image_format], on_unparseable
        token = read_token(token_env, token_file, where=f"{WHERE}'")
        self.endpoint = Endpoint(self.url, f"vlm_judge (model {model!r})", timeout, retries, backoff, token)
        adapter = requests.adapters.HTTPAdapter(pool_maxsize=concurrency)  # a kept connection per request in flight
        for scheme in ("http://", "https://"):
            self.endpoint.session.mount(scheme, adapter)

    @staticmethod
    def check_prompts(prompts: Sequence[str]) -> None:
        """Nothing: any prompt can be judged."""

    def identity(self) -> dict:
        """The URL, the model as ``GET /models`` describes it and the template's text (a fingerprint of it);
        ``PermanentError`` naming the URL when the server does not serve the model."""
        reply = self.endpoint.call("GET", "/models", what=" (the served models)")
        entries = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(entries, list):
            raise PermanentError(f"{self.endpoint.label}: GET {self.url}/models: malformed reply: expected "
                                 "{\"data\": [models]} (permanent: not retried)")
        entry = next((e for e in entries if isinstance(e, dict) and e.get("id") == self.model), None)
        if entry is None:
            served = [e.get("id") for e in entries if isinstance(e, dict)]
            raise PermanentError(f"{self.endpoint.label}: GET {self.url}/models lists {served}, not {self.model!r} "
                                 "(rewards.vlm_judge.model: the served model's name)")
        return {"url": self.url, "model": {k: entry[k] for k in STABLE_MODEL_FIELDS if k in entry},
                "template": hashlib.sha256(self.template.text.encode()).hexdigest()[:16]}

    def request(self, image, prompt: str) -> dict:
        """The chat completion request that asks for one image's judgement."""
        data = encode_image(image, self.image_format)
        media = f"image/{self.image_format.lower()}"
        content = [{"type": "image_url", "image_url": {"url": f"data:{media};base64,{data}"}},
                   {"type": "text", "text": self.template.text.replace("{prompt}", prompt)}]
        return {"model": self.model, "messages": [{"role": "user", "content": content}],
                "max_tokens": self.max_tokens, "temperature": self.temperature, "stream": False}

    def judge(self, image, prompt: str, what: str) -> dict:
        """One image's details: the raw answer, its score (None when unparseable), the finish reason."""
        reply = self.endpoint.call("POST", "/chat/completions", self.request(image, prompt), what=what)
        try:
            choice = reply["choices"][0]
            answer = choice["message"]["content"]
            if not isinstance(answer, str):
                raise TypeError
        except (KeyError, IndexError, TypeError):
            raise PermanentError(f"{self.endpoint.label}: POST {self.url}/chat/completions{what}: malformed reply: "
                                 f"expected choices[0].message.content, a string, got {str(reply)[:QUOTED]!r} "
                                 "(permanent: not retried)") from None
        score = parse_score(answer, self.template)
        return {"answer": answer, "score": score, "unparseable": score is None,
                "finish_reason": choice.get("finish_reason")}

    def score(self, images: Sequence, prompts: Sequence[str]) -> tuple[np.ndarray, list[dict]]:
        images, prompts = list(images), list(prompts)
        if len(images) != len(prompts):
            raise ValueError(f"got {len(images)} images but {len(prompts)} prompts")
        whats = [f" (image {k + 1} of {len(images)} in this batch, prompt {p!r})" for k, p in enumerate(prompts)]
        pool = ThreadPoolExecutor(max(1, min(self.concurrency, len(images))), thread_name_prefix="vlm-judge")
        try:
            details = list(pool.map(self.judge, images, prompts, whats))
        finally:
            pool.shutdown(cancel_futures=True)  # after a failure, the requests not yet sent are not
        bad = [k for k, d in enumerate(details) if d["unparseable"]]
        if bad and self.on_unparseable == "error":
            first = details[bad[0]]
            raise UnparseableAnswers(
                f"vlm_judge (model {self.model!r} at {self.url}): {len(bad)} of {len(images)} answers unparseable "
                f"under template {self.template_name!r} (a number in [{self.template.low}, {self.template.high}]; "
                f"docs/rewards.md, 'VLM judge'); the first is image {bad[0] + 1}'s, prompt {prompts[bad[0]]!r}, "
                f"finish_reason {first['finish_reason']!r}: {first['answer'][:QUOTED]!r}"
                f"{'...' if len(first['answer']) > QUOTED else ''}")
        scores = np.array([np.nan if d["score"] is None else d["score"] for d in details], dtype=np.float64)
        return scores, details


def served_identity(options: Mapping) -> dict:
    """``VLMJudge(**options).identity()``, for ``remote.client.remote_identities``."""
    return VLMJudge(**options).identity()


SERVER_IDENTITIES["vlm_judge"] = served_identity
