"""Real models nobody here wrote, CPU against simhpu from the same start.

Tiny, randomly initialised transformers models (nothing is downloaded), a CNN, RNNs,
the optimizers in their for-loop, foreach and fused forms, and autocast. Each trains
a few steps on both devices; losses, parameters and buffers must agree.
"""
import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

DEV = "simhpu"
STEPS = 3


def train(model, batch, optimizer_factory, steps=STEPS, loss_of=None):
    """Loss after each step; the model is trained in place."""
    opt = optimizer_factory(model.parameters())
    losses = []
    for _ in range(steps):
        loss = loss_of(model, batch)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def assert_same_training(cpu_model, device_model, cpu_batch, device_batch, loss_of, optimizer_factory,
                         atol=2e-5, rtol=2e-4):
    expected = train(cpu_model, cpu_batch, optimizer_factory, loss_of=loss_of)
    actual = train(device_model, device_batch, optimizer_factory, loss_of=loss_of)
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)
    for (name, p), q in zip(device_model.named_parameters(), cpu_model.parameters()):
        assert p.device.type == DEV, name
        torch.testing.assert_close(p.detach().cpu(), q.detach(), atol=atol, rtol=rtol, msg=name)
    for (name, b), c in zip(device_model.named_buffers(), cpu_model.buffers()):
        torch.testing.assert_close(b.cpu(), c, atol=atol, rtol=rtol, msg=name)


# ---- transformers ------------------------------------------------------------------

try:
    import transformers
except ImportError:  # only the tests marked below need it; the CNN, RNN and optimizer tests run without
    transformers = None
else:
    transformers.logging.set_verbosity_error()
needs_transformers = pytest.mark.skipif(transformers is None, reason="transformers is not installed "
                                        "(requirements-test.txt)")
VOCAB = 128


def _gpt2():
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=32,
                                  resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
    return transformers.GPT2LMHeadModel(cfg)


def _bert():
    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                                  vocab_size=VOCAB, max_position_embeddings=32, hidden_dropout_prob=0,
                                  attention_probs_dropout_prob=0)
    return transformers.BertForMaskedLM(cfg)


def _t5():
    cfg = transformers.T5Config(num_layers=2, d_model=64, d_ff=128, num_heads=4, d_kv=16, vocab_size=VOCAB,
                                dropout_rate=0)
    return transformers.T5ForConditionalGeneration(cfg)


def _llama():
    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=32,
                                   tie_word_embeddings=True)
    return transformers.LlamaForCausalLM(cfg)


def _token_batch(model_name, device):
    ids = torch.randint(0, VOCAB, (4, 16), generator=torch.Generator().manual_seed(1))
    batch = {"input_ids": ids, "labels": ids, "attention_mask": torch.ones_like(ids)}
    if model_name == "t5":
        batch["decoder_input_ids"] = ids
    return {k: v.to(device) for k, v in batch.items()}


@needs_transformers
@pytest.mark.parametrize("name, make", [("gpt2", _gpt2), ("bert", _bert), ("t5", _t5), ("llama", _llama)])
def test_tiny_transformer_trains_as_on_the_cpu(name, make):
    torch.manual_seed(0)
    cpu_model = make()
    device_model = copy.deepcopy(cpu_model).to(DEV)
    # Tied embeddings stay tied through .to() (they are one Parameter).
    assert device_model.get_output_embeddings().weight is device_model.get_input_embeddings().weight
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_same_training(cpu_model, device_model, _token_batch(name, "cpu"), _token_batch(name, DEV),
                             loss_of=lambda m, b: m(**b).loss,
                             optimizer_factory=lambda p: torch.optim.AdamW(p, lr=1e-3))


