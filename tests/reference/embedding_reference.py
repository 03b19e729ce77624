#!/usr/bin/python3
"""Embeddings of a sentence-transformers model folder computed independently of Troupe: the
float64 PyTorch forward of llama_reference.py for the last hidden states, then the folder's own
modules (modules.json: Pooling with its config's mode, then Normalize if listed) applied as
sentence-transformers defines them. Used by tests/http/http_test.cpp against /v1/embeddings.

usage: embedding_reference.py MODEL_DIR IDS_FILE OUT_FILE
  IDS_FILE: JSON list of inputs, each a list of token ids.
  Writes OUT_FILE: a JSON list of embeddings (lists of floats), one per input.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_reference import Model  # noqa: E402

torch.set_grad_enabled(False)


def modules(model_dir):
    pooling, normalize = None, False
    for m in json.load(open(os.path.join(model_dir, 'modules.json'))):
        kind = m['type'].rsplit('.', 1)[-1]
        if kind == 'Pooling':
            pooling = json.load(open(os.path.join(model_dir, m['path'], 'config.json')))
        elif kind == 'Normalize':
            normalize = True
    return pooling, normalize


def pool(h, cfg):
    # h: [T, hidden]; one unpadded input, so the attention mask is all ones.
    if cfg.get('pooling_mode_cls_token'):
        return h[0]
    if cfg.get('pooling_mode_lasttoken'):
        return h[-1]
    if cfg.get('pooling_mode_mean_tokens'):
        return h.sum(0) / h.shape[0]
    raise SystemExit('pooling mode not handled by this reference')


def main():
    model_dir, ids_file, out_file = sys.argv[1:4]
    m = Model(model_dir)
    cfg, normalize = modules(model_dir)
    out = []
    for ids in json.load(open(ids_file)):
        e = pool(m.hidden(ids, [None] * m.cfg['num_hidden_layers']), cfg)
        if normalize:
            e = torch.nn.functional.normalize(e, p=2, dim=0)
        out.append(e.tolist())
    json.dump(out, open(out_file, 'w'))


if __name__ == '__main__':
    main()
