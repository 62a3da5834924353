"""The tiny GPT-2 training step several benchmarks time (2 layers, 128 wide,
vocabulary 512, batch 8x64, AdamW, dropout off), from a fixed start: eager, or
with forward+backward and the optimizer step each under torch.compile."""
import warnings

import torch


def model_batch_optimizer(device):
    """The model, its input batch and its optimizer on `device` (needs transformers)."""
    import transformers
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=512, n_positions=64,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config).to(device)
    batch = torch.randint(0, 512, (8, 64), generator=torch.Generator().manual_seed(1)).to(device)
    return model, batch, torch.optim.AdamW(model.parameters(), lr=1e-3)


def training_step(device):
    """A function that runs one eager training step on `device` (needs transformers)."""
    model, batch, optimizer = model_batch_optimizer(device)

    def step():
        optimizer.zero_grad()
        model(input_ids=batch, labels=batch).loss.backward()
        optimizer.step()
    return step


def compiled_training_step(device):
    """The same step with forward+backward and the optimizer step each under
    torch.compile, as benchmarks/graph_mode.py times it (the first call compiles)."""
    return compiled_step(*model_batch_optimizer(device))


def compiled_step(model, batch, optimizer):
    """A function that runs one compiled training step of `model` and returns its loss."""
    @torch.compile
    def forward_backward(batch):
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        return loss

    @torch.compile
    def optimizer_step():
        optimizer.step()

    def step():
        loss = forward_backward(batch)
        optimizer_step()
        optimizer.zero_grad()
        return loss
    return step
