#!/usr/bin/python3
"""Trains Troupe's default model: a small Llama on the King James Bible.

Everything comes from Debian: the text from the `bible` program (package bible-kjv), PyTorch
from python3-torch, numpy from python3-numpy. Fixed seeds; the same command on the same machine
gives the same folder. Steps:

1. The text: every book, verse by verse (one verse a line, a blank line between chapters, no
   verse numbers). A few whole books are held out for evaluation (HELD_OUT) and written to
   heldout.txt in the output folder; the rest is the training text.
2. A byte-level BPE tokenizer (GPT-2's byte alphabet and pre-tokenization, which Troupe's own
   tokenizer implements) trained on the training text, written as a Hugging Face tokenizer.json.
3. A Llama-architecture model (LlamaForCausalLM: RMSNorm, rotary positions, SwiGLU, grouped
   KV heads, tied embeddings) trained with AdamW on windows of the training text.
4. The folder: f16 safetensors, config.json, generation_config.json, tokenizer.json,
   tokenizer_config.json (with a chat template), heldout.txt, and metrics.json with the
   held-out perplexity computed here (the figure `troupe eval perplexity` must reproduce).

Training runs in two phases of the same tokens per step: most steps on windows of SHORT_CONTEXT
tokens (16 a step), then the rest on windows of the full CONTEXT (4 a step), so that rotary
positions and attention spans up to CONTEXT are learned. Where the processor multiplies bfloat16
natively (AVX-512 BF16 or AMX), the forward and backward matrix products run in bfloat16 under
autocast while the weights, the optimizer and the loss stay in float32: measured on a 2-core AMD
EPYC, a step of either phase takes about 1.6 s against 3.2 s (256) and 7.0 s (1,024) in float32,
so the default 2,000 steps take about 55 minutes. `--precision fp32` forces float32.

usage: /usr/bin/python3 tools/train/train_kjv.py --out models/kjv [--size main|draft] [--steps N]
           [--tokenizer models/kjv/tokenizer.json] [--precision auto|bf16|fp32]
           [--init DIR] [--teacher DIR] [--copy-share F] [--copy-random F] [--copy-perturb F]

--copy-share makes a model that copies from its context: that share of each step's windows quote
a passage, break the paragraph and repeat it, then go on as the text did. models/kjv is trained
without (greedy, it repeats a quoted held-out passage at about 10% of positions); the speculative
benchmark's copying target (docs/performance.md) is models/kjv fine-tuned with it, which n-gram
prompt lookup needs to have anything to find. metrics.json reports heldout_copy_accuracy either way.
"""
import argparse
import json
import math
import os
import re
import struct
import subprocess
import sys
import time
from collections import Counter, defaultdict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HELD_OUT = ["Ruth", "Jonah", "Philemon", "Jude", "Titus"]
SPECIALS = ["<|bos|>", "<|eos|>", "<|user|>", "<|assistant|>", "<|end|>"]
SIZES = {
    # hidden, layers, heads, kv heads, intermediate
    # main: sized for the hour on two cores (issue 24): at about 1.6 s a step here (bfloat16), 2,000
    # steps see the text about eight times; the 11 M model of before (hidden 384) managed a fifth of that.
    "main": dict(hidden=256, layers=6, heads=4, kv_heads=2, inter=768),
    "draft": dict(hidden=192, layers=3, heads=3, kv_heads=1, inter=512),
}
CONTEXT = 1024       # the model's context (max_position_embeddings)
SHORT_CONTEXT = 256  # the window of the first phase of training (see main)
VOCAB = 4096
# GPT-2's pre-tokenization, restricted to ASCII (the text is ASCII; Troupe's ByteLevel
# pre-tokenizer applies the Unicode form, which splits ASCII text the same way).
PRETOKEN = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")
# Tools and tool calls in the Hermes style (what Qwen2.5/Qwen3 write), so that a served
# models/kjv renders them and its tool-call parser is inferred from the template.
CHAT_TEMPLATE = ("{% if tools %}<|system|>\nYou may call these tools. For each call write "
                 "<tool_call>{\"name\": <name>, \"arguments\": <arguments>}</tool_call>.\n<tools>\n"
                 "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}</tools><|end|>\n{% endif %}"
                 "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}"
                 "{% if message.tool_calls %}{% for call in message.tool_calls %}<tool_call>\n"
                 "{\"name\": {{ call.function.name | tojson }}, \"arguments\": {{ call.function.arguments | tojson }}}\n</tool_call>"
                 "{% endfor %}{% endif %}<|end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def kjv_books():
    """[(book, text)] in canon order, from the `bible` program."""
    out = subprocess.run(["bible", "-l100000", "Gen1:1-Rev22:21"], check=True, capture_output=True, text=True).stdout
    books, order = {}, []
    book, chapter = None, []
    header = re.compile(r"^(\S.*\S) (\d+)$")
    verse = re.compile(r"^\s+\d+ (.*)$")

    def flush():
        if book is not None and chapter:
            books[book].append("\n".join(chapter))

    for line in out.split("\n"):
        h = header.match(line)
        if h:
            flush()
            chapter = []
            book = h.group(1)
            if book not in books:
                books[book] = []
                order.append(book)
            continue
        v = verse.match(line)
        if v:
            chapter.append(v.group(1).strip())
    flush()
    return [(b, "\n\n".join(books[b]) + "\n") for b in order]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


BYTE = bytes_to_unicode()


def pretokens(text):
    return ["".join(BYTE[b] for b in t.encode("utf-8")) for t in PRETOKEN.findall(text)]


def train_bpe(text, vocab_size):
    """Byte-level BPE: the 256 byte symbols, then merges of the most frequent adjacent pair
    (ties broken by the pair itself, so the result is deterministic)."""
    words = Counter(pretokens(text))
    seqs = {w: list(w) for w in words}
    pairs = Counter()
    where = defaultdict(set)
    for w, c in words.items():
        s = seqs[w]
        for a, b in zip(s, s[1:]):
            pairs[(a, b)] += c
            where[(a, b)].add(w)
    merges = []
    symbols = sorted(set(BYTE.values()))
    while len(symbols) + len(merges) + len(SPECIALS) < vocab_size and pairs:
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        if pairs[best] < 2:
            break
        merges.append(best)
        joined = best[0] + best[1]
        for w in list(where[best]):
            s, c = seqs[w], words[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] -= c
                if pairs[(a, b)] <= 0:
                    del pairs[(a, b)]
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == best[0] and s[i + 1] == best[1]:
                    out.append(joined)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
            for a, b in zip(out, out[1:]):
                pairs[(a, b)] += c
                where[(a, b)].add(w)
        del where[best]
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    for s in symbols:
        vocab[s] = len(vocab)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return vocab, merges


class Encoder:
    def __init__(self, vocab, merges):
        self.vocab = vocab
        self.rank = {m: i for i, m in enumerate(merges)}
        self.cache = {}

    def word(self, w):
        if w in self.cache:
            return self.cache[w]
        s = list(w)
        while len(s) > 1:
            ranked = [(self.rank.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(zip(s, s[1:]))]
            r, i = min(ranked)
            if r == 1 << 30:
                break
            s = s[:i] + [s[i] + s[i + 1]] + s[i + 2:]
        ids = [self.vocab[t] for t in s]
        self.cache[w] = ids
        return ids

    def encode(self, text, bos=True):
        ids = [self.vocab["<|bos|>"]] if bos else []
        for w in pretokens(text):
            ids.extend(self.word(w))
        return ids


def tokenizer_json(vocab, merges):
    special = lambda t: {"id": vocab[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                         "normalized": False, "special": True}
    bos = "<|bos|>"
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [special(t) for t in SPECIALS],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [vocab[bos]], "tokens": [bos]}},
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False, "vocab": vocab,
                  "merges": [[a, b] for a, b in merges]},
    }


