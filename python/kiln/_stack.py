"""Finding and talking to a running stack."""
from kiln._kiln import Stack


def connect(run_dir: str | None = None) -> Stack:
    """Connects to the stack at `run_dir`, else at $KILN_RUN_DIR, else the default stack.

    `run_dir` may also be a broker endpoint ("ipc://...", "tcp://...").
    Raises KilnError with code "unavailable" when no launcher answers there.

        stack = kiln.connect("/tmp/my-stack")
        assert stack.ping("codegen", b"hi") == b"hi"
    """
    return Stack.connect(run_dir or "")


def status(run_dir: str | None = None) -> dict:
    """What `kiln status` shows, as plain dicts: the stack, then each service and its workers.

        for service in kiln.status()["services"]:
            print(service["name"], service["state"], [w["pid"] for w in service["workers"]])
    """
    return connect(run_dir).status()
