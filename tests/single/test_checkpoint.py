"""Checkpoints: a round trip restores model and optimizer exactly; a foreign
or damaged file is refused with one line; a writer killed mid-write never
leaves a checkpoint that loads wrong."""


import pytest
import torch

from horovod_train.core.errors import UserError
from horovod_train.torch import checkpoint
from horovod_train.torch.models import build_model


def trained_pair(name="mnist_cnn", steps=3):
    torch.manual_seed(0)
    model = build_model(name)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(steps):
        loss = model(torch.randn(8, 1, 28, 28)).logsumexp(1).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model, optimizer


def test_round_trip_restores_weights_buffers_and_momentum(tmp_path):
    model, optimizer = trained_pair()
    path = checkpoint.save(tmp_path, model, optimizer, "mnist_cnn", epochs_done=3,
                           extra={"note": "x"})
    assert path == tmp_path / "checkpoint.pt"

    fresh, fresh_opt = trained_pair(steps=0)
    assert checkpoint.resume(tmp_path, fresh, fresh_opt, "mnist_cnn") == 3
    for key, value in model.state_dict().items():
        assert torch.equal(value, fresh.state_dict()[key]), key
    saved_momentum = [s["momentum_buffer"] for s in optimizer.state_dict()["state"].values()]
    loaded_momentum = [s["momentum_buffer"] for s in fresh_opt.state_dict()["state"].values()]
    assert all(torch.equal(a, b) for a, b in zip(saved_momentum, loaded_momentum, strict=True))


def test_a_full_disk_is_one_line_and_the_last_checkpoint_resumes(small_disk):
    # torch.save alone would say "unexpected pos" (its zip writer's error).
    model, optimizer = trained_pair()
    checkpoint.save(small_disk, model, optimizer, "mnist_cnn", epochs_done=1, extra={})
    with pytest.raises(UserError) as err:
        checkpoint.save(small_disk, model, optimizer, "mnist_cnn", epochs_done=2, extra={})
    assert str(err.value) == (f"cannot write {small_disk / 'checkpoint.pt'}: "
                              "No space left on device")
    fresh, fresh_opt = trained_pair(steps=0)
    assert checkpoint.resume(small_disk, fresh, fresh_opt, "mnist_cnn") == 1


def test_resume_without_a_checkpoint_is_a_fresh_start(tmp_path):
    model, optimizer = trained_pair(steps=0)
    assert checkpoint.resume(tmp_path, model, optimizer, "mnist_cnn") == 0


def test_checkpoint_of_another_model_is_refused_by_name(tmp_path):
    model, optimizer = trained_pair()
    checkpoint.save(tmp_path, model, optimizer, "mnist_cnn", 1, {})
    other, other_opt = trained_pair("horovod_example", steps=0)
    expected = "holds model 'mnist_cnn', this run trains 'horovod_example'"
    with pytest.raises(UserError, match=expected):
        checkpoint.resume(tmp_path, other, other_opt, "horovod_example")


def test_checkpoint_with_other_shapes_names_the_tensors(tmp_path):
    model, optimizer = trained_pair()
    state = model.state_dict()
    state["classifier.1.weight"] = torch.zeros(64, 1568)
    with pytest.raises(UserError, match=r"classifier.1.weight is \(64, 1568\) not \(128, 1568\)"):
        checkpoint.check_fits(tmp_path / "x.pt", state, model)


@pytest.mark.parametrize("content", [b"", b"garbage" * 100, b"PK\x03\x04 truncated zip"])
def test_damaged_file_is_refused_in_one_line(tmp_path, content):
    (tmp_path / "checkpoint.pt").write_bytes(content)
    model, optimizer = trained_pair(steps=0)
    with pytest.raises(UserError, match="not a readable checkpoint") as err:
        checkpoint.resume(tmp_path, model, optimizer, "mnist_cnn")
    assert "\n" not in str(err.value)


def test_file_of_another_program_is_refused(tmp_path):
    torch.save({"weights": torch.zeros(3)}, tmp_path / "checkpoint.pt")
    model, optimizer = trained_pair(steps=0)
    with pytest.raises(UserError, match="not a checkpoint of this trainer"):
        checkpoint.resume(tmp_path, model, optimizer, "mnist_cnn")
