"""The device's generator: counter-based, with CUDA's state (seed, offset) and offset semantics."""
import pytest
import torch


def seed_and_offset() -> tuple[int, int]:
    seed, offset = torch.simhpu.get_rng_state().view(torch.int64).tolist()
    return seed, offset


def test_the_state_is_cudas_seed_then_offset():
    torch.simhpu.manual_seed(1234)
    state = torch.simhpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu" and state.numel() == 16
    assert seed_and_offset() == (1234, 0)
    torch.rand(10, device="simhpu")
    assert seed_and_offset() == (1234, 12)  # 10 numbers, in whole Philox counters of 4
    torch.randn(3, 5, device="simhpu")
    assert seed_and_offset() == (1234, 28)
    assert torch.simhpu._default_generator().get_offset() == 28
    assert torch.simhpu.initial_seed() == 1234


def test_any_offset_can_be_set_and_a_draw_depends_on_seed_and_offset_alone():
    torch.simhpu.manual_seed(7)
    torch.rand(100, device="simhpu")
    at_100 = torch.rand(8, device="simhpu").cpu()  # drawn at offset 100
    generator = torch.simhpu._default_generator()
    generator.manual_seed(7)
    generator.set_offset(100)
    torch.testing.assert_close(torch.rand(8, device="simhpu").cpu(), at_100, rtol=0, atol=0)
    generator.set_offset(104)
    assert not torch.equal(torch.rand(8, device="simhpu").cpu(), at_100)


def test_a_state_from_get_rng_state_replays_and_bad_states_are_refused():
    state = torch.simhpu.get_rng_state()
    first = torch.randn(6, device="simhpu").cpu()
    torch.simhpu.set_rng_state(state)
    torch.testing.assert_close(torch.randn(6, device="simhpu").cpu(), first, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="simhpu generator: set_state: expected 16 bytes"):
        torch.simhpu.set_rng_state(torch.zeros(5056, dtype=torch.uint8))
    with pytest.raises(RuntimeError, match="offset must be a multiple of 4"):
        torch.simhpu.set_rng_state(torch.tensor([1, 3], dtype=torch.int64).view(torch.uint8))
    with pytest.raises(RuntimeError, match="offset must be a multiple of 4"):
        torch.simhpu._default_generator().set_offset(6)
    torch.simhpu.set_rng_state(state)  # still usable
    torch.testing.assert_close(torch.randn(6, device="simhpu").cpu(), first, rtol=0, atol=0)


def test_fork_rng_restores_the_device_generator():
    torch.simhpu.manual_seed(3)
    before = seed_and_offset()
    with torch.random.fork_rng(devices=[0], device_type="simhpu"):
        torch.rand(50, device="simhpu")
    assert seed_and_offset() == before


def test_each_graph_replay_draws_new_numbers_and_moves_the_offset_as_a_launch_would():
    torch.simhpu.manual_seed(11)
    graph = torch.simhpu.Graph()
    x = torch.zeros(16, device="simhpu")
    with torch.simhpu.graph(graph):
        y = torch.rand(16, device="simhpu") + x
    state = torch.simhpu.get_rng_state()
    _, offset = seed_and_offset()
    graph.replay()
    first = y.cpu().clone()
    assert seed_and_offset()[1] == offset + 16
    graph.replay()
    second = y.cpu().clone()
    assert seed_and_offset()[1] == offset + 32
    assert not torch.equal(first, second)
    # A replay draws what an eager launch at the same state draws.
    torch.simhpu.set_rng_state(state)
    torch.testing.assert_close(torch.rand(16, device="simhpu").cpu(), first, rtol=0, atol=0)
    torch.simhpu.set_rng_state(state)
    graph.replay()
    torch.testing.assert_close(y.cpu(), first, rtol=0, atol=0)