class RMSNorm(nn.Module):
    def __init__(self, n, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


_MASKS = {}


def causal_mask(rows, end, rep):
    """True where a query may not look: for the `rows` queries ending at position `end`, the keys
    after each query's own position; `rep` query heads stacked along the rows."""
    if (rows, end, rep) not in _MASKS:
        q = torch.arange(end - rows, end).view(rows, 1)
        _MASKS[(rows, end, rep)] = (torch.arange(end).view(1, end) > q).repeat(rep, 1)
    return _MASKS[(rows, end, rep)]


def causal_attention(q, k, v, chunk):
    """softmax(q k^T + causal mask) v for q (B, kv, rep, T, hd), already scaled, and k, v
    (B, kv, T, hd): grouped-query attention without copying K and V per query head (the query
    heads that share a KV head are stacked along the rows, one matmul per KV head). Queries go in
    chunks of `chunk` positions, each against the keys up to its own end only: at a 1,024-token
    window that skips the 37% of the score matrix the mask would throw away, and the masked
    chunks' scores are a quarter the size."""
    B, kv, rep, T, hd = q.shape
    out = []
    for s in range(0, T, chunk):
        e = min(T, s + chunk)
        qc = q[:, :, :, s:e].reshape(B, kv, rep * (e - s), hd)
        att = (qc @ k[:, :, :e].transpose(-2, -1)).masked_fill(causal_mask(e - s, e, rep), float("-inf"))
        out.append((F.softmax(att, dim=-1) @ v[:, :, :e]).view(B, kv, rep, e - s, hd))
    return out[0] if len(out) == 1 else torch.cat(out, dim=3)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, hd = c["hidden"], c["hidden"] // c["heads"]
        self.heads, self.kv, self.hd = c["heads"], c["kv_heads"], hd
        self.q = nn.Linear(h, c["heads"] * hd, bias=False)
        self.k = nn.Linear(h, c["kv_heads"] * hd, bias=False)
        self.v = nn.Linear(h, c["kv_heads"] * hd, bias=False)
        self.o = nn.Linear(c["heads"] * hd, h, bias=False)
        self.gate = nn.Linear(h, c["inter"], bias=False)
        self.up = nn.Linear(h, c["inter"], bias=False)
        self.down = nn.Linear(c["inter"], h, bias=False)
        self.n1, self.n2 = RMSNorm(h), RMSNorm(h)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        y = self.n1(x)
        q = self.q(y).view(B, T, self.heads, self.hd).transpose(1, 2)
        k = self.k(y).view(B, T, self.kv, self.hd).transpose(1, 2)
        v = self.v(y).view(B, T, self.kv, self.hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        # The scale goes on q (T x hd), not on the scores (T x T), which dominate at long windows.
        rep = self.heads // self.kv
        q = (q * (1.0 / math.sqrt(self.hd))).view(B, self.kv, rep, T, self.hd)
        a = causal_attention(q, k, v, SHORT_CONTEXT).reshape(B, self.heads, T, self.hd)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, -1))
        y = self.n2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Llama(nn.Module):
    def __init__(self, c, vocab):
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(vocab, c["hidden"])
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.norm = RMSNorm(c["hidden"])
        hd = c["hidden"] // c["heads"]
        inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        t = torch.arange(CONTEXT, dtype=torch.float64)
        f = torch.outer(t, inv)
        e = torch.cat((f, f), dim=-1)
        self.register_buffer("cos", e.cos().float(), persistent=False)
        self.register_buffer("sin", e.sin().float(), persistent=False)
        nn.init.normal_(self.embed.weight, std=0.02)
        for b in self.blocks:
            for m in (b.q, b.k, b.v, b.gate, b.up):
                nn.init.normal_(m.weight, std=0.02)
            for m in (b.o, b.down):
                nn.init.normal_(m.weight, std=0.02 / math.sqrt(2 * c["layers"]))

    def forward(self, ids):
        T = ids.shape[1]
        x = self.embed(ids)
        cos, sin = self.cos[:T], self.sin[:T]
        for b in self.blocks:
            x = b(x, cos, sin)
        return F.linear(self.norm(x), self.embed.weight)  # tied head

    def hf_params(self):
        """Hugging Face LlamaForCausalLM names -> this model's parameters."""
        t = {"model.embed_tokens.weight": self.embed.weight, "model.norm.weight": self.norm.weight}
        for i, b in enumerate(self.blocks):
            p = f"model.layers.{i}."
            t.update({p + "self_attn.q_proj.weight": b.q.weight, p + "self_attn.k_proj.weight": b.k.weight,
                      p + "self_attn.v_proj.weight": b.v.weight, p + "self_attn.o_proj.weight": b.o.weight,
                      p + "mlp.gate_proj.weight": b.gate.weight, p + "mlp.up_proj.weight": b.up.weight,
                      p + "mlp.down_proj.weight": b.down.weight, p + "input_layernorm.weight": b.n1.weight,
                      p + "post_attention_layernorm.weight": b.n2.weight})
        return t

    def hf_tensors(self):
        """Hugging Face LlamaForCausalLM names -> f16 numpy arrays."""
        return {k: v.detach().to(torch.float16).numpy() for k, v in self.hf_params().items()}

    def load_hf(self, path):
        """The weights of a folder this script wrote (the inverse of hf_tensors)."""
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            data = f.read()
        with torch.no_grad():
            for name, param in self.hf_params().items():
                t = header[name]
                a, e = t["data_offsets"]
                param.copy_(torch.from_numpy(np.frombuffer(data[a:e], dtype=np.float16).reshape(t["shape"]).astype(np.float32)))


