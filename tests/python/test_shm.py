"""kiln.shm_*: torch tensors in the stack's shared memory, by id, without copies."""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest
import torch

import kiln

DTYPES = [
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
    torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128,
]


def random_tensor(sizes, dtype):
    if dtype == torch.bool:
        return torch.rand(sizes) > 0.5
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(sizes, dtype=dtype)
    return torch.randint(-100 if dtype != torch.uint8 else 0, 100, sizes, dtype=dtype)


def test_shm_empty_is_a_view_on_shared_memory(stack):
    tensor_id, x = kiln.shm_empty([3, 5], torch.float32, stack=stack)
    assert x.shape == (3, 5) and x.dtype == torch.float32 and x.is_contiguous()
    x.copy_(torch.arange(15, dtype=torch.float32).view(3, 5))
    y = kiln.shm_get(tensor_id, stack=stack)
    assert torch.equal(y, x)
    assert y.data_ptr() == x.data_ptr()
    y[1, 2] = -7.0  # a write through one view is seen through the other
    assert x[1, 2].item() == -7.0
    kiln.shm_free(tensor_id, stack=stack)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_shm_put_then_get_returns_an_equal_tensor(stack, dtype):
    source = random_tensor([4, 7], dtype)
    tensor_id = kiln.shm_put(source, stack=stack)
    assert stack.shm().meta(tensor_id)["dtype"] == str(dtype).removeprefix("torch.")
    copy = kiln.shm_get(tensor_id, stack=stack)
    assert copy.dtype == dtype and copy.shape == source.shape
    assert torch.equal(copy, source)
    assert copy.data_ptr() != source.data_ptr()  # put copies once; the source stays the user's
    kiln.shm_free(tensor_id, stack=stack)


def test_shm_put_keeps_a_dense_layout_and_densifies_others(stack):
    transposed = torch.randn(6, 4).t()
    tensor_id = kiln.shm_put(transposed, stack=stack)
    stored = kiln.shm_get(tensor_id, stack=stack)
    assert stored.stride() == transposed.stride()
    assert torch.equal(stored, transposed)

    sliced = torch.randn(5, 8)[1:, ::3]
    sliced_id = kiln.shm_put(sliced, stack=stack)
    stored_slice = kiln.shm_get(sliced_id, stack=stack)
    assert stored_slice.is_contiguous()
    assert torch.equal(stored_slice, sliced)
    for freed in (tensor_id, sliced_id):
        kiln.shm_free(freed, stack=stack)


def test_shm_get_honours_stored_strides_and_offset(stack):
    store = stack.shm()
    tensor_id = store.allocate([3, 2], "int64", strides=[1, 3], storage_offset=2)
    meta = store.meta(tensor_id)
    assert (meta["sizes"], meta["strides"], meta["storage_offset"]) == ([3, 2], [1, 3], 2)
    view = kiln.shm_get(tensor_id, stack=stack)
    assert view.shape == (3, 2) and view.stride() == (1, 3)
    view.copy_(torch.tensor([[1, 2], [3, 4], [5, 6]]))
    flat = torch.frombuffer(store.buffer(tensor_id), dtype=torch.int64)
    # Column-major: the bytes after the offset hold 1, 3, 5, 2, 4, 6.
    assert flat.tolist() == [1, 3, 5, 2, 4, 6]
    assert torch.equal(kiln.shm_get(tensor_id, stack=stack), view)
    kiln.shm_free(tensor_id, stack=stack)


def test_another_process_reads_the_tensor_by_id(run_dir, stack):
    source = torch.arange(1000, dtype=torch.float64).view(10, 100) / 7
    tensor_id = kiln.shm_put(source, stack=stack)
    reader = textwrap.dedent(
        f"""
        import torch, kiln
        x = kiln.shm_get({tensor_id})  # the stack from $KILN_RUN_DIR
        assert x.shape == (10, 100) and x.dtype == torch.float64
        print(repr(x.sum().item()), x[3, 17].item())
        x[0, 0] = 42.0  # visible to the writer
        """
    )
    env = dict(os.environ, KILN_RUN_DIR=run_dir)
    result = subprocess.run([sys.executable, "-c", reader], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    total, element = result.stdout.split()
    assert float(total) == source.sum().item()
    assert float(element) == source[3, 17].item()
    assert kiln.shm_get(tensor_id, stack=stack)[0, 0].item() == 42.0
    kiln.shm_free(tensor_id, stack=stack)


def test_default_store_follows_kiln_run_dir(run_dir, monkeypatch):
    monkeypatch.setenv("KILN_RUN_DIR", run_dir)
    tensor_id, x = kiln.shm_empty([4], torch.int32)
    x.copy_(torch.tensor([1, 2, 3, 4], dtype=torch.int32))
    assert kiln.shm_get(tensor_id).tolist() == [1, 2, 3, 4]
    kiln.shm_free(tensor_id)


def test_tensor_outlives_its_store_object(run_dir):
    # The view holds the mapping: dropping every other reference must not unmap it.
    stack = kiln.connect(run_dir)
    tensor_id, x = kiln.shm_empty([256], torch.float32, stack=stack)
    del stack
    x.fill_(2.5)
    assert x.sum().item() == 640.0
    kiln.shm_free(tensor_id, stack=kiln.connect(run_dir))


def test_shm_free_then_get_raises_not_found(stack):
    tensor_id = kiln.shm_put(torch.ones(3), stack=stack)
    assert any(info["id"] == tensor_id for info in stack.shm().list())
    kiln.shm_free(tensor_id, stack=stack)
    assert all(info["id"] != tensor_id for info in stack.shm().list())
    with pytest.raises(kiln.KilnError) as caught:
        kiln.shm_get(tensor_id, stack=stack)
    assert caught.value.code == "not_found"
    with pytest.raises(kiln.KilnError) as caught:
        kiln.shm_free(tensor_id, stack=stack)
    assert caught.value.code == "not_found"


def test_unsupported_dtype_is_refused(stack):
    with pytest.raises(TypeError):
        kiln.shm_empty([2], torch.complex32, stack=stack)


def test_stores_follow_a_restarted_stack(monkeypatch):
    # A stack of its own: restarting the session's stack would disturb other tests.
    from kiln_cli import kiln_cli

    run_dir = tempfile.mkdtemp(prefix="kr", dir="/tmp")
    try:
        assert kiln_cli(run_dir, "up").returncode == 0
        monkeypatch.setenv("KILN_RUN_DIR", run_dir)
        stack = kiln.connect(run_dir)
        old_id = kiln.shm_put(torch.arange(8, dtype=torch.float32))
        old_store = stack.shm()
        assert old_store.current

        assert kiln_cli(run_dir, "down").returncode == 0
        assert kiln_cli(run_dir, "up").returncode == 0
        assert not old_store.current

        # Both the default store and a Stack's attach to the new, empty segment on their own.
        with pytest.raises(kiln.KilnError) as error:
            kiln.shm_get(old_id)
        assert error.value.code == "not_found"
        new_id = kiln.shm_put(torch.ones(3))
        assert kiln.shm_get(new_id).tolist() == [1.0, 1.0, 1.0]
        assert stack.shm().current
        assert kiln.shm_get(new_id, stack=kiln.connect(run_dir)).sum().item() == 3.0
    finally:
        kiln_cli(run_dir, "down")
        shutil.rmtree(run_dir, ignore_errors=True)
