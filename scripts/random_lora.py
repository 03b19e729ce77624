#!/usr/bin/python3
"""Writes a LoRA adapter of random low-rank matrices for a Llama-shaped model folder, in Hugging
Face PEFT's layout (adapter_config.json, adapter_model.safetensors): for measuring what serving
adapters costs (docs/lora.md), not for its output. Standard library only.

usage: /usr/bin/python3 scripts/random_lora.py --model models/kjv --out /tmp/kjv-lora [--rank 16] [--seed 1]
"""
import argparse
import json
import os
import random
import struct

MODULES = [("self_attn", "q_proj"), ("self_attn", "k_proj"), ("self_attn", "v_proj"), ("self_attn", "o_proj"),
           ("mlp", "gate_proj"), ("mlp", "up_proj"), ("mlp", "down_proj")]


def shapes(c, module):
    hidden, inter = c["hidden_size"], c["intermediate_size"]
    head_dim = c.get("head_dim", hidden // c["num_attention_heads"])
    q, kv = c["num_attention_heads"] * head_dim, c.get("num_key_value_heads", c["num_attention_heads"]) * head_dim
    return {"q_proj": (hidden, q), "k_proj": (hidden, kv), "v_proj": (hidden, kv), "o_proj": (q, hidden),
            "gate_proj": (hidden, inter), "up_proj": (hidden, inter), "down_proj": (inter, hidden)}[module]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="the base model's folder (its config.json)")
    p.add_argument("--out", required=True, help="the adapter folder to write")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    with open(os.path.join(a.model, "config.json")) as f:
        c = json.load(f)
    rnd = random.Random(a.seed)
    header, blobs, offset = {}, [], 0
    for layer in range(c["num_hidden_layers"]):
        for part, module in MODULES:
            n_in, n_out = shapes(c, module)
            name = f"base_model.model.model.layers.{layer}.{part}.{module}"
            for suffix, shape in ((".lora_A.weight", [a.rank, n_in]), (".lora_B.weight", [n_out, a.rank])):
                count = shape[0] * shape[1]
                data = struct.pack(f"<{count}f", *(rnd.uniform(-0.05, 0.05) for _ in range(count)))
                header[name + suffix] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
                blobs.append(data)
                offset += len(data)
    os.makedirs(a.out, exist_ok=True)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(a.out, "adapter_model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    with open(os.path.join(a.out, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": a.rank, "lora_alpha": 2 * a.rank, "bias": "none",
                   "target_modules": [m for _, m in MODULES], "base_model_name_or_path": a.model}, f, indent=2)
    print(f"{a.out}: rank {a.rank}, {len(header)} matrices, {offset / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
