# Source: https://github.com/vllm-project/vllm/pull/47644 (sync reused pinned input buffers under the PP batch queue)
"""Input preparation for step N+1 rewrote the reused pinned CPU tensors
(seq_lens_cpu, query_start_loc_cpu) while step N's non_blocking copies from
them might not have run: step N's kernels consumed step N+1's values. The fix
records an event after the copies and synchronises it before the next
preparation rewrites the buffers (synchronize_input_prep)."""
import torch

from race_corpus.common import D, busy

SIDES = ("the host wrote pinned memory", "aten::_copy_from")


class InputBatch:
    def __init__(self, use_event):
        self.seq_lens_cpu = torch.zeros(256, dtype=torch.int64, pin_memory=True)
        self.seq_lens = torch.zeros(256, dtype=torch.int64, device=D)
        self.prepare_inputs_event = torch.simhpu.Event() if use_event else None

    def synchronize_input_prep(self):
        if self.prepare_inputs_event is not None:
            self.prepare_inputs_event.synchronize()

    def prepare(self, step):
        self.synchronize_input_prep()
        self.seq_lens_cpu.fill_(step + 1)
        self.seq_lens.copy_(self.seq_lens_cpu, non_blocking=True)
        if self.prepare_inputs_event is not None:
            self.prepare_inputs_event.record()


def engine(use_event):
    batch = InputBatch(use_event)
    totals = []
    for step in range(3):
        busy(torch.simhpu.current_stream(), 5_000)  # step N-1 still running: steps overlap
        batch.prepare(step)
        totals.append(batch.seq_lens.sum())
    return [int(t) for t in totals] == [256 * (step + 1) for step in range(3)]


def racy():
    return engine(use_event=False)


def fixed():
    return engine(use_event=True)
