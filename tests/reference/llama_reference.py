#!/usr/bin/python3
"""An independent PyTorch implementation of the Llama / Mistral / Qwen2 forward pass, and of the
mixture-of-experts families Mixtral / Qwen2-MoE / Qwen3-MoE (as Hugging Face transformers
defines them: softmax router, top-k, family-specific renormalization, Qwen2-MoE's gated shared
expert, Qwen3's per-head q/k norms), used by
tests/runtime/model_reference_test.cpp to check Troupe's engine. Shares no code with it: reads
the safetensors file and config.json itself and computes in float64.

usage: llama_reference.py MODEL_DIR IDS_FILE OUT_DIR GREEDY_PROMPT_LEN GREEDY_TOKENS
       llama_reference.py --jobs JOBS_FILE   (a JSON list of {model_dir, ids_file, out_dir,
                                               prompt_len, tokens}: several in one start)
  IDS_FILE: JSON list of token ids (the teacher-forced sequence).
  Writes OUT_DIR/logits.f64 (len(ids) x vocab, little-endian float64) and OUT_DIR/greedy.json
  (greedy continuation of the first GREEDY_PROMPT_LEN ids).
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch

torch.set_grad_enabled(False)


def read_safetensors(path):
    with open(path, 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        header = json.loads(f.read(n))
    # Mapped, not read: each tensor is converted straight from the page cache (reading 230 MB into
    # a bytes object, then slicing copies of it, was most of this script's time).
    data = np.memmap(path, dtype=np.uint8, mode='r', offset=8 + n)
    out = {}
    for name, info in header.items():
        if name == '__metadata__':
            continue
        b, e = info['data_offsets']
        raw = data[b:e]
        dt = info['dtype']
        if dt == 'F32':
            arr = np.frombuffer(raw, dtype='<f4').astype(np.float64)
        elif dt == 'F16':
            arr = np.frombuffer(raw, dtype='<f2').astype(np.float64)
        elif dt == 'BF16':
            arr = (np.frombuffer(raw, dtype='<u2').astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        else:
            raise SystemExit('unsupported dtype ' + dt)
        out[name] = torch.from_numpy(arr.reshape(info['shape']))  # astype made it a fresh, writable array
    return out


def inv_freq(cfg):
    hd = cfg.get('head_dim') or cfg['hidden_size'] // cfg['num_attention_heads']
    base = cfg.get('rope_theta', 10000.0)
    f = [1.0 / base ** (2 * i / hd) for i in range(hd // 2)]
    rs = cfg.get('rope_scaling')
    if rs and rs.get('rope_type', rs.get('type')) == 'llama3':
        factor, lo, hi = rs['factor'], rs['low_freq_factor'], rs['high_freq_factor']
        old = rs['original_max_position_embeddings']
        out = []
        for x in f:
            wl = 2 * math.pi / x
            if wl < old / hi:
                out.append(x)
            elif wl > old / lo:
                out.append(x / factor)
            else:
                s = (old / wl - lo) / (hi - lo)
                out.append((1 - s) * x / factor + s * x)
        f = out
    return torch.tensor(f, dtype=torch.float64)


class Model:
    def __init__(self, d):
        self.cfg = json.load(open(os.path.join(d, 'config.json')))
        self.w = {}
        for fn in sorted(os.listdir(d)):
            if fn.endswith('.safetensors'):
                self.w.update(read_safetensors(os.path.join(d, fn)))
        c = self.cfg
        self.h = c['num_attention_heads']
        self.kvh = c.get('num_key_value_heads', self.h)
        self.hd = c.get('head_dim') or c['hidden_size'] // self.h
        self.eps = c['rms_norm_eps']
        self.freq = inv_freq(c)
        self.lm_head = self.w['model.embed_tokens.weight'] if c.get('tie_word_embeddings') else self.w['lm_head.weight']

    def norm(self, x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + self.eps) * w

    def rope(self, x, pos):  # x: [T, heads, hd]
        ang = pos[:, None].double() * self.freq[None, :]
        cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
        a, b = x[..., : self.hd // 2], x[..., self.hd // 2:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

    def forward(self, ids, cache):
        """ids: new tokens; cache: list per layer of (k, v) [T_past, kvh, hd]. Returns logits."""
        return self.hidden(ids, cache) @ self.lm_head.T

    def hidden(self, ids, cache):
        """The last hidden states [T, hidden] after the final norm (what *Model returns)."""
        past = cache[0][0].shape[0] if cache[0] is not None else 0
        T = len(ids)
        pos = torch.arange(past, past + T)
        x = self.w['model.embed_tokens.weight'][torch.tensor(ids)]
        g = self.h // self.kvh
        for l in range(self.cfg['num_hidden_layers']):
            p = 'model.layers.%d.' % l
            h = self.norm(x, self.w[p + 'input_layernorm.weight'])
            proj = {}
            for n in ('q', 'k', 'v'):
                y = h @ self.w[p + 'self_attn.%s_proj.weight' % n].T
                if p + 'self_attn.%s_proj.bias' % n in self.w:
                    y = y + self.w[p + 'self_attn.%s_proj.bias' % n]
                proj[n] = y
            q = proj['q'].view(T, self.h, self.hd)
            k = proj['k'].view(T, self.kvh, self.hd)
            if p + 'self_attn.q_norm.weight' in self.w:  # Qwen3: RMSNorm over each head
                q = self.norm(q, self.w[p + 'self_attn.q_norm.weight'])
                k = self.norm(k, self.w[p + 'self_attn.k_norm.weight'])
            q = self.rope(q, pos)
            k = self.rope(k, pos)
            v = proj['v'].view(T, self.kvh, self.hd)
            if cache[l] is not None:
                k = torch.cat([cache[l][0], k])
                v = torch.cat([cache[l][1], v])
            cache[l] = (k, v)
            S = k.shape[0]
            kk = k.repeat_interleave(g, dim=1)  # query head j uses KV head j // g
            vv = v.repeat_interleave(g, dim=1)
            scores = torch.einsum('thd,shd->hts', q, kk) / math.sqrt(self.hd)
            mask = torch.arange(S)[None, :] > pos[:, None]
            scores = scores.masked_fill(mask[None], float('-inf'))
            att = torch.softmax(scores, dim=-1)
            o = torch.einsum('hts,shd->thd', att, vv).reshape(T, self.h * self.hd)
            x = x + o @ self.w[p + 'self_attn.o_proj.weight'].T
            h = self.norm(x, self.w[p + 'post_attention_layernorm.weight'])
            x = x + self.mlp(l, h)
        return self.norm(x, self.w['model.norm.weight'])

    @staticmethod
    def swiglu(h, gate_w, up_w, down_w):
        gate = h @ gate_w.T
        return (gate * torch.sigmoid(gate) * (h @ up_w.T)) @ down_w.T

    def mlp(self, l, h):
        c = self.cfg
        p = 'model.layers.%d.' % l
        arch = c['architectures'][0]
        if arch == 'MixtralForCausalLM':
            n_exp, renorm, blk = c['num_local_experts'], True, p + 'block_sparse_moe.'
            names = ('w1', 'w3', 'w2')
        elif arch in ('Qwen2MoeForCausalLM', 'Qwen3MoeForCausalLM'):
            n_exp, renorm, blk = c['num_experts'], c.get('norm_topk_prob', False), p + 'mlp.'
            names = ('gate_proj', 'up_proj', 'down_proj')
            if l in c.get('mlp_only_layers', []) or (l + 1) % c.get('decoder_sparse_step', 1) != 0:
                n_exp = 0
        else:
            n_exp = 0
        if n_exp == 0:
            return self.swiglu(h, self.w[p + 'mlp.gate_proj.weight'], self.w[p + 'mlp.up_proj.weight'],
                               self.w[p + 'mlp.down_proj.weight'])
        probs = torch.softmax(h @ self.w[blk + 'gate.weight'].T, dim=-1)
        top_w, top_e = torch.topk(probs, c['num_experts_per_tok'], dim=-1)
        if renorm:
            top_w = top_w / top_w.sum(-1, keepdim=True)
        out = torch.zeros_like(h)
        for e in range(n_exp):
            x = blk + 'experts.%d.' % e
            y = self.swiglu(h, *(self.w[x + n + '.weight'] for n in names))
            weight = (top_w * (top_e == e)).sum(-1, keepdim=True)  # 0 for tokens not routed to e
            out = out + weight * y
        if blk + 'shared_expert_gate.weight' in self.w:
            x = blk + 'shared_expert.'
            y = self.swiglu(h, self.w[x + 'gate_proj.weight'], self.w[x + 'up_proj.weight'], self.w[x + 'down_proj.weight'])
            out = out + torch.sigmoid(h @ self.w[blk + 'shared_expert_gate.weight'].T) * y
        return out


def run(model_dir, ids_file, out_dir, plen, ntok):
    ids = json.load(open(ids_file))
    m = Model(model_dir)
    layers = m.cfg['num_hidden_layers']
    logits = m.forward(ids, [None] * layers)
    logits.numpy().astype('<f8').tofile(os.path.join(out_dir, 'logits.f64'))
    cache = [None] * layers
    seq = ids[: int(plen)]
    out = []
    step = m.forward(seq, cache)[-1]
    for _ in range(int(ntok)):
        t = int(torch.argmax(step))
        out.append(t)
        step = m.forward([t], cache)[-1]
    json.dump(out, open(os.path.join(out_dir, 'greedy.json'), 'w'))


def main():
    # --jobs FILE: a JSON list of {model_dir, ids_file, out_dir, prompt_len, tokens}, one
    # Python start for all (importing torch is most of a small model's time).
    if sys.argv[1] == '--jobs':
        for j in json.load(open(sys.argv[2])):
            run(j['model_dir'], j['ids_file'], j['out_dir'], j['prompt_len'], j['tokens'])
        return
    run(*sys.argv[1:6])


if __name__ == '__main__':
    main()
