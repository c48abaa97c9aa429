"""kiln.connect / kiln.status: finding a running stack and talking to its services."""
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor

import pytest

import kiln

SERVICES = ["tracer", "guards", "shapes", "partitioner", "codegen"]


def test_connect_finds_the_stack(run_dir):
    stack = kiln.connect(run_dir)
    assert stack.run_dir == run_dir
    assert stack.endpoint.startswith("ipc://")
    assert stack.info("kiln.launcher")["pid"] > 0


def test_connect_uses_kiln_run_dir(run_dir, monkeypatch):
    monkeypatch.setenv("KILN_RUN_DIR", run_dir)
    assert kiln.connect().status()["run_dir"] == run_dir


def test_status_lists_every_service_running_with_live_pids(run_dir):
    status = kiln.status(run_dir)
    assert status["run_dir"] == run_dir
    os.kill(status["launcher_pid"], 0)
    services = {service["name"]: service for service in status["services"]}
    assert sorted(services) == sorted(SERVICES)
    for name in SERVICES:
        service = services[name]
        assert service["state"] == "running", service
        assert service["workers"], service
        for worker in service["workers"]:
            assert worker["pid"] > 0, worker
            os.kill(worker["pid"], 0)  # raises if the process does not exist


@pytest.mark.parametrize("service", SERVICES)
def test_ping_round_trips_bytes(stack, service):
    payload = bytes(range(256)) + b"\x00kiln"
    assert stack.ping(service, payload) == payload
    assert stack.ping(service, b"") == b""


def test_connect_by_endpoint_still_finds_shared_memory(stack):
    by_endpoint = kiln.connect(stack.endpoint)
    assert by_endpoint.run_dir is None
    assert by_endpoint.shm().name == stack.shm().name  # run dir asked of the launcher


def test_one_stack_serves_many_threads(stack):
    payloads = [f"thread {i}".encode() * (i + 1) for i in range(32)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        echoed = list(pool.map(lambda p: stack.ping(SERVICES[len(p) % 5], p), payloads))
    assert echoed == payloads


def test_info_names_the_service(stack):
    info = stack.info("codegen")
    assert info["service"] == "codegen"
    os.kill(info["pid"], 0)


def test_no_stack_raises_unavailable():
    empty = tempfile.mkdtemp(prefix="kt", dir="/tmp")
    try:
        with pytest.raises(kiln.KilnError) as caught:
            kiln.connect(empty)
        assert caught.value.code == "unavailable"
        assert empty in caught.value.message
        assert isinstance(caught.value, RuntimeError)
    finally:
        os.rmdir(empty)


def test_unknown_service_raises_kiln_error(stack):
    with pytest.raises(kiln.KilnError) as caught:
        stack.ping("no-such-service", b"x", timeout_ms=2000)
    assert caught.value.code == "unknown_service"
