# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Prompt tokenization: a checkpoint's Hugging Face tokenizer, or a small one built in code."""
from pathlib import Path

import numpy as np

from pi0_ros.engine.errors import CheckpointError

SPECIAL_TOKENS = ('<pad>', '<eos>', '<bos>', '<unk>')


def build_builtin_tokenizer():
    """
    Build a deterministic byte-level tokenizer (260 ids) that behaves like PaliGemma's.

    Ids: 0 <pad>, 1 <eos>, 2 <bos>, 3 <unk>, then the 256 byte-level symbols. Every prompt
    starts with <bos>, as PaliGemma's tokenizer does.
    """
    from tokenizers import decoders, models, pre_tokenizers, processors, Tokenizer
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS)}
    for symbol in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[symbol] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token='<unk>'))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.post_processor = processors.TemplateProcessing(
        single='<bos> $A', pair='<bos> $A $B', special_tokens=[('<bos>', vocab['<bos>'])])
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token='<bos>', eos_token='<eos>',
                                   pad_token='<pad>', unk_token='<unk>')


def load_tokenizer(path):
    """Load a Hugging Face tokenizer from a local directory (no downloads)."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f'tokenizer directory {path} does not exist')
    if not any((path / name).is_file() for name in ('tokenizer.json', 'tokenizer.model')):
        raise CheckpointError(f'{path} holds no tokenizer: expected tokenizer.json (or '
                              'tokenizer.model with tokenizer_config.json), e.g. from '
                              "PaliGemma's tokenizer save_pretrained()")
    try:
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as error:  # noqa: B902 - any parse failure is a checkpoint problem
        raise CheckpointError(f'could not load the tokenizer in {path}: {error}') from error
    if tokenizer.pad_token_id is None:
        raise CheckpointError(f'the tokenizer in {path} has no pad token: pi0 pads every prompt '
                              'to tokenizer_max_length (PaliGemma uses <pad>)')
    return tokenizer


def tokenize_prompt(tokenizer, instruction: str, max_length: int) -> tuple:
    r"""
    Prompt -> (ids int64 [max_length], mask bool [max_length]) like LeRobot's pi0 processor.

    Appends '\n' unless present, truncates to max_length, pads on the right.
    """
    prompt = instruction if instruction.endswith('\n') else instruction + '\n'
    encoded = tokenizer(prompt, max_length=max_length, truncation=True, padding='max_length',
                        padding_side='right', return_tensors='np')
    ids = np.asarray(encoded['input_ids'], dtype=np.int64).reshape(-1)
    mask = np.asarray(encoded['attention_mask']).reshape(-1).astype(bool)
    if ids.shape != (max_length,):
        raise ValueError(f'tokenizer returned {ids.shape[0]} ids, expected {max_length}')
    return ids, mask
