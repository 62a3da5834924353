"""The tiny GPT-2 eager training step several benchmarks time (2 layers, 128
wide, vocabulary 512, batch 8x64, AdamW, dropout off), from a fixed start."""
import warnings

import torch


def training_step(device):
    """A function that runs one training step on `device` (needs transformers)."""
    import transformers
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=512, n_positions=64,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config).to(device)
    batch = torch.randint(0, 512, (8, 64), generator=torch.Generator().manual_seed(1)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        optimizer.zero_grad()
        model(input_ids=batch, labels=batch).loss.backward()
        optimizer.step()
    return step
