#!/usr/bin/python3
"""Writes the tokenizer reference corpus: JSON, a list of strings, the same for the same seed.

Hand-picked texts (tests/tokenizer/texts.json) first, then strings assembled from fragments of
every kind the issue names: multilingual text in many scripts, code, numbers in several
notations, emoji with modifiers, ZWJ sequences, flags and keycaps, runs of every kind of white
space and newline, special-token look-alikes (and the real ones), and edge Unicode (combining
marks, decomposed forms, noncharacters, private use, controls, bidirectional marks, BOM,
variation selectors, unassigned code points). Only characters assigned in Unicode 14 or
unassigned in every version since are used: the reference's regexes (Node's) know later
versions, ours Unicode 14's tables (runtime/tokenizer/unicode_data.inc).

usage: /usr/bin/python3 tests/tokenizer/make_corpus.py [--count N] [--seed S] OUT.json
"""
import argparse
import json
import os
import random
import unicodedata

WORDS = {
    'en': 'the quick brown fox jumps over lazy dog tokenizer model serving cluster request answer '
          "I'll you're we've they'd it's DON'T WON'T O'Neil's",
    'de': 'Straße Größe über Äpfel Öl Übung schön Fußgänger Mädchen Weißwurst',
    'fr': 'café naïve résumé façade où là-bas élève garçon cœur œuvre',
    'es': 'niño año señor mañana ¿qué? ¡hola! pingüino corazón',
    'pt': 'ação coração não informação São Paulo',
    'tr': 'İstanbul ılık ağaç şeker Çok güzel ğ',
    'pl': 'zażółć gęślą jaźń Łódź źródło',
    'vi': 'Tiếng Việt người được không thể',
    'ru': 'Привет мир съешь ещё этих мягких французских булок Ёлка',
    'uk': 'Ґанок їжак єнот Україна',
    'el': 'Καλημέρα κόσμε ΑΒΓΔ λόγος ψυχή',
    'ar': 'العربية مرحبا بالعالم السلام عليكم ١٢٣٤٥',
    'fa': 'فارسی سلام دنیا ۱۲۳',
    'he': 'עברית שלום עולם',
    'hi': 'हिन्दी नमस्ते दुनिया भाषा क्षत्रिय ०१२३',
    'bn': 'বাংলা ভাষা নমস্কার',
    'ta': 'தமிழ் வணக்கம் உலகம்',
    'th': 'ภาษาไทย สวัสดีชาวโลก',
    'ka': 'ქართული გამარჯობა',
    'hy': 'Հայերեն բարեւ',
    'am': 'አማርኛ ሰላም',
    'zh': '中文文本 你好世界 機器學習 模型服务 龘',
    'ja': '日本語のテキスト こんにちは カタカナ ひらがな 漢字 ｶﾀｶﾅ',
    'ko': '한국어 텍스트 안녕하세요 세계',
    'km': 'ភាសាខ្មែរ',
    'my': 'မြန်မာဘာသာ',
}

CODE = [
    'def f(x):\n    return x ** 2  # square\n',
    'for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n',
    'const x = await fetch(`/v1/chat?q=${q}`);\nconsole.log(x?.ok ?? false);',
    '{"model": "troupe", "messages": [{"role": "user", "content": "hi"}], "n": 2}',
    '<div class="a b">&nbsp;&lt;tag&gt; &#x1F600;</div>',
    'SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;',
    'if [ -z "$HOME" ]; then echo "no home" >&2; exit 1; fi',
    '    indented\n        more\n\t\ttabbed\n',
    'fn main() -> Result<(), Box<dyn Error>> { Ok(()) }',
    'x<<=2; y>>>=3; z!==w; a&&b||c; p->q; ::std::vector<int>{}',
    '#include <stdio.h>\nint main(void){printf("%d\\n", 42);}',
    '$ a = b + c; @decorator\n@@ -1,3 +1,4 @@\n+added line',
]

NUMBERS = [
    lambda r: str(r.randint(0, 9)),
    lambda r: str(r.randint(0, 10 ** r.randint(1, 20))),
    lambda r: '%.*f' % (r.randint(1, 6), r.uniform(-1e6, 1e6)),
    lambda r: '%e' % r.uniform(-1e30, 1e30),
    lambda r: '{:,}'.format(r.randint(0, 10 ** 12)),
    lambda r: '%04d-%02d-%02d' % (r.randint(1900, 2100), r.randint(1, 12), r.randint(1, 28)),
    lambda r: '+1 (%03d) %03d-%04d' % (r.randint(100, 999), r.randint(100, 999), r.randint(0, 9999)),
    lambda r: ''.join(chr(0x660 + int(d)) for d in str(r.randint(0, 99999))),   # Arabic-Indic digits
    lambda r: ''.join(chr(0xFF10 + int(d)) for d in str(r.randint(0, 99999))),  # fullwidth digits
    lambda r: r.choice(['½', '⅓', '¾', '²', '³', '①', '⑳', 'Ⅻ', 'ⅷ', '〇', '𝟘𝟙𝟚']),
    lambda r: '0x%X' % r.randint(0, 2 ** 32),
    lambda r: '%d%%' % r.randint(0, 100),
]