@needs_transformers
def test_gpt2_training_step_never_waits_for_the_device():
    torch.manual_seed(0)
    model = _gpt2().to(DEV)
    batch = _token_batch("gpt2", DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(2):  # warm up: first calls may learn about out= sizing
        model(**batch).loss.backward()
        opt.step()
        opt.zero_grad()
    with torch.simhpu.op_routes() as routes:
        model(**batch).loss.backward()
        opt.step()
        opt.zero_grad()
    # Only where the model's own Python asks for a value (.item() in its mask checks).
    assert set(routes.ops("synchronized")) <= {"aten::_local_scalar_dense"}
    assert routes.total("reference") > 100


@needs_transformers
def test_generation_with_a_kv_cache_matches_the_cpu():
    torch.manual_seed(0)
    cpu_model = _gpt2().eval()
    device_model = copy.deepcopy(cpu_model).to(DEV)
    prompt = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        expected = cpu_model.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=0)
        actual = device_model.generate(prompt.to(DEV), max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert actual.cpu().tolist() == expected.tolist()


# ---- a CNN -------------------------------------------------------------------------

class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2)
        self.bn2 = nn.BatchNorm2d(16)
        self.drop = nn.Dropout(0.0)  # in the graph; p=0 keeps CPU and device comparable
        self.fc = nn.Linear(16 * 3 * 3, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.adaptive_avg_pool2d(x, 3)
        return self.fc(self.drop(torch.flatten(x, 1)))


@pytest.mark.parametrize("channels_last", [False, True])
def test_cnn_with_batchnorm_trains_and_evaluates_as_on_the_cpu(channels_last):
    torch.manual_seed(0)
    cpu_model = SmallCNN()
    x = torch.randn(8, 3, 16, 16)
    y = torch.randint(0, 10, (8,))
    if channels_last:
        cpu_model = cpu_model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    device_model = copy.deepcopy(cpu_model).to(DEV)
    assert_same_training(cpu_model, device_model, (x, y), (x.to(DEV), y.to(DEV)),
                         loss_of=lambda m, b: F.cross_entropy(m(b[0]), b[1]),
                         optimizer_factory=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), atol=1e-4, rtol=1e-4)
    cpu_model.eval()
    device_model.eval()  # the running statistics the training produced decide these outputs
    with torch.no_grad():
        torch.testing.assert_close(device_model(x.to(DEV)).cpu(), cpu_model(x), atol=1e-4, rtol=1e-4)


# ---- RNNs ----------------------------------------------------------------------------

class Tagger(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.rnn = cell(8, 16, num_layers=2, batch_first=True, bidirectional=True)
        self.out = nn.Linear(32, 5)

    def forward(self, tokens):
        return self.out(self.rnn(self.emb(tokens))[0])


@pytest.mark.parametrize("cell", [nn.LSTM, nn.GRU])
def test_rnn_tagger_trains_as_on_the_cpu(cell):
    torch.manual_seed(0)
    cpu_model = Tagger(cell)
    tokens = torch.randint(0, 20, (4, 7))
    tags = torch.randint(0, 5, (4, 7))
    device_model = copy.deepcopy(cpu_model).to(DEV)
    assert_same_training(cpu_model, device_model, (tokens, tags), (tokens.to(DEV), tags.to(DEV)),
                         loss_of=lambda m, b: F.cross_entropy(m(b[0]).flatten(0, 1), b[1].flatten()),
                         optimizer_factory=lambda p: torch.optim.Adam(p, lr=1e-2))


# ---- optimizers ----------------------------------------------------------------------

OPTIMIZERS = {
    "sgd-loop": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=False),
    "sgd-foreach": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, foreach=True),
    "adamw-loop": lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=False),
    "adamw-foreach": lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=True),
    "adamw-fused": lambda p: torch.optim.AdamW(p, lr=1e-2, fused=True),
    "adam-amsgrad-fused": lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True, fused=True),
    "rmsprop-foreach": lambda p: torch.optim.RMSprop(p, lr=1e-2, foreach=True),
    "adagrad-foreach": lambda p: torch.optim.Adagrad(p, lr=1e-2, foreach=True),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_updates_match_the_cpu(name):
    torch.manual_seed(0)
    cpu_model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3))
    device_model = copy.deepcopy(cpu_model).to(DEV)
    x, y = torch.randn(16, 6), torch.randn(16, 3)
    assert_same_training(cpu_model, device_model, (x, y), (x.to(DEV), y.to(DEV)),
                         loss_of=lambda m, b: F.mse_loss(m(b[0]), b[1]),
                         optimizer_factory=OPTIMIZERS[name])


def test_grad_clipping_and_lr_scheduler_match_the_cpu():
    torch.manual_seed(0)
    cpu_model = nn.Linear(5, 5)
    device_model = copy.deepcopy(cpu_model).to(DEV)
    results = []
    for model, device in ((cpu_model, "cpu"), (device_model, DEV)):
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
        x = torch.randn(4, 5, generator=torch.Generator().manual_seed(3)).to(device)
        for _ in range(3):
            model(x).pow(2).sum().backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            opt.step()
            sched.step()
            opt.zero_grad()
        results.append((norm.item(), model.weight.detach().cpu()))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-5)
    torch.testing.assert_close(results[1][1], results[0][1])


# ---- autocast ------------------------------------------------------------------------

def test_autocast_bfloat16_matches_the_cpu():
    torch.manual_seed(0)
    cpu_model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    device_model = copy.deepcopy(cpu_model).to(DEV)
    x = torch.randn(6, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = cpu_model(x)
    with torch.autocast(DEV, dtype=torch.bfloat16):
        actual = device_model(x.to(DEV))
    assert actual.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(actual.cpu(), expected, atol=1e-2, rtol=1e-2)
    actual.float().sum().backward()
    assert device_model[0].weight.grad.dtype == torch.float32
