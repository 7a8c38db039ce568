"""The prompt set tokenizers are compared on: plain, weights syntax, unicode of many scripts,
whitespace and punctuation runs, typed special tokens, and a prompt of over 1,000 tokens."""

from __future__ import annotations

LONG = " ".join(
    f"(masterpiece:1.{i % 10}), detailed {i}th lantern, ünïcödé 猫{i} — “quoted” {i * 37 % 1000}"
    for i in range(90)
)

PROMPTS = (
    "a cat",
    "Hello world",
    "(masterpiece:1.2), best quality, ((detailed eyes)), [background], \\(literal\\) brackets",
    "embedding:easynegative, lowres",
    "café naïve résumé — Ångström ß ﬁne ǅ ＦＵＬＬＷＩＤＴＨ",
    "日本語のプロンプト、猫と犬 中文提示词 한국어 프롬프트",
    "Привет мир; مرحبا بالعالم; नमस्ते दुनिया; שלום עולם",
    "emoji 🐱‍👤 👩🏽‍🚀 🇯🇵 ❤️ ✨✨✨",
    "tabs\tand\nnew\n\nlines   and    spaces  ",
    "numbers 1234567890 3.14159 1e-5 2024-11-27 $5,000",
    "punctuation!!! ??? ... --- ___ *** ''' \"\"\" ``` ~~~",
    "don't can't I'll we've they're it's HE'S",
    "<|im_start|>user typed a template<|im_end|> and <think>thinking</think>",
    "<end_of_turn> and <start_of_turn> typed",
    "",
    " ",
    LONG,
)