EMOJI = ['😀', '🚀', '👍', '👍🏽', '👋🏿', '❤️', '❤', '☺️', '🇩🇪', '🇯🇵', '🏳️‍🌈', '1️⃣', '#️⃣',
         '👨\u200d👩\u200d👧\u200d👦', '👩🏽\u200d💻', '🧑\u200d🤝\u200d🧑', '🐕\u200d🦺', '🫠', '🥲', '👁️‍🗨️',
         '🏴\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F']

SPACES = [' ', '  ', '\t', '\n', '\r\n', '\r', '\n\n', '\xa0', '\u3000', '\u2002', '\u2003', '\u2009', '\u200b',
          '\u2028', '\u2029', '\x0b', '\x0c', '\x85', '\u1680', '\u202f', '\u205f']

SPECIAL = ['<|im_start|>', '<|im_end|>', '<|endoftext|>', '<|begin_of_text|>', '<|eot_id|>',
           '<|start_header_id|>', '<|end_header_id|>', '<s>', '</s>', '<unk>', '[INST]', '[/INST]',
           '<start_of_turn>', '<end_of_turn>', '<bos>', '<eos>', '<|start|>', '<|message|>', '<|end|>',
           '<|channel|>', '<think>', '</think>', '<｜begin▁of▁sentence｜>', '<｜User｜>', '<tool_call>',
           '<|im_', 'im_start|>', '< |im_start| >', '<<s>>', '<|IM_START|>', '<|fake_token|>', '<0x41>',
           '▁', '▁▁hello', 'Ġhello', 'Ċ', '<|reserved_special_token_0|>', '<start_of_image>']

EDGE = ['e\u0301', 'A\u030a', 'n\u0303', '\u0301', '\u0301\u0301\u0301', 'Z\u0351\u036b\u0343a\u0352l',
        '\ufeff', '\u200d', '\u200c', '\u200e', '\u200f', '\u202e', '\ufffe', '\uffff', '\ue000',
        '\U000f0000', '\U0010fffd', '\u0378', '\U000e0001', '\x00', '\x01', '\x1f', '\x7f', '\x9f',
        '\ufe0f', '\ufe0e', '\u00ad', '\u034f', '\u1100\u1161\u11a8', '가', '\ufb01', 'Ǆ', 'ǅ', 'ǆ',
        'ﬀ', '℃', 'Å', 'Ω', 'ᾈ', 'ß', 'ẞ', 'İ', 'ı', '\U0001d400', '\u0e33', '\u0f00', '\ufdfa',
        '\u2126', '\u212b', '\U00020000', '\U0002a6df', '\U00030000', '\U000e0100']


def fragment(r):
    kind = r.randrange(9)
    if kind <= 2:
        lang = r.choice(list(WORDS))
        words = WORDS[lang].split()
        sep = ' ' if lang not in ('zh', 'ja', 'th', 'km', 'my') or r.random() < 0.3 else ''
        return sep.join(r.choice(words) for _ in range(r.randint(1, 8)))
    if kind == 3:
        return r.choice(CODE)
    if kind == 4:
        return r.choice(NUMBERS)(r)
    if kind == 5:
        return ''.join(r.choice(EMOJI) for _ in range(r.randint(1, 4)))
    if kind == 6:
        return ''.join(r.choice(SPACES) for _ in range(r.randint(1, 6))) * r.randint(1, 3)
    if kind == 7:
        return r.choice(SPECIAL)
    return ''.join(r.choice(EDGE) for _ in range(r.randint(1, 3)))


def assigned_in_every_version(s):
    """Characters assigned in Unicode 14, or private use / unassigned in every later version."""
    for c in s:
        cp = ord(c)
        if unicodedata.category(c) == 'Cn' and not (0x40000 <= cp <= 0xDFFFF or cp in (0x378, 0xFFFE, 0xFFFF)):
            return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--count', type=int, default=20000)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('out')
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    texts = json.load(open(os.path.join(here, 'texts.json'), encoding='utf-8'))
    r = random.Random(a.seed)
    while len(texts) < a.count:
        parts = [fragment(r) for _ in range(r.choice([1, 1, 1, 2, 3, 5]))]
        joiners = ['', ' ', '\n', r.choice(SPACES)]
        s = ''
        for p in parts:
            s += (r.choice(joiners) if s else '') + p
        if assigned_in_every_version(s):
            texts.append(s)
    with open(a.out, 'w', encoding='utf-8') as f:
        json.dump(texts, f, ensure_ascii=False)


main()