def write_safetensors(path, tensors):
    """numpy arrays (f16 or f32, each tensor its own) -> a safetensors file."""
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        b = a.tobytes()
        header[name] = {"dtype": {np.dtype(np.float16): "F16", np.dtype(np.float32): "F32"}[a.dtype],
                        "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def quoted_window(ids, start, span, rng, sep, random_quote=False, perturb=0.0):
    """span + 1 tokens: a passage of the text, a paragraph break, then the passage again and what
    followed it. The loss on the repeat is what a model learns copying from. A random quote is
    tokens drawn from anywhere in the text: a model that has half-memorised its training books can
    predict a real passage's repeat from memory, which teaches it little about held-out passages;
    a random one it can only copy. `perturb`: that share of a real quote's tokens replaced by
    random ones (in both copies), so that copying must win where the model's own guess disagrees."""
    quote = int(rng.integers(16, span // 2))
    if random_quote:
        q = ids[rng.integers(0, len(ids), size=quote)]
        return np.concatenate([q, sep, q, sep, ids[start:start + span]])[:span + 1]
    q = ids[start:start + quote].copy()
    swap = rng.random(quote) < perturb
    q[swap] = ids[rng.integers(0, len(ids), size=int(swap.sum()))]
    w = np.concatenate([q, sep, q, ids[start + quote:start + span]])
    return w[:span + 1]


def heldout_nll(model, ids, window):
    """Summed NLL and tokens scored, in consecutive windows of `window` tokens, each token after a
    window's first scored after the window's earlier tokens (what `troupe eval perplexity` does)."""
    nll, n = 0.0, 0
    with torch.no_grad():
        for s in range(0, len(ids) - 1, window):
            w = ids[s:s + window]
            if len(w) < 2:
                break
            x = torch.tensor([w])
            logp = F.log_softmax(model(x)[0].double(), dim=-1)  # float32 products, as Troupe computes
            nll -= logp[torch.arange(len(w) - 1), torch.tensor(w[1:])].sum().item()
            n += len(w) - 1
    return nll, n


def top1_agreement(model, teacher, ids, window):
    """The share of held-out positions where the model's likeliest next token is the teacher's: the
    rate at which a greedy draft's proposal is accepted."""
    same, n = 0, 0
    with torch.no_grad():
        for s in range(0, len(ids) - 1, window):
            x = torch.tensor([ids[s:s + window]])
            same += (model(x)[0].argmax(-1) == teacher(x)[0].argmax(-1)).sum().item()
            n += x.shape[1]
    return same / n


def heldout_copy_accuracy(model, ids, sep, quote=64, count=64):
    """Of held-out passages of `quote` tokens quoted, a paragraph break and the passage again: the
    share of the repeat's tokens that are the model's likeliest next token (teacher-forced)."""
    same, n = 0, 0
    with torch.no_grad():
        for s in np.linspace(0, len(ids) - quote - 1, count).astype(int):
            p = list(ids[s:s + quote])
            x = torch.tensor([p + list(sep) + p])
            guess = model(x)[0].argmax(-1)[quote + len(sep) - 1:-1]
            same += (guess == torch.tensor(p)).sum().item()
            n += quote
    return same / n


def heldout_free_copy(model, ids, sep, quote=64, cue=6, count=16):
    """What n-gram lookup sees: held-out passages of `quote` tokens quoted, a paragraph break and
    the passage's first `cue` tokens, then the model's own greedy tokens. Returns the mean share of
    the rest of the passage reproduced before the first token that leaves it."""
    kept = 0.0
    with torch.no_grad():
        for s in np.linspace(0, len(ids) - quote - 1, count).astype(int):
            p = list(ids[s:s + quote])
            x, same = p + list(sep) + p[:cue], 0
            for want in p[cue:]:
                if int(model(torch.tensor([x]))[0, -1].argmax()) != want:
                    break
                x.append(want)
                same += 1
            kept += same / (quote - cue)
    return kept / count


def native_bf16():
    """Whether this processor multiplies bfloat16 in hardware (else autocast would emulate it, slower)."""
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return bool(re.search(r"\b(avx512_bf16|amx_bf16)\b", flags))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="the model folder to write")
    ap.add_argument("--size", choices=sorted(SIZES), default="main")
    ap.add_argument("--steps", type=int, default=0, help="optimizer steps (default: main 2000, draft 1000)")
    ap.add_argument("--batch", type=int, default=16, help="windows of %d tokens per step in the first phase" % SHORT_CONTEXT)
    ap.add_argument("--long-share", type=float, default=0.25,
                    help="share of the steps on windows of %d tokens (the last ones)" % CONTEXT)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto",
                    help="matrix products in training: auto is bf16 where the processor has native bfloat16")
    ap.add_argument("--tokenizer", help="reuse this tokenizer.json (the draft model shares the main model's)")
    ap.add_argument("--teacher", help="distil from this model folder (the main model): the loss is the cross-entropy "
                                      "against its next-token distribution instead of the text's next token")
    ap.add_argument("--copy-share", type=float, default=0.0,
                    help="share of each step's windows that quote a passage and then repeat it (teaches copying "
                         "from the context, what n-gram speculation needs of a target); 0 for the default model")
    ap.add_argument("--copy-random", type=float, default=0.0,
                    help="share of the quoting windows whose passage is random tokens of the text (only copying "
                         "predicts their repeat, not memory of the training books)")
    ap.add_argument("--copy-perturb", type=float, default=0.0,
                    help="share of a real quote's tokens replaced by random ones, in both copies")
    ap.add_argument("--init", help="start from this model folder's weights (of the same --size) instead of random ones")
    a = ap.parse_args()
    torch.manual_seed(1234)
    np.random.seed(1234)
    torch.set_num_threads(a.threads)
    steps = a.steps or (2000 if a.size == "main" else 1000)
    precision = a.precision if a.precision != "auto" else ("bf16" if native_bf16() else "fp32")
    long_from = steps - int(round(steps * a.long_share))
    long_batch = max(1, a.batch * SHORT_CONTEXT // CONTEXT)
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    books = kjv_books()
    train_text = "".join(t for b, t in books if b not in HELD_OUT)
    held_text = "".join(t for b, t in books if b in HELD_OUT)
    with open(os.path.join(a.out, "heldout.txt"), "w") as f:
        f.write(held_text)
    if a.tokenizer:
        tj = json.load(open(a.tokenizer))
        vocab = tj["model"]["vocab"]
        merges = [tuple(m) for m in tj["model"]["merges"]]
    else:
        vocab, merges = train_bpe(train_text, VOCAB)
        tj = tokenizer_json(vocab, merges)
    print(f"text: {len(train_text)} training bytes, {len(held_text)} held out ({', '.join(HELD_OUT)}); "
          f"tokenizer: {len(vocab)} tokens, {len(merges)} merges ({time.time() - t0:.0f} s)", flush=True)
    enc = Encoder(vocab, merges)
    train_ids = np.array(enc.encode(train_text), dtype=np.int64)
    held_ids = enc.encode(held_text)
    print(f"tokens: {len(train_ids)} training, {len(held_ids)} held out", flush=True)
    paragraph = np.array(enc.encode("\n\n", bos=False), dtype=np.int64)  # as "...\n\nAnd" tokenizes

    c = SIZES[a.size]
    model = Llama(c, len(vocab))
    if a.init:
        model.load_hf(os.path.join(a.init, "model.safetensors"))
    teacher = None
    if a.teacher:  # a draft learns to propose what the target will choose, not what the text says
        tc = json.load(open(os.path.join(a.teacher, "config.json")))
        teacher = Llama(dict(hidden=tc["hidden_size"], layers=tc["num_hidden_layers"], heads=tc["num_attention_heads"],
                             kv_heads=tc["num_key_value_heads"], inter=tc["intermediate_size"]), len(vocab))
        teacher.load_hf(os.path.join(a.teacher, "model.safetensors"))
        teacher.eval()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps)))))
    rng = np.random.default_rng(1234)
    t1 = time.time()
    for step in range(steps):
        span, batch = (CONTEXT, long_batch) if step >= long_from else (SHORT_CONTEXT, a.batch)
        starts = rng.integers(0, len(train_ids) - span - 1, size=batch)
        windows = [train_ids[s:s + span + 1] for s in starts]
        quoted = int(round(batch * a.copy_share))
        for i in range(quoted):
            windows[i] = quoted_window(train_ids, starts[i], span, rng, paragraph, i < round(quoted * a.copy_random),
                                       a.copy_perturb)
        x = torch.from_numpy(np.stack([w[:span] for w in windows]))
        y = torch.from_numpy(np.stack([w[1:span + 1] for w in windows]))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = model(x)
            if teacher is not None:
                with torch.no_grad():
                    target = F.softmax(teacher(x).float().view(-1, len(vocab)), dim=-1)
        if teacher is None:
            loss = F.cross_entropy(logits.float().view(-1, len(vocab)), y.view(-1))
        else:
            loss = -(target * F.log_softmax(logits.float().view(-1, len(vocab)), dim=-1)).sum(-1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == steps - 1:
            el = time.time() - t1
            print(f"step {step}/{steps} window {span} loss {loss.item():.3f} ({el:.0f} s, {el / (step + 1):.2f} s/step)",
                  flush=True)
    train_s = time.time() - t1

    # Export, then evaluate the exported (f16-rounded) weights, as Troupe will load them.
    tensors = model.hf_tensors()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(p.to(torch.float16).float())
    write_safetensors(os.path.join(a.out, "model.safetensors"), tensors)
    model.eval()
    nll, n = heldout_nll(model, held_ids, CONTEXT)
    nll_short, n_short = heldout_nll(model, held_ids, SHORT_CONTEXT)
    hd = c["hidden"] // c["heads"]
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": c["hidden"],
        "intermediate_size": c["inter"], "num_hidden_layers": c["layers"], "num_attention_heads": c["heads"],
        "num_key_value_heads": c["kv_heads"], "head_dim": hd, "vocab_size": len(vocab), "max_position_embeddings": CONTEXT,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True, "hidden_act": "silu",
        "bos_token_id": vocab["<|bos|>"], "eos_token_id": vocab["<|eos|>"], "torch_dtype": "float16",
        "attention_bias": False, "mlp_bias": False,
    }
    json.dump(config, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    # Sampling defaults a request gets when it names none: greedy decoding of a model this small
    # loops; these read as KJV English (models/kjv/README.md shows samples).
    json.dump({"bos_token_id": vocab["<|bos|>"], "eos_token_id": [vocab["<|eos|>"], vocab["<|end|>"]],
               "do_sample": True, "temperature": 0.8, "top_p": 0.95, "top_k": 40, "repetition_penalty": 1.1},
              open(os.path.join(a.out, "generation_config.json"), "w"), indent=2)
    json.dump(tj, open(os.path.join(a.out, "tokenizer.json"), "w"), ensure_ascii=False)
    json.dump({"bos_token": "<|bos|>", "eos_token": "<|eos|>", "add_bos_token": True, "model_max_length": CONTEXT,
               "chat_template": CHAT_TEMPLATE, "tokenizer_class": "PreTrainedTokenizerFast"},
              open(os.path.join(a.out, "tokenizer_config.json"), "w"), indent=2)
    metrics = {"size": a.size, "parameters": params, "steps": steps, "batch": a.batch, "context": CONTEXT,
               "short_context": SHORT_CONTEXT, "long_steps": steps - long_from, "long_batch": long_batch, "lr": a.lr,
               "final_train_loss": loss.item(), "train_seconds": round(train_s, 1), "heldout_books": HELD_OUT,
               "heldout_tokens_scored": n, "heldout_mean_nll": nll / n, "heldout_perplexity": math.exp(nll / n),
               "heldout_perplexity_window_256": math.exp(nll_short / n_short), "heldout_tokens_scored_window_256": n_short,
               "torch": torch.__version__, "threads": a.threads, "precision": precision}
    metrics["heldout_copy_accuracy"] = heldout_copy_accuracy(model, held_ids, paragraph)
    metrics["heldout_free_copy"] = heldout_free_copy(model, held_ids, paragraph)
    if a.copy_share:
        metrics["copy_share"] = a.copy_share
        metrics["copy_random"] = a.copy_random
        metrics["copy_perturb"] = a.copy_perturb
    if a.init:
        metrics["init"] = a.init
    if teacher is not None:
        metrics["teacher"] = a.teacher
        metrics["heldout_top1_agreement_with_teacher"] = top1_agreement(model, teacher, held_ids, CONTEXT)
    json.dump(metrics, open(os.path.join(a.out, "metrics.json"), "w"), indent=2)
    print(json.dumps(metrics, indent=2))


if __name__ == "__main__":
    main()
