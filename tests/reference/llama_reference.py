#!/usr/bin/python3
"""An independent PyTorch implementation of the Llama / Mistral / Qwen2 / Qwen3 forward pass, of
the mixture-of-experts families Mixtral / Qwen2-MoE / Qwen3-MoE (as Hugging Face transformers
defines them: softmax router, top-k, family-specific renormalization, Qwen2-MoE's gated shared
expert, Qwen3's per-head q/k norms), and of Gemma 2 / Gemma 3 (scaled embeddings, (1 + w) norms
before and after each sublayer, the tanh GELU, query_pre_attn_scalar, soft caps, sliding-window
layers and Gemma 3's local RoPE base), Granite (its four multipliers), OLMo2 (norms after the
sublayers, whole-projection q/k norms), SmolLM3 (layers without RoPE) and Phi-3 / Phi-4 (fused
qkv and gate_up projections, longrope, Phi-4-mini's partial rotary), used by
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


def rotary_dims(cfg):
    """How many of each head's dimensions RoPE rotates: partial_rotary_factor of head_dim."""
    hd = cfg.get('head_dim') or cfg['hidden_size'] // cfg['num_attention_heads']
    return int(hd * cfg.get('partial_rotary_factor', 1.0))


def inv_freq(cfg, base=None):
    hd = rotary_dims(cfg)
    if base is not None:  # Gemma 3's local layers: their own base, unscaled
        return torch.tensor([1.0 / base ** (2 * i / hd) for i in range(hd // 2)], dtype=torch.float64)
    base = cfg.get('rope_theta', 10000.0)
    rs = cfg.get('rope_scaling')
    if rs and rs.get('rope_type', rs.get('type')) == 'dynamic':
        # transformers' _compute_dynamic_ntk_parameters at the longest sequence the scaling is for,
        # max_position_embeddings x factor (what vLLM rotates every position by)
        factor, max_pos = rs['factor'], cfg['max_position_embeddings']
        seq = max_pos * factor
        base = base * ((factor * seq / max_pos) - (factor - 1)) ** (hd / (hd - 2))
    f = [1.0 / base ** (2 * i / hd) for i in range(hd // 2)]
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
    elif rs and rs.get('rope_type', rs.get('type')) == 'linear':
        f = [x / rs['factor'] for x in f]
    elif rs and rs.get('rope_type', rs.get('type')) in ('longrope', 'su'):
        # Phi-3: the long divisors when the model's context passes the original one. (transformers
        # switches on the current sequence's length instead; the tests' sequences pass it too.)
        orig = cfg.get('original_max_position_embeddings') or rs['original_max_position_embeddings']
        ext = rs['long_factor'] if cfg['max_position_embeddings'] > orig else rs['short_factor']
        f = [x / e for x, e in zip(f, ext)]
    elif rs and rs.get('rope_type', rs.get('type')) == 'yarn':  # transformers' _compute_yarn_parameters
        factor, orig = rs['factor'], rs.get('original_max_position_embeddings') or cfg['max_position_embeddings']
        fast, slow = rs.get('beta_fast', 32), rs.get('beta_slow', 1)

        def corr(rot):
            return hd * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))
        low, high = max(math.floor(corr(fast)), 0), min(math.ceil(corr(slow)), hd - 1)
        if low == high:
            high += 0.001
        out = []
        for i, x in enumerate(f):
            extrapolate = 1 - min(max((i - low) / (high - low), 0), 1)
            out.append(x / factor * (1 - extrapolate) + x * extrapolate)
        f = out
    return torch.tensor(f, dtype=torch.float64)


def rope_magnitude(cfg):
    """What cos and sin are multiplied by: YaRN's attention factor (0.1 ln(factor) + 1 unless given)."""
    rs = cfg.get('rope_scaling')
    if rs and rs.get('rope_type', rs.get('type')) == 'yarn':
        return rs.get('attention_factor') or (0.1 * math.log(rs['factor']) + 1.0 if rs['factor'] > 1 else 1.0)
    if rs and rs.get('rope_type', rs.get('type')) in ('longrope', 'su'):
        orig = cfg.get('original_max_position_embeddings') or rs['original_max_position_embeddings']
        grown = cfg['max_position_embeddings'] / orig
        return rs.get('attention_factor') or (math.sqrt(1 + math.log(grown) / math.log(orig)) if grown > 1 else 1.0)
    return 1.0


class Model:
    def __init__(self, d):
        self.cfg = json.load(open(os.path.join(d, 'config.json')))
        self.w = {}
        for fn in sorted(os.listdir(d)):
            if fn.endswith('.safetensors'):
                self.w.update(read_safetensors(os.path.join(d, fn)))
        c = self.cfg
        self.type = c.get('model_type', 'llama')
        self.gemma = self.type in ('gemma2', 'gemma3', 'gemma3_text')
        self.h = c['num_attention_heads']
        self.kvh = c.get('num_key_value_heads', self.h)
        self.hd = c.get('head_dim') or c['hidden_size'] // self.h
        self.rot = rotary_dims(c)
        self.eps = c['rms_norm_eps']
        self.freq = inv_freq(c)
        self.magnitude = rope_magnitude(c)
        self.local_freq = inv_freq(c, c.get('rope_local_base_freq', 10000.0)) if self.type.startswith('gemma3') else self.freq
        tied = c.get('tie_word_embeddings', self.gemma or self.type == 'smollm3')
        self.lm_head = self.w['model.embed_tokens.weight'] if tied else self.w['lm_head.weight']
        layers = c['num_hidden_layers']
        # Each layer's window (0: global): Gemma 2's even layers, Gemma 3's layer_types; Mistral's
        # sliding_window on every layer.
        if self.type == 'gemma2':
            self.window = [c['sliding_window'] if l % 2 == 0 else 0 for l in range(layers)]
        elif self.type.startswith('gemma3'):
            kinds = c.get('layer_types') or ['sliding_attention' if (l + 1) % c.get('sliding_window_pattern', 6) else
                                             'full_attention' for l in range(layers)]
            self.window = [c['sliding_window'] if k == 'sliding_attention' else 0 for k in kinds]
        elif c.get('sliding_window') and c.get('use_sliding_window', True):
            self.window = [c['sliding_window']] * layers
        else:
            self.window = [0] * layers
        self.rope_layers = c.get('no_rope_layers') or [1] * layers  # SmolLM3: 0 where a layer has no RoPE
        scalar = c.get('query_pre_attn_scalar') or self.hd
        self.scale = c.get('attention_multiplier') or 1.0 / math.sqrt(scalar)

    def norm(self, x, w):
        if self.gemma:  # Gemma's RMSNorm scales by (1 + weight)
            w = 1.0 + w
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + self.eps) * w

    def rope(self, x, pos, freq):  # x: [T, heads, hd]
        ang = pos[:, None].double() * freq[None, :]
        m = self.magnitude if freq is self.freq else 1.0  # Gemma 3's local layers: unscaled
        cos, sin = m * torch.cos(ang)[:, None, :], m * torch.sin(ang)[:, None, :]
        r = self.rot  # Phi-4-mini rotates the first 3/4 of each head; the rest passes through
        a, b = x[..., : r // 2], x[..., r // 2: r]
        return torch.cat([a * cos - b * sin, b * cos + a * sin, x[..., r:]], dim=-1)

    def forward(self, ids, cache):
        """ids: new tokens; cache: list per layer of (k, v) [T_past, kvh, hd]. Returns logits."""
        logits = self.hidden(ids, cache) @ self.lm_head.T
        logits = logits / self.cfg.get('logits_scaling', 1.0)  # Granite
        cap = self.cfg.get('final_logit_softcapping')
        return cap * torch.tanh(logits / cap) if cap else logits

    def attention(self, l, h, pos, cache):
        c, p, T = self.cfg, 'model.layers.%d.' % l, h.shape[0]
        proj = {}
        if p + 'self_attn.qkv_proj.weight' in self.w:  # Phi-3: the three projections in one, rows q, k, v
            qkv = h @ self.w[p + 'self_attn.qkv_proj.weight'].T
            q_rows, kv_rows = self.h * self.hd, self.kvh * self.hd
            proj = {'q': qkv[:, :q_rows], 'k': qkv[:, q_rows:q_rows + kv_rows], 'v': qkv[:, q_rows + kv_rows:]}
        for n in ('q', 'k', 'v') if not proj else ():
            y = h @ self.w[p + 'self_attn.%s_proj.weight' % n].T
            if p + 'self_attn.%s_proj.bias' % n in self.w:
                y = y + self.w[p + 'self_attn.%s_proj.bias' % n]
            proj[n] = y
        if self.type == 'olmo2':  # q/k norms over the whole projections
            proj['q'] = self.norm(proj['q'], self.w[p + 'self_attn.q_norm.weight'])
            proj['k'] = self.norm(proj['k'], self.w[p + 'self_attn.k_norm.weight'])
        q = proj['q'].view(T, self.h, self.hd)
        k = proj['k'].view(T, self.kvh, self.hd)
        if self.type != 'olmo2' and p + 'self_attn.q_norm.weight' in self.w:  # Qwen3, Gemma 3: RMSNorm over each head
            q = self.norm(q, self.w[p + 'self_attn.q_norm.weight'])
            k = self.norm(k, self.w[p + 'self_attn.k_norm.weight'])
        if self.rope_layers[l]:
            freq = self.local_freq if self.window[l] else self.freq
            q, k = self.rope(q, pos, freq), self.rope(k, pos, freq)
        v = proj['v'].view(T, self.kvh, self.hd)
        if cache[l] is not None:
            k = torch.cat([cache[l][0], k])
            v = torch.cat([cache[l][1], v])
        cache[l] = (k, v)
        S, g = k.shape[0], self.h // self.kvh
        kk = k.repeat_interleave(g, dim=1)  # query head j uses KV head j // g
        vv = v.repeat_interleave(g, dim=1)
        scores = torch.einsum('thd,shd->hts', q, kk) * self.scale
        cap = c.get('attn_logit_softcapping')
        if cap:
            scores = cap * torch.tanh(scores / cap)
        key = torch.arange(S)[None, :]
        mask = key > pos[:, None]
        if self.window[l]:  # a window of the last `window` positions, the token's own included
            mask = mask | (pos[:, None] - key >= self.window[l])
        scores = scores.masked_fill(mask[None], float('-inf'))
        att = torch.softmax(scores, dim=-1)
        o = torch.einsum('hts,shd->thd', att, vv).reshape(T, self.h * self.hd)
        return o @ self.w[p + 'self_attn.o_proj.weight'].T

    def hidden(self, ids, cache):
        """The last hidden states [T, hidden] after the final norm (what *Model returns)."""
        c = self.cfg
        past = cache[0][0].shape[0] if cache[0] is not None else 0
        pos = torch.arange(past, past + len(ids))
        x = self.w['model.embed_tokens.weight'][torch.tensor(ids)]
        if self.gemma:
            x = x * math.sqrt(c['hidden_size'])
        x = x * c.get('embedding_multiplier', 1.0)  # Granite
        r = c.get('residual_multiplier', 1.0)
        for l in range(c['num_hidden_layers']):
            p = 'model.layers.%d.' % l
            if self.type == 'olmo2':  # norms after the sublayers only
                x = x + self.norm(self.attention(l, x, pos, cache), self.w[p + 'post_attention_layernorm.weight'])
                x = x + self.norm(self.mlp(l, x), self.w[p + 'post_feedforward_layernorm.weight'])
            elif self.gemma:  # norms before and after both
                a = self.attention(l, self.norm(x, self.w[p + 'input_layernorm.weight']), pos, cache)
                x = x + self.norm(a, self.w[p + 'post_attention_layernorm.weight'])
                m = self.mlp(l, self.norm(x, self.w[p + 'pre_feedforward_layernorm.weight']))
                x = x + self.norm(m, self.w[p + 'post_feedforward_layernorm.weight'])
            else:
                x = x + r * self.attention(l, self.norm(x, self.w[p + 'input_layernorm.weight']), pos, cache)
                x = x + r * self.mlp(l, self.norm(x, self.w[p + 'post_attention_layernorm.weight']))
        return self.norm(x, self.w['model.norm.weight'])

    def swiglu(self, h, gate_w, up_w, down_w):
        gate = h @ gate_w.T
        if self.gemma:  # GeGLU with PyTorch's gelu(approximate='tanh')
            act = 0.5 * gate * (1 + torch.tanh(math.sqrt(2 / math.pi) * (gate + 0.044715 * gate ** 3)))
        else:
            act = gate * torch.sigmoid(gate)
        return (act * (h @ up_w.T)) @ down_w.T

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
        if n_exp == 0 and p + 'mlp.gate_up_proj.weight' in self.w:  # Phi-3: gate rows, then up rows
            gu = self.w[p + 'mlp.gate_up_proj.weight']
            half = gu.shape[0] // 2
            return self.swiglu(h, gu[:half], gu[half:], self.w[p + 'mlp.down_proj.weight'])
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
