#!/usr/bin/python3
"""Writes a BERT-style tokenizer.json (BertNormalizer, a pre-tokenizer, WordPiece, BertProcessing,
the WordPiece decoder) whose vocabulary is drawn from the tokenizer corpus: its most frequent
characters, words and word endings, lowercased and without accents as BERT's uncased models see
them. The embedding models' tokenizers are of this kind; no npm package ships one, so the
tokenizer tests compare Troupe and the Hugging Face library on this one.

usage: make_wordpiece.py CORPUS.json OUT.json [PRE_TOKENIZER]   (BertPreTokenizer, Whitespace or WhitespaceSplit)
"""
import collections
import json
import re
import sys
import unicodedata


def words_of(text):
    text = unicodedata.normalize('NFD', text.lower())
    text = ''.join(c for c in text if unicodedata.category(c) != 'Mn')
    return re.findall(r'\w+|[^\w\s]', text)


def main():
    corpus, out = sys.argv[1], sys.argv[2]
    pre = sys.argv[3] if len(sys.argv) > 3 else 'BertPreTokenizer'
    chars, words, endings = collections.Counter(), collections.Counter(), collections.Counter()
    for text in json.load(open(corpus, encoding='utf-8')):
        for w in words_of(text):
            words[w] += 1
            chars.update(w)
            for n in (2, 3, 4):
                if len(w) > n:
                    endings[w[-n:]] += 1

    def top(counter, n):
        return [k for k, _ in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]

    vocab = {}
    for t in ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']:
        vocab[t] = len(vocab)
    pieces = top(chars, 3000) + ['##' + c for c in top(chars, 1000)] + top(words, 4000) + ['##' + e for e in top(endings, 2000)]
    for p in pieces:
        if p not in vocab:
            vocab[p] = len(vocab)
    added = [{'id': vocab[t], 'content': t, 'single_word': False, 'lstrip': False, 'rstrip': False, 'normalized': False,
              'special': True} for t in ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']]
    tok = {
        'version': '1.0', 'truncation': None, 'padding': None, 'added_tokens': added,
        'normalizer': {'type': 'BertNormalizer', 'clean_text': True, 'handle_chinese_chars': True, 'strip_accents': None,
                       'lowercase': True},
        'pre_tokenizer': {'type': pre},
        'post_processor': {'type': 'BertProcessing', 'sep': ['[SEP]', vocab['[SEP]']], 'cls': ['[CLS]', vocab['[CLS]']]},
        'decoder': {'type': 'WordPiece', 'prefix': '##', 'cleanup': True},
        'model': {'type': 'WordPiece', 'unk_token': '[UNK]', 'continuing_subword_prefix': '##', 'max_input_chars_per_word': 100,
                  'vocab': vocab},
    }
    json.dump(tok, open(out, 'w', encoding='utf-8'), ensure_ascii=False)


if __name__ == '__main__':
    main()
