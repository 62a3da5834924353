"""What the corpus programs share: the device, and a way to keep a stream busy
so what is queued behind it runs late (as a long kernel would)."""
import torch

import torch_simhpu

D = "simhpu"


def busy(stream, microseconds=20_000):
    """Queues `microseconds` of device time on `stream` (the host does not wait)."""
    with torch.simhpu.stream(stream):
        torch_simhpu._C._sleep_on_device(torch.empty(1, device=D), microseconds)
