#!/usr/bin/python3
"""Widens and deepens models/kjv to the 1b preset's size without changing what it computes.

Speculative decoding pays where a decode step is bound by reading the weights, as a real model's
is; models/kjv (5.8 M parameters) is not, and a random 1b model predicts nothing a draft could
guess. This script builds the target the speculative benchmark needs: models/kjv's function in
the 1b preset's shapes (hidden 2048, 22 layers, 32 heads over 4 KV heads of 64, SwiGLU 5632;
the vocabulary stays kjv's 4,096 so models/kjv-draft still drafts for it), about 0.98 B
parameters, 1.96 GB of f16 that every decode step reads.

How the added weights keep kjv's function (in exact arithmetic; in floating point the greedy
tokens come out equal, which --check shows with the engine itself):
- The residual stream keeps kjv's 256 values in its first 256 dimensions and zeros in the
  other 1,792: the embedding is zero there, and every matrix that writes the stream (o_proj,
  down_proj) has zero rows there, so nothing ever puts a value in them.
- RMSNorm divides by the root mean square over all 2,048 dimensions, whose mean square is 8
  times smaller than kjv's over 256; with its epsilon divided by 8 the root is sqrt(8) times
  smaller, so each norm's weight is divided by sqrt(8) (stored in f32 so that it is not rounded
  to f16), which gives kjv's normalisation.
- kjv's 4 heads over 2 KV heads (two heads each) sit at heads 0, 1 (KV head 0) and 8, 9 (KV head
  1) of the 32 over 4 (eight each), so each keeps its KV head; the other heads read random
  projections and write through zero columns of o_proj. The added SwiGLU units read random
  gate/up rows and write through zero columns of down_proj.
- kjv's 6 layers are layers 0, 3, 7, 11, 14, 18 of the 22; the 16 added layers are random except
  for their zero o_proj and down_proj, so they add exactly zero to the stream.
Every weight is read by every step, as in a dense model: the engine does not skip zeros.

usage: /usr/bin/python3 tools/train/widen_kjv.py --out DIR [--from models/kjv] [--seed 1]
           [--check build/troupe]   (greedy tokens of DIR against --from on held-out prompts)
The folder is 1.96 GB: build it where it is needed, do not commit it.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_kjv import write_safetensors  # noqa: E402  (the same writer the trained models come from)

WIDE = dict(hidden=2048, layers=22, heads=32, kv_heads=4, inter=5632)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    kinds = {"F16": np.float16, "F32": np.float32, "BF16": None}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if kinds.get(t["dtype"]) is None:
            sys.exit(f"{path}: tensor {name} has dtype {t['dtype']}; this script reads F16 and F32")
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=kinds[t["dtype"]]).reshape(t["shape"])
    return out


def head_rows(heads, hd):
    """The rows of a [heads * hd, hidden] projection that belong to the given heads."""
    return np.concatenate([np.arange(h * hd, (h + 1) * hd) for h in heads])


def widen(src, cfg, seed):
    H, h = WIDE["hidden"], cfg["hidden_size"]
    hd = cfg["head_dim"]
    n, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    group, wide_group = n // n_kv, WIDE["heads"] // WIDE["kv_heads"]
    if H % h or group > wide_group or n_kv > WIDE["kv_heads"] or cfg["intermediate_size"] > WIDE["inter"]:
        sys.exit("the source model does not fit in the 1b shapes")
    # Source head q (KV head q // group) goes to wide head (q // group) * wide_group + q % group.
    q_to = [(q // group) * wide_group + q % group for q in range(n)]
    scale = np.float32(np.sqrt(h / H))
    rng = np.random.default_rng(seed)

    def random(shape):  # what an initialised model's weights look like (std 0.02)
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)).astype(np.float16)

    def norm(weight):  # kjv's norm over the first h dimensions: sqrt(h/H) undoes the wider mean's smaller root
        w = np.full(H, scale, dtype=np.float32)
        if weight is not None:
            w[:h] = weight.astype(np.float32) * scale
        return w

    out = {}
    embed = np.zeros((cfg["vocab_size"], H), dtype=np.float16)
    embed[:, :h] = src["model.embed_tokens.weight"]
    out["model.embed_tokens.weight"] = embed
    out["model.norm.weight"] = norm(src["model.norm.weight"])
    place = [i * WIDE["layers"] // cfg["num_hidden_layers"] for i in range(cfg["num_hidden_layers"])]
    for layer in range(WIDE["layers"]):
        p = f"model.layers.{layer}."
        s = f"model.layers.{place.index(layer)}." if layer in place else None
        q = random((WIDE["heads"] * hd, H))
        k = random((WIDE["kv_heads"] * hd, H))
        v = random((WIDE["kv_heads"] * hd, H))
        o = np.zeros((H, WIDE["heads"] * hd), dtype=np.float16)
        gate = random((WIDE["inter"], H))
        up = random((WIDE["inter"], H))
        down = np.zeros((H, WIDE["inter"]), dtype=np.float16)
        if s:
            rows = head_rows(q_to, hd)
            q[rows, :h] = src[s + "self_attn.q_proj.weight"]
            q[rows, h:] = 0
            kv_rows = head_rows(range(n_kv), hd)
            for name, m in (("k_proj", k), ("v_proj", v)):
                m[kv_rows, :h] = src[s + f"self_attn.{name}.weight"]
                m[kv_rows, h:] = 0
            o[:h, rows] = src[s + "self_attn.o_proj.weight"]
            inter = cfg["intermediate_size"]
            gate[:inter, :h], gate[:inter, h:] = src[s + "mlp.gate_proj.weight"], 0
            up[:inter, :h], up[:inter, h:] = src[s + "mlp.up_proj.weight"], 0
            down[:h, :inter] = src[s + "mlp.down_proj.weight"]
        out[p + "self_attn.q_proj.weight"], out[p + "self_attn.k_proj.weight"] = q, k
        out[p + "self_attn.v_proj.weight"], out[p + "self_attn.o_proj.weight"] = v, o
        out[p + "mlp.gate_proj.weight"], out[p + "mlp.up_proj.weight"], out[p + "mlp.down_proj.weight"] = gate, up, down
        out[p + "input_layernorm.weight"] = norm(src[s + "input_layernorm.weight"] if s else None)
        out[p + "post_attention_layernorm.weight"] = norm(src[s + "post_attention_layernorm.weight"] if s else None)
    return out


def check(troupe, wide, source, tokens=128, prompts=32):
    """Greedy continuations of held-out lines by both models through the engine: equal or not."""
    lines = [l for l in open(os.path.join(source, "heldout.txt")).read().splitlines() if len(l) > 60][:prompts]
    path = os.path.join(wide, "check-prompts.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    outs = []
    for model in (source, wide):
        r = subprocess.run([troupe, "generate", "--model", model, "--prompts-file", path, "--max-tokens", str(tokens),
                            "--temperature", "0", "--ignore-eos", "--json"], capture_output=True, text=True, check=True)
        outs.append(json.loads(r.stdout))
    os.remove(path)
    a, b = outs
    same = sum(x["output_ids"] == y["output_ids"] for x, y in zip(a["outputs"], b["outputs"]))
    print(f"greedy continuations equal to {source}'s: {same} of {len(lines)} prompts ({tokens} tokens each)")
    return same == len(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--from", dest="source", default="models/kjv")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check", metavar="TROUPE", help="compare greedy tokens with the source through this troupe binary")
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.source, "config.json")))
    src = read_safetensors(os.path.join(a.source, "model.safetensors"))
    os.makedirs(a.out, exist_ok=True)
    tensors = widen(src, cfg, a.seed)
    write_safetensors(os.path.join(a.out, "model.safetensors"), tensors)
    wide = dict(cfg, hidden_size=WIDE["hidden"], num_hidden_layers=WIDE["layers"], num_attention_heads=WIDE["heads"],
                num_key_value_heads=WIDE["kv_heads"], intermediate_size=WIDE["inter"],
                rms_norm_eps=cfg["rms_norm_eps"] * cfg["hidden_size"] / WIDE["hidden"])
    json.dump(wide, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "heldout.txt"):
        shutil.copy(os.path.join(a.source, name), os.path.join(a.out, name))
    print(f"wrote {a.out}: {sum(v.size for v in tensors.values()):,} parameters")
    if a.check and not check(a.check, a.out, a.source):
        sys.exit(1)


if __name__ == "__main__":
    main()
