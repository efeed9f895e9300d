"""Tiny Hugging Face models made here, never downloaded: a Llama small enough to train on a CPU in seconds."""

import os


def tiny_llama(directory: str, vocab: int = 256, seed: int = 0) -> str:
    """A 2-layer Llama (GQA, SwiGLU, RoPE) with random weights, saved as a model directory (safetensors)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(directory)
    os.chmod(directory, 0o755)
    return directory
